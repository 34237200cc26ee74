/// What the RPC server lets in, decided before any call is read. A web
/// page in the user's browser can reach a loopback port; these rules
/// keep it from doing anything there without the secret.
public enum RPCHTTPPolicy {
    /// The largest request body or WebSocket message (aria2's `--rpc-max-request-size` default).
    public static let maximumBodyBytes = 2 << 20
    /// Connections open at once; more are closed as they come.
    public static let maximumConnections = 64
    /// WebSockets open at once that have made no call with the secret; the oldest goes when another comes.
    public static let maximumUntrustedWebSockets = 16
    /// A connection that sends nothing for this long is closed.
    public static let idleSeconds: Int64 = 30
    /// A request must have come whole (head and body) this long after its first byte:
    /// one sending a header line every few seconds never lets the idle close come.
    public static let requestSeconds: Int64 = 10

    /// Whether the `Host` a request names may reach the server. DNS
    /// rebinding points a name the attacker owns at 127.0.0.1, and the
    /// page's requests then carry that name: only an IP address (which no
    /// one can rebind), `localhost` and names under `.localhost` (which
    /// browsers resolve to loopback themselves, RFC 6761) are answered.
    /// A request without `Host` comes from no browser.
    public static func allowsHost(_ host: String?) -> Bool {
        guard let host = host?.trimmingCharacters(in: .whitespaces) else { return true }
        guard let name = hostName(host)?.lowercased(), !name.isEmpty else { return false }
        if name == "localhost" || name.hasSuffix(".localhost") { return true }
        if name.hasPrefix("[") { return URLRules.ipv6(String(name.dropFirst().dropLast())) != nil }
        return URLRules.isDottedQuad(name.utf8)
    }

    /// `Host` without its port; nil when it is not `name[:port]` or `[v6][:port]`.
    static func hostName(_ host: String) -> String? {
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let rest = host[host.index(after: close)...]
            guard rest.isEmpty || (rest.first == ":" && rest.dropFirst().allSatisfy(\.isNumber)) else { return nil }
            return String(host[...close])
        }
        let parts = host.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count <= 2, parts.count == 1 || parts[1].allSatisfy(\.isNumber) else { return nil }
        return String(parts[0])
    }

    /// The CORS headers aria2 sends with `--rpc-allow-origin-all`, which web
    /// UIs need: any origin may call, and the token decides what it may do.
    /// A preflight (`OPTIONS`) also allows what it asked for.
    public static func corsHeaders(origin: String?, preflightHeaders: String?) -> [(String, String)] {
        guard origin != nil else { return [] }
        var headers = [("Access-Control-Allow-Origin", "*")]
        if let asked = preflightHeaders {
            headers.append(("Access-Control-Allow-Methods", "POST, GET, OPTIONS"))
            headers.append(("Access-Control-Max-Age", "1728000"))
            // Echoed as aria2 does, but only as header names: nothing a page sends becomes a header of its own.
            let names = asked.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter(Header.isToken)
            if !names.isEmpty { headers.append(("Access-Control-Allow-Headers", names.joined(separator: ", "))) }
        }
        return headers
    }
}

/// A request's calls as the RPC's rates count them (`RPCMethods.admission(of:)`).
public struct RPCAdmission: Equatable, Sendable {
    /// Calls that carry the secret (to any method, one that needs none too).
    public var trusted = 0
    /// Guesses: a wrong token or none to a method that needs one, a method that does not exist, a call that cannot be read.
    public var untrusted = 0
    /// Calls that need no secret and do not carry it (`system.listMethods`, `system.listNotifications`):
    /// answered at once, on the server's thread, from nothing the agent holds; they never wait behind guesses.
    public var open = 0

    public init(trusted: Int = 0, untrusted: Int = 0, open: Int = 0) {
        self.trusted = trusted
        self.untrusted = untrusted
        self.open = open
    }
}

/// A token bucket: `rate` calls a second, `burst` at once. Time is given,
/// never read, so the rule is tested without a clock.
public struct RPCRateLimit: Equatable, Sendable {
    public let rate: Double
    public let burst: Double
    private var tokens: Double
    private var lastMs: Int64?

    public init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = burst
        tokens = burst
    }

    /// Takes `cost` calls' worth at `nowMs` (monotonic), if there are that many.
    public mutating func take(_ cost: Double = 1, nowMs: Int64) -> Bool {
        if let lastMs { tokens = min(burst, tokens + Double(max(0, nowMs - lastMs)) * rate / 1000) }
        lastMs = nowMs
        guard tokens >= cost else { return false }
        tokens -= cost
        return true
    }

    /// Takes `cost` calls' worth at `nowMs`, into debt if there are not that
    /// many: how long (ms) until the debt is paid back, which is when the
    /// call that made it may be answered. Calls that wait so come no faster
    /// than `rate`, however many are sent at once.
    /// The debt stops at `maximumDelayMs`: a client that hangs up and calls
    /// again (its waiting answer dropped) must not leave every later caller
    /// waiting for hours; at most one call per connection then gets through
    /// per `maximumDelayMs`, beyond `rate`.
    public mutating func delay(_ cost: Double = 1, nowMs: Int64) -> Int64 {
        if let lastMs { tokens = min(burst, tokens + Double(max(0, nowMs - lastMs)) * rate / 1000) }
        lastMs = nowMs
        tokens = max(tokens - cost, -rate * Double(Self.maximumDelayMs) / 1000)
        return tokens >= 0 ? 0 : Int64((-tokens * 1000 / rate).rounded(.up))
    }

    /// The longest a call waits its turn.
    public static let maximumDelayMs: Int64 = 60_000

    /// Calls with the secret, a second: AriaNg polls about five times a second, a script
    /// adding a list faster; 10,000 calls in a second get "too many requests" past the burst.
    public static let calls = RPCRateLimit(rate: 500, burst: 1000)
    /// Calls without it (a wrong token or none, a method that does not exist): past these,
    /// each is answered only when the bucket has refilled for it, so guessing costs
    /// time; they never take from the calls of those who hold the secret.
    public static let untrusted = RPCRateLimit(rate: 10, burst: 100)
}

/// `rpc_listen`: an IP address and a port. Loopback by default; any other
/// address is the user's choice, written out.
public struct RPCListen: Equatable, Sendable, CustomStringConvertible {
    /// An IPv4 address, or an IPv6 one without its brackets.
    public var host: String
    public var port: Int

    public static let `default` = RPCListen(host: "127.0.0.1", port: 6800)
    /// Where the agent keeps the secret it made when the config names none.
    public static let secretFileName = "rpc-secret"

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `127.0.0.1:6800`, `[::1]:6800`, `0.0.0.0:6800`.
    public init(parsing text: String, key: String) throws {
        let rule = "must be an IP address and a port, such as \"127.0.0.1:6800\" or \"[::1]:6800\", not \"\(text)\""
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65535).contains(port) else {
            throw KeyError(key: key, rule)
        }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") {
            host = String(host.dropFirst().dropLast())
            guard URLRules.ipv6(host) != nil else { throw KeyError(key: key, rule) }
        } else {
            guard URLRules.isDottedQuad(host.utf8) else { throw KeyError(key: key, rule) }
        }
        self.host = host
        self.port = port
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// The config's `proxy` and `no_proxy` (curl's `--proxy`, `--noproxy`),
/// and what a proxy's refusal means for a task.
public enum ProxyRules {
    /// The schemes curl speaks to a proxy; none written means `http`.
    public static let schemes = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]

    /// Checks a `proxy` value; the error names the key and never the credentials.
    public static func check(proxy: String) throws {
        let shown = self.shown(proxy)
        if proxy.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            throw KeyError(key: "proxy", "must not contain spaces or control characters (\(Printable.escaping(shown)))")
        }
        var authority = Substring(proxy)
        if let schemeEnd = proxy.range(of: "://") {
            let scheme = proxy[..<schemeEnd.lowerBound].lowercased()
            guard schemes.contains(scheme) else {
                throw KeyError(key: "proxy", "has the scheme \"\(Printable.escaping(scheme))\", which is none of "
                               + schemes.joined(separator: ", ") + " (\(shown))")
            }
            authority = proxy[schemeEnd.upperBound...]
        }
        authority = authority.prefix { $0 != "/" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        guard !authority.isEmpty, !authority.hasPrefix(":") else {
            throw KeyError(key: "proxy", "names no host (\(shown))")
        }
    }

    /// Checks a `no_proxy` value: host names, domains and addresses separated by commas, or `*`.
    public static func check(noProxy: String) throws {
        if noProxy.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw KeyError(key: "no_proxy", "must not contain control characters")
        }
    }

    /// The proxy as it may be shown: its scheme (curl's `http` when none is written), host and
    /// port, its credentials `<redacted>`.
    public static func shown(_ proxy: String) -> String {
        Redaction.url(proxy.contains("://") ? proxy : "http://" + proxy)
    }

    /// A proxy's refusal (curl's `CURLE_PROXY`, told apart by `CURLINFO_PROXY_ERROR`).
    public enum Refusal: Equatable, Sendable {
        /// The user name and password were refused, or cannot be sent (too long for SOCKS).
        case credentials
        /// The proxy accepts none of the ways to log in offered: it wants a login the config does not give.
        case noAcceptableLogin
        /// Its rules do not allow this connection.
        case notAllowed
        /// It could not reach the server (unreachable, refused, its name not found).
        case serverUnreachable
        /// Anything else: the handshake broke.
        case other
    }

    /// What the task does after the proxy refused: a refusal no retry changes fails it at once,
    /// naming the proxy (redacted); the rest are retried like any transient failure.
    /// - Parameters:
    ///   - proxy: the config's `proxy`, or nil when curl took one from the environment.
    ///   - curlWords: curl's own sentence, already free of credentials.
    public static func outcome(of refusal: Refusal, proxy: String?, url: String, curlWords: String) -> AttemptOutcome {
        let named = proxy.map { "the proxy \(shown($0))" } ?? "the proxy from the environment (all_proxy, https_proxy, http_proxy)"
        let detail = " (curl: \(curlWords)) for \(Redaction.url(url))"
        switch refusal {
        case .credentials:
            return .permanent(reason: "\(named) refused the user name and password\(detail); fix the proxy's credentials in the config",
                              code: .proxyRefused)
        case .noAcceptableLogin:
            return .permanent(reason: "\(named) accepts none of the ways to log in offered\(detail): "
                              + "it may want a user name and password (proxy = \"socks5h://USER:PASSWORD@HOST:PORT\")",
                              code: .proxyRefused)
        case .notAllowed:
            return .permanent(reason: "\(named) does not allow this connection by its rules\(detail)", code: .proxyRefused)
        case .serverUnreachable:
            return .retry("\(named) could not reach the server\(detail)")
        case .other:
            return .retry("\(named) failed the handshake\(detail)")
        }
    }

    /// curl could not resolve the proxy's own name.
    public static func unresolvedProxy(_ proxy: String?, url: String, curlWords: String) -> AttemptOutcome {
        let named = proxy.map { "the proxy \(shown($0))" } ?? "the proxy from the environment"
        return .retry("cannot resolve the host of \(named) (curl: \(curlWords)) for \(Redaction.url(url))")
    }
}

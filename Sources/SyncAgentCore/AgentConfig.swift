import Foundation

public enum CookieMode: String, Codable, Equatable, Sendable, CaseIterable {
    case persistent, ephemeral, off
}

/// `config.toml` (SPEC §5). Paths stay nil when not set; the engine fills
/// them from flags and the XDG defaults.
public struct AgentConfig: Equatable, Sendable {
    public var inbox: String?
    public var stateDir: String?
    public var downloadDir: String?
    public var maxActive = 4
    public var maxPerHost = 6
    public var retries = 5
    public var connectTimeout = 30
    public var idleTimeout = 60
    public var totalTimeout = 604_800
    public var maxRedirects = 10
    public var maxSpeed: Int64?
    public var notify: NotifyMode = .batch
    public var userAgent: String?
    public var cookies: CookieMode = .persistent
    public var proxy: String?
    public var caFile: String?
    public var headers: [Header] = []
    /// Progress is made durable and logged at most this often …
    public var progressIntervalMs = 1000
    /// … or after this many bytes, whichever comes first (SPEC §6 rule 2).
    public var progressIntervalBytes: Int64 = 8 << 20

    public init() {}

    public var limits: SchedulerLimits { SchedulerLimits(maxActive: maxActive, maxPerHost: maxPerHost) }

    static let keys: Set<String> = [
        "inbox", "state_dir", "download_dir", "max_active", "max_per_host", "retries",
        "connect_timeout", "idle_timeout", "total_timeout", "max_redirects", "max_speed",
        "notify", "user_agent", "cookies", "proxy", "ca_file", "headers",
    ]

    /// Parses the text of a config file; errors name the key.
    public static func parse(_ text: String) throws -> AgentConfig {
        let reader = try TOMLReader.parse(text)
        try reader.rejectUnknownKeys(allowed: keys)
        var config = AgentConfig()
        config.inbox = try reader.string("inbox")
        config.stateDir = try reader.string("state_dir")
        config.downloadDir = try reader.string("download_dir")
        config.maxActive = try reader.int("max_active", in: 1...1024) ?? config.maxActive
        config.maxPerHost = try reader.int("max_per_host", in: 1...1024) ?? config.maxPerHost
        config.retries = try reader.int("retries", in: 0...100) ?? config.retries
        config.connectTimeout = try reader.seconds("connect_timeout") ?? config.connectTimeout
        config.idleTimeout = try reader.seconds("idle_timeout") ?? config.idleTimeout
        config.totalTimeout = try reader.seconds("total_timeout") ?? config.totalTimeout
        config.maxRedirects = try reader.int("max_redirects", in: 0...100) ?? config.maxRedirects
        config.maxSpeed = try reader.byteCount("max_speed")
        config.notify = try reader.choice("notify", NotifyMode.self) ?? config.notify
        config.userAgent = try reader.string("user_agent")
        config.cookies = try reader.choice("cookies", CookieMode.self) ?? config.cookies
        config.proxy = try reader.string("proxy")
        config.caFile = try reader.string("ca_file")
        config.headers = try reader.headers("headers")
        return config
    }
}

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
    /// More folders a job's `dest` may name (absolutely), each reached as download_dir is.
    public var moreDirs: [String] = []
    public var maxActive = 4
    public var maxPerHost = 6
    public var retries = 5
    public var connectTimeout = 30
    public var idleTimeout = 60
    public var totalTimeout = 604_800
    public var maxRedirects = 10
    public var maxSpeed: Int64?
    /// All running transfers together, shared among them (aria2's max-overall-download-limit).
    public var maxOverallSpeed: Int64?
    /// A transfer moving fewer bytes per second than this over `minSpeedTimeS` retries (nil: never).
    public var minSpeed: Int64? = LowSpeedWatch.defaultMinBytesPerS
    public var minSpeedTimeS = LowSpeedWatch.defaultWindowS
    /// Downloads without `dest` are named by their server's answer (jobs may say otherwise).
    public var nameFromServer = false
    /// Run when a task ends (`on_task_end`) or a batch drains (`on_batch_end`); argv, no shell.
    public var onTaskEnd: [String]?
    public var onBatchEnd: [String]?
    /// A hook still running after this many seconds is killed.
    public var hookTimeout = 60
    /// Connections per download that does not set its own `connections`.
    public var connections = 1
    /// False: transfers wait while NetworkManager says the link is metered (jobs may say otherwise).
    public var allowMetered = true
    /// Ended tasks keep their raw events this long; `compact` folds older ones into the snapshot.
    public var keepEndedS = Compaction.defaultKeepEndedS
    /// Seconds between scans of the inbox beside inotify (0: never; nil: only
    /// where inotify cannot see every change, `InboxPolling`).
    public var inboxPollS: Int64?
    public var notify: NotifyMode = .batch
    /// Notices offer "Open folder" and "Retry" where the notification server shows buttons.
    public var notifyActions = true
    public var userAgent: String?
    public var cookies: CookieMode = .persistent
    /// curl's proxy URL (`socks5h://user:password@host:1080`); nil: curl's environment decides.
    public var proxy: String?
    /// Hosts reached without the proxy (curl's `--noproxy`); nil: the environment's `no_proxy`.
    public var noProxy: String?
    public var caFile: String?
    public var headers: [Header] = []
    /// Progress is made durable and logged at most this often …
    public var progressIntervalMs = 1000
    /// … or after this many bytes, whichever comes first (SPEC §6 rule 2).
    public var progressIntervalBytes: Int64 = 8 << 20
    /// aria2's JSON-RPC (SPEC §12): off unless asked for.
    public var rpc = false
    public var rpcListen = RPCListen.default
    /// Nil: the agent makes one in the state dir (`RPCListen.secretFileName`).
    public var rpcSecret: String?

    public init() {}

    /// The hooks set, as `agent_started` and `config_reloaded` record them.
    public var hooks: [String] {
        (onTaskEnd != nil ? [HookKind.taskEnd.rawValue] : []) + (onBatchEnd != nil ? [HookKind.batchEnd.rawValue] : [])
    }

    public var limits: SchedulerLimits { SchedulerLimits(maxActive: maxActive, maxPerHost: maxPerHost) }

    /// Every key the config file may hold (syncagent.toml(5) names each).
    public static let keys: Set<String> = [
        "inbox", "state_dir", "download_dir", "max_active", "max_per_host", "retries",
        "connect_timeout", "idle_timeout", "total_timeout", "max_redirects", "max_speed",
        "notify", "notify_actions", "user_agent", "cookies", "proxy", "no_proxy", "ca_file", "headers",
        "max_overall_speed", "on_task_end", "on_batch_end", "hook_timeout", "connections",
        "allow_metered", "keep_ended", "more_dirs", "inbox_poll", "min_speed", "min_speed_time", "name_from_server",
        "rpc", "rpc_listen", "rpc_secret",
    ]

    /// Keys a running agent cannot change: SIGHUP reports them for the next start.
    public static let restartKeys: Set<String> = ["inbox", "state_dir", "download_dir", "more_dirs", "cookies", "rpc", "rpc_listen",
                                                  "rpc_secret"]

    /// The keys whose values differ, for the reload's log entry.
    public static func changes(from old: AgentConfig, to new: AgentConfig) -> [String] {
        var keys: [String] = []
        func note<T: Equatable>(_ key: String, _ path: KeyPath<AgentConfig, T>) {
            if old[keyPath: path] != new[keyPath: path] { keys.append(key) }
        }
        note("inbox", \.inbox); note("state_dir", \.stateDir); note("download_dir", \.downloadDir); note("more_dirs", \.moreDirs)
        note("max_active", \.maxActive); note("max_per_host", \.maxPerHost); note("retries", \.retries)
        note("connect_timeout", \.connectTimeout); note("idle_timeout", \.idleTimeout)
        note("total_timeout", \.totalTimeout); note("max_redirects", \.maxRedirects); note("max_speed", \.maxSpeed)
        note("notify", \.notify); note("notify_actions", \.notifyActions); note("user_agent", \.userAgent); note("cookies", \.cookies)
        note("proxy", \.proxy)
        note("no_proxy", \.noProxy)
        note("ca_file", \.caFile); note("headers", \.headers); note("max_overall_speed", \.maxOverallSpeed)
        note("on_task_end", \.onTaskEnd); note("on_batch_end", \.onBatchEnd); note("hook_timeout", \.hookTimeout)
        note("connections", \.connections); note("allow_metered", \.allowMetered)
        note("keep_ended", \.keepEndedS); note("inbox_poll", \.inboxPollS)
        note("min_speed", \.minSpeed); note("min_speed_time", \.minSpeedTimeS); note("name_from_server", \.nameFromServer)
        note("rpc", \.rpc); note("rpc_listen", \.rpcListen); note("rpc_secret", \.rpcSecret)
        return keys
    }

    /// Parses the text of a config file; errors name the key.
    public static func parse(_ text: String) throws -> AgentConfig {
        let reader = try TOMLReader.parse(text)
        try reader.rejectUnknownKeys(allowed: keys)
        var config = AgentConfig()
        config.inbox = try reader.string("inbox")
        config.stateDir = try reader.string("state_dir")
        config.downloadDir = try reader.string("download_dir")
        config.moreDirs = try reader.folders("more_dirs") ?? []
        config.maxActive = try reader.int("max_active", in: 1...1024) ?? config.maxActive
        config.maxPerHost = try reader.int("max_per_host", in: 1...1024) ?? config.maxPerHost
        config.retries = try reader.int("retries", in: 0...100) ?? config.retries
        config.connectTimeout = try reader.seconds("connect_timeout") ?? config.connectTimeout
        config.idleTimeout = try reader.seconds("idle_timeout") ?? config.idleTimeout
        config.totalTimeout = try reader.seconds("total_timeout") ?? config.totalTimeout
        config.maxRedirects = try reader.int("max_redirects", in: 0...100) ?? config.maxRedirects
        config.maxSpeed = try reader.byteCount("max_speed")
        config.maxOverallSpeed = try reader.byteCount("max_overall_speed")
        // 0 turns the check off: a transfer may then crawl until total_timeout.
        if reader.isZero("min_speed") { config.minSpeed = nil } else { config.minSpeed = try reader.byteCount("min_speed") ?? config.minSpeed }
        config.minSpeedTimeS = try reader.seconds("min_speed_time") ?? config.minSpeedTimeS
        config.nameFromServer = try reader.bool("name_from_server") ?? config.nameFromServer
        config.onTaskEnd = try reader.command("on_task_end")
        config.onBatchEnd = try reader.command("on_batch_end")
        config.hookTimeout = try reader.seconds("hook_timeout") ?? config.hookTimeout
        config.allowMetered = try reader.bool("allow_metered") ?? config.allowMetered
        config.keepEndedS = try reader.duration("keep_ended") ?? config.keepEndedS
        config.inboxPollS = try reader.duration("inbox_poll")
        config.connections = try reader.int("connections", in: 1...SegmentPlan.maximumConnections) ?? config.connections
        config.notify = try reader.choice("notify", NotifyMode.self) ?? config.notify
        config.notifyActions = try reader.bool("notify_actions") ?? config.notifyActions
        config.userAgent = try reader.string("user_agent")
        // It goes out as a header: a line break would start another one.
        if let agent = config.userAgent, agent.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            throw KeyError(key: "user_agent", "must not contain CR, LF, NUL or other control characters")
        }
        config.cookies = try reader.choice("cookies", CookieMode.self) ?? config.cookies
        config.proxy = try reader.string("proxy")
        if let proxy = config.proxy { try ProxyRules.check(proxy: proxy) }
        config.noProxy = try reader.string("no_proxy")
        if let noProxy = config.noProxy { try ProxyRules.check(noProxy: noProxy) }
        config.caFile = try reader.string("ca_file")
        config.headers = try reader.headers("headers")
        config.rpc = try reader.bool("rpc") ?? config.rpc
        if let listen = try reader.string("rpc_listen") { config.rpcListen = try RPCListen(parsing: listen, key: "rpc_listen") }
        config.rpcSecret = try reader.string("rpc_secret")
        if let secret = config.rpcSecret, secret.isEmpty || secret.unicodeScalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F }) {
            throw KeyError(key: "rpc_secret", "must be a word of printable characters, without spaces")
        }
        return config
    }
}

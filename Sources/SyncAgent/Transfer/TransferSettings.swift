import SyncAgentCore

/// Settings every exchange shares: config.toml with its defaults.
struct TransferSettings {
    var connectTimeout: Int
    var idleTimeout: Int
    var maxRedirects: Int
    var maxSpeed: Int64?
    var maxOverallSpeed: Int64?
    /// How many transfers may share `maxOverallSpeed` at most.
    var maxActive: Int
    var userAgent: String
    var proxy: String?
    var noProxy: String?
    var caFile: String?
    var headers: [Header]
    var progressIntervalMs: Int64
    var progressIntervalBytes: Int64
    var totalTimeout: Int
    var minSpeed: Int64?
    var minSpeedTimeS: Int

    init(config: AgentConfig) {
        connectTimeout = config.connectTimeout
        idleTimeout = config.idleTimeout
        maxRedirects = config.maxRedirects
        maxOverallSpeed = config.maxOverallSpeed
        maxActive = config.maxActive
        maxSpeed = config.maxSpeed
        userAgent = config.userAgent ?? "syncagent/\(SyncAgentVersion.current)"
        proxy = config.proxy
        noProxy = config.noProxy
        caFile = config.caFile
        headers = config.headers
        progressIntervalMs = Int64(config.progressIntervalMs)
        progressIntervalBytes = config.progressIntervalBytes
        totalTimeout = config.totalTimeout
        minSpeed = config.minSpeed
        minSpeedTimeS = config.minSpeedTimeS
    }
}

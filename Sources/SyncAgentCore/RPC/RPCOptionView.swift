import Foundation

/// aria2's options as the agent can state them: a download's from its
/// job, the global ones from the config, each value a string.
public enum RPCOptionView {
    /// `aria2.getOption`.
    public static func options(of task: TaskState, settings: RPCSettings) -> JSONValue {
        let spec = task.spec
        var options = common(settings)
        if let dest = task.dest {
            options["dir"] = .string((dest as NSString).deletingLastPathComponent)
            options["out"] = .string((dest as NSString).lastPathComponent)
        }
        let connections = spec.connections ?? settings.config.connections
        options["split"] = .string(String(connections))
        options["max-connection-per-server"] = .string(String(connections))
        options["max-download-limit"] = .string(String(spec.maxSpeed ?? settings.config.maxSpeed ?? 0))
        options["max-tries"] = .string(String((spec.retries ?? settings.config.retries) + 1))
        if let sha256 = spec.sha256 { options["checksum"] = .string("sha-256=" + sha256) }
        if let md5 = spec.md5 { options["checksum"] = .string("md5=" + md5) }
        if !spec.headers.isEmpty { options["header"] = .array(spec.headers.map { .string($0.printable) }) }
        return .object(options)
    }

    /// `aria2.getGlobalOption`.
    public static func globalOptions(_ settings: RPCSettings) -> JSONValue {
        let config = settings.config
        var options = common(settings)
        options["dir"] = .string(settings.downloadDir)
        options["max-concurrent-downloads"] = .string(String(config.maxActive))
        options["max-overall-download-limit"] = .string(String(config.maxOverallSpeed ?? 0))
        options["max-download-limit"] = .string(String(config.maxSpeed ?? 0))
        options["split"] = .string(String(config.connections))
        options["max-connection-per-server"] = .string(String(config.connections))
        options["max-tries"] = .string(String(config.retries + 1))
        if !config.headers.isEmpty { options["header"] = .array(config.headers.map { .string($0.printable) }) }
        return .object(options)
    }

    /// The options every download shares with the agent's config.
    private static func common(_ settings: RPCSettings) -> [String: JSONValue] {
        let config = settings.config
        var options: [String: JSONValue] = [
            "connect-timeout": .string(String(config.connectTimeout)),
            "timeout": .string(String(config.idleTimeout)),
            "user-agent": .string(settings.userAgent),
            "continue": "true",
            "always-resume": "true",
            "auto-file-renaming": "true",
            "allow-overwrite": "false",
        ]
        if let proxy = config.proxy { options["all-proxy"] = .string(Redaction.url(proxy)) }
        return options
    }

    /// `aria2.changeOption`: a download's options are its job, which does
    /// not change once recorded; a call that changes nothing is answered OK.
    public static func checkUnchanged(_ options: [String: JSONValue], of task: TaskState, settings: RPCSettings) throws {
        guard case .object(let current) = Self.options(of: task, settings: settings) else { return }
        for name in options.keys.sorted() where options[name] != current[name] {
            throw RPCError("Cannot change option \(name) for GID#\(RPCGID.of(taskID: task.id)): a download's options are fixed when it is added")
        }
    }

    /// `aria2.changeGlobalOption`: the options the running agent can change.
    public static func changeGlobal(_ options: [String: JSONValue]) throws -> RPCAction {
        var maxActive: Int?, overall: Int64??, perTask: Int64??
        for name in options.keys.sorted() {
            guard let text = options[name]?.string ?? (options[name].flatMap { if case .int(let n) = $0 { String(n) } else { nil } }) else {
                throw RPCError("option \(name): must be a string")
            }
            switch name {
            case "max-concurrent-downloads":
                guard let count = Int(text), (1...1024).contains(count) else {
                    throw RPCError("option max-concurrent-downloads: must be a whole number from 1 to 1024, not \"\(text)\"")
                }
                maxActive = count
            case "max-overall-download-limit", "max-download-limit":
                let limit: Int64?
                if text == "0" {
                    limit = nil
                } else if let bytes = ByteCount.parse(text), bytes > 0 {
                    limit = bytes
                } else {
                    throw RPCError("option \(name): must be a number of bytes per second such as 512K or 2M, or 0 for none")
                }
                if name == "max-download-limit" { perTask = .some(limit) } else { overall = .some(limit) }
            default:
                throw RPCError("option \(name) cannot be changed on a running syncagent; set it in config.toml")
            }
        }
        return .changeSettings(maxActive: maxActive, maxOverallSpeed: overall, maxSpeed: perTask)
    }
}

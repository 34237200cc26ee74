/// aria2's download options, as `aria2.addUri` carries them, turned into
/// the keys of a job file: the job parser then checks an RPC download
/// exactly as it checks a dropped job. Options with no counterpart here
/// (BitTorrent's, FTP's, aria2's own file allocation …) are left out, as
/// aria2 itself leaves out what does not apply; docs/rpc.md lists those
/// that take effect.
public enum RPCJobOptions {
    /// The options key for everything aria2 has no option for: job keys as
    /// a JSON object (`{"kind": "hls", "variant": "720p"}`) or as the TOML
    /// lines of a job file (`"kind = \"hls\""`).
    public static let jobKey = "syncagent"

    /// What an `addUri` asks for: a job's keys, the task id its `gid` names
    /// (nil: the agent picks one), and whether it starts paused.
    public struct Addition: Equatable, Sendable {
        public var table: TOMLTable
        public var taskID: String?
        public var startsPaused: Bool
        /// The aria2 option each job key came from, to name it in an error.
        public var origins: [String: String]
    }

    /// The options that take effect, with the job key each sets.
    public static let honoured: [String: String] = [
        "dir": "dest", "out": "dest", "header": "headers", "max-download-limit": "max_speed",
        "split": "connections", "max-connection-per-server": "connections", "checksum": "sha256 or md5",
        "all-proxy": "(the config's proxy)", "gid": "id", "pause": "(starts paused)",
        "max-tries": "retries", jobKey: "(any job key)",
    ]

    public static func addition(uris: [JSONValue], options: [String: JSONValue]) throws -> Addition {
        guard let url = uris.first?.string, !url.isEmpty else { throw RPCError("URI is not provided.") }
        guard uris.allSatisfy({ $0.string != nil }) else { throw RPCError.wrongType(0) }
        if url.lowercased().hasPrefix("magnet:") {
            throw RPCError("Magnet URIs are not supported: syncagent does not speak BitTorrent.")
        }
        var table = TOMLTable()
        var origins: [String: String] = [:]
        func set(_ key: String, _ value: TOMLValue, from option: String) {
            table.set(key, value)
            origins[key] = option
        }
        table.set("url", .string(url))

        var folder: String?, fileName: String?
        if let dir = try text(options, "dir") { folder = dir }
        if let out = try text(options, "out") { fileName = out }

        var headers = TOMLTable()
        for line in try texts(options, "header") {
            guard let colon = line.firstIndex(of: ":") else {
                throw RPCError("option header: \"\(line)\" must look like \"Name: value\"")
            }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces)
            headers.set(name, .string(line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        if !headers.keys.isEmpty { set("headers", .table(headers), from: "header") }

        if let limit = try text(options, "max-download-limit"), limit != "0" {
            set("max_speed", .string(limit), from: "max-download-limit")
        }
        // aria2 opens min(split, max-connection-per-server) connections to one server.
        let split = try count(options, "split")
        let perServer = try count(options, "max-connection-per-server")
        if let connections = [split, perServer].compactMap({ $0 }).min() {
            set("connections", .integer(min(connections, SegmentPlan.maximumConnections)),
                from: split != nil ? "split" : "max-connection-per-server")
        }
        if let tries = try count(options, "max-tries"), tries > 0 {
            // aria2 counts the first try; retries do not.
            set("retries", .integer(min(tries - 1, 100)), from: "max-tries")
        }
        if let checksum = try text(options, "checksum") {
            let parts = checksum.split(separator: "=", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { throw RPCError("option checksum: \"\(checksum)\" must look like sha-256=HEX or md5=HEX") }
            switch parts[0].lowercased() {
            case "sha-256": set("sha256", .string(parts[1]), from: "checksum")
            case "md5": set("md5", .string(parts[1]), from: "checksum")
            default: throw RPCError("option checksum: \(parts[0]) is not supported; use sha-256=HEX or md5=HEX")
            }
        }
        if let proxy = try text(options, "all-proxy"), !proxy.isEmpty {
            throw RPCError("option all-proxy: a proxy per download is not supported; set proxy in the agent's config.toml")
        }
        var taskID: String?
        if let gid = try text(options, "gid") {
            guard RPCGID.isGID(gid.lowercased()) else { throw RPCError("option gid: \"\(gid)\" is not 16 hex digits") }
            // aria2 keeps GID 0 for itself.
            guard gid != String(repeating: "0", count: 16) else { throw RPCError("option gid: \(gid) is not a GID a download may have") }
            taskID = gid.lowercased()
        }
        let startsPaused: Bool
        switch try text(options, "pause") {
        case nil, "false": startsPaused = false
        case "true": startsPaused = true
        case let other?: throw RPCError("option pause: must be \"true\" or \"false\", not \"\(Printable.escaping(other))\"")
        }

        if let jobKeys = options[jobKey] {
            for (key, value) in try jobTable(jobKeys) {
                guard key != "url", key != "id", key != "action" else {
                    throw RPCError("option \(jobKey): key \"\(key)\" cannot be set there (the URI and gid options say it)")
                }
                set(key, value, from: jobKey)
            }
        }
        if table["dest"] == nil, folder != nil || fileName != nil {
            let isVideo = table["kind"] == .string(TransferKind.hls.rawValue)
            let name = fileName ?? (isVideo ? URLRules.videoName(from: url) : URLRules.fileName(from: url))
            let dest = folder.map { ($0.hasSuffix("/") ? $0 : $0 + "/") + name } ?? name
            set("dest", .string(dest), from: fileName != nil && folder == nil ? "out" : "dir")
        }
        return Addition(table: table, taskID: taskID, startsPaused: startsPaused, origins: origins)
    }

    /// The job key's sentence, naming the aria2 option it came from.
    public static func describe(_ error: KeyError, origins: [String: String]) -> String {
        let root = error.key.map { String($0.split(separator: ".").first ?? "") } ?? ""
        if root == "url" { return "URI \(error.problem)" }
        guard let option = origins[root], option != jobKey else {
            return error.key == nil ? error.description : "option \(jobKey): \(error.description)"
        }
        return "option \(option): \(error.problem)"
    }

    // MARK: - Values

    /// aria2 sends every option value as a string; numbers are taken too.
    private static func text(_ options: [String: JSONValue], _ name: String) throws -> String? {
        switch options[name] {
        case nil, .null?: return nil
        case .string(let value)?: return value
        case .int(let value)?: return String(value)
        case .bool(let value)?: return String(value)
        default: throw RPCError("option \(name): must be a string")
        }
    }

    /// `header` may be one string or an array of them (aria2's own rule for repeatable options).
    private static func texts(_ options: [String: JSONValue], _ name: String) throws -> [String] {
        if case .array(let items)? = options[name] {
            return try items.map { item in
                guard let value = item.string else { throw RPCError("option \(name): must be a string or an array of strings") }
                return value
            }
        }
        return try text(options, name).map { [$0] } ?? []
    }

    private static func count(_ options: [String: JSONValue], _ name: String) throws -> Int? {
        guard let value = try text(options, name) else { return nil }
        guard let number = Int(value), number >= 1 else { throw RPCError("option \(name): must be a whole number from 1, not \"\(value)\"") }
        return number
    }

    /// The `syncagent` option as job keys: a JSON object, or TOML text.
    private static func jobTable(_ value: JSONValue) throws -> [(String, TOMLValue)] {
        switch value {
        case .object(let members):
            return try members.keys.sorted().compactMap { key in try toml(members[key]!, key: key).map { (key, $0) } }
        case .string(let text):
            let table: TOMLTable
            do {
                table = try TOML.parse(text)
            } catch let error as TOMLSyntaxError {
                throw RPCError("option \(jobKey): not valid TOML: \(error)")
            }
            return table.keys.map { ($0, table[$0]!) }
        default:
            throw RPCError("option \(jobKey): must be an object of job keys or the TOML lines of a job")
        }
    }

    private static func toml(_ value: JSONValue, key: String) throws -> TOMLValue? {
        switch value {
        case .null: return nil
        case .bool(let flag): return .boolean(flag)
        case .int(let number):
            guard let int = Int(exactly: number) else { throw RPCError("option \(jobKey): key \"\(key)\" is out of range") }
            return .integer(int)
        case .double(let number): return .float(number)
        case .string(let text): return .string(text)
        case .array(let items): return .array(try items.compactMap { try toml($0, key: key) })
        case .object(let members):
            var table = TOMLTable()
            for name in members.keys.sorted() {
                if let inner = try toml(members[name]!, key: key + "." + name) { table.set(name, inner) }
            }
            return .table(table)
        }
    }
}

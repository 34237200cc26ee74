import Foundation

/// What the answers about downloads need beyond a task: the agent's settings.
public struct RPCSettings: Equatable, Sendable {
    public var downloadDir: String
    public var config: AgentConfig
    /// What requests go out with (the config's `user_agent`, or the agent's own).
    public var userAgent: String
    public init(downloadDir: String, config: AgentConfig, userAgent: String = "syncagent") {
        self.downloadDir = downloadDir
        self.config = config
        self.userAgent = userAgent
    }
}

/// A task as aria2 describes a download (`aria2.tellStatus`): every value a
/// string, as aria2 writes them, and the same keys aria2 sends for a plain
/// HTTP download in the same state.
public enum RPCTaskStatus {
    /// aria2's piece length for HTTP downloads (`--piece-length`'s default):
    /// `bitfield` and `numPieces` count pieces of this size.
    public static let pieceLength: Int64 = 1 << 20

    /// aria2's word for where a task is.
    public static func status(of task: TaskState) -> String {
        switch task.phase {
        case .queued: "waiting"
        case .running: "active"
        // Paused by the user; a task waiting for the network (or for the agent to start again) waits.
        case .paused: task.pauseReason == .user ? "paused" : "waiting"
        case .finished: "complete"
        case .failed: "error"
        case .cancelled: "removed"
        }
    }

    /// The keys of `object`: what a status can hold.
    public static let keys: Set<String> = [
        "gid", "status", "totalLength", "completedLength", "uploadLength", "downloadSpeed", "uploadSpeed", "pieceLength",
        "numPieces", "connections", "dir", "files", "bitfield", "errorCode", "errorMessage",
    ]

    /// The struct of `aria2.tellStatus`, only `keys` when some are named.
    public static func object(_ task: TaskState, in state: AgentState, settings: RPCSettings, keys: [String] = []) -> JSONValue {
        let wanted = keys.isEmpty ? nil : Set(keys)
        var members: [String: JSONValue] = [:]
        func put(_ key: String, _ value: @autoclosure () -> JSONValue) {
            if wanted?.contains(key) ?? true { members[key] = value() }
        }
        let figures = state.figures(of: task)
        let sends = task.spec.behaviour.countsSent
        let total = figures.total ?? 0
        put("gid", .string(RPCGID.of(taskID: task.id)))
        put("status", .string(status(of: task)))
        put("totalLength", .string(String(total)))
        put("completedLength", .string(String(figures.bytes)))
        put("uploadLength", .string(String(sends ? figures.bytes : 0)))
        put("downloadSpeed", .string(String(sends ? 0 : figures.speed)))
        put("uploadSpeed", .string(String(sends ? figures.speed : 0)))
        put("pieceLength", .string(String(pieceLength)))
        put("numPieces", .string(String(pieces(in: total))))
        put("connections", .string(String(connections(of: task, settings: settings))))
        put("dir", .string(directory(of: task, settings: settings)))
        put("files", files(of: task, in: state))
        if figures.total != nil, task.attempts > 0 || figures.bytes > 0 {
            put("bitfield", .string(bitfield(task.phase == .finished ? ByteRanges([ByteSpan(0, total)]) : task.durableRanges, total: total)))
        }
        if task.phase.isEnded {
            put("errorCode", .string(String(errorCode(of: task))))
            put("errorMessage", .string(task.phase == .failed ? Printable.escaping(task.error ?? "") : ""))
        }
        return .object(members)
    }

    /// `aria2.getFiles`: one file, the task's destination.
    public static func files(of task: TaskState, in state: AgentState) -> JSONValue {
        let figures = state.figures(of: task)
        let file: JSONValue = .object([
            "index": "1",
            "path": .string(task.dest ?? ""),
            "length": .string(String(figures.total ?? 0)),
            "completedLength": .string(String(figures.bytes)),
            "selected": "true",
            "uris": uris(of: task),
        ])
        return .array([file])
    }

    /// `aria2.getUris`: the job's URL (credentials left out, as everywhere the agent shows one).
    public static func uris(of task: TaskState) -> JSONValue {
        // aria2 calls a URL used once a request went to it.
        let used = task.attempts > 0 || task.phase.isEnded
        return .array([.object(["uri": .string(Redaction.url(task.spec.url)), "status": used ? "used" : "waiting"])])
    }

    /// `aria2.getServers`, for an active task: the URL it was given and where it is fetched from now.
    public static func servers(of task: TaskState, in state: AgentState) -> JSONValue {
        let server: JSONValue = .object([
            "uri": .string(Redaction.url(task.spec.url)),
            "currentUri": .string(Redaction.url(task.currentURL)),
            "downloadSpeed": .string(String(state.figures(of: task).speed)),
        ])
        return .array([.object(["index": "1", "servers": .array([server])])])
    }

    static func pieces(in total: Int64) -> Int64 { total > 0 ? (total - 1) / pieceLength + 1 : 0 }

    /// aria2's bitfield: a bit per piece, the first piece the highest bit,
    /// set when the whole piece is durable; padded with zero bits to a byte.
    public static func bitfield(_ durable: ByteRanges, total: Int64) -> String {
        let count = pieces(in: total)
        guard count > 0 else { return "" }
        var bytes = [UInt8](repeating: 0, count: Int((count + 7) / 8))
        for span in durable.spans {
            // The pieces wholly inside the span.
            var piece = (span.start + pieceLength - 1) / pieceLength
            while piece < count, min((piece + 1) * pieceLength, total) <= span.end {
                bytes[Int(piece / 8)] |= 0x80 >> UInt8(piece % 8)
                piece += 1
            }
        }
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xF)]] }, as: UTF8.self)
    }

    private static func connections(of task: TaskState, settings: RPCSettings) -> Int {
        guard task.phase == .running else { return 0 }
        return task.isFannedOut ? 1 : max(1, task.spec.connections ?? settings.config.connections)
    }

    private static func directory(of task: TaskState, settings: RPCSettings) -> String {
        guard let dest = task.dest else { return settings.downloadDir }
        return (dest as NSString).deletingLastPathComponent
    }

    /// aria2's exit status for a stopped download (its EXIT STATUS list):
    /// 0 when it completed, 31 when removed, else the nearest cause.
    public static func errorCode(of task: TaskState) -> Int {
        switch task.phase {
        case .finished: return 0
        case .cancelled: return 31
        default: break
        }
        switch task.errorCode {
        case .http(let status)?:
            switch status {
            case 404, 410: return 3
            case 401, 407: return 24
            case 500...599: return 29
            default: return 22
            }
        case .curl(let code)?:
            switch code {
            case 5, 6: return 19
            case 28: return 2
            case 47: return 23
            case 7, 52, 55, 56: return 6
            default: return 1
            }
        case .totalTimeout?: return 2
        case .diskFull?: return 9
        case .ioError?, .readError?, .partChanged?: return 17
        case .destExists?: return 13
        case .destReserved?, .destBusy?: return 11
        case .destUnreachable?: return 16
        case .checksumMismatch?: return 32
        case .rangeIgnored?: return 8
        default: return 1
        }
    }
}

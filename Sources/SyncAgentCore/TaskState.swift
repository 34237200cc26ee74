import Foundation

public enum TaskPhase: String, Codable, Equatable, Sendable, CaseIterable {
    case queued, running, paused, finished, failed, cancelled

    /// Counts towards "is there still work": the notification waits for these.
    public var isActive: Bool { self == .queued || self == .running }
    public var isEnded: Bool { self == .finished || self == .failed || self == .cancelled }
}

/// One task as the log tells it.
public struct TaskState: Equatable, Sendable {
    public var id: String
    public var spec: TaskSpec
    public var phase: TaskPhase = .queued
    /// Bytes the log vouches for: flushed to the partial (or final) file.
    public var bytes: Int64 = 0
    public var total: Int64?
    /// Attempts started so far, across restarts.
    public var attempts: Int = 0
    public var error: String?
    public var errorCode: String?
    public var currentURL: String {
        didSet { hostKey = URLRules.hostKey(currentURL) }
    }
    /// `host:port` of `currentURL`, kept rather than parsed on every scheduling pass.
    public private(set) var hostKey: String
    public var redirects: Int = 0
    public var etag: String?
    public var lastModified: String?
    /// Why the last restart from 0 happened, if one did.
    public var restartReason: String?
    public var pauseReason: PauseReason?
    /// Unix ms before which the scheduler must not start it (not_before, retry backoff).
    public var notBeforeMs: Int64?
    public var createdSeq: Int64
    public var lastSeq: Int64
    public var createdAtMs: Int64
    public var updatedAtMs: Int64
    public var endedAtMs: Int64?
    /// Throughput over the last two progress events, bytes per second.
    public var speed: Int64 = 0
    /// `notify = "each"` tasks owe their own notification once ended.
    public var owesOwnNotice = false

    public init(id: String, spec: TaskSpec, seq: Int64, atMs: Int64) {
        self.id = id
        self.spec = spec
        self.currentURL = spec.url
        self.hostKey = URLRules.hostKey(spec.url)
        self.notBeforeMs = spec.notBeforeMs
        self.createdSeq = seq
        self.lastSeq = seq
        self.createdAtMs = atMs
        self.updatedAtMs = atMs
    }

    /// Where `finished` published the file (may differ from the requested
    /// `spec.dest` with `overwrite = "rename"`).
    public var publishedPath: String?

    /// The file as the user should look for it.
    public var dest: String { publishedPath ?? spec.dest }

    /// The partial file downloads stream into: beside the requested destination.
    public var partPath: String { spec.dest + ".part" }

    /// 0…100 when the size is known.
    public var percent: Double? {
        guard let total, total > 0 else { return phase == .finished ? 100 : nil }
        return min(100, Double(bytes) * 100 / Double(total))
    }
}

/// The notification group a task belongs to: its `batch`, or the default one.
public struct BatchKey: Hashable, Comparable, Sendable {
    public var name: String?
    public init(_ name: String?) { self.name = name }
    public static func < (lhs: BatchKey, rhs: BatchKey) -> Bool { (lhs.name ?? "") < (rhs.name ?? "") }
}

/// Every task plus the agent-level facts: the fold of the whole log.
public struct AgentState: Equatable, Sendable {
    public internal(set) var tasks: [String: TaskState] = [:]
    /// Task ids in creation order.
    public internal(set) var order: [String] = []
    public internal(set) var lastSeq: Int64 = 0
    /// Identities of job files that became tasks (exactly-once intake).
    public internal(set) var takenSources: Set<String> = []
    public internal(set) var rejected: [Rejected] = []
    /// Tasks that ended since their batch was last announced, per batch.
    public internal(set) var endedSinceNotice: [BatchKey: [String]] = [:]
    /// `batch_finished` recorded, `notified` not yet: a restart must post these.
    public internal(set) var owedNotices: [BatchKey: BatchFinished] = [:]
    /// Queued tasks in start order.
    public internal(set) var runQueue = RunQueue()
    /// Tasks in the `running` phase.
    public internal(set) var runningCount = 0
    /// Running tasks per `host:port`.
    public internal(set) var runningByHost: [String: Int] = [:]
    /// Ended `notify = "each"` tasks whose own notification is not posted yet.
    public internal(set) var owedOwnNotices: Set<String> = []
    /// Active (queued or running) task count per batch, to know when one drains.
    public internal(set) var activeByBatch: [BatchKey: Int] = [:]
    public internal(set) var activeCount = 0
    /// The pid of the agent that last started and has not recorded a stop.
    public internal(set) var runningAgentPid: Int32?

    public init() {}

    public subscript(id: String) -> TaskState? { tasks[id] }

    public var orderedTasks: [TaskState] { order.compactMap { tasks[$0] } }

    /// Unknown ids found while folding: events for tasks never created.
    /// Kept, not thrown, so a damaged log still replays what it can.
    public internal(set) var orphanEvents: [Int64] = []
}

import Foundation

public enum TaskPhase: String, Codable, Equatable, Sendable, CaseIterable {
    case queued, running, paused, finished, failed, cancelled

    /// Counts towards "is there still work": the notification waits for these.
    public var isActive: Bool { self == .queued || self == .running }
    public var isEnded: Bool { self == .finished || self == .failed || self == .cancelled }
}

/// A task's job as created. It never changes, so the task holds it by
/// reference: a queue of 10,000 tasks then stores ~170 bytes less per task.
final class SpecBox: Equatable, Sendable {
    let spec: TaskSpec
    init(_ spec: TaskSpec) { self.spec = spec }
    static func == (lhs: SpecBox, rhs: SpecBox) -> Bool { lhs === rhs || lhs.spec == rhs.spec }
}

/// Where a task's job is: held in memory, or let go while the task waits
/// and read back from the log's `created` event at `createdSeq` (see
/// `SpecArchive`). Either way it is the same job, and compares so.
struct SpecSlot: Equatable, Sendable {
    var box: SpecBox?
    var createdSeq: Int64

    func spec(of id: String?) -> TaskSpec { box?.spec ?? SpecArchive.spec(of: id, createdAt: createdSeq) }

    static func == (lhs: SpecSlot, rhs: SpecSlot) -> Bool {
        guard lhs.createdSeq == rhs.createdSeq else { return false }
        if let left = lhs.box, let right = rhs.box { return left == right }
        return lhs.spec(of: nil) == rhs.spec(of: nil)
    }
}

/// The rarely set strings of a task, kept out of line: a queued task has
/// none of them, and 10,000 queued tasks then store 88 bytes less each.
struct TaskDetails: OutOfLineFields {
    var error: String?
    var errorCode: FailureCode?
    var etag: String?
    var lastModified: String?
    var restartReason: String?
    var publishedPath: String?
    var responseStatus: Int?
    var skipReason: String?
    var hls: HLSProgress?
    var unchanged = false
    var doneRanges: ByteRanges?
    var singleConnectionReason: String?
    var upload: UploadSession?
    var chunkSize: Int64?
    var splitInto: Int?
    var bodyChangedNs: Int64?
    var digests: DigestBook?
    var namedDest: String?
    /// Retargeted with bytes kept: the new URL's answer must confirm them first.
    var retargetCheck = false
}

/// What a task gains once it is started, moved or ended: byte and attempt
/// counts, times, a redirect's URL. A task waiting in the queue has none of
/// it, so it stays out of line: 100,000 waiting tasks store 80 bytes less
/// each. Counts are 32 bits and optional times 8 bytes (`OptionalInt64`).
struct TaskActivity: OutOfLineFields {
    /// `lastSeq` and `updatedAtMs`, as distances from the creation's (wrapping: a damaged log may hold any number).
    var seqsSinceCreated: Int64 = 0
    var msSinceCreated: Int64 = 0
    var bytes: Int64 = 0
    var speed: Int64 = 0
    var attempts: Int32 = 0
    var attemptsBeforeRerun: Int32 = 0
    var attemptsNotCounted: Int32 = 0
    var redirects: Int32 = 0
    var total = OptionalInt64()
    var endedAtMs = OptionalInt64()
    var firstStartedAtMs = OptionalInt64()
    var movedURL: String?
}

/// What an HLS parent knows of its playlist: every segment so far, in order.
public struct HLSProgress: Equatable, Sendable {
    public var playlist: String
    public var targetDurationMs: Int64
    public var ended: Bool
    public var entries: [HLSEntry]
    /// Media seconds taken so far (× 1000), for `max_duration`.
    public var mediaMs: Int64
    public var lastSequence: Int64?
    /// Sound and subtitles from playlists of their own, taken with the video.
    public var renditions: HLSRenditions? = nil
}

/// A parent's children in numbers, kept by the fold as they change.
public struct Family: Equatable, Sendable {
    public var total = 0
    public var finished = 0
    /// Failed or cancelled: the parent cannot complete.
    public var lost = 0
    /// Bytes the children's logs vouch for.
    public var bytes: Int64 = 0
    public init() {}
}

/// One task as the log tells it.
public struct TaskState: Equatable, Sendable {
    public var id: String
    /// The job (see `SpecSlot`): let go only by the agent, only while a
    /// top-level task waits, queued or paused (`AgentState.releaseSpec`).
    private var specSlot: SpecSlot
    public var spec: TaskSpec { specSlot.spec(of: id) }
    /// Whether the job is in memory, not only in the log.
    public var holdsSpec: Bool { specSlot.box != nil }
    /// Bytes the log vouches for: flushed to the partial (or final) file.
    public var bytes: Int64 { get { activity.box?.fields.bytes ?? 0 } set { activity.modify { $0.bytes = newValue } } }
    /// Attempts started so far, across restarts.
    public var attempts: Int {
        get { Int(activity.box?.fields.attempts ?? 0) } set { activity.modify { $0.attempts = Int32(clamping: newValue) } }
    }
    /// `attempts` when the user last ran the failed task again: retries count from here.
    public var attemptsBeforeRerun: Int {
        get { Int(activity.box?.fields.attemptsBeforeRerun ?? 0) }
        set { activity.modify { $0.attemptsBeforeRerun = Int32(clamping: newValue) } }
    }
    /// Attempts that spend no retry: they met no network (the task then waited
    /// for it), or ended by the agent's own change of approach (a segmented
    /// download going on over one connection).
    public var attemptsNotCounted: Int {
        get { Int(activity.box?.fields.attemptsNotCounted ?? 0) }
        set { activity.modify { $0.attemptsNotCounted = Int32(clamping: newValue) } }
    }
    /// Attempts that count against `retries`.
    public var attemptsUsed: Int { attempts - attemptsBeforeRerun - attemptsNotCounted }
    /// The number the next `started` records: at the 32-bit limit (a damaged
    /// log) it stays there, as the fold will store it, so the agent that
    /// compares the two still finds its attempt (and retries are long spent).
    public var nextAttempt: Int {
        let attempts = activity.box?.fields.attempts ?? 0
        return Int(attempts == .max ? .max : attempts + 1)
    }
    public var redirects: Int {
        get { Int(activity.box?.fields.redirects ?? 0) } set { activity.modify { $0.redirects = Int32(clamping: newValue) } }
    }
    // Set in any order (a snapshot sets each): the last seq and time, kept
    // as distances from the creation's, stay what they were.
    public var createdSeq: Int64 {
        get { specSlot.createdSeq }
        set { let last = lastSeq; specSlot.createdSeq = newValue; lastSeq = last }
    }
    /// The seq of the task's last event.
    public var lastSeq: Int64 {
        get { createdSeq &+ (activity.box?.fields.seqsSinceCreated ?? 0) }
        set { let distance = newValue &- createdSeq; activity.modify { $0.seqsSinceCreated = distance } }
    }
    public var createdAtMs: Int64 {
        get { storedCreatedAtMs }
        set { let updated = updatedAtMs; storedCreatedAtMs = newValue; updatedAtMs = updated }
    }
    private var storedCreatedAtMs: Int64
    /// When the task's last event was recorded.
    public var updatedAtMs: Int64 {
        get { createdAtMs &+ (activity.box?.fields.msSinceCreated ?? 0) }
        set { let distance = newValue &- createdAtMs; activity.modify { $0.msSinceCreated = distance } }
    }
    /// Throughput over the last two progress events, bytes per second.
    public var speed: Int64 { get { activity.box?.fields.speed ?? 0 } set { activity.modify { $0.speed = newValue } } }
    /// Where the next request goes: the job's URL until a redirect moves it.
    public var currentURL: String {
        get { movedURL ?? spec.url }
        set {
            // Every `started` sets it, almost always to what it was: parsed again only when it changed.
            let url = spec.url
            guard newValue != (movedURL ?? url) else { return }
            // Nil while it is the job's: a second reference to the job's string would keep it when the job is let go.
            movedURL = newValue == url ? nil : newValue
            hostKey = URLRules.hostKey(newValue)
        }
    }
    /// `currentURL` when a redirect moved it off the job's URL; else nil.
    public private(set) var movedURL: String? {
        get { activity.box?.fields.movedURL } set { activity.modify { $0.movedURL = newValue } }
    }
    /// `host:port` of `currentURL`, kept rather than parsed on every scheduling pass.
    public internal(set) var hostKey: String
    /// The rarely set fields (see `TaskDetails`).
    var details = OutOfLine<TaskDetails>()
    /// What the task gained once anything happened to it (see `TaskActivity`).
    var activity = OutOfLine<TaskActivity>()
    // The optional time below is stored with a sentinel: 8 bytes, not 16.
    private var storedNotBeforeMs = OptionalInt64()
    public var total: Int64? { get { activity.box?.fields.total.value } set { activity.modify { $0.total = OptionalInt64(newValue) } } }
    /// Unix ms before which the scheduler must not start it (not_before, retry backoff).
    public var notBeforeMs: Int64? { get { storedNotBeforeMs.value } set { storedNotBeforeMs.value = newValue } }
    public var endedAtMs: Int64? {
        get { activity.box?.fields.endedAtMs.value } set { activity.modify { $0.endedAtMs = OptionalInt64(newValue) } }
    }
    /// When the first attempt began: `total_timeout` counts from here, across
    /// attempts and restarts (NSURLSession's timeoutIntervalForResource).
    public var firstStartedAtMs: Int64? {
        get { activity.box?.fields.firstStartedAtMs.value } set { activity.modify { $0.firstStartedAtMs = OptionalInt64(newValue) } }
    }
    public var phase: TaskPhase = .queued
    public var pauseReason: PauseReason?
    /// `notify = "each"` tasks owe their own notification once ended.
    public var owesOwnNotice = false
    /// `syncagent forget`: no longer listed by `status`.
    public var forgotten = false
    /// The job's `allow_metered`, kept beside it: the network policy asks it of
    /// every waiting task on every network change, whose job may be let go.
    public let jobAllowsMetered: Bool?

    public var error: String? { get { details.box?.fields.error } set { details.fields.error = newValue } }
    public var errorCode: FailureCode? { get { details.box?.fields.errorCode } set { details.fields.errorCode = newValue } }
    public var etag: String? { get { details.box?.fields.etag } set { details.fields.etag = newValue } }
    public var lastModified: String? { get { details.box?.fields.lastModified } set { details.fields.lastModified = newValue } }
    /// Why the last restart from 0 happened, if one did.
    public var restartReason: String? { get { details.box?.fields.restartReason } set { details.fields.restartReason = newValue } }
    /// Where `finished` published the file (may differ from the requested
    /// `spec.dest` with `overwrite = "rename"`).
    public var publishedPath: String? { get { details.box?.fields.publishedPath } set { details.fields.publishedPath = newValue } }
    /// Upload and data tasks: the status of the response they finished with.
    public var responseStatus: Int? { get { details.box?.fields.responseStatus } set { details.fields.responseStatus = newValue } }
    /// An HLS parent after it read its playlist; nil before.
    public var hls: HLSProgress? { get { details.box?.fields.hls } set { details.fields.hls = newValue } }
    /// A parent whose work is its children's: it holds no transfer slot.
    /// (Read in place: the fold asks on every phase change.)
    public var isFannedOut: Bool { details.box.map { $0.fields.hls != nil || $0.fields.splitInto != nil } ?? false }
    /// A resumable upload's resource on the server, once created (`upload_created`).
    public var upload: UploadSession? { get { details.box?.fields.upload } set { details.fields.upload = newValue } }
    /// The size of the last chunk sent and confirmed.
    public var chunkSize: Int64? { get { details.box?.fields.chunkSize } set { details.fields.chunkSize = newValue } }
    /// A resumable upload: `body_file`'s ctime when its upload began or it was split.
    public var bodyChangedNs: Int64? { get { details.box?.fields.bodyChangedNs } set { details.fields.bodyChangedNs = newValue } }
    /// A parallel upload: how many partial uploads (child tasks) it became.
    public var splitInto: Int? { get { details.box?.fields.splitInto } set { details.fields.splitInto = newValue } }
    /// Whether no more children will come: a video's playlist ended, or an upload was split.
    public var hasAllChildren: Bool { hls?.ended ?? (splitInto != nil) }
    /// The parent of a child task, read in place (not through a copy of the
    /// spec). A task whose job is let go has none: only top-level jobs are.
    public var parentID: String? { specSlot.box?.spec.parent }
    /// Set when the task finished without a transfer (`overwrite = "skip"`): why.
    public var skipReason: String? { get { details.box?.fields.skipReason } set { details.fields.skipReason = newValue } }
    /// A segmented download whose durable bytes are not one prefix: which
    /// parts of the file they are (`bytes` in all). Nil: bytes `0 ..< bytes`.
    public var doneRanges: ByteRanges? { get { details.box?.fields.doneRanges } set { details.fields.doneRanges = newValue } }
    /// Why it downloads over one connection although it asked for more.
    public var singleConnectionReason: String? {
        get { details.box?.fields.singleConnectionReason } set { details.fields.singleConnectionReason = newValue }
    }
    /// Whether `doneRanges` is set, asked without copying the details out.
    var hasDoneRanges: Bool { details.box?.fields.doneRanges != nil }
    /// The digests of the durable bytes (`durableRanges`), as progress
    /// recorded them; nil when none were (a log from before them, or no bytes).
    public var digests: DigestBook? { details.box?.fields.digests }
    var hasDigests: Bool { details.box?.fields.digests != nil }
    /// What the log vouches for, as spans of the file.
    public var durableRanges: ByteRanges { doneRanges ?? ByteRanges([ByteSpan(0, bytes)]) }
    /// Retargeted with bytes kept, and no answer from the new URL has
    /// confirmed them yet: its next answer is held to `RetargetRules.sameFile`.
    /// A video that fanned out: its playlist is to be read at the new URL
    /// (`HLSRetarget`) before its segments go on.
    public var awaitsRetargetCheck: Bool {
        get { details.box?.fields.retargetCheck ?? false } set { details.fields.retargetCheck = newValue }
    }
    /// `overwrite = "update"` found it unchanged on the server (a 304).
    public var unchanged: Bool { get { details.box?.fields.unchanged ?? false } set { details.fields.unchanged = newValue } }

    public init(id: String, spec: TaskSpec, seq: Int64, atMs: Int64) {
        self.init(id: id, spec: spec, hostKey: URLRules.hostKey(spec.url), seq: seq, atMs: atMs)
    }

    /// With the host key already known (a snapshot stores it: parsing 100,000 URLs again costs more than reading them).
    init(id: String, spec: TaskSpec, hostKey: String, seq: Int64, atMs: Int64) {
        self.id = id
        self.hostKey = hostKey
        self.storedNotBeforeMs = OptionalInt64(spec.notBeforeMs)
        self.jobAllowsMetered = spec.allowMetered
        // Last: the box takes the spec itself, not a copy (a copy retains its every string).
        self.specSlot = SpecSlot(box: SpecBox(consume spec), createdSeq: seq)
        self.storedCreatedAtMs = atMs
    }

    /// The creation's and the last event's seq and time, set together (a
    /// snapshot reads them so): one at a time, each would make and drop a
    /// box of activity for a task nothing happened to.
    mutating func setSeqsAndTimes(createdSeq: Int64, lastSeq: Int64, createdAtMs: Int64, updatedAtMs: Int64) {
        specSlot.createdSeq = createdSeq
        storedCreatedAtMs = createdAtMs
        activity.modify { activity in
            activity.seqsSinceCreated = lastSeq &- createdSeq
            activity.msSinceCreated = updatedAtMs &- createdAtMs
        }
    }

    /// Lets the job go, to be read back from the log: a top-level task that
    /// waits (queued or paused), whose `created` the caller knows to be in
    /// the log. (Never an ended one: compaction may delete its events.)
    mutating func releaseSpec() -> Bool {
        guard mayLetSpecGo else { return false }
        specSlot.box = nil
        return true
    }

    /// Whether `releaseSpec` would let the job go (asked before looking in the log for its `created`).
    public var mayLetSpecGo: Bool {
        guard let box = specSlot.box else { return false }
        return (phase == .queued || phase == .paused) && box.spec.parent == nil
    }

    /// Reads a job let go back into memory, where it stays. One that cannot
    /// be read stays let go: a placeholder is never kept as the job.
    mutating func holdSpec() {
        if specSlot.box == nil, let spec = SpecArchive.read(of: id, createdAt: createdSeq) { specSlot.box = SpecBox(spec) }
    }

    /// `name_from_server`: where its server's answer said the file goes
    /// (`Progressed.dest`); nil until that answer, and for every other task.
    public var namedDest: String? { get { details.box?.fields.namedDest } set { details.fields.namedDest = newValue } }

    /// A download named by its server whose name is still to come: its
    /// destination is known once the first answer is.
    public var awaitsServerName: Bool { namedDest == nil && spec.nameFromServer == true }

    /// Where the file is to be published: the server's name, else the job's destination.
    public var finalDest: String? { namedDest ?? spec.dest }

    /// The file as the user should look for it; nil when the task keeps no body.
    public var dest: String? { publishedPath ?? finalDest }

    /// The partial file a received body streams into: beside the requested destination.
    public var partPath: String? { spec.dest.map(Destinations.partPath(of:)) }

    /// What a person calls this transfer: the file's name, else what was sent where.
    public var displayName: String {
        if let dest { return (dest as NSString).lastPathComponent }
        if let body = spec.bodyFile { return (body as NSString).lastPathComponent }
        return "\(spec.effectiveMethod) \(Redaction.url(spec.url))"
    }

    /// 0…100 when the size is known.
    public var percent: Double? {
        guard let total, total > 0 else { return phase == .finished ? 100 : nil }
        return min(100, Double(bytes) * 100 / Double(total))
    }
}

/// An `Int64?` in 8 bytes rather than 16: `Int64.min` stands for nil. No
/// size or time a job or server can give is that far below zero.
struct OptionalInt64: Equatable, Sendable {
    private var stored: Int64
    init(_ value: Int64? = nil) { stored = Self.representable(value) ?? .min }
    var value: Int64? {
        get { stored == .min ? nil : stored }
        set { stored = Self.representable(newValue) ?? .min }
    }

    /// What a value reads back as: `Int64.min` (only a damaged log holds
    /// one) as the one above it, never as nil. A snapshot's task header,
    /// written with the value itself, is compared through this too.
    static func representable(_ value: Int64?) -> Int64? { value == .min ? .min + 1 : value }
}

/// The notification group a task belongs to: its `batch`, or the default one.
public struct BatchKey: Hashable, Comparable, Sendable {
    public var name: String?
    public init(_ name: String?) { self.name = name }
    public static func < (lhs: BatchKey, rhs: BatchKey) -> Bool { (lhs.name ?? "") < (rhs.name ?? "") }
}

/// Every task plus the agent-level facts: the fold of the whole log.
public struct AgentState: Equatable, Sendable {
    /// Every task ever created, in creation order.
    public internal(set) var tasks = TaskList()
    public internal(set) var lastSeq: Int64 = 0
    /// Identities of job files that became tasks (`hasTaken`): each task's
    /// job names its own, so the index holds none of them.
    var sourcesOfTasks = TaskKeyIndex()
    /// Top-level tasks by GID (`conflict(ofNewTaskID:)`).
    var gidIndex = GIDIndex()
    /// Identities of job files applied as control jobs.
    public internal(set) var controlSources: Set<String> = []
    /// Identities of job files that were rejected.
    public internal(set) var rejectedSources: Set<String> = []
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
    /// Destinations of live (not ended) tasks → the task holding them (and
    /// so their partial files): two live tasks never share one (see
    /// `Destinations`). Each is its holder's own `dest`, so the index holds none.
    var reservations = TaskKeyIndex()
    /// Destinations named by a server's answer (`name_from_server`), of live
    /// tasks that hold their own `dest` too (where their partial file is).
    var namedReservations = TaskKeyIndex()
    /// Children of each parent, in creation order, and their numbers.
    public internal(set) var children: [String: [String]] = [:]
    public internal(set) var families: [String: Family] = [:]
    /// Running parents whose children have all finished (and whose playlist
    /// has ended), or one of whose children failed: a decision is due.
    public internal(set) var settledParents: Set<String> = []
    /// The pid of the agent that last started and has not recorded a stop.
    public internal(set) var runningAgentPid: Int32?
    /// Files this agent published, by path: what `overwrite = "update"` asks the server about.
    public internal(set) var published: [String: PublishedFile] = [:]
    /// Hooks the running config sets (from `agent_started`, `config_reloaded`).
    public internal(set) var armedHooks: Set<HookKind> = []
    /// Top-level tasks that ended while `on_task_end` was set and whose hook has not started.
    public internal(set) var owedTaskHooks: Set<String> = []
    /// `batch_finished` events (by seq) owed an `on_batch_end` run.
    public internal(set) var owedBatchHooks: [Int64: BatchFinished] = [:]
    /// Hook runs started whose end is not recorded: running, or left so by an agent that died.
    public internal(set) var hooksInFlight: [HookRunKey: HookRun] = [:]
    /// Hook runs whose `hook_ended` says they may not have run, until the
    /// same hook starts again for the same task (a later end of it).
    public internal(set) var hooksMayNotHaveRun: [HookRunKey: HookRun] = [:]

    public init() {}

    public subscript(id: String) -> TaskState? { tasks[id] }

    /// Whether a job file of this identity became a task or was applied as
    /// a control job (exactly-once intake).
    public func hasTaken(_ identity: String) -> Bool {
        controlSources.contains(identity) || sourcesOfTasks.position(of: identity, in: tasks, keyOf: \.spec.source?.identity) != nil
    }

    /// Indexes the job-file identity of the task at `position`, if it has one
    /// (`hasTaken`): as the fold creates it, or a snapshot is read.
    mutating func indexSourceOfTask(at position: Int) {
        guard let identity = tasks[position].spec.source?.identity else { return }
        sourcesOfTasks.insert(identity, position: position, in: tasks, keyOf: \.spec.source?.identity)
    }

    /// Every identity `hasTaken` knows (reads every task's job: for tests and old snapshots).
    public var takenSources: Set<String> {
        controlSources.union(sourcesOfTasks.positions.compactMap { tasks[$0].spec.source?.identity })
    }

    /// The live task holding `path` as its destination, if any.
    public func holder(ofDestination path: String) -> String? {
        let position = reservations.position(of: path, in: tasks, keyOf: \.spec.dest)
            ?? (namedReservations.isEmpty ? nil : namedReservations.position(of: path, in: tasks, keyOf: \.namedDest))
        return position.map { tasks[$0].id }
    }

    /// Every reserved destination and its holder (reads every holder's job: for tests).
    public var reservedPaths: [String: String] {
        let named = namedReservations.positions.compactMap { position in tasks[position].namedDest.map { ($0, tasks[position].id) } }
        return Dictionary(reservations.positions.compactMap { position in
            tasks[position].spec.dest.map { ($0, tasks[position].id) }
        } + named, uniquingKeysWith: { first, _ in first })
    }

    /// The agent lets a waiting top-level task's job go once its `created`
    /// is durable, and reads it back as the task starts (`holdSpec`) or
    /// ends (the fold does: compaction may then delete its events): a
    /// queue of 100,000 jobs then holds none of their URLs, paths and
    /// headers. Only for a task whose `created` the caller knows to be in
    /// the log (compaction never deletes a live task's events, but a task
    /// run again after its events were dropped has none). Whether it did.
    @discardableResult
    public mutating func releaseSpec(of id: String) -> Bool {
        guard let index = tasks.index(forKey: id) else { return false }
        return tasks[index].releaseSpec()
    }

    /// Keeps a task's job in memory from now on (read back if it was let go).
    public mutating func holdSpec(of id: String) {
        guard let index = tasks.index(forKey: id), !tasks[index].holdsSpec else { return }
        tasks[index].holdSpec()
    }

    /// Every task in creation order (the list itself: no copy).
    public var orderedTasks: TaskList { tasks }

    /// Unknown ids found while folding: events for tasks never created.
    /// Kept, not thrown, so a damaged log still replays what it can.
    public internal(set) var orphanEvents: [Int64] = []
}

/// Tasks by id, kept in creation order. A task is never removed (compaction
/// keeps ended tasks in the snapshot), so they sit in fixed-size chunks found
/// through a small index. A dictionary of these 200-byte values kept up to
/// 2.6 slots per task, and one growing array briefly holds both its old and
/// its doubled buffer: either cost a fold of 100,000 queued tasks 40–60 MiB.
public struct TaskList: RandomAccessCollection, Equatable, Sendable {
    private static let chunkShift = 10
    private static let chunkMask = (1 << chunkShift) - 1
    private var chunks: [[TaskState]] = []
    /// By a hash of the id, each hit checked against the task's own (see `PositionTable`).
    private var positions = PositionTable()
    public private(set) var count = 0

    public init() {}

    public var startIndex: Int { 0 }
    public var endIndex: Int { count }

    /// The task at a position (creation order). Mutable inside the module, in
    /// place; a task's `id` is never changed there.
    public internal(set) subscript(position: Int) -> TaskState {
        // Read in place: reading one field of a task copies no other.
        _read { yield chunks[position >> Self.chunkShift][position & Self.chunkMask] }
        _modify { yield &chunks[position >> Self.chunkShift][position & Self.chunkMask] }
    }

    public subscript(id: String) -> TaskState? { index(forKey: id).map { self[$0] } }
    public func index(forKey id: String) -> Int? { positions.first(hash: id.hashValue) { self[$0].id == id } }
    /// The ids in creation order, each read in place (not through a copy of its task).
    public var keys: LazyMapSequence<Range<Int>, String> { indices.lazy.map { self[$0].id } }

    /// Adds a task whose id is new; false (and nothing added) if the id is taken.
    @discardableResult
    mutating func append(_ task: consuming TaskState) -> Bool {
        // One hash of the id, not two: a start-up adds every task of its snapshot.
        let id = task.id
        let idHash = id.hashValue
        guard count < Int32.max, positions.first(hash: idHash, where: { self[$0].id == id }) == nil else { return false }
        positions.insert(hash: idHash, position: count)
        if count & Self.chunkMask == 0 {
            var chunk: [TaskState] = []
            chunk.reserveCapacity(Self.chunkMask + 1)
            chunks.append(chunk)
        }
        chunks[chunks.count - 1].append(consume task)
        count += 1
        return true
    }

    mutating func reserveCapacity(_ count: Int) {
        positions.reserveCapacity(count)
    }

    public static func == (lhs: TaskList, rhs: TaskList) -> Bool { lhs.elementsEqual(rhs) }
}

/// What `status` shows of a task's progress. A parent's is its children's:
/// their bytes and speed, and the share of them finished.
public struct TaskFigures: Equatable, Sendable {
    public var bytes: Int64
    public var total: Int64?
    public var percent: Double?
    public var speed: Int64
    /// A parent's children: finished of all.
    public var children: (done: Int, total: Int)?

    public static func == (lhs: TaskFigures, rhs: TaskFigures) -> Bool {
        lhs.bytes == rhs.bytes && lhs.total == rhs.total && lhs.percent == rhs.percent && lhs.speed == rhs.speed
            && lhs.children?.done == rhs.children?.done && lhs.children?.total == rhs.children?.total
    }
}

extension AgentState {
    public func figures(of task: TaskState) -> TaskFigures {
        guard let family = families[task.id], task.phase != .finished else {
            return TaskFigures(bytes: task.bytes, total: task.total, percent: task.percent,
                               speed: task.phase == .running ? task.speed : 0,
                               children: families[task.id].map { ($0.finished, $0.total) })
        }
        let running = (children[task.id] ?? []).compactMap { self[$0] }.filter { $0.phase == .running }
        // Until a live playlist ends, its share done is not known. A split upload's size is its file's.
        let known = task.hasAllChildren && family.total > 0
        let percent: Double? = if let total = task.total, total > 0, task.splitInto != nil {
            min(100, Double(family.bytes) * 100 / Double(total))
        } else {
            known ? Double(family.finished) * 100 / Double(family.total) : nil
        }
        return TaskFigures(bytes: family.bytes, total: task.splitInto != nil ? task.total : nil, percent: percent,
                           speed: task.phase == .running ? running.reduce(0) { $0 &+ $1.speed } : 0,
                           children: (family.finished, family.total))
    }
}

/// A file as this agent published it: the validators its server gave, and
/// its size and modification time then. A file changed on disk since is not
/// the one the validators describe.
public struct PublishedFile: Equatable, Sendable {
    /// The task that published it (last).
    public var task: String
    /// The job URL it came from: its validators describe that resource only.
    public var url: String
    /// The job's sha256, checked when it was published.
    public var sha256: String?
    public var etag: String?
    public var lastModified: String?
    public var size: Int64
    public var modifiedNs: Int64?

    /// The conditional headers to ask `url` with, if the file on disk is
    /// still this one and came from there. (`ETag: *` is no validator: sent
    /// back as `If-None-Match: *` it would match every version.)
    public func validators(for url: String, size onDisk: Int64, modifiedNs onDiskNs: Int64) -> (etag: String?, lastModified: String?)? {
        let etag = self.etag == "*" ? nil : self.etag
        guard url == self.url, etag != nil || lastModified != nil, size == onDisk, let modifiedNs, modifiedNs == onDiskNs else {
            return nil
        }
        return (etag, lastModified)
    }
}

import Foundation

/// One fact in the event log. The log is an ordered list of these; every
/// state the agent, `status` and `replay` show is the fold of such a list.
public struct Event: Equatable, Sendable {
    /// Position in the log's total order; assigned by the single writer.
    public var seq: Int64
    /// Unix epoch milliseconds.
    public var atMs: Int64
    /// The task this fact is about; nil for agent-level facts.
    public var task: String?
    public var body: EventBody

    public init(seq: Int64 = 0, atMs: Int64, task: String? = nil, body: EventBody) {
        self.seq = seq
        self.atMs = atMs
        self.task = task
        self.body = body
    }

    /// The `type` column.
    public var type: String { body.type }
}

/// What happened. Each case's payload is the `data` JSON object of the row.
public enum EventBody: Equatable, Sendable {
    // The big payloads (a spec, attempt metrics) are boxed: an event is then
    // the size of a `progressed`, and replaying a million of them copies
    // about a hundred bytes each instead of several hundred.
    indirect case created(TaskSpec)
    case started(Started)
    case progressed(Progressed)
    indirect case paused(Paused)
    case resumed(Resumed)
    case redirected(Redirected)
    indirect case retrying(Retrying)
    indirect case finished(Finished)
    indirect case failed(Failed)
    indirect case cancelled(Cancelled)
    indirect case rejected(Rejected)
    indirect case agentStarted(AgentStarted)
    case agentStopped(AgentStopped)
    indirect case batchFinished(BatchFinished)
    indirect case notified(Notified)
    indirect case controlled(Controlled)
    indirect case configReloaded(ConfigReloaded)
    indirect case expanded(Expanded)
    case forgotten(Forgotten)
    indirect case hookStarted(HookStarted)
    indirect case hookEnded(HookEnded)
    indirect case compacted(Compacted)
    indirect case uploadCreated(UploadCreated)
    indirect case split(Split)
    indirect case retargeted(Retargeted)

    public static let allTypes = [
        "created", "started", "progressed", "paused", "resumed", "redirected", "retrying",
        "finished", "failed", "cancelled", "rejected", "controlled", "expanded",
        "agent_started", "agent_stopped", "batch_finished", "notified", "config_reloaded",
        "forgotten", "hook_started", "hook_ended", "compacted", "retargeted",
    ]

    public var type: String {
        switch self {
        case .created: "created"
        case .started: "started"
        case .progressed: "progressed"
        case .paused: "paused"
        case .resumed: "resumed"
        case .redirected: "redirected"
        case .retrying: "retrying"
        case .finished: "finished"
        case .failed: "failed"
        case .cancelled: "cancelled"
        case .rejected: "rejected"
        case .agentStarted: "agent_started"
        case .agentStopped: "agent_stopped"
        case .batchFinished: "batch_finished"
        case .notified: "notified"
        case .controlled: "controlled"
        case .configReloaded: "config_reloaded"
        case .expanded: "expanded"
        case .forgotten: "forgotten"
        case .hookStarted: "hook_started"
        case .hookEnded: "hook_ended"
        case .compacted: "compacted"
        case .uploadCreated: "upload_created"
        case .split: "split"
        case .retargeted: "retargeted"
        }
    }
}

// MARK: - Payloads

/// An attempt began: the request went out asking for bytes from `offset`.
public struct Started: Codable, Equatable, Sendable {
    public var attempt: Int
    public var offset: Int64
    public var url: String
    public init(attempt: Int, offset: Int64, url: String) {
        self.attempt = attempt; self.offset = offset; self.url = url
    }
}

/// Bytes up to `bytes` are flushed to the partial file (rule 2: durable
/// before claimed). Validators arrive with the first progress of a response.
public struct Progressed: Codable, Equatable, Sendable {
    public var bytes: Int64
    public var total: Int64?
    public var etag: String?
    public var lastModified: String?
    /// Set when the offset went back to 0 because the server would not resume.
    public var restartReason: String?
    /// A segmented download (`connections` > 1): the parts of the file that
    /// are durable, `bytes` in all. Nil: bytes `0 ..< bytes`.
    public var ranges: [ByteSpan]?
    /// Why a download that asked for several connections uses one.
    public var fallback: String?
    /// A resumable upload: the size of the chunk just sent and confirmed (auto-sized ones change).
    public var chunk: Int64?
    /// The SHA-256 of what this claim made durable (SPEC §6 rule 3), as the
    /// chain of each part that grew (`SpanDigest`); kept by the fold in a `DigestBook`.
    public var digests: [SpanDigest]?
    /// Set when a resume found durable bytes that no longer match their
    /// digests: which, and how many are fetched again (`bytes` and `ranges`
    /// say what is left).
    public var mismatch: String?
    /// `name_from_server`: where the file is to be published, as its server's
    /// answer named it (made safe, `overwrite` applied). Recorded once, with
    /// the first answer, before any of its bytes are claimed; the name holds
    /// for the task's life, whatever later answers say.
    public var dest: String?
    /// A segmented download moved the rest of a range to another connection
    /// (its own crawled below `min_speed`, or fell far behind the others):
    /// which bytes, and why. `ranges` is unchanged by it.
    public var moved: String?
    public init(bytes: Int64, total: Int64? = nil, etag: String? = nil, lastModified: String? = nil,
                restartReason: String? = nil, ranges: [ByteSpan]? = nil, fallback: String? = nil, chunk: Int64? = nil,
                digests: [SpanDigest]? = nil, mismatch: String? = nil, dest: String? = nil, moved: String? = nil) {
        self.bytes = bytes; self.total = total; self.etag = etag
        self.lastModified = lastModified; self.restartReason = restartReason; self.ranges = ranges
        self.fallback = fallback; self.chunk = chunk; self.digests = digests; self.mismatch = mismatch
        self.dest = dest; self.moved = moved
    }
}

/// Why a task stopped without ending. Only `user` pauses survive a restart;
/// the others are resumed by the next agent.
public enum PauseReason: String, Codable, Equatable, Sendable {
    case user
    case agentStopping = "agent_stopping"
    /// The machine is offline: an attempt could not reach the server. Resumed
    /// when the network comes back, without spending a retry
    /// (NSURLSession's waitsForConnectivity).
    case offline = "waiting_for_network"
    /// `allow_metered = false` while NetworkManager says the link is metered
    /// (NSURLSession's allowsExpensiveNetworkAccess). Resumed when it is not.
    case metered

    /// Waits for the network, not for the user: the agent resumes it by itself.
    public var waitsForNetwork: Bool { self == .offline || self == .metered }
}

public struct Paused: Codable, Equatable, Sendable {
    public var bytes: Int64
    public var reason: PauseReason
    /// Set when a running attempt was stopped.
    public var metrics: AttemptMetrics?
    public init(bytes: Int64, reason: PauseReason, metrics: AttemptMetrics? = nil) {
        self.bytes = bytes; self.reason = reason; self.metrics = metrics
    }
}

/// The task goes back to the queue and will continue from `bytes`
/// (NSURLSession's `didResumeAtOffset`).
public struct Resumed: Codable, Equatable, Sendable {
    public var bytes: Int64
    public var reason: String
    public init(bytes: Int64, reason: String) { self.bytes = bytes; self.reason = reason }
}

public struct Redirected: Codable, Equatable, Sendable {
    public var from: String
    public var to: String
    public var status: Int
    public init(from: String, to: String, status: Int) { self.from = from; self.to = to; self.status = status }
}

/// `syncagent retarget`: the task goes on from another URL (a link that
/// expired, a new mirror). Its id and job stay; `status` shows `to` as its
/// current URL. Every field but `to` is decoded leniently (absent: nil or 0).
public struct Retargeted: Codable, Equatable, Sendable {
    /// The URL it left: the job's, or where a redirect or an earlier retarget had moved it.
    public var from: String?
    public var to: String
    /// The bytes kept: the new URL's first answer must confirm they are its
    /// file's (`RetargetRules.sameFile`) before more are added. 0: it starts over.
    public var bytes: Int64
    /// Why it starts over, if it had bytes and could not keep them.
    public var reason: String?
    /// The attempt that was running, stopped for the move.
    public var metrics: AttemptMetrics?

    public init(from: String?, to: String, bytes: Int64, reason: String? = nil, metrics: AttemptMetrics? = nil) {
        self.from = from; self.to = to; self.bytes = bytes; self.reason = reason; self.metrics = metrics
    }

    private enum CodingKeys: String, CodingKey { case from, to, bytes, reason, metrics }

    public init(from decoder: Decoder) throws {
        let keys = try decoder.container(keyedBy: CodingKeys.self)
        from = try keys.decodeIfPresent(String.self, forKey: .from)
        to = try keys.decode(String.self, forKey: .to)
        bytes = try keys.decodeIfPresent(Int64.self, forKey: .bytes) ?? 0
        reason = try keys.decodeIfPresent(String.self, forKey: .reason)
        metrics = try keys.decodeIfPresent(AttemptMetrics.self, forKey: .metrics)
    }
}

/// A transient failure: the task waits `delayMs` and tries again from `bytes`.
public struct Retrying: Codable, Equatable, Sendable {
    public var attempt: Int
    public var reason: String
    public var delayMs: Int64
    public var bytes: Int64
    public var metrics: AttemptMetrics?
    /// True: the attempt ended by the agent's own choice, not a failure, and spends no retry.
    public var free: Bool?
    public init(attempt: Int, reason: String, delayMs: Int64, bytes: Int64, metrics: AttemptMetrics? = nil, free: Bool? = nil) {
        self.attempt = attempt; self.reason = reason; self.delayMs = delayMs; self.bytes = bytes
        self.metrics = metrics; self.free = free
    }
}

/// The task succeeded: a received file is verified and published at
/// `dest`; an upload's `bytes` are the bytes sent.
public struct Finished: Codable, Equatable, Sendable {
    public var bytes: Int64
    public var dest: String?
    /// The published bytes' SHA-256, hashed as they were made durable
    /// (earlier logs: the job's `sha256`, when it gave one).
    public var sha256: String?
    /// Upload and data tasks: the final response's status and headers.
    public var status: Int?
    public var responseHeaders: [Header]?
    /// nil when no attempt ran (`overwrite = "skip"` found the file).
    public var metrics: AttemptMetrics?
    /// Set when nothing was transferred because `overwrite = "skip"` found
    /// the file, or another task bringing it: why.
    public var skipped: String?
    /// The published file's modification time (ns since the epoch), so that
    /// `overwrite = "update"` can tell the file is still the one it published.
    public var modifiedNs: Int64?
    /// `overwrite = "update"`: the server answered 304; the file was left as it was.
    public var unchanged: Bool?
    public init(bytes: Int64, dest: String?, sha256: String? = nil, status: Int? = nil,
                responseHeaders: [Header]? = nil, metrics: AttemptMetrics? = nil, skipped: String? = nil,
                modifiedNs: Int64? = nil, unchanged: Bool? = nil) {
        self.bytes = bytes; self.dest = dest; self.sha256 = sha256; self.status = status
        self.responseHeaders = responseHeaders; self.metrics = metrics; self.skipped = skipped
        self.modifiedNs = modifiedNs; self.unchanged = unchanged
    }

    /// As it may be shown: credentials among the response headers redacted.
    public var redacted: Finished {
        var copy = self
        copy.responseHeaders = responseHeaders?.map(\.redacted)
        return copy
    }
}

public struct Failed: Codable, Equatable, Sendable {
    /// Words for the user: "server answered 404 for https://…".
    public var reason: String
    /// Machine-readable: "http_404", "curl_7", "checksum_mismatch", …
    public var code: FailureCode
    public var bytes: Int64
    /// nil when the task failed before or between attempts.
    public var metrics: AttemptMetrics?
    public init(reason: String, code: FailureCode, bytes: Int64, metrics: AttemptMetrics? = nil) {
        self.reason = reason; self.code = code; self.bytes = bytes; self.metrics = metrics
    }
}

public struct Cancelled: Codable, Equatable, Sendable {
    public var bytes: Int64
    public var metrics: AttemptMetrics?
    public init(bytes: Int64, metrics: AttemptMetrics? = nil) { self.bytes = bytes; self.metrics = metrics }
}

/// A job file that could not become a task; it now sits in `INBOX/rejected/`.
public struct Rejected: Codable, Equatable, Sendable {
    public var file: String
    public var error: String
    /// The job file's identity (see `JobSource`): a restart that finds the
    /// file again knows it was handled.
    public var identity: String?
    public init(file: String, error: String, identity: String? = nil) {
        self.file = file; self.error = error; self.identity = identity
    }
}

/// A control job was handled: what it asked, and what came of it
/// ("paused at byte 1048576", "nothing to do: task already finished").
/// The event's task is the target, or nil for `task = "*"`.
public struct Controlled: Codable, Equatable, Sendable {
    public var action: String
    public var target: String
    public var outcome: String
    public var file: String?
    /// The job file's identity: intake is exactly-once for control jobs too.
    public var identity: String?
    /// How many tasks it changed (0: "nothing to do", "cannot run again"):
    /// what the command that asked exits with. Nil in logs from before it was kept.
    public var changed: Int?
    public init(action: String, target: String, outcome: String, file: String? = nil, identity: String? = nil, changed: Int? = nil) {
        self.action = action; self.target = target; self.outcome = outcome; self.file = file; self.identity = identity
        self.changed = changed
    }

    /// Whether it changed any task. (A log from before `changed` was kept
    /// says so only in words: every outcome that changed nothing begins so.)
    public var changedAnything: Bool {
        if let changed { return changed > 0 }
        return !outcome.contains("nothing to do") && !outcome.contains("cannot run again")
    }

    /// The most tasks one `outcome` names, each with what happened to it.
    public static let outcomesNamed = 20

    /// One line for what a control job did (`outcomes`: "ID: what happened",
    /// in task order): all of them when few; when many, the first ones and
    /// how many more, counted by what happened to them. Every task's own
    /// event (paused, resumed, cancelled) records its part: `pause --all`
    /// of 100,000 tasks wrote one event of 2.6 MB naming each.
    public static func outcome(of outcomes: [String]) -> String {
        guard outcomes.count > outcomesNamed else { return outcomes.joined(separator: "; ") }
        // "paused at byte 123" and "paused at byte 456" are one kind: "paused at byte …".
        var kinds: [String: Int] = [:], order: [String] = []
        for outcome in outcomes.dropFirst(outcomesNamed) {
            // Its words after the task id, up to the first that holds a number (an offset, an id).
            let words = outcome.drop { $0 != ":" }.dropFirst().split(separator: " ")
            let wording = words.prefix { !$0.contains(where: \.isNumber) }
            let kind = wording.joined(separator: " ") + (wording.count < words.count ? " …" : "")
            if kinds[kind] == nil { order.append(kind) }
            kinds[kind, default: 0] += 1
        }
        return outcomes.prefix(outcomesNamed).joined(separator: "; ") + "; and \(outcomes.count - outcomesNamed) more: "
            + order.map { "\($0) ×\(kinds[$0]!)" }.joined(separator: ", ")
    }
}

/// SIGHUP: the config file was read again. `error` set: it did not parse
/// and the agent goes on with the settings it had.
public struct ConfigReloaded: Codable, Equatable, Sendable {
    public var file: String
    /// Keys whose value changed and took effect.
    public var applied: [String]
    /// Keys that changed but only take effect at the next start (paths).
    public var needRestart: [String]
    public var error: String?
    /// The hooks set from now on (nil: unchanged, as when the file did not parse).
    public var hooks: [String]?
    public init(file: String, applied: [String], needRestart: [String], error: String? = nil, hooks: [String]? = nil) {
        self.file = file; self.applied = applied; self.needRestart = needRestart; self.error = error; self.hooks = hooks
    }
}

/// `syncagent compact` (or the agent by itself) stored a snapshot and
/// dropped the raw events of tasks that ended long ago (SPEC §6).
public struct Compacted: Codable, Equatable, Sendable {
    /// The seq the new snapshot covers.
    public var snapshotSeq: Int64
    /// Tasks whose raw events were deleted, and how many events went in all.
    public var tasks: Int
    public var events: Int
    /// Tasks that had ended at least this long ago qualified.
    public var olderThanS: Int64
    /// Size of the log (with its write-ahead log) before and after.
    public var bytesBefore: Int64
    public var bytesAfter: Int64
    /// `requested` (syncagent compact), `log_size` (the agent by itself),
    /// `intake` (the agent, after taking many jobs), or `interrupted`
    /// (finishing one a crash or a stop cut short).
    public var trigger: String
    /// Set when the compaction failed (the numbers are then 0): what `compact` reports.
    public var error: String?
    /// The `compact` requests (their job files' names) this compaction answered: each
    /// `syncagent compact` waits for the report that names its own. Nil for the agent's own.
    public var requestedBy: [String]?
    public init(snapshotSeq: Int64, tasks: Int, events: Int, olderThanS: Int64, bytesBefore: Int64, bytesAfter: Int64, trigger: String,
                error: String? = nil, requestedBy: [String]? = nil) {
        self.snapshotSeq = snapshotSeq; self.tasks = tasks; self.events = events; self.olderThanS = olderThanS
        self.bytesBefore = bytesBefore; self.bytesAfter = bytesAfter; self.trigger = trigger; self.error = error
        self.requestedBy = requestedBy
    }

    public static func failed(_ error: String, olderThanS: Int64, trigger: String) -> Compacted {
        Compacted(snapshotSeq: 0, tasks: 0, events: 0, olderThanS: olderThanS, bytesBefore: 0, bytesAfter: 0, trigger: trigger, error: error)
    }
}

/// `syncagent forget`: an ended task leaves `status`; the log keeps its history.
public struct Forgotten: Codable, Equatable, Sendable {
    public var file: String?
    public init(file: String? = nil) { self.file = file }
}

/// The config's commands run when a task or a batch ends (`on_task_end`,
/// `on_batch_end`, SPEC §5).
public enum HookKind: String, Codable, Equatable, Sendable, CaseIterable {
    case taskEnd = "task_end"
    case batchEnd = "batch_end"

    /// The config key that sets it, as people know it: `on_task_end`, `on_batch_end`.
    public var configKey: String { "on_" + rawValue }
}

/// A hook is about to start: recorded and committed before the process is
/// spawned, so a restart never runs it twice (at most once, like `notified`).
/// The event's task is the ended task for `task_end`.
public struct HookStarted: Codable, Equatable, Sendable {
    public var hook: HookKind
    /// `batch_end`: the seq of the `batch_finished` it is for.
    public var batchSeq: Int64?
    /// The program (the command's first word; its arguments may be private).
    public var program: String
    public init(hook: HookKind, batchSeq: Int64? = nil, program: String) {
        self.hook = hook; self.batchSeq = batchSeq; self.program = program
    }
}

/// How a hook's process ended: its exit status, or the signal that ended it
/// (SIGKILL from the agent when it ran past `hook_timeout`: `timedOut`), or
/// why it could not be started (`error`), or that no end was seen at all
/// (`mayNotHaveRun`).
public struct HookEnded: Codable, Equatable, Sendable {
    public var hook: HookKind
    public var batchSeq: Int64?
    public var pid: Int32?
    public var exitStatus: Int32?
    public var signal: Int32?
    public var timedOut: Bool
    public var durationMs: Int64
    public var error: String?
    /// Recorded by the next agent's start for a run whose `hook_started` has
    /// no end: the agent died after that commit, before the spawn or while
    /// the hook ran. It is not run again (at most once); it may not have run.
    /// Absent (nil) in every other `hook_ended`, and in logs before it existed.
    public var mayNotHaveRun: Bool?
    public init(hook: HookKind, batchSeq: Int64? = nil, pid: Int32?, exitStatus: Int32? = nil, signal: Int32? = nil,
                timedOut: Bool = false, durationMs: Int64, error: String? = nil, mayNotHaveRun: Bool? = nil) {
        self.hook = hook; self.batchSeq = batchSeq; self.pid = pid; self.exitStatus = exitStatus; self.signal = signal
        self.timedOut = timedOut; self.durationMs = durationMs; self.error = error; self.mayNotHaveRun = mayNotHaveRun
    }
}

public struct AgentStarted: Codable, Equatable, Sendable {
    public var pid: Int32
    public var version: String
    /// The hooks the config sets (`HookKind` raw values): ends from now on owe them a run.
    public var hooks: [String]?
    public init(pid: Int32, version: String, hooks: [String]? = nil) {
        self.pid = pid; self.version = version; self.hooks = hooks
    }
}

public struct AgentStopped: Codable, Equatable, Sendable {
    public var reason: String
    public init(reason: String) { self.reason = reason }
}

/// Every task of a batch that was active has ended; a notification is owed.
/// A big batch is recorded as counts, its ids listed only up to
/// `listedUpTo` each: 20,000 ids made one event of 180 KB.
public struct BatchFinished: Codable, Equatable, Sendable {
    /// nil for the default batch (tasks without a `batch` key).
    public var batch: String?
    /// The finished tasks' ids: all of them, or the first `listedUpTo` when `finishedCount` says more.
    public var finished: [String]
    /// The failed tasks' ids, likewise (failures first: they are what hooks and notices name).
    public var failed: [String]
    /// Counts, recorded since lists are cut; nil in older events, whose lists are whole.
    public var finishedCount: Int?
    public var failedCount: Int?
    /// Finished tasks a 304 left as they were (`overwrite = "update"`).
    public var unchangedCount: Int?

    /// Ids listed per list, at most.
    public static let listedUpTo = 100

    /// - Parameter unchanged: nil: counted from the ids when a notice is made (they must then all be listed).
    public init(batch: String?, finished: [String], failed: [String], unchanged: Int? = nil) {
        self.batch = batch
        self.finished = Array(finished.prefix(Self.listedUpTo))
        self.failed = Array(failed.prefix(Self.listedUpTo))
        finishedCount = finished.count
        failedCount = failed.count
        unchangedCount = unchanged
    }

    public var finishedTotal: Int { finishedCount ?? finished.count }
    public var failedTotal: Int { failedCount ?? failed.count }
}

/// A notification was handed to the desktop (or could not be: `delivered`
/// false with the warning). Either way it is never posted again.
public struct Notified: Codable, Equatable, Sendable {
    public var batch: String?
    public var summary: String
    /// Nil: recorded as the notice was handed over, before the notification server answered, so
    /// that no restart posts it again; the answer goes to the agent's own log. (Earlier logs
    /// recorded it after the answer, with what it was.)
    public var delivered: Bool?
    public var warning: String?
    public init(batch: String?, summary: String, delivered: Bool? = nil, warning: String? = nil) {
        self.batch = batch; self.summary = summary; self.delivered = delivered; self.warning = warning
    }
}

/// An HLS parent read its media playlist (SPEC §10): these children are its
/// new segments, in playback order, each with what the local playlist needs.
/// Key and init-segment children are named by the entries that use them.
public struct Expanded: Codable, Equatable, Sendable {
    /// The media playlist's URL (the chosen variant's, after redirects).
    public var playlist: String
    public var targetDurationMs: Int64
    /// No segment will follow: `#EXT-X-ENDLIST`, or `max_duration` reached.
    public var ended: Bool
    public var entries: [HLSEntry]
    /// The separate renditions (sound, subtitles) taken with the video, in the first
    /// expansion only; absent when there are none (and in logs older than them).
    public var renditions: HLSRenditions?
    public init(playlist: String, targetDurationMs: Int64, ended: Bool, entries: [HLSEntry], renditions: HLSRenditions? = nil) {
        self.playlist = playlist; self.targetDurationMs = targetDurationMs; self.ended = ended; self.entries = entries
        self.renditions = renditions
    }
}

/// A video's `#EXT-X-MEDIA` renditions taken beside its own segments, and
/// what its local master playlist says of the variant (as the server wrote
/// it: untrusted, made safe where it is written).
public struct HLSRenditions: Codable, Equatable, Sendable {
    public var bandwidth: Int64?
    public var resolution: String?
    public var codecs: String?
    public var tracks: [HLSTrack]
    public init(bandwidth: Int64? = nil, resolution: String? = nil, codecs: String? = nil, tracks: [HLSTrack]) {
        self.bandwidth = bandwidth; self.resolution = resolution; self.codecs = codecs; self.tracks = tracks
    }
}

/// One rendition's media playlist: its segments as children, like the video's.
public struct HLSTrack: Codable, Equatable, Sendable {
    public var kind: HLSRendition.Kind
    public var playlist: String
    public var language: String?
    public var name: String?
    public var targetDurationMs: Int64
    /// The extension its segments are published with (`ts`, `aac`, `m4s`, `vtt` …).
    public var segmentExtension: String
    public var entries: [HLSEntry]
    public init(kind: HLSRendition.Kind, playlist: String, language: String?, name: String?, targetDurationMs: Int64,
                segmentExtension: String, entries: [HLSEntry]) {
        self.kind = kind; self.playlist = playlist; self.language = language; self.name = name
        self.targetDurationMs = targetDurationMs; self.segmentExtension = segmentExtension; self.entries = entries
    }
}

/// One segment of an HLS parent: the child that downloads it and how it plays.
public struct HLSEntry: Codable, Equatable, Sendable {
    public var child: String
    public var durationMs: Int64
    public var sequence: Int64
    public var discontinuity: Bool
    /// The child holding the AES-128 key (never printed: a file, not a log entry).
    public var keyChild: String?
    /// The AES-128 IV, hex (public by RFC 8216: it travels in the playlist).
    public var iv: String?
    /// The child holding the fMP4 init segment (`#EXT-X-MAP`).
    public var mapChild: String?
    public init(child: String, durationMs: Int64, sequence: Int64, discontinuity: Bool = false, keyChild: String? = nil,
                iv: String? = nil, mapChild: String? = nil) {
        self.child = child; self.durationMs = durationMs; self.sequence = sequence; self.discontinuity = discontinuity
        self.keyChild = keyChild; self.iv = iv; self.mapChild = mapChild
    }
}

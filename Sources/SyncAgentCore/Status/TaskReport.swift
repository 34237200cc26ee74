import Foundation

/// One task as `status --json` and `replay --json` print it (SPEC §3).
/// Header values that are credentials never appear here.
public struct TaskReport: Codable, Equatable, Sendable {
    public var id: String
    public var kind: String
    public var state: String
    public var url: String
    public var currentURL: String
    public var dest: String?
    public var method: String
    /// Upload and data tasks: the status they finished with.
    public var status: Int?
    public var bytes: Int64
    public var total: Int64?
    public var percent: Double?
    public var speed: Int64
    /// Seconds left at the current speed (running tasks of known size).
    public var etaS: Int64?
    public var attempts: Int
    public var redirects: Int
    /// `overwrite = "update"` met 304 Not Modified: finished with the file left as it was.
    public var unchanged: Bool
    /// `overwrite = "skip"` found a file at `dest`: finished without a transfer, for this reason.
    public var skipped: String?
    public var priority: Int
    public var batch: String?
    public var error: String?
    public var errorCode: String?
    public var etag: String?
    public var lastModified: String?
    public var headers: [String]
    public var createdAtMs: Int64
    public var updatedAtMs: Int64
    public var lastSeq: Int64
    /// `replay` only: what a restart would do.
    public var plan: String?
    /// `status --task` only: each attempt with its metrics.
    public var attemptHistory: [AttemptRecord]?
    /// A parent (an HLS video): its children finished and in all.
    public var children: Children?
    /// A child: its parent's id.
    public var parent: String?
    /// Why a paused task is paused: user, agent_stopping, waiting_for_network, metered.
    public var pauseReason: String?
    /// `on_task_end` when the task's hook run may not have run (the agent died between its start and its end).
    public var hookMayNotHaveRun: String?

    public struct Children: Codable, Equatable, Sendable {
        public var done: Int
        public var total: Int
    }

    enum CodingKeys: String, CodingKey {
        case id, kind, state, url, dest, bytes, total, percent, speed, attempts, redirects, priority, batch
        case error, etag, headers, plan, method, status, children, parent, unchanged, skipped
        case etaS = "eta_s", pauseReason = "pause_reason", hookMayNotHaveRun = "hook_may_not_have_run"
        case attemptHistory = "attempt_history"
        case currentURL = "current_url", errorCode = "error_code", lastModified = "last_modified"
        case createdAtMs = "created_at_ms", updatedAtMs = "updated_at_ms", lastSeq = "last_seq"
    }

    /// - Parameters:
    ///   - agentState: where a parent's children are counted (its bytes and speed are theirs).
    ///   - agentRunning: false: a `running` task's agent is gone; it moves no bytes (speed 0, no ETA).
    public init(_ task: TaskState, plan: RecoveryPlan? = nil, in agentState: AgentState? = nil, agentRunning: Bool = true) {
        id = task.id
        kind = task.spec.kind.rawValue
        state = task.phase.rawValue
        url = Redaction.url(task.spec.url)
        currentURL = Redaction.url(task.currentURL)
        dest = task.dest
        method = task.spec.effectiveMethod
        status = task.responseStatus
        bytes = task.bytes
        total = task.total
        percent = task.percent.map { ($0 * 10).rounded() / 10 }
        speed = task.speed
        attempts = task.attempts
        redirects = task.redirects
        unchanged = task.unchanged
        skipped = task.skipReason
        priority = task.spec.priority
        batch = task.spec.batch
        error = task.error.map(Redaction.text)
        errorCode = task.errorCode?.rawValue
        etag = task.etag
        lastModified = task.lastModified
        headers = task.spec.headers.map(\.printable)
        createdAtMs = task.createdAtMs
        updatedAtMs = task.updatedAtMs
        lastSeq = task.lastSeq
        self.plan = plan?.words
        parent = task.spec.parent
        pauseReason = task.phase == .paused ? task.pauseReason?.rawValue : nil
        hookMayNotHaveRun = agentState?.taskHookMayNotHaveRun(task.id, agentRunning: agentRunning)?.key.hook.configKey
        if let figures = agentState?.figures(of: task), let family = figures.children {
            children = Children(done: family.done, total: family.total)
            bytes = figures.bytes
            percent = figures.percent.map { ($0 * 10).rounded() / 10 }
            speed = figures.speed
        }
        if !agentRunning { speed = 0 }
        etaS = StatusView.etaSeconds(TaskFigures(bytes: bytes, total: total, percent: percent, speed: speed, children: nil),
                                     phase: task.phase)
    }

    /// SPEC §3: every key of a task is present, `null` when it has no value;
    /// `plan`, `attempt_history`, `children`, `parent`, `pause_reason` and
    /// `hook_may_not_have_run` only where they apply.
    public func encode(to encoder: Encoder) throws {
        var keys = encoder.container(keyedBy: CodingKeys.self)
        try keys.encode(id, forKey: .id); try keys.encode(kind, forKey: .kind); try keys.encode(state, forKey: .state)
        try keys.encode(url, forKey: .url); try keys.encode(currentURL, forKey: .currentURL); try keys.encode(dest, forKey: .dest)
        try keys.encode(method, forKey: .method); try keys.encode(status, forKey: .status); try keys.encode(bytes, forKey: .bytes)
        try keys.encode(total, forKey: .total); try keys.encode(percent, forKey: .percent); try keys.encode(speed, forKey: .speed)
        try keys.encode(etaS, forKey: .etaS); try keys.encode(attempts, forKey: .attempts)
        try keys.encode(redirects, forKey: .redirects); try keys.encode(priority, forKey: .priority)
        try keys.encode(unchanged, forKey: .unchanged); try keys.encode(skipped, forKey: .skipped)
        try keys.encode(batch, forKey: .batch); try keys.encode(error, forKey: .error); try keys.encode(errorCode, forKey: .errorCode)
        try keys.encode(etag, forKey: .etag); try keys.encode(lastModified, forKey: .lastModified)
        try keys.encode(headers, forKey: .headers); try keys.encode(createdAtMs, forKey: .createdAtMs)
        try keys.encode(updatedAtMs, forKey: .updatedAtMs); try keys.encode(lastSeq, forKey: .lastSeq)
        try keys.encodeIfPresent(plan, forKey: .plan); try keys.encodeIfPresent(attemptHistory, forKey: .attemptHistory)
        try keys.encodeIfPresent(children, forKey: .children); try keys.encodeIfPresent(parent, forKey: .parent)
        try keys.encodeIfPresent(pauseReason, forKey: .pauseReason)
        try keys.encodeIfPresent(hookMayNotHaveRun, forKey: .hookMayNotHaveRun)
    }

    /// `{"tasks": [...]}` (and `"agent"` for `status`), keys sorted so output is stable.
    public static func json(_ reports: [TaskReport], agent: AgentReport? = nil, waiting: [WaitingReport]? = nil) -> String {
        var document = ""
        writeJSON(reports, agent: agent, waiting: waiting) { document += $0 }
        return document
    }

    /// The same document, handed to `write` a task at a time: `status --json`
    /// of 20,000 tasks built it whole (107 MB) before printing a byte. Each
    /// task is encoded alone, indented as one encoder would have put it.
    /// - Parameter hookRuns: the hook runs that may not have run, listed as
    ///   `"hooks_may_not_have_run"` when there are any (`status`).
    public static func writeJSON<Reports: Sequence>(_ reports: Reports, agent: AgentReport? = nil, hookRuns: [HookRun] = [],
                                                   rejected: [RejectionReport]? = nil, waiting: [WaitingReport]? = nil,
                                                   to write: (String) -> Void) where Reports.Element == TaskReport {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        // For the attempt history's metrics (dns_us, …); the explicit keys above are snake_case already.
        encoder.keyEncodingStrategy = .convertToSnakeCase
        // Values never hold a raw line break (JSON escapes it): every one is the encoder's
        // layout, whose blank lines (an empty array's) stay blank.
        func nested<Value: Encodable>(_ value: Value, indent: String) -> String {
            // Printed to terminals too: no bidirectional override or C1 control goes out raw.
            let text = (try? encoder.encode(value)).map { Printable.jsonSafe(String(decoding: $0, as: UTF8.self)) } ?? "null"
            return text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
                .map { index, line in index == 0 || line.isEmpty ? String(line) : indent + line }
                .joined(separator: "\n")
        }
        write("{\n")
        if let agent { write("  \"agent\" : " + nested(agent, indent: "  ") + ",\n") }
        if !hookRuns.isEmpty {
            let runs = hookRuns.map { run in
                var object = PrettyJSONObject(indent: 4)
                object.field("batch", run.key.hook == .batchEnd ? run.batch : nil); object.field("batch_seq", run.key.batchSeq)
                object.field("hook", run.key.hook.configKey); object.field("started_seq", run.startedSeq)
                object.field("task", run.key.task)
                return Printable.jsonSafe(object.finish())
            }
            write("  \"hooks_may_not_have_run\" : [\n    " + runs.joined(separator: ",\n    ") + "\n  ],\n")
        }
        if let rejected { write("  \"rejected\" : " + nested(rejected, indent: "  ") + ",\n") }
        write("  \"tasks\" : [")
        var empty = true
        for report in reports {
            // The encoder took 85% of `status --json`'s time (8.6 s at 100,000 tasks): only
            // the attempt history, shown for one task at a time, still goes through it.
            let text = report.attemptHistory == nil ? Printable.jsonSafe(report.prettyJSON(indent: 4)) : nested(report, indent: "    ")
            write((empty ? "\n    " : ",\n    ") + text)
            empty = false
        }
        write((empty ? "\n\n  ]" : "\n  ]") + (waiting.map { ",\n  \"waiting\" : " + nested($0, indent: "  ") } ?? "") + "\n}")
    }
}

extension TaskReport {
    /// The task as the encoder above lays it out (sorted keys, pretty, slashes
    /// unescaped), its lines after the first indented by `indent` spaces.
    /// Keys are written in sorted order by hand; a test compares the two.
    func prettyJSON(indent: Int) -> String {
        var object = PrettyJSONObject(indent: indent)
        object.field("attempts", Int64(attempts)); object.field("batch", batch); object.field("bytes", bytes)
        if let children {
            var nested = PrettyJSONObject(indent: indent + 2)
            nested.field("done", Int64(children.done)); nested.field("total", Int64(children.total))
            object.field("children", object: nested)
        }
        object.field("created_at_ms", createdAtMs); object.field("current_url", currentURL); object.field("dest", dest)
        object.field("error", error); object.field("error_code", errorCode); object.field("eta_s", etaS)
        object.field("etag", etag); object.field("headers", strings: headers)
        if let hookMayNotHaveRun { object.field("hook_may_not_have_run", hookMayNotHaveRun) }
        object.field("id", id)
        object.field("kind", kind); object.field("last_modified", lastModified); object.field("last_seq", lastSeq)
        object.field("method", method)
        if let parent { object.field("parent", parent) }
        if let pauseReason { object.field("pause_reason", pauseReason) }
        object.field("percent", percent)
        if let plan { object.field("plan", plan) }
        object.field("priority", Int64(priority)); object.field("redirects", Int64(redirects)); object.field("skipped", skipped)
        object.field("speed", speed); object.field("state", state); object.field("status", status.map(Int64.init))
        object.field("total", total); object.field("unchanged", unchanged); object.field("updated_at_ms", updatedAtMs)
        object.field("url", url)
        return object.finish()
    }
}

/// One JSON object as `JSONEncoder` pretty-prints it: a key per line, `"key" : value`,
/// two more spaces per level, an empty array as `[`, a blank line, `]`.
struct PrettyJSONObject {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]
    /// Spaces before the closing brace; keys get two more.
    private let indent: Int

    init(indent: Int) {
        self.indent = indent
        bytes.reserveCapacity(768)
    }

    private mutating func newline(indent spaces: Int) {
        bytes.append(UInt8(ascii: "\n"))
        bytes.append(contentsOf: repeatElement(UInt8(ascii: " "), count: spaces))
    }

    private mutating func key(_ name: StaticString) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        newline(indent: indent + 2)
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes.append(contentsOf: "\" : ".utf8)
    }

    private mutating func null() { bytes.append(contentsOf: "null".utf8) }

    mutating func field(_ name: StaticString, _ value: String?) {
        key(name)
        if let value { JSONWriter.appendQuoted(value, to: &bytes) } else { null() }
    }

    mutating func field(_ name: StaticString, _ value: Int64?) {
        key(name)
        if let value { bytes.append(contentsOf: String(value).utf8) } else { null() }
    }

    /// As the encoder writes a Double: its shortest form, without a trailing `.0`.
    mutating func field(_ name: StaticString, _ value: Double?) {
        key(name)
        guard let value else { return null() }
        let text = value.description
        bytes.append(contentsOf: (text.hasSuffix(".0") ? text.dropLast(2) : Substring(text)).utf8)
    }

    mutating func field(_ name: StaticString, _ value: Bool) {
        key(name)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    mutating func field(_ name: StaticString, strings: [String]) {
        key(name)
        bytes.append(UInt8(ascii: "["))
        if strings.isEmpty { bytes.append(UInt8(ascii: "\n")) }
        for (index, string) in strings.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            newline(indent: indent + 4)
            JSONWriter.appendQuoted(string, to: &bytes)
        }
        newline(indent: indent + 2)
        bytes.append(UInt8(ascii: "]"))
    }

    mutating func field(_ name: StaticString, object: consuming PrettyJSONObject) {
        key(name)
        bytes.append(contentsOf: object.finish().utf8)
    }

    consuming func finish() -> String {
        if bytes.count == 1 { bytes.append(UInt8(ascii: "\n")) }
        newline(indent: indent)
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// `status --json`'s `"rejected"`: a job file the agent refused, and why.
public struct RejectionReport: Codable, Equatable, Sendable {
    /// The job file's name when it was dropped (it now sits in `INBOX/rejected/`).
    public var file: String
    public var error: String
    public var atMs: Int64
    public var seq: Int64

    public init(file: String, error: String, atMs: Int64, seq: Int64) {
        self.file = file
        // A reason may quote the job's URL: credentials in it are not shown.
        self.error = Redaction.text(error)
        self.atMs = atMs; self.seq = seq
    }

    enum CodingKeys: String, CodingKey {
        case file, error, seq
        case atMs = "at_ms"
    }
}

/// `status --json`'s `"waiting"`: a transfer job in the inbox the agent has not taken yet.
public struct WaitingReport: Codable, Equatable, Sendable {
    /// Its file's name in the inbox.
    public var file: String
    /// Nil when the job names none: the agent chooses one as it takes it.
    public var id: String?
    public var kind: String
    public var url: String
    public var dest: String?

    public init(file: String, id: String?, spec: TaskSpec) {
        self.file = file; self.id = id
        kind = spec.kind.rawValue
        url = Redaction.url(spec.url)
        dest = spec.dest
    }

    public func encode(to encoder: Encoder) throws {
        // Every key present, null when it has no value, as a task's are.
        var keys = encoder.container(keyedBy: CodingKeys.self)
        try keys.encode(file, forKey: .file); try keys.encode(id, forKey: .id); try keys.encode(kind, forKey: .kind)
        try keys.encode(url, forKey: .url); try keys.encode(dest, forKey: .dest)
    }
}

/// `status --json`'s `"agent"`: whether an agent holds the state directory's lock.
public struct AgentReport: Codable, Equatable, Sendable {
    public var running: Bool
    public var pid: Int32?
    public var startedAtMs: Int64?

    public init(running: Bool, pid: Int32?, startedAtMs: Int64?) {
        self.running = running; self.pid = pid; self.startedAtMs = startedAtMs
    }

    enum CodingKeys: String, CodingKey {
        case running, pid
        case startedAtMs = "started_at_ms"
    }

    public func encode(to encoder: Encoder) throws {
        var keys = encoder.container(keyedBy: CodingKeys.self)
        try keys.encode(running, forKey: .running); try keys.encode(pid, forKey: .pid)
        try keys.encode(startedAtMs, forKey: .startedAtMs)
    }
}

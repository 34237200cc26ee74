import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

/// pause / resume / cancel / retarget travel through the inbox as control jobs
/// (SPEC §4.3), so they work whether or not the agent is running.
struct ControlTarget: ParsableArguments {
    @Argument(help: "The task id.", completion: TaskIDCompletion.kind)
    var id: String?

    @Flag(name: .long, help: "Every task.")
    var all = false

    /// Checked in `run`, not `validate`: `--help` must not print an error first.
    func check() throws {
        if all, let id { throw fail("give a task id or --all, not both (got --all and \"\(id)\")") }
        if !all && id == nil { throw fail("give a task id, or --all for every task") }
        if let id { try refuseStar(id, everyTask: "--all") }
    }

    var task: String { all ? "*" : id! }
}

/// An id given on the command line. "*" is every task in a control job
/// (SPEC §4.3), but never as an argument: an unquoted `cancel *` in an
/// empty folder would reach here as "*" and cancel everything.
func refuseStar(_ id: String, everyTask flag: String?) throws {
    guard id != "*" else { throw fail("\"*\" is not a task id" + (flag.map { "; \($0) acts on every task" } ?? "")) }
}

/// - Parameter url: `retarget`'s new URL (checked by the caller).
func sendControl(_ action: ControlJob.Action, task: String, url: String? = nil, global: GlobalOptions) throws {
    let resolved = try global.resolve()
    if task != "*" {
        // The task alone is looked up, not the whole log folded (a second per command on a long log).
        let store = try? EventStore(readingFrom: resolved.paths.eventLog)
        let record = (try? store?.lookingUpTasks { try $0.record(of: task) }) ?? .unknown
        // Said now rather than only in the log: forgetting never touches a live transfer.
        // (A task compacted long ago has ended; the fold says so for certain.)
        let phase: TaskPhase? = switch record {
        case .unknown: nil
        case .whole(let own): own
        case .compacted: action == .forget ? (try? store?.replay())?[task]?.phase : nil
        }
        if action == .forget, let phase, !phase.isEnded {
            throw fail("task \(task) is \(phase.rawValue); only an ended task can be forgotten (cancel it first)")
        }
        // A finished or cancelled task stays so whatever else waits in the inbox: with no
        // agent to answer, the log's word is the outcome, and no request is left to linger.
        if action != .forget, let phase, phase == .finished || phase == .cancelled,
           !AgentLiveness.probe(stateDir: resolved.paths.stateDir).running {
            throw fail("task \(task): nothing to do: task already \(phase.rawValue)")
        }
        if record == .unknown {
            guard pendingJobIDs(resolved.paths).contains(task) else {
                throw fail("no task has the id \"\(task)\" in \(resolved.paths.eventLog) or in a job waiting in \(resolved.paths.inbox)")
            }
            // A job not yet taken becomes a queued task: not one that has ended.
            if action == .forget {
                throw fail("task \(task) is waiting in \(resolved.paths.inbox); only an ended task can be forgotten (cancel it first)")
            }
        }
    }
    // Where the log ends before the request goes in: its outcome is recorded after.
    let since = (try? EventStore(readingFrom: resolved.paths.eventLog).lastSeq) ?? 0
    let text = ControlJob(action: action, task: task, url: url).fileText
    let path: String
    do {
        path = try InboxWriter(inbox: resolved.paths.inbox).write(text, prefix: action.rawValue)
    } catch {
        throw fail("cannot write into the inbox \(resolved.paths.inbox): \(error)")
    }
    let who = task == "*" ? (action == .forget ? "every ended task" : "every task") : "task \(task)"
    guard AgentLiveness.probe(stateDir: resolved.paths.stateDir).running else {
        print("\(action.rawValue) requested for \(who): \(path)")
        warnIfNoAgent(resolved.paths)
        return
    }
    switch ControlAnswer.awaited(name: (path as NSString).lastPathComponent, since: since, paths: resolved.paths) {
    case .applied(let control):
        let words = Printable.escaping(Redaction.text(control.outcome))
        // "ID: what happened" for one task; for every task, one such part per task that changed.
        guard control.changedAnything else { throw fail(task == "*" ? words : "task \(words)") }
        print(task == "*" ? "\(action.rawValue) --all: \(words)" : "task \(words)")
    case .refused(let reason):
        throw fail("the agent refused the \(action.rawValue) request: \(Printable.escaping(Redaction.text(reason)))")
    case .stillWaiting:
        print("\(action.rawValue) requested for \(who): \(path)")
        FileHandle.standardError.write(Data(("syncagent: the agent has not applied it within \(ControlAnswer.waitS) s; "
            + "`syncagent events -n 5\(task == "*" ? "" : " --task \(task)")` will show what came of it\n").utf8))
    case .agentStopped:
        print("\(action.rawValue) requested for \(who): \(path)")
        warnIfNoAgent(resolved.paths)
    }
}

/// What the running agent made of a control job, looked for in the log
/// for a few seconds: the agent takes a job from the inbox at once, and
/// the person who typed `cancel` wants to know it happened.
enum ControlAnswer {
    case applied(Controlled)
    /// Rejected as a job: the reason it gave.
    case refused(String)
    case stillWaiting
    case agentStopped

    static let waitS = 5

    static func awaited(name: String, since: Int64, paths: AgentPaths) -> ControlAnswer {
        let deadline = Date().addingTimeInterval(Double(waitS))
        var cursor = since
        while true {
            var answer: ControlAnswer?
            try? EventStore(readingFrom: paths.eventLog).forEachRow(after: cursor) { row in
                cursor = row.seq
                guard answer == nil, row.type == "controlled" || row.type == "rejected",
                      let body = try? EventCoding.body(type: row.type, data: row.data) else { return }
                switch body {
                case .controlled(let control) where control.file == name: answer = .applied(control)
                case .rejected(let rejection) where rejection.file == name: answer = .refused(rejection.error)
                default: break
                }
            }
            if let answer { return answer }
            guard Date() < deadline else { return .stillWaiting }
            guard AgentLiveness.probe(stateDir: paths.stateDir).running else { return .agentStopped }
            Posix.sleep(ms: 50)
        }
    }
}

/// A job written while no agent runs is not lost, only late: say so (on
/// stderr, so a script reading ids or paths from stdout is not disturbed).
func warnIfNoAgent(_ paths: AgentPaths) {
    guard !AgentLiveness.probe(stateDir: paths.stateDir).running else { return }
    FileHandle.standardError.write(Data(("syncagent: no agent is running on \(paths.stateDir); the request waits in \(paths.inbox) "
        + "and applies when the agent starts (syncagent run)\n").utf8))
}

struct PauseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pause",
        abstract: "Pause a task (or --all), keeping its partial file and validators.",
        discussion: "Example:\n  syncagent pause debian-13")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: ControlTarget
    func run() throws {
        try target.check()
        try sendControl(.pause, task: target.task, global: global)
    }
}

struct ResumeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resume",
        abstract: "Resume a paused task (or --all) from its durable offset.",
        discussion: "Example:\n  syncagent resume --all")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var target: ControlTarget
    func run() throws {
        try target.check()
        try sendControl(.resume, task: target.task, global: global)
    }
}

struct CancelCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cancel",
        abstract: "Cancel a task and remove its partial file.",
        discussion: "Example:\n  syncagent cancel debian-13")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The task id.", completion: TaskIDCompletion.kind) var id: String
    func run() throws {
        try refuseStar(id, everyTask: nil)
        try sendControl(.cancel, task: id, global: global)
    }
}

struct RetargetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retarget",
        abstract: "Move a task to a new URL (a link that expired, a mirror), keeping its bytes if the new URL serves the same file.",
        discussion: """
            The task keeps its id; status shows the new URL as its current one. Its bytes are kept \
            when the new URL's answer carries the same validators (ETag, Last-Modified) and size; \
            otherwise it starts over and says why. A running task moves at once, a paused one stays \
            paused, a failed one runs again.

            Example:
              syncagent retarget debian-13 'https://mirror.example.org/debian-13.iso?sig=…'
            """)
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The task id.", completion: TaskIDCompletion.kind) var id: String
    @Argument(help: "The URL it goes on from (http or https).") var url: String

    func run() throws {
        try refuseStar(id, everyTask: nil)
        // Refused here by the rules a job's `url` is held to (the agent holds the job to them again).
        do { try URLRules.checkTransferURL(url, key: "url") } catch let error as KeyError { throw fail(error.description) }
        try sendControl(.retarget, task: id, url: url, global: global)
    }
}

struct ForgetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "Take an ended task (or --ended: every ended task) off the status list; the log keeps its history.",
        discussion: "Example:\n  syncagent forget debian-13\n  syncagent forget --ended")
    @OptionGroup var global: GlobalOptions
    @Argument(help: "The task id.", completion: TaskIDCompletion.kind) var id: String?
    @Flag(help: "Every task that has finished, failed or been cancelled.") var ended = false

    func check() throws {
        if ended, let id { throw fail("give a task id or --ended, not both (got --ended and \"\(id)\")") }
        if !ended && id == nil { throw fail("give a task id, or --ended for every ended task") }
        if let id { try refuseStar(id, everyTask: "--ended") }
    }

    func run() throws {
        try check()
        try sendControl(.forget, task: ended ? "*" : id!, global: global)
    }
}

/// Ids named by jobs still waiting in the inbox: a control job dropped after
/// them is applied after them, so they count as known.
func pendingJobIDs(_ paths: AgentPaths) -> Set<String> {
    Set(WaitingJobs.read(paths).jobs.compactMap(\.id))
}

/// Ids of the jobs `submit` wrote that still wait in the inbox, read from
/// their names (`submit-ID-…`, see `InboxWriter`): no file is opened.
func submittedJobIDs(inbox: String) -> Set<String> {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: inbox)) ?? []
    return Set(names.compactMap { name in
        InboxWriter.prefix(ofName: name).flatMap { $0.hasPrefix("submit-") ? String($0.dropFirst("submit-".count)) : nil }
    })
}

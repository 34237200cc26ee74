import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show whether the agent runs and the tasks the event log describes (read-only; safe while the agent runs).",
        discussion: """
            The first line says whether an agent runs on the state directory. Tasks a \
            dead agent left running read "interrupted": the next start resumes them. \
            Ended tasks older than a day, and queued tasks past the first \(StatusView.queuedListed), are not \
            listed unless --all (the summary line counts them); --json lists them.

            Example:
              syncagent status
              syncagent status --state failed --all
              syncagent status --json | jq '.tasks[] | select(.state == "failed")'
              syncagent status --task debian-13
            """)

    @OptionGroup var global: GlobalOptions

    @Flag(help: "Print {\"agent\": {...}, \"tasks\": [...]} as JSON.")
    var json = false

    @Flag(help: "Redraw live progress until interrupted: fitted to a terminal, plain snapshots when piped.")
    var watch = false

    @Option(help: "Show one task in full, with its attempts and events.", completion: TaskIDCompletion.kind)
    var task: String?

    @Option(name: .customLong("state"), parsing: .singleValue,
            help: ArgumentHelp("Only tasks in this state: queued, retrying, running, interrupted, paused, finished, failed or cancelled; "
                               + "rejected for job files the agent refused, waiting for jobs it has not taken yet; "
                               + "repeatable or comma-separated.",
                               valueName: "state"),
            completion: .list(["queued", "retrying", "running", "interrupted", "paused", "finished", "failed", "cancelled", "rejected",
                               "waiting"]))
    var states: [String] = []

    @Flag(help: "Also list tasks that ended more than a day ago, and every queued task (not only the first \(StatusView.queuedListed)).")
    var all = false

    /// Checked in `run`, not `validate`: `--help` must not print an error first.
    private func check() throws {
        _ = try phases()
        if task != nil && (watch || !states.isEmpty || all) { throw fail("--task shows one task; it takes no --watch, --state or --all") }
        if json && watch { throw fail("--json prints one document; it cannot --watch") }
    }

    /// The phases `--state` asks for. "interrupted" is `running` in a log
    /// whose agent is gone (so nothing, while one runs).
    private func phases(agentRunning: Bool = false) throws -> Set<TaskPhase>? {
        guard !states.isEmpty else { return nil }
        var phases = Set<TaskPhase>()
        for name in stateWords {
            if name == "interrupted" {
                if !agentRunning { phases.insert(.running) }
                continue
            }
            // Queued, waiting out a retry's backoff (`retryingOnly` keeps only those of the queue).
            if name == "retrying" {
                phases.insert(.queued)
                continue
            }
            // Not tasks' states: job files the agent refused, or has not taken yet.
            if name == "rejected" || name == "waiting" { continue }
            guard let phase = TaskPhase(rawValue: name) else {
                throw fail("--state \"\(name)\" is not a state; use queued, retrying, running, interrupted, paused, finished, failed, "
                           + "cancelled, rejected or waiting")
            }
            phases.insert(phase)
        }
        return phases
    }

    /// The states `--state` names, each option split at its commas.
    private var stateWords: [String] {
        states.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
    }

    /// `--state retrying` without `queued`: of the queue, only the tasks waiting to retry.
    private var retryingOnly: Bool {
        stateWords.contains("retrying") && !stateWords.contains("queued")
    }

    /// Rejected job files are shown unless `--state` names only states of
    /// tasks other than failed (a rejected job is a submission that failed).
    private var showsRejections: Bool {
        stateWords.isEmpty || stateWords.contains("rejected") || stateWords.contains("failed")
    }

    /// Jobs still in the inbox are shown unless `--state` names only states
    /// other than queued (what they become) or waiting.
    private var showsWaiting: Bool {
        stateWords.isEmpty || stateWords.contains("waiting") || stateWords.contains("queued")
    }

    /// What the inbox adds to the log's tasks: jobs it holds, and job files rejected.
    struct InboxView {
        var path: String
        /// The newest rejected in the time the view covers, and how many in all.
        var rejected: (newest: [EventStore.RejectionRow], count: Int) = ([], 0)
        var waiting = WaitingJobs()
    }

    /// The jobs waiting in the inbox, read before the log is: one taken in
    /// between is then in both, and shown once (`complete`), never in neither.
    private func waitingJobs(_ paths: AgentPaths, limit: Int) -> InboxView {
        InboxView(path: paths.inbox, waiting: showsWaiting ? WaitingJobs.read(paths, limit: limit)
                                                           : WaitingJobs())
    }

    /// The rest, once the log is read: the rejected jobs, and no waiting job the log holds.
    private func complete(_ view: inout InboxView, _ store: EventStore, nowMs: Int64, rejectionsLimit: Int) throws {
        view.waiting.dropTaken(by: store)
        guard showsRejections else { return }
        view.rejected = try store.rejections(sinceMs: StatusView.hiddenEndedBeforeMs(nowMs: nowMs), limit: rejectionsLimit)
    }

    func run() throws {
        try check()
        let resolved = try global.resolve()
        warnIfStateDirIsNotTrusted(resolved.paths)
        if watch { try watchLoop(resolved) }
        var inbox = waitingJobs(resolved.paths, limit: json || task != nil ? .max : StatusView.queuedListed)
        let store = try openLog(global)
        let agent = AgentLiveness.probe(stateDir: resolved.paths.stateDir)
        if let id = task {
            try show(id, of: store, in: try store.replay(), agent: agent, waiting: inbox, retries: resolved.config.retries)
            return
        }
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        // The table, unless --all, lists part of the queue and no old ended task: what it
        // would not list is passed over in the snapshot, unread. JSON lists everything.
        let window = !json && !all
        let (state, passedOver) = window
            ? try store.replayForTable(queuedListed: StatusView.queuedListed, hiddenEndedBeforeMs: StatusView.hiddenEndedBeforeMs(nowMs: nowMs))
            : (try store.replay(), Snapshot.PassedOver())
        let selection = StatusView.select(state, phases: try phases(agentRunning: agent.running), all: all || json, children: json,
                                          queuedListed: window ? StatusView.queuedListed : nil, passedOver: passedOver,
                                          retryingOnly: retryingOnly, nowMs: nowMs)
        try complete(&inbox, store, nowMs: nowMs, rejectionsLimit: json ? .max : StatusView.rejectionsListed)
        if json {
            let report = AgentReport(running: agent.running, pid: agent.pid, startedAtMs: agent.startedAtMs)
            let rejections = inbox.rejected.newest.reversed().map {
                RejectionReport(file: $0.rejection.file, error: $0.rejection.error, atMs: $0.atMs, seq: $0.seq)
            }
            let waiting = inbox.waiting.jobs.map { WaitingReport(file: $0.file, id: $0.id, spec: $0.spec) }
            // Streamed: a report is made and printed per task, never the whole document in memory.
            TaskReport.writeJSON(selection.tasks.lazy.map { TaskReport($0, in: state, agentRunning: agent.running) }, agent: report,
                                 hookRuns: state.hookRunsThatMayNotHaveRun(agentRunning: agent.running),
                                 rejected: rejections, waiting: waiting) {
                print($0, terminator: "")
            }
            print()
        } else {
            // On a terminal, fitted to its width: the rows each on one line, errors wrapped under them.
            let width = Posix.isTerminal(STDOUT_FILENO) ? TerminalSize.current().columns : nil
            let style = TaskTable.Style(width: width, wrapNotes: true, home: ProcessInfo.processInfo.environment["HOME"],
                                        agentRunning: agent.running, retryClock: (nowMs, resolved.config.retries))
            var lines = screen(state, selection, agent, inbox: inbox, style: style)
            // Above the summary line: a hook run that may not have run is said as plainly as a failure.
            let hookNotes = StatusView.hookNotes(state, listed: selection.tasks, agentRunning: agent.running, all: all, nowMs: nowMs)
            lines.insert(contentsOf: hookNotes.flatMap { Self.wrapped($0, to: width) }, at: lines.count - 1)
            print(lines.joined(separator: "\n"))
        }
        // Done: exit (stdio flushes) rather than free every task one by one,
        // which took 5% of a `status` on 10,000 tasks.
        Glibc.exit(EXIT_SUCCESS)
    }

    /// The agent line, the table, the rejected jobs, the summary line; on a
    /// terminal, every line fitted to its width and the whole to its height.
    private func screen(_ state: AgentState, _ selection: StatusView.Selection, _ agent: AgentLiveness, inbox: InboxView,
                        style: TaskTable.Style, height: Int? = nil) -> [String] {
        var summary = StatusView.summary(of: selection, in: state, agentRunning: agent.running, nowMs: style.retryClock?.nowMs)
        summary.rejected = inbox.rejected.count
        summary.waiting = inbox.waiting.count
        let waiting = inbox.waiting.asTasks
        var table = selection.tasks.isEmpty && waiting.isEmpty ? [] : TaskTable.lines(selection.tasks, in: state, style: style, waiting: waiting)
        var rejections = Self.rejectionLines(inbox.rejected, inbox: inbox.path, wrappedTo: style.wrapNotes ? style.width : nil,
                                             home: style.width == nil ? nil : style.home)
        // A short terminal keeps its rows for tasks: the summary still counts the rejected jobs.
        if let height, table.count + rejections.count + 2 > height { rejections = [] }
        if let height {
            if height < 4 {
                // Too short for rows: what matters most, in the lines there are.
                let header: [String] = table.first.map { [$0] } ?? []
                let fitting: [String] = switch height {
                case 1: [summary.words]
                case 2: [Self.agentLine(agent), summary.words]
                default: [Self.agentLine(agent)] + header + [summary.words]
                }
                return fitting.map { StatusView.cut($0, to: style.width ?? .max) }
            }
            // The header, the first rows that fit, and how many more there are.
            if table.count + 2 > height {
                let shown = height - 3
                table = Array(table.prefix(shown)) + ["… \(table.count - shown) more (a taller terminal, or status without --watch)"]
            }
        }
        let lines = [Self.agentLine(agent)] + table + rejections + [summary.words]
        // Only a screen redrawn in place must not wrap: elsewhere the terminal wraps a long agent or summary line.
        guard let width = style.width, height != nil else { return lines }
        // Table rows are fitted already (and may carry colour); the others are cut here.
        return lines.enumerated().map { index, line in
            index == 0 || index > table.count || line.hasPrefix("… ") ? StatusView.cut(line, to: width) : line
        }
    }

    /// A heading that says where the files went, then a line per job file,
    /// newest last: its time, its name, why.
    /// - Parameters:
    ///   - width: wrap the heading and each reason to it, under its own start.
    ///   - home: on a terminal, written `~` at the start of the inbox's path, as DEST is.
    static func rejectionLines(_ rejected: (newest: [EventStore.RejectionRow], count: Int), inbox: String,
                               wrappedTo width: Int? = nil, home: String? = nil) -> [String] {
        guard !rejected.newest.isEmpty else { return [] }
        let folder = TaskTable.tildeHome(Printable.escaping(inbox), home: home)
        var lines = prose("rejected job files (moved to \(folder)/rejected/, each with a .error file):", wrappedTo: width)
        if rejected.count > rejected.newest.count {
            lines.append("  … \(rejected.count - rejected.newest.count) earlier (syncagent status --json lists them all)")
        }
        for row in rejected.newest.reversed() {
            let lead = "  \(clockTime(row.atMs))  "
            let text = Printable.escaping(row.rejection.file + ": " + Redaction.text(row.rejection.error))
            guard let width, width - lead.count >= 20 else {
                lines.append(lead + text)
                continue
            }
            let wrapped = TaskTable.wrap(text, to: width - lead.count)
            lines.append(lead + wrapped[0])
            lines += wrapped.dropFirst().map { String(repeating: " ", count: lead.count) + $0 }
        }
        return lines
    }

    /// A line of prose wrapped at its spaces to `width`, its following lines indented.
    static func prose(_ line: String, wrappedTo width: Int?) -> [String] {
        guard let width, width - 2 >= 20 else { return [line] }
        let lines = TaskTable.wrap(line, to: width)
        return [lines[0]] + TaskTable.wrap(lines.dropFirst().joined(separator: " "), to: width - 2).map { "  " + $0 }
    }

    /// A note line ("! …") wrapped to `width`, its following lines under its text.
    static func wrapped(_ note: String, to width: Int?) -> [String] {
        guard let width, width - 2 >= 20, note.hasPrefix("! ") else { return [note] }
        let lines = TaskTable.wrap(String(note.dropFirst(2)), to: width - 2)
        return lines.enumerated().map { ($0.offset == 0 ? "! " : "  ") + $0.element }
    }

    static func agentLine(_ agent: AgentLiveness) -> String {
        guard agent.running else { return "agent: not running" }
        var words = agent.pid.map { "pid \($0)" } ?? "pid unknown"
        if let started = agent.startedAtMs { words += ", since " + clockTime(started) }
        return "agent: running (\(words))"
    }

    /// "10:02" today, "Nov 21 10:02" before.
    static func clockTime(_ ms: Int64) -> String {
        let date = Date(timeIntervalSince1970: Double(ms) / 1000)
        let formatter = DateFormatter()
        formatter.dateFormat = Calendar.current.isDateInToday(date) ? "HH:mm" : "MMM d HH:mm"
        return formatter.string(from: date)
    }

    private func show(_ id: String, of store: EventStore, in state: AgentState, agent: AgentLiveness, waiting: InboxView,
                      retries: Int) throws {
        let agentRunning = agent.running
        guard let one = state[id] else {
            // Submitted, not yet taken: `submit` printed this id, and `pause` knows it.
            guard let job = waiting.waiting.jobs.first(where: { $0.id == id }) else { throw fail("no task has the id \"\(id)\"") }
            if json {
                print(TaskReport.json([], agent: AgentReport(running: agent.running, pid: agent.pid, startedAtMs: agent.startedAtMs),
                                      waiting: [WaitingReport(file: job.file, id: job.id, spec: job.spec)]))
            } else {
                print(TaskTable.detail(waiting: job, inbox: waiting.path))
            }
            return
        }
        var events: [Event] = []
        try store.forEach(task: id) { events.append($0) }
        let history = AttemptRecord.history(of: events)
        if json {
            var report = TaskReport(one, in: state, agentRunning: agentRunning)
            report.attemptHistory = history
            print(TaskReport.json([report], agent: AgentReport(running: agent.running, pid: agent.pid, startedAtMs: agent.startedAtMs)))
            return
        }
        print(TaskTable.detail(one, in: state, agentRunning: agentRunning,
                               retryClock: (Int64(Date().timeIntervalSince1970 * 1000), retries)))
        if let run = state.taskHookMayNotHaveRun(id, agentRunning: agentRunning) { print("hook:        " + Printable.escaping(run.words)) }
        if one.createdSeq <= (try store.prunedThrough()), !events.contains(where: { $0.seq == one.createdSeq }) {
            print("history:     compacted (syncagent compact kept the task's state and dropped its raw events)")
        }
        print("attempt history:")
        for record in history {
            let ending = record.endedBy ?? (one.phase == .running ? (agentRunning ? "running" : "interrupted") : "no end recorded")
            print("  #\(record.attempt) from byte \(record.offset), \(ending): " + (record.metrics?.words ?? "no metrics"))
        }
        if let headers = events.lazy.compactMap({ event -> [Header]? in
            if case .finished(let finished) = event.body { return finished.responseHeaders } else { return nil }
        }).last {
            print("response headers:")
            for header in headers { print("  " + header.printable) }
        }
        print("events:")
        try store.forEachRow(task: id) { print("  " + EventLine.text($0)) }
    }

    /// On a terminal: the screen redrawn in place, fitted to its size, in
    /// colour unless NO_COLOR. Piped: a plain snapshot every second, with no
    /// escape codes, for a log file or `grep`.
    private func watchLoop(_ resolved: ResolvedConfig) throws -> Never {
        let paths = resolved.paths
        let terminal = Posix.isTerminal(STDOUT_FILENO)
        let noColour = !(ProcessInfo.processInfo.environment["NO_COLOR"] ?? "").isEmpty
        var state = AgentState()
        while true {
            // Only the events since the last round are folded (or the newest snapshot, after a compaction).
            // (Opened afresh each round: the agent may create it after we start.)
            var inbox = waitingJobs(paths, limit: StatusView.queuedListed)
            let store = try openLog(global)
            try store.catchUp(&state)
            let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
            try complete(&inbox, store, nowMs: nowMs, rejectionsLimit: 3)
            let agent = AgentLiveness.probe(stateDir: paths.stateDir)
            var selection = StatusView.select(state, phases: try phases(agentRunning: agent.running), all: all,
                                              queuedListed: all ? nil : StatusView.queuedListed, retryingOnly: retryingOnly,
                                              nowMs: nowMs)
            selection.tasks = StatusView.forWatching(selection.tasks)
            if terminal {
                let size = TerminalSize.current()
                let style = TaskTable.Style(width: size.columns, colour: !noColour, bars: size.columns >= 100,
                                            home: ProcessInfo.processInfo.environment["HOME"], agentRunning: agent.running,
                                            retryClock: (nowMs, resolved.config.retries))
                let lines = screen(state, selection, agent, inbox: inbox, style: style, height: size.rows)
                // Home, each line cleared to its end, the rest of the screen cleared: no flicker.
                print("\u{1B}[H" + lines.map { $0 + "\u{1B}[K" }.joined(separator: "\n") + "\u{1B}[J", terminator: "")
                fflush(nil)  // every open stream: the only one written is stdout
                Posix.sleep(ms: 500)
            } else {
                let time = CivilTime.iso8601(ms: Int64(Date().timeIntervalSince1970 * 1000))
                print(([time] + screen(state, selection, agent, inbox: inbox,
                                       style: TaskTable.Style(agentRunning: agent.running, retryClock: (nowMs, resolved.config.retries))))
                    .joined(separator: "\n") + "\n")
                fflush(nil)  // every open stream: the only one written is stdout
                Posix.sleep(ms: 1000)
            }
        }
    }
}

/// The terminal's size in character cells (80×24 when it cannot be asked).
enum TerminalSize {
    static func current() -> (columns: Int, rows: Int) {
        guard let size = try? Posix.terminalSize(STDOUT_FILENO), size.columns > 0, size.rows > 0 else { return (80, 24) }
        return size
    }
}

/// `status`, `replay` and `events` only read the log: from a state dir
/// that `run` would refuse (SPEC §4.1) they still show what it says, for
/// whoever inspects it, after one line on stderr saying why it may not be
/// the agent's. They act on nothing it says and write nothing.
func warnIfStateDirIsNotTrusted(_ paths: AgentPaths) {
    for problem in StrictModes.problems(ofStateDir: paths.stateDir) {
        FileHandle.standardError.write(Data("syncagent: warning: \(problem) (run refuses to start; what follows may not be the agent's log)\n".utf8))
    }
}

func openLog(_ global: GlobalOptions) throws -> EventStore {
    let resolved = try global.resolve()
    do {
        return try EventStore(readingFrom: resolved.paths.eventLog)
    } catch {
        throw fail("\(error)")
    }
}


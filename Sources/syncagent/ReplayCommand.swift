import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

struct ReplayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Fold the event log and print each task's recovered state and recovery plan.",
        discussion: """
            The plan is what a restart would do: "resume at byte N with If-Range: ETag", \
            "restart from 0: …", "nothing: finished". Read-only.

            Example:
              syncagent replay --until 1200
              syncagent replay --verify
            """)

    @OptionGroup var global: GlobalOptions

    @Flag(help: "Print {\"tasks\": [...]} as JSON, each with \"plan\" and \"last_seq\".")
    var json = false

    @Option(help: "Only this task.", completion: TaskIDCompletion.kind)
    var task: String?

    @Option(help: "Stop at this sequence number: the state a restart at that point would see.")
    var until: Int64?

    @Flag(help: "Check every partial and finished file on disk against the log.")
    var verify = false

    func validate() throws {
        // Seqs start at 1: a negative one is no point in the log (`--until 0` is the empty state).
        if let until, until < 0 { throw ValidationError("--until takes a seq, 0 or more; got \(until)") }
    }

    func run() throws {
        warnIfStateDirIsNotTrusted(try global.resolve().paths)
        let store = try openLog(global)
        let state: AgentState
        do {
            state = try store.replay(through: until ?? .max)
        } catch {
            throw fail("\(error)")
        }
        var tasks = Array(state.orderedTasks)
        if let id = task {
            tasks = tasks.filter { $0.id == id }
            if tasks.isEmpty { throw fail("no task has the id \"\(id)\" up to seq \(state.lastSeq)") }
        }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let plans = Dictionary(uniqueKeysWithValues: tasks.map { ($0.id, RecoveryPlan.plan(for: $0, in: state, nowMs: now)) })
        // The whole log, as `status` reads it: a task left running by an agent that is gone
        // is interrupted and moves no bytes, whatever speed its last progress had. (A past
        // point, `--until`, shows the log's words as they were then.)
        let agentRunning: Bool? = state.lastSeq < store.lastSeq ? nil
            : AgentLiveness.probe(stateDir: try global.resolve().paths.stateDir).running
        // What the log records of hook runs that may not have run (a restart records those it finds unended).
        let hookRuns = state.hookRunsThatMayNotHaveRun(agentRunning: true).filter { run in task.map { run.key.task == $0 } ?? true }
        if json {
            // Streamed as `status --json` is: a report per task, never the whole document in memory.
            TaskReport.writeJSON(tasks.lazy.map { TaskReport($0, plan: plans[$0.id], in: state, agentRunning: agentRunning ?? true) },
                                 hookRuns: hookRuns) {
                print($0, terminator: "")
            }
            print()
        } else {
            // On a terminal, fitted to its width, plans and errors wrapped under their rows.
            let width = Posix.isTerminal(STDOUT_FILENO) ? TerminalSize.current().columns : nil
            let home = ProcessInfo.processInfo.environment["HOME"]
            let logPath = width == nil ? store.path : TaskTable.tildeHome(store.path, home: home)
            StatusCommand.prose("log: \(logPath), replayed through seq \(state.lastSeq)", wrappedTo: width).forEach { print($0) }
            // A video's segments are summed up on its row (replay --task SEGMENT shows one).
            let rows = task != nil ? tasks : tasks.filter { $0.spec.parent.map { state[$0] == nil } ?? true }
            let style = TaskTable.Style(width: width, wrapNotes: true, home: home, agentRunning: agentRunning)
            print(TaskTable.render(rows, in: state, style: style, plans: plans.mapValues(\.words)), terminator: "")
            for run in hookRuns { StatusCommand.wrapped("! " + Printable.escaping(run.words), to: width).forEach { print($0) } }
        }
        if verify {
            // A log is input too: a file it places outside download_dir and more_dirs is not read (the agent would not write it).
            let paths = try global.resolve().paths
            let rules = JobParser(downloadDir: paths.downloadDir, moreDirs: paths.moreDirs)
            let checked = tasks.filter { task in
                guard let refusal = rules.refusal(ofRecorded: task.spec, serverNamed: task.namedDest) else { return true }
                print("not checked: \(task.id): \(refusal.reason); its files are not read")
                return false
            }
            let problems = checked.flatMap { DiskCheck.mismatches($0, in: state, log: store) }
            for problem in problems { print("mismatch: \(problem)") }
            if problems.isEmpty { print("verify: every file on disk matches the log") } else { throw ExitCode(5) }
        }
    }
}

/// `replay --verify`: what the disk holds against what the log vouches for:
/// sizes, the digests progress recorded for a partial file's durable bytes,
/// and a finished file's SHA-256 (SPEC §6 rule 3).
enum DiskCheck {
    static func mismatches(_ task: TaskState, in state: AgentState, log: EventStore) -> [String] {
        let fileManager = FileManager.default
        func size(_ path: String) -> Int64? {
            (try? fileManager.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value
        }
        // A published video's segments now live in it (or were joined into one file).
        if let parent = task.spec.parent, state[parent]?.phase == .finished { return [] }
        if task.spec.behaviour.fansOut {
            guard task.phase == .finished, let dest = task.dest else { return [] }
            let exists = fileManager.fileExists(atPath: task.spec.hls?.output == .file ? dest : dest + "/index.m3u8")
            // Finished and not yet renamed (a crash or a power cut after the commit): its start renames it.
            let staged = HLSFanOut.workDirectory(of: task).map { fileManager.fileExists(atPath: $0 + "/out") } ?? false
            return exists || staged ? [] : ["\(task.id): \(dest) is missing"]
        }
        // An upload or a data task without dest keeps no file to check.
        // Nor does a task that skipped its transfer (`overwrite = "skip"`).
        guard let dest = task.dest, let part = task.partPath, task.skipReason == nil else { return [] }
        switch task.phase {
        case .finished:
            // Superseded by a later publication (replace, update), or left as it was (a 304):
            // the fold knows who published the path last, and that one is checked.
            guard state.published[dest]?.task == task.id else { return [] }
            guard let actual = size(dest) else {
                // Finished and not yet renamed (a crash or a power cut after the commit): the next start renames it.
                return size(part) == task.bytes ? [] : ["\(task.id): \(dest) is missing"]
            }
            if actual != task.bytes { return ["\(task.id): \(dest) has \(actual) bytes, the log says \(task.bytes)"] }
            // The bytes published were hashed as they were made durable (logs before that: the job's sha256, if any).
            if let expected = state.published[dest]?.sha256 ?? task.spec.sha256 {
                let digest: String
                do { digest = try FileDigest.sha256(ofFile: dest) } catch { return ["\(task.id): cannot read \(dest): \(error)"] }
                guard digest == expected else {
                    return ["\(task.id): \(dest) has sha256 \(digest), the log says \(expected)"
                            + whereItDiffers(finished: task, file: dest, size: actual, log: log)]
                }
                return []
            }
            // Without one, the log knows the modification time the file was published with
            // (the rename keeps it): a file written to since then has another.
            if let logged = state.published[dest]?.modifiedNs, let info = try? Posix.status(of: dest, flags: AT_SYMLINK_NOFOLLOW),
               Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec) != logged {
                return ["\(task.id): \(dest) was modified after it was published (its modification time is not the one logged)"]
            }
            return []
        case .queued, .running, .paused:
            guard task.bytes > 0, task.spec.isResumable else { return [] }
            guard let actual = size(part) else { return ["\(task.id): \(part) is missing; \(task.bytes) bytes were logged"] }
            let durable = task.durableRanges
            let end = durable.spans.last?.end ?? 0
            if actual < end { return ["\(task.id): \(part) has \(actual) bytes, fewer than the \(end) logged"] }
            guard let digests = task.digests else { return [] }
            do {
                return try FileDigest.damage(ofFile: part, digests: digests, within: durable).map { span in
                    "\(task.id): bytes \(span) of \(part) do not match the sha256 logged for them"
                }
            } catch {
                return ["\(task.id): cannot read \(part): \(error)"]
            }
        default:
            return []
        }
    }

    /// Where a finished file differs, by the digests its progress recorded,
    /// if the log still holds them (compaction drops an ended task's events).
    private static func whereItDiffers(finished task: TaskState, file: String, size: Int64, log: EventStore) -> String {
        var alone = AgentState()
        do {
            try log.forEach(task: task.id) { event in
                // Folded up to its end: `finished` lets them go, the file's own digest standing for them.
                if case .finished = event.body { return }
                alone.apply(event)
            }
        } catch {
            return ""
        }
        guard let digests = alone[task.id]?.digests else {
            return " (its progress events, whose digests would say where, are no longer in the log)"
        }
        guard let damaged = try? FileDigest.damage(ofFile: file, digests: digests, within: ByteRanges([ByteSpan(0, size)])),
              !damaged.isEmpty else { return "" }
        return ": bytes " + damaged.map(\.description).joined(separator: ", ") + " differ"
    }
}

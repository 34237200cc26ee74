import Foundation
import SyncAgent
import SyncAgentCore

/// `submit --wait`: stays until the tasks just submitted end, as aria2c
/// stays until its downloads end, and exits as aria2c would. On a
/// terminal, one line per task redrawn in place (on stderr, as curl and
/// wget draw their progress: stdout keeps the ids); elsewhere, a line as
/// each ends. Ctrl-C stops the waiting, not the tasks.
enum SubmitWait {
    static func follow(_ ids: [String], global: GlobalOptions, paths: AgentPaths) throws -> Never {
        let signals: Int32
        do {
            signals = try Posix.stopSignals()
        } catch {
            throw fail("cannot wait for the tasks: \(error)")
        }
        let live = Posix.isTerminal(STDERR_FILENO)
        if !AgentLiveness.probe(stateDir: paths.stateDir).running {
            say("syncagent: waiting for an agent to take the jobs (syncagent run); Ctrl-C stops waiting and leaves them queued\n")
        }
        var state = AgentState()
        var drawn = 0
        var told = Set<String>()
        while true {
            try openLog(global).catchUp(&state)
            let agentRunning = AgentLiveness.probe(stateDir: paths.stateDir).running
            if live {
                let size = (try? Posix.terminalSize(STDERR_FILENO)) ?? (columns: 80, rows: 24)
                let lines = Self.lines(ids, in: state, agentRunning: agentRunning, width: max(size.columns, 20), rows: max(size.rows - 1, 2))
                // Back to the first line drawn, each line rewritten and cleared to its end.
                say((drawn > 0 ? "\u{1B}[\(drawn)A" : "") + lines.map { "\r" + $0 + "\u{1B}[K\n" }.joined())
                drawn = lines.count
            } else {
                for id in ids where !told.contains(id) {
                    guard let task = state[id], task.phase.isEnded else { continue }
                    told.insert(id)
                    say(Self.line(id, task, in: state, agentRunning: agentRunning) + "\n")
                }
            }
            if WaitVerdict.allEnded(ids, in: state) {
                say(Self.summary(ids, in: state) + "\n")
                exit(WaitVerdict.exitStatus(ids, in: state))
            }
            if (try? Posix.nextSignal(signals)) ?? nil != nil {
                let left = ids.filter { state[$0]?.phase.isEnded != true }.count
                say("syncagent: stopped waiting; \(left == 1 ? "1 task goes" : "\(left) tasks go") on (syncagent status)\n")
                exit(7)
            }
            Posix.sleep(ms: live ? 500 : 1000)
        }
    }

    private static func say(_ text: String) {
        FileHandle.standardError.write(Data(text.utf8))
    }

    /// One line per task, as many as the terminal holds, the rest counted.
    static func lines(_ ids: [String], in state: AgentState, agentRunning: Bool, width: Int, rows: Int) -> [String] {
        let idWidth = min(ids.map(\.count).max() ?? 0, 16)
        var lines = ids.prefix(ids.count > rows ? rows - 1 : rows).map { id in
            let shown = StatusView.shorten(id, to: idWidth).padding(toLength: idWidth, withPad: " ", startingAt: 0)
            guard let task = state[id] else { return StatusView.cut("\(shown)  waiting for the agent", to: width) }
            return StatusView.cut(line(shown, task, in: state, agentRunning: agentRunning), to: width)
        }
        if ids.count > rows {
            let ended = ids.dropFirst(rows - 1).filter { state[$0]?.phase.isEnded == true }.count
            lines.append("… \(ids.count - rows + 1) more (\(ended) of them ended)")
        }
        return lines
    }

    /// "a1b2c3  running  42%  12.0 MiB/28.6 MiB  1.2 MiB/s  ETA 14s  debian.iso"
    static func line(_ id: String, _ task: TaskState, in state: AgentState, agentRunning: Bool) -> String {
        let figures = state.figures(of: task)
        let size = figures.total.map { "\(ByteCount.format(figures.bytes))/\(ByteCount.format($0))" } ?? ByteCount.format(figures.bytes)
        let name = Printable.escaping(task.displayName)
        switch task.phase {
        case .finished: return "\(id)  finished  \(size)  \(Printable.escaping(task.dest ?? name))"
        case .failed: return "\(id)  failed  \(name): \(Printable.escaping(Redaction.text(task.error ?? "failed")))"
        case .cancelled: return "\(id)  cancelled  \(name)"
        case .paused: return "\(id)  paused  \(size)  \(name)"
        case .queued: return "\(id)  \(task.error == nil ? "queued" : "retrying")  \(size)  \(name)"
        case .running:
            guard agentRunning else { return "\(id)  interrupted  \(size)  \(name)" }
            let percent = figures.percent.map { "\(Int($0.rounded()))%  " } ?? ""
            let eta = StatusView.etaSeconds(figures, phase: task.phase).map { "  ETA \(StatusView.duration($0))" } ?? ""
            return "\(id)  running  \(percent)\(size)  \(ByteCount.format(figures.speed))/s\(eta)  \(name)"
        }
    }

    /// "3 finished, 1 failed" and, for each failure, its id and why.
    static func summary(_ ids: [String], in state: AgentState) -> String {
        var counts: [TaskPhase: Int] = [:]
        for id in ids { if let phase = state[id]?.phase { counts[phase, default: 0] += 1 } }
        let words = [TaskPhase.finished, .failed, .cancelled].compactMap { phase in counts[phase].map { "\($0) \(phase.rawValue)" } }
        let failures = ids.compactMap { id in state[id].flatMap { $0.phase == .failed ? "\n  \(id): \(Redaction.text($0.error ?? "failed"))" : nil } }
        return "syncagent: " + words.joined(separator: ", ") + failures.prefix(10).joined()
            + (failures.count > 10 ? "\n  … and \(failures.count - 10) more (syncagent status --state failed)" : "")
    }
}

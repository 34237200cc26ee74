import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

struct CompactCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact",
        abstract: "Fold tasks that ended long ago into a snapshot and drop their raw events; the log shrinks.",
        discussion: """
            The state stays the same: `status` and `replay` list every task as before. What goes is the \
            event-by-event history (`events`, and the attempts `status --task` lists) of tasks that ended before \
            DURATION ago (default: the config's keep_ended, 7d). \
            With an agent running, the agent compacts in the background and this command waits for its report.

            Example:
              syncagent compact
              syncagent compact --older-than 30d
            """)

    @OptionGroup var global: GlobalOptions

    @Option(name: .customLong("older-than"), help: ArgumentHelp("Compact tasks that ended at least this long ago: 7d, 12h, 30m, 0 (default: keep_ended).", valueName: "duration"))
    var olderThan: String?

    /// How long to wait for a running agent's report before leaving it to finish on its own.
    static let waitForAgentS = 120.0

    func run() throws {
        let resolved = try global.resolve()
        var olderThanS = resolved.config.keepEndedS
        if let olderThan {
            guard let seconds = DurationText.seconds(olderThan) else {
                throw fail("--older-than must be a duration such as 7d, 12h, 30m or 0, not \"\(olderThan)\"")
            }
            olderThanS = seconds
        }
        if !AgentLiveness.probe(stateDir: resolved.paths.stateDir).running {
            do {
                print(Self.describe(try Compactor.compactAlone(paths: resolved.paths, olderThanS: olderThanS)))
                return
            } catch let running as AgentAlreadyRunning {
                // Another `compact` holds the lock, not an agent: nobody would answer a request.
                if let pid = running.pid, Self.isCompaction(pid) {
                    throw fail("another syncagent compact (pid \(pid)) is compacting \(resolved.paths.eventLog); try again when it ends")
                }
                // An agent started meanwhile: it does the work.
            } catch {
                throw fail("cannot compact \(resolved.paths.eventLog): \(error)")
            }
        }
        try askTheAgent(resolved.paths, olderThanS: olderThanS)
    }

    /// The agent owns the log while it runs: the request goes through the inbox, and the report comes back in the log.
    private func askTheAgent(_ paths: AgentPaths, olderThanS: Int64) throws {
        let since = (try? EventStore(readingFrom: paths.eventLog).lastSeq) ?? 0
        let file: String
        do {
            file = try InboxWriter(inbox: paths.inbox).write(ControlJob(action: .compact, task: "*", olderThanS: olderThanS).fileText, prefix: "compact")
        } catch {
            throw fail("cannot write into the inbox \(paths.inbox): \(error)")
        }
        print("compaction requested from the running agent: \(file)")
        let deadline = Date().addingTimeInterval(Self.waitForAgentS)
        let name = (file as NSString).lastPathComponent
        while Date() < deadline {
            // The report that names this request: one running when it came, or one for another
            // cutoff asked at the same time, answers others.
            var report: Compacted?
            try? EventStore(readingFrom: paths.eventLog).forEach(after: since) { event in
                if case .compacted(let found) = event.body, found.requestedBy?.contains(name) == true { report = found }
            }
            if let report {
                if let error = report.error { throw fail("the agent could not compact \(paths.eventLog): \(error)") }
                print(Self.describe(report))
                return
            }
            guard AgentLiveness.probe(stateDir: paths.stateDir).running else {
                if FileManager.default.fileExists(atPath: file) { throw fail("the agent stopped before taking the request; it waits in \(file) for its next start") }
                throw fail("the agent stopped before it reported a compaction; run syncagent compact again")
            }
            Posix.sleep(ms: 200)
        }
        print("the agent is still compacting; `syncagent events` will show its report")
    }

    /// Whether process `pid` is a `syncagent compact` (its arguments, from /proc).
    static func isCompaction(_ pid: Int32) -> Bool {
        guard let arguments = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
        return arguments.split(separator: 0).contains { String(decoding: $0, as: UTF8.self) == "compact" }
    }

    static func describe(_ report: Compacted) -> String {
        let size = ByteCount.format(report.bytesAfter)
        if report.trigger == "requested", report.events == 0 {
            guard report.olderThanS > 0 else {
                return "nothing to compact: no ended task has events left to drop, nor has the agent; the log stays \(size)"
            }
            // As --older-than is written: 7d, 12h, 30m, 45s.
            let unit = [(86_400, "d"), (3_600, "h"), (60, "m")].first { report.olderThanS % Int64($0.0) == 0 }
            let age: String = unit.map { "\(report.olderThanS / Int64($0.0))\($0.1)" } ?? "\(report.olderThanS)s"
            return "nothing to compact: no ended task older than \(age) has events left to drop, nor has the agent; "
                + "the log stays \(size) (--older-than 0 compacts every ended task)"
        }
        let change = report.bytesBefore > 0 ? String(format: " (%.1f%%)", Double(report.bytesAfter) * 100 / Double(report.bytesBefore)) : ""
        // A snapshot of every task's state now stands in for what went: a few events dropped may weigh less.
        let grew = report.bytesAfter > report.bytesBefore ? "; it grew: the snapshot of every task outweighs the events dropped" : ""
        return "compacted: snapshot at seq \(report.snapshotSeq); raw events of \(report.tasks) ended task(s) dropped "
            + "(\(report.events) events); log \(ByteCount.format(report.bytesBefore)) → \(size)\(change)\(grew)"
    }
}

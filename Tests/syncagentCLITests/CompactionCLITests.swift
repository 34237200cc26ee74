import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `syncagent compact` against the real binary: alone, beside a running
/// agent, killed at its crash points and at random instants.
@Suite("compact", .serialized)
struct CompactionCLITests {
    /// The tasks as `replay --json --all` shows them, comparable as text.
    static func replayed(_ harness: AgentHarness) throws -> String {
        let tasks = try harness.replayTasks()
        return String(decoding: try JSONSerialization.data(withJSONObject: tasks, options: [.sortedKeys]), as: UTF8.self)
    }

    static func status(_ harness: AgentHarness) throws -> String {
        let tasks = try harness.statusTasks(["--all"])
        return String(decoding: try JSONSerialization.data(withJSONObject: tasks, options: [.sortedKeys]), as: UTF8.self)
    }

    /// A log of finished downloads: `count` small files fetched from nginx.
    static func finishedDownloads(_ count: Int, harness: AgentHarness, nginx: Nginx, prefix: String = "f") throws -> [String: Data] {
        var served: [String: Data] = [:]
        for index in 0..<count {
            let name = "\(prefix)\(index).bin"
            served[name] = try nginx.serve(name, size: 2_000 + index * 37, seed: UInt64(index + 1))
            try harness.drop("\(prefix)\(index).job", "url = \"\(nginx.url(name))\"\nid = \"\(prefix)\(index)\"\n")
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "agent stderr: \(agent.stderr.suffix(1500))")
        return served
    }

    static var loggen: String { ((syncagentBinary as NSString).deletingLastPathComponent as NSString).appendingPathComponent("syncagent-loggen") }

    /// A log of `events` events of `tasks` finished tasks in the harness's state dir, written by `syncagent-loggen`.
    static func generateLog(_ harness: AgentHarness, events: Int, tasks: Int) throws {
        try FileManager.default.createDirectory(atPath: harness.stateDir, withIntermediateDirectories: true)
        let generator = try ChildProcess(loggen, ["\(harness.stateDir)/events.sqlite", "\(events)", "\(tasks)"],
                                         environment: harness.environment, outputIn: harness.directory.path)
        #expect(generator.wait(seconds: 120) == 0, "\(loggen): \(generator.stderr)")
    }

    /// A compaction with nothing to drop wrote a snapshot all the same, kept
    /// beside the pruned one before it (time travel needs that one): the
    /// log grew by a whole snapshot (128 → 228 KiB; 10.3 → 20.6 MiB at
    /// 20,000 tasks). Now it writes none and the log is no larger, whether
    /// a snapshot is there already or not, asked again and again.
    @Test func aCompactionWithNothingToDropLeavesTheLogNoLarger() throws {
        /// Each compaction's sizes as its report gives them: the log's pages, in its file or its WAL.
        func sizes(_ harness: AgentHarness) throws -> [(before: Int, after: Int)] {
            try harness.events().filter { $0.type == "compacted" }.map { ($0.data["bytes_before"] as? Int ?? 0, $0.data["bytes_after"] as? Int ?? 0) }
        }
        // The generated tasks ended about ten days ago: a month's cutoff keeps them all.
        let fresh = try AgentHarness()
        try Self.generateLog(fresh, events: 20_000, tasks: 2_000)
        for _ in 0..<2 {
            let result = try fresh.run(["compact", "--older-than", "30d"])
            #expect(result.status == 0 && result.stdout.hasPrefix("nothing to compact"), "\(result.stdout)\(result.stderr)")
        }
        let unchanged = try sizes(fresh)
        #expect(unchanged.count == 2 && unchanged.allSatisfy { $0.after <= $0.before }, "\(unchanged)")
        // After a compaction that dropped everything, the pruned snapshot stays alone.
        let compacted = try AgentHarness()
        try Self.generateLog(compacted, events: 20_000, tasks: 2_000)
        #expect(try compacted.run(["compact"]).stdout.contains("raw events of 2000 ended task(s) dropped"))
        let statusBefore = try Self.status(compacted)
        for _ in 0..<3 {
            let result = try compacted.run(["compact"])
            #expect(result.status == 0 && result.stdout.hasPrefix("nothing to compact"), "\(result.stdout)\(result.stderr)")
        }
        let reports = try sizes(compacted)
        #expect(reports.count == 4 && reports.dropFirst().allSatisfy { $0.after <= $0.before }, "\(reports)")
        #expect(try Self.status(compacted) == statusBefore)
    }

    /// `status`'s table lists the first 50 queued tasks and counts the rest,
    /// the same from a snapshot that passed over them as from raw events;
    /// a passed-over task the events after the snapshot change is shown as
    /// they left it; `--all` and `--json` list every task.
    @Test func theTableListsTheHeadOfTheQueueAndCountsTheRestFromASnapshot() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        for index in 0..<60 {
            try harness.drop(String(format: "q%02d.job", index),
                             "url = \"http://127.0.0.1:9/q\(index)\"\nid = \"q\(index)\"\nnot_before = 2099-01-01T00:00:00Z\n")
        }
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { (try? harness.events().filter { $0.type == "created" }.count) == 60 })
        func table() throws -> [String] {
            let result = try harness.run(["status"])
            #expect(result.status == 0, "\(result.stderr)")
            return result.stdout.split(separator: "\n").map(String.init)
        }
        func rows(_ lines: [String]) -> [String] { lines.filter { $0.hasPrefix("q") }.map { String($0.prefix { $0 != " " }) } }
        let raw = try table()
        #expect(rows(raw) == (0..<50).map { "q\($0)" })
        #expect(raw.last == "60 queued · 10 more not listed (--all)", "\(raw)")

        // Paused after the snapshot: the table reads it from the snapshot and folds its pause.
        #expect(try harness.run(["compact", "--older-than", "0"]).status == 0)
        #expect(try table() == raw)
        #expect(try harness.run(["pause", "q55"]).status == 0)
        #expect(harness.waitForEvent("paused", task: "q55"))
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 30) == 0)
        let afterPause = try table()
        #expect(rows(afterPause) == (0..<50).map { "q\($0)" } + ["q55"])
        #expect(afterPause.last == "59 queued, 1 paused · 9 more not listed (--all)", "\(afterPause)")
        #expect(rows(try harness.run(["status", "--all"]).stdout.split(separator: "\n").map(String.init)).count == 60)
        #expect(try harness.statusTasks().count == 60)
    }

    /// 10,000 jobs taken in one intake: once it is over, the agent stores its
    /// own state as a snapshot (trigger "intake"), without folding the log
    /// again. That state is the fold of the file: `replay` from the snapshot
    /// and from the raw events alone (a copy with its snapshot removed) agree,
    /// also when the agent was killed the moment the snapshot was written.
    @Test(arguments: [nil, "compact-snapshot-written"])
    func aLargeIntakeIsSnapshotOnceOverAndTheSnapshotIsTheFoldOfTheLog(crashPoint: String?) throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        for index in 0..<10_000 {
            try harness.write(String(format: "q%05d.job", index),
                              "url = \"http://127.0.0.1:9/q\(index)\"\nid = \"q\(index)\"\nnot_before = 2099-01-01T00:00:00Z\n")
        }
        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = crashPoint
        var agent = try harness.startAgent()
        if crashPoint != nil {
            #expect(agent.wait(seconds: 180) == 137, "killed at its crash point: \(agent.stderr.suffix(500))")
            harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
            agent = try harness.startAgent()
            #expect(eventually(within: 30) { harness.statusSaysAgentRuns })
        }
        func intakeSnapshot() -> AgentHarness.LoggedEvent? {
            (try? harness.events())?.first { $0.type == "compacted" && $0.data["error"] == nil }
        }
        #expect(eventually(within: 180) { intakeSnapshot() != nil })
        // Given time to make a second, the agent makes none: one intake, one snapshot. (Slept: the
        // absence of an event over time is what is checked.)
        usleep(2_000_000)
        let report = try #require(intakeSnapshot())
        let events = try harness.events()
        let lastCreated = try #require(events.last { $0.type == "created" })
        #expect(events.filter { $0.type == "created" }.count == 10_000)
        #expect(report.data["snapshot_seq"] as? Int ?? 0 >= lastCreated.seq, "\(report.data)")
        // Killed, its next start finishes the compaction it left ("interrupted"); else the intake's own.
        #expect(report.data["trigger"] as? String == (crashPoint == nil ? "intake" : "interrupted"), "\(report.data)")
        #expect(events.filter { $0.type == "compacted" }.count == 1, "one snapshot for one intake")
        let table = try harness.run(["status"]).stdout
        #expect(table.contains("10000 queued · 9950 more not listed (--all)"), "\(table.suffix(200))")
        agent.signal(SIGKILL)
        _ = agent.wait(seconds: 10)

        let fromSnapshot = try Self.replayed(harness)
        let copy = try AgentHarness(config: "notify = \"none\"\n")
        try FileManager.default.createDirectory(atPath: copy.stateDir, withIntermediateDirectories: true)
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: harness.stateDir + "/events.sqlite" + suffix) {
            try FileManager.default.copyItem(atPath: harness.stateDir + "/events.sqlite" + suffix, toPath: copy.stateDir + "/events.sqlite" + suffix)
        }
        try pythonSQLite(copy.stateDir + "/events.sqlite", "DELETE FROM snapshots; DELETE FROM snapshot_parts")
        #expect(try Self.replayed(copy) == fromSnapshot)
        #expect(try copy.replayTasks().count == 10_000)
    }

    /// The parts of a snapshot whose writer was killed before its row are
    /// removed when the agent starts (they were kept until the next snapshot).
    @Test func theAgentsStartRemovesThePartsOfASnapshotCutShort() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        func python(_ sql: String) throws -> String { try pythonSQLite(harness.stateDir + "/events.sqlite", sql) }
        _ = try python("INSERT INTO snapshot_parts VALUES (99, 0, X'00')")
        #expect(try python("SELECT count(*) FROM snapshot_parts") == "1")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        #expect(try python("SELECT count(*) FROM snapshot_parts") == "0")
    }

    @Test func compactingAloneKeepsEveryTaskAndDropsTheirEvents() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        let nginx = try Nginx(in: harness.directory)
        _ = try Self.finishedDownloads(20, harness: harness, nginx: nginx)
        let before = try Self.replayed(harness)
        let statusBefore = try Self.status(harness)
        let eventsBefore = try harness.events().count

        let result = try harness.run(["compact", "--older-than", "0"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("raw events of 20 ended task(s) dropped"), "\(result.stdout)")
        #expect(try Self.replayed(harness) == before)
        #expect(try Self.status(harness) == statusBefore)
        // Left: the report of the compaction itself, numbered after everything before it, never from 1 again.
        let events = try harness.events()
        #expect(events.map(\.type) == ["compacted"], "\(events.map(\.type)) of \(eventsBefore)")
        #expect(events.first?.seq == eventsBefore + 1)
        #expect(events.first?.data["tasks"] as? Int == 20)

        // The default keeps a week: nothing of today goes, and nothing is added (a second
        // snapshot beside the one kept for what was dropped made the log grow, and said so).
        _ = try Self.finishedDownloads(3, harness: harness, nginx: nginx, prefix: "g")
        let kept = try harness.events().count
        let snapshots = try pythonSQLite(harness.stateDir + "/events.sqlite", "SELECT count(*) FROM snapshots")
        let nothing = try harness.run(["compact"]).stdout
        #expect(nothing.hasPrefix("nothing to compact: no ended task older than 7d has events left to drop, nor has the agent; "
                                  + "the log stays "), "\(nothing)")
        #expect(try harness.events().count == kept + 1, "its report only")
        #expect(try pythonSQLite(harness.stateDir + "/events.sqlite", "SELECT count(*) FROM snapshots") == snapshots)

        // replay --until before the compaction point names where it can start.
        let early = try harness.run(["replay", "--until", "3"])
        #expect(early.status != 0 && early.stderr.contains("compacted into a snapshot"), "\(early.stderr)")

        // Commands about one task look it up alone: one compacted into the
        // snapshot is still known by every one of them, and so is its id.
        let compactedEvents = try harness.run(["events", "--task", "f3"])
        #expect(compactedEvents.status == 0 && compactedEvents.stdout.isEmpty
                && compactedEvents.stderr.contains("the first events of task f3 were compacted"), "\(compactedEvents.stderr)")
        let rawEvents = try harness.run(["events", "--task", "g0"])
        #expect(rawEvents.status == 0 && rawEvents.stderr.isEmpty && rawEvents.stdout.contains("\tg0\tcreated\t"), "\(rawEvents)")
        let reused = try harness.run(["submit", nginx.url("f3.bin"), "--id", "f3"])
        #expect(reused.status != 0 && reused.stderr.contains("\"f3\" is already used by a task in the log"), "\(reused.stderr)")
        #expect(try harness.run(["forget", "f3"]).status == 0)
        #expect(try harness.run(["forget", "g1"]).status == 0)
        let unknown = try harness.run(["pause", "f99"])
        #expect(unknown.status != 0 && unknown.stderr.contains("no task has the id \"f99\""), "\(unknown.stderr)")
    }

    @Test(arguments: ["compact-snapshot-written", "compact-deleting"])
    func aCompactionKilledAtItsCrashPointLosesNothing(point: String) throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        let nginx = try Nginx(in: harness.directory)
        let served = try Self.finishedDownloads(12, harness: harness, nginx: nginx)
        let before = try Self.replayed(harness)

        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = point
        #expect(try harness.run(["compact", "--older-than", "0"]).status == 137)
        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        #expect(try Self.replayed(harness) == before)
        // Before its first deletion, every point of the log can still be replayed.
        #expect(try harness.run(["replay", "--until", "3"]).status == (point == "compact-snapshot-written" ? 0 : 1))
        #expect(try harness.run(["compact", "--older-than", "0"]).status == 0)
        #expect(try Self.replayed(harness) == before)

        // The agent starts on it, and the files it published are still its own (nothing fetched again).
        let requests = nginx.requests.count
        try harness.drop("again.job", "url = \"\(nginx.url("f0.bin"))\"\ndest = \"f0.bin\"\noverwrite = \"update\"\nid = \"again\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "agent stderr: \(agent.stderr.suffix(1500))")
        #expect(nginx.requests.count == requests + 1)
        #expect(nginx.requests.last?.status == 304, "the published validators survived the compaction")
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/f0.bin") == served["f0.bin"])
    }

    @Test func theRunningAgentCompactsWhenAskedAndGoesOnWorking() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        let nginx = try Nginx(in: harness.directory)
        _ = try Self.finishedDownloads(10, harness: harness, nginx: nginx)
        let before = try Self.replayed(harness)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        #expect(eventually(within: 10) { harness.statusSaysAgentRuns })
        let result = try harness.run(["compact", "--older-than", "0"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("compaction requested from the running agent"), "\(result.stdout)")
        #expect(result.stdout.contains("raw events of 10 ended task(s) dropped"), "\(result.stdout)")
        #expect(try Self.replayed(harness) == before)

        let data = try nginx.serve("after.bin", size: 100_000, seed: 99)
        try harness.drop("after.job", "url = \"\(nginx.url("after.bin"))\"\nid = \"after\"\n")
        #expect(eventually(within: 30) { harness.state(of: "after") == "finished" })
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/after.bin") == data)
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// Found by a fourth adversary: a second `compact` asked while the first ran printed the
    /// first one's report (its own ran after), and that compaction deleted the first one's report.
    @Test func eachCompactPrintsTheReportOfTheCompactionThatAnsweredIt() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        // Under the agent's own threshold (200,000 events): no compaction of its own at start.
        try Self.generateLog(harness, events: 150_000, tasks: 15_000)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        #expect(eventually(within: 30) { harness.statusSaysAgentRuns })
        let compact = ["compact"] + harness.globalFlags + ["--older-than", "0"]
        let first = try ChildProcess(syncagentBinary, compact, environment: harness.environment, outputIn: harness.directory.path)
        // The second is asked once the first compaction runs, not in the same breath (one compaction would answer both).
        #expect(eventually(within: 30) { agent.stderr.contains("compaction started") })
        let second = try ChildProcess(syncagentBinary, compact, environment: harness.environment, outputIn: harness.directory.path)
        #expect(first.wait(seconds: 120) == 0, "\(first.stderr)")
        #expect(second.wait(seconds: 120) == 0, "\(second.stderr)")
        #expect(first.stdout.contains("raw events of 15000 ended task(s) dropped"), "\(first.stdout)")
        // Queued behind the first or run after it, the second compaction found nothing left to drop.
        #expect(second.stdout.contains("raw events of 0 ended task(s) dropped"), "\(second.stdout)")
        // Both reports stay in the log.
        #expect(try harness.events().filter { $0.type == "compacted" }.count == 2)

        // A fifth adversary: two asked at once with different cutoffs got one compaction (the
        // second cutoff's) and one report between them. Each cutoff now gets its own.
        let now = try ChildProcess(syncagentBinary, compact, environment: harness.environment, outputIn: harness.directory.path)
        let hour = try ChildProcess(syncagentBinary, ["compact"] + harness.globalFlags + ["--older-than", "1h"],
                                    environment: harness.environment, outputIn: harness.directory.path)
        #expect(now.wait(seconds: 120) == 0 && hour.wait(seconds: 120) == 0, "\(now.stderr) \(hour.stderr)")
        let reports = try harness.events().filter { $0.type == "compacted" }.compactMap { $0.data["requested_by"] as? [String] }
        #expect(reports.count == 4 && Set(reports.flatMap { $0 }).count == 4, "\(reports)")
        let printed = [now.stdout, hour.stdout].map { $0.split(separator: "\n").last.map(String.init) ?? "" }
        // (The agent's own events of the last hour go with the first; the second finds nothing older than an hour.)
        #expect(printed[0].hasPrefix("compacted: snapshot at seq")
                && printed[1].hasPrefix("nothing to compact: no ended task older than 1h"), "\(printed)")
    }

    /// Found by an adversary: an outside program opening the log read-write
    /// (sqlite3, a backup script) took the agent's locks away, deleted its
    /// WAL, and every event after that went to a deleted file.
    @Test func anOutsideWriterOpeningTheLogTakesNothingFromTheAgent() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        let nginx = try Nginx(in: harness.directory)
        _ = try Self.finishedDownloads(2, harness: harness, nginx: nginx)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        #expect(eventually(within: 10) { harness.statusSaysAgentRuns })
        try pythonSQLite("\(harness.stateDir)/events.sqlite", "select max(seq) from events")
        _ = try nginx.serve("late.bin", size: 5_000, seed: 5)
        try harness.drop("late.job", "url = \"\(nginx.url("late.bin"))\"\nid = \"late\"\n")
        #expect(eventually(within: 30) { harness.state(of: "late") == "finished" })
        agent.signal(SIGKILL)
        #expect(agent.wait(seconds: 10) != nil)
        #expect(try harness.tasksByID()["late"]?["state"] as? String == "finished", "the job survives the kill")
    }

    @Test func aCompactionTheAgentCannotFinishIsReportedNotWaitedForForever() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        try FileManager.default.createDirectory(atPath: harness.stateDir, withIntermediateDirectories: true)
        guard let disk = TestMount(tmpfsAt: harness.stateDir, size: "16m") else { return }
        defer { withExtendedLifetime(disk) {} }
        try Self.generateLog(harness, events: 25000, tasks: 250)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        #expect(eventually(within: 10) { harness.statusSaysAgentRuns })
        // Fill the disk: no room left for a snapshot.
        let filler = try ChildProcess("/usr/bin/dd", ["if=/dev/zero", "of=\(harness.stateDir)/filler", "bs=64k"],
                                      environment: harness.environment, outputIn: harness.directory.path)
        _ = filler.wait(seconds: 30)
        let result = try harness.run(["compact", "--older-than", "0"], seconds: 150)
        #expect(result.status != 0, "\(result.stdout)")
        // The agent's report of the failure; or, its own commits failing too, that it stopped without one;
        // or, gone before the request, the command's own attempt failing on the full disk.
        let said = ["the agent could not compact", "the agent stopped before", "cannot compact \(harness.stateDir)/events.sqlite"]
        #expect(said.contains { result.stderr.contains($0) }, "\(result.stderr)")
        #expect(result.stderr.contains("No space left on device") || result.stderr.contains("full") || result.stderr.contains("stopped"),
                "\(result.stderr)")
    }

    @Test func badCompactJobsAreRejectedWithTheKey() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\n")
        try harness.drop("a.job", "action = \"compact\"\nolder_than = \"soon\"\n")
        try harness.drop("b.job", "action = \"compact\"\ntask = \"t1\"\n")
        try harness.drop("c.job", "action = \"pause\"\ntask = \"t1\"\nolder_than = \"1d\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0)
        let errors = ["a", "b", "c"].map { (try? String(contentsOfFile: "\(harness.inbox)/rejected/\($0).job.error", encoding: .utf8)) ?? "" }
        #expect(errors[0].contains("older_than"), "\(errors[0])")
        #expect(errors[1].contains("\"task\""), "\(errors[1])")
        #expect(errors[2].contains("older_than"), "\(errors[2])")
        #expect(try harness.run(["compact", "--older-than", "forever"]).stderr.contains("--older-than"))
    }

    /// The agent's own compaction (off its loop, every 200,000 events) killed
    /// at its crash points: the next start reads the same tasks and compacts again.
    @Test(arguments: ["compact-snapshot-written", "compact-deleting"])
    func theAgentKilledInsideItsOwnCompactionLosesNothing(point: String) throws {
        let harness = try AgentHarness(config: "notify = \"none\"\nkeep_ended = \"1d\"\n")
        try Self.generateLog(harness, events: 210000, tasks: 100)
        let before = try Self.replayed(harness)

        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = point
        let dying = try harness.startAgent()
        #expect(dying.wait(seconds: 120) == 137, "the agent reached \(point): \(dying.stderr.suffix(1500))")
        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        #expect(try Self.replayed(harness) == before)

        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 120) == 0, "agent stderr: \(agent.stderr.suffix(1500))")
        #expect(try Self.replayed(harness) == before)
        let events = try harness.events()
        // Finished at the next start, though the snapshot was already there.
        #expect(events.contains { $0.type == "compacted" && $0.data["trigger"] as? String == "interrupted" && $0.data["error"] == nil },
                "\(events.map(\.type))")
        #expect(events.count < 100, "the generated tasks' events were dropped")
    }

    /// Found by an adversary: an agent stopped (SIGTERM) during a requested
    /// compaction reported it done, and its next start finished it with
    /// `keep_ended` instead of the cutoff asked for.
    @Test func aCompactionCutShortByAStopIsSaidSoAndFinishedAsAsked() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\nkeep_ended = \"3650d\"\n")
        try Self.generateLog(harness, events: 150000, tasks: 1500)
        let before = try Self.replayed(harness)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        #expect(eventually(within: 10) { harness.statusSaysAgentRuns })
        let request = try ChildProcess(syncagentBinary, ["compact"] + harness.globalFlags + ["--older-than", "0"],
                                       environment: harness.environment, outputIn: harness.directory.path)
        // Stopped once the requested compaction has started (the agent's own, for the long log, may
        // run first and hold the request back), long before it is through.
        #expect(eventually(within: 30) {
            agent.stderr.split(separator: "\n").contains { $0.contains("trigger=requested") && $0.hasSuffix("compaction started") }
        }, "\(agent.stderr.suffix(1500))")
        // An instant some way into it: nothing is logged between its start and its end.
        usleep(200_000)
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let status = request.wait(seconds: 30)
        #expect(status == 1, "compact: \(request.stdout) \(request.stderr)")
        #expect(request.stderr.contains("cut short by the agent stopping"), "\(request.stderr)")
        #expect(try Self.replayed(harness) == before)

        let next = try harness.startAgent(exitWhenIdle: true)
        #expect(next.wait(seconds: 120) == 0, "agent stderr: \(next.stderr.suffix(1500))")
        if request.stderr.contains("before anything was compacted") {
            // Stopped while folding: nothing to finish; asked again, it completes.
            #expect(try harness.run(["compact", "--older-than", "0"]).status == 0)
        } else {
            let finished = try harness.events().last { $0.type == "compacted" && $0.data["trigger"] as? String == "interrupted" }
            #expect(finished?.data["older_than_s"] as? Int == 0, "the cutoff asked for, not keep_ended")
        }
        #expect(try harness.events().count < 100)
        #expect(try Self.replayed(harness) == before)
    }

    /// The agent compacts by itself once the log is long, off its loop, and
    /// a kill -9 at any instant of it loses nothing: every restart reads
    /// the same tasks, and downloads dropped meanwhile finish exactly once.
    @Test func compactionByItselfUnderKill9() throws {
        let harness = try AgentHarness(config: "notify = \"none\"\nkeep_ended = \"1d\"\n")
        let nginx = try Nginx(in: harness.directory)
        try Self.generateLog(harness, events: 240000, tasks: 600)
        let before = try Self.replayed(harness)

        var random = SplitMix64(seed: 20261122)
        var served: [String: Data] = [:]
        for round in 0..<6 {
            let agent = try harness.startAgent()
            let name = "r\(round).bin"
            served[name] = try nginx.serve(name, size: 300_000 + round, seed: UInt64(round + 7))
            try harness.drop("r\(round).job", "url = \"\(nginx.url(name))\"\nid = \"r\(round)\"\n")
            // A seeded random instant: the kill may land anywhere, the compaction included.
            usleep(UInt32.random(in: 50_000...1_500_000, using: &random))
            agent.signal(SIGKILL)
            #expect(agent.wait(seconds: 10) != nil)
            let now = try harness.replayTasks().filter { ($0["id"] as? String)?.hasPrefix("t") == true }
            let text = String(decoding: try JSONSerialization.data(withJSONObject: now, options: [.sortedKeys]), as: UTF8.self)
            #expect(text == before, "round \(round): the generated tasks changed")
        }
        let last = try harness.startAgent(exitWhenIdle: true)
        #expect(last.wait(seconds: 120) == 0, "agent stderr: \(last.stderr.suffix(1500))")
        let events = try harness.events()
        // Started by the log's size; a kill after its snapshot and before its event makes the
        // next start finish it as "interrupted" (nothing here asks for a compaction).
        #expect(events.contains { $0.type == "compacted" && ["log_size", "interrupted"].contains($0.data["trigger"] as? String) })
        #expect(events.count < 10_000, "the generated tasks' events were dropped")
        for (name, data) in served { #expect(FileManager.default.contents(atPath: "\(harness.downloads)/\(name)") == data, "\(name)") }
        let finished = try harness.statusTasks(["--all"]).filter { ($0["id"] as? String)?.hasPrefix("r") == true }
        #expect(finished.count == 6 && finished.allSatisfy { $0["state"] as? String == "finished" })
        #expect(Set(events.filter { $0.type == "finished" }.compactMap(\.task)).count == events.filter { $0.type == "finished" }.count)
    }
}

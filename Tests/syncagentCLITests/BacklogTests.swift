import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A backlog of jobs is moved into `.taken/` and read on a worker thread
/// while the loop records the jobs before it, committed every 256 jobs.
/// Whatever instant it stops at, every job becomes one task.
@Suite("Backlogs", .serialized)
struct BacklogTests {
    /// Jobs that wait (not_before in 2099): taking them is the whole work.
    static func waitingJob(_ index: Int) -> String {
        "url = \"http://127.0.0.1:9/f\(index).bin\"\ndest = \"f\(index).bin\"\nnot_before = 2099-01-01T00:00:00Z\n"
    }

    /// Every job recorded: created, or rejected (a job that does not parse
    /// is read again after a grace period when a scan found it, as it may
    /// still have been being written).
    func allRecorded(_ harness: AgentHarness, _ count: Int) -> Bool {
        ((try? harness.events().filter { $0.type == "created" || $0.type == "rejected" }.count) ?? 0) == count
    }

    func takenFiles(_ harness: AgentHarness) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: harness.inbox + "/.taken")
    }

    /// Each job file's name once among the `created` events, the bad ones once among the `rejected`.
    func expectEachJobOnce(_ harness: AgentHarness, good: Int, bad: [String]) throws {
        let events = try harness.events()
        let created = events.filter { $0.type == "created" }.compactMap { ($0.data["source"] as? [String: Any])?["file"] as? String }
        #expect(created.count == good)
        #expect(Set(created) == Set((0..<good).map { String(format: "j%05d.job", $0) }))
        let rejected = events.filter { $0.type == "rejected" }.compactMap { $0.data["file"] as? String }
        #expect(rejected.sorted() == bad.sorted())
        #expect(harness.jobFiles().isEmpty)
        #expect(try takenFiles(harness).isEmpty)
    }

    /// Killed at the first commit inside a backlog of 700 (after 256 jobs):
    /// the log holds those, `.taken/` holds them and the ones the reader had
    /// moved ahead, the inbox the rest. The restart makes each job one task.
    @Test func killedInTheMiddleOfABacklogEachJobBecomesOneTask() throws {
        let harness = try AgentHarness()
        let good = 700
        for index in 0..<good { try harness.drop(String(format: "j%05d.job", index), Self.waitingJob(index)) }
        let bad = ["bad-a.job", "bad-b.job"]
        for name in bad { try harness.drop(name, "url = \"ftp://example.invalid/x\"\n") }

        harness.extraEnvironment = ["SYNCAGENT_CRASHPOINT": "intake-committed"]
        let crashed = try harness.startAgent()
        #expect(crashed.wait(seconds: 60) == 137)
        let createdBeforeCrash = try harness.events().filter { $0.type == "created" }.count
        #expect(createdBeforeCrash > 0 && createdBeforeCrash < good)
        // Recorded but not removed, and moved ahead but not recorded: both wait in `.taken/`.
        #expect(try takenFiles(harness).count >= createdBeforeCrash)
        #expect(!harness.jobFiles().isEmpty)

        harness.extraEnvironment = [:]
        let agent = try harness.startAgent()
        #expect(eventually(within: 60) { allRecorded(harness, good + bad.count) })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 30) == 0)
        try expectEachJobOnce(harness, good: good, bad: bad)
    }

    /// More jobs than inotify can queue arrive while the agent cannot read
    /// its queue (stopped): the overflow makes it scan the inbox and take
    /// the whole backlog, each job once, written in place or renamed in.
    @Test func aFloodThatOverflowsInotifysQueueIsTakenFromAScan() throws {
        let limitFile = "/proc/sys/fs/inotify/max_queued_events"
        let original = try String(contentsOfFile: limitFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let limit = Int(original) else { throw TestFailure("cannot read \(limitFile)") }
        // Read when the agent's watch is made: a small queue keeps the flood small.
        var lowered = false
        if limit > 1024, (try? "256".write(toFile: limitFile, atomically: false, encoding: .utf8)) != nil { lowered = true }
        defer { if lowered { try? original.write(toFile: limitFile, atomically: false, encoding: .utf8) } }
        let queue = lowered ? 256 : limit

        let harness = try AgentHarness()
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started", within: 30))
        if lowered { try original.write(toFile: limitFile, atomically: false, encoding: .utf8); lowered = false }

        agent.signal(SIGSTOP)
        // At least one event per job, so the queue cannot hold them all.
        let good = queue + 300
        for index in 0..<good {
            let name = String(format: "j%05d.job", index)
            if index % 2 == 0 { try harness.drop(name, Self.waitingJob(index)) } else { try harness.write(name, Self.waitingJob(index)) }
        }
        try harness.drop("bad-a.job", "url = \"ftp://example.invalid/x\"\n")
        agent.signal(SIGCONT)

        #expect(eventually(within: 120) { allRecorded(harness, good + 1) })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 30) == 0)
        #expect(agent.stderr.contains("more jobs arrived than inotify could queue"))
        try expectEachJobOnce(harness, good: good, bad: ["bad-a.job"])
    }

    /// A backlog is taken a slice at a time between loop turns: a download
    /// that runs while a flood overflows inotify's queue keeps moving (its
    /// progress is logged between the flood's first and last `created`).
    /// It used to stand still until the whole backlog was taken.
    @Test func aDownloadKeepsMovingWhileABacklogIsTaken() throws {
        let limitFile = "/proc/sys/fs/inotify/max_queued_events"
        let original = try String(contentsOfFile: limitFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        var lowered = false
        if let limit = Int(original), limit > 1024, (try? "256".write(toFile: limitFile, atomically: false, encoding: .utf8)) != nil {
            lowered = true
        }
        defer { if lowered { try? original.write(toFile: limitFile, atomically: false, encoding: .utf8) } }

        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("slow.bin", size: 20_000_000)
        try harness.drop("slow.job", "id = \"slow\"\nurl = \"\(server.url("slow.bin", "rate=200000"))\"\n")
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("progressed", task: "slow", within: 30))
        if lowered { try original.write(toFile: limitFile, atomically: false, encoding: .utf8); lowered = false }

        agent.signal(SIGSTOP)
        // Big enough to take seconds, so more than one progress interval passes while it is taken.
        let good = 8_000
        for index in 0..<good { try harness.drop(String(format: "j%05d.job", index), Self.waitingJob(index)) }
        agent.signal(SIGCONT)
        #expect(eventually(within: 180) { allRecorded(harness, good + 1) })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 30) == 0)

        let events = try harness.events()
        let floodCreated = events.filter { $0.type == "created" && $0.task != "slow" }.map(\.seq)
        let first = try #require(floodCreated.min()), last = try #require(floodCreated.max())
        let progressMeanwhile = events.filter { $0.type == "progressed" && $0.task == "slow" && $0.seq > first && $0.seq < last }
        #expect(!progressMeanwhile.isEmpty, "the download made no progress while \(good) jobs were taken")
        #expect(agent.stderr.contains("more jobs arrived than inotify could queue"))
        let created = events.filter { $0.type == "created" }.compactMap { ($0.data["source"] as? [String: Any])?["file"] as? String }
        #expect(created.count == good + 1 && Set(created).count == good + 1, "each job once")
        #expect(harness.jobFiles().isEmpty)
    }

    /// A job written in place by a writer that pauses past the grace period
    /// (2 s) is read only once that writer closes it, whether inotify saw it
    /// created (live) or a start-up scan found it. Found by an adversary: its
    /// first lines, valid alone, were taken as the whole job.
    @Test(arguments: ["live", "scan"])
    func aJobStillOpenForWritingIsReadOnceClosed(_ found: String) throws {
        let harness = try AgentHarness()
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/bin/sh")
        let job = harness.inbox + "/paused.job"
        writer.arguments = ["-c", """
            exec 3>"$1"
            printf 'url = "http://127.0.0.1:9/x.bin"\nnot_before = 2099-01-01T00:00:00Z\n' >&3
            sleep 3.5
            printf 'dest = "chosen.bin"\npriority = 7\n' >&3
            """, "sh", job]
        var agent: ChildProcess?
        if found == "live" {
            agent = try harness.startAgent()
            #expect(harness.waitForEvent("agent_started", within: 30))
        }
        try writer.run()
        if found == "scan" {
            #expect(eventually(within: 10) { FileManager.default.fileExists(atPath: job) })
            agent = try harness.startAgent()
        }
        writer.waitUntilExit()
        #expect(writer.terminationStatus == 0)
        #expect(harness.waitForEvent("created", within: 30))
        agent?.signal(SIGTERM)
        #expect(agent?.wait(seconds: 30) == 0)
        let created = try harness.events().filter { $0.type == "created" }
        #expect(created.count == 1)
        #expect((created.first?.data["dest"] as? String)?.hasSuffix("/chosen.bin") == true, "\(created.map(\.data))")
        #expect(created.first?.data["priority"] as? Int == 7, "\(created.map(\.data))")
        #expect(try harness.events().filter { $0.type == "rejected" }.isEmpty)
    }

    /// A burst of jobs that fits inotify's queue (no overflow) is taken a
    /// slice per loop turn too: a SIGTERM once the first slice is committed
    /// stops the agent before the rest, and the next start takes it. Found
    /// by an adversary: the whole drain was taken in one turn, and a stop
    /// waited for it (9 s for 6,000 jobs).
    @Test func aStopDuringABurstEndsItAndTheRestIsTakenLater() throws {
        let harness = try AgentHarness()
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started", within: 30))
        agent.signal(SIGSTOP)
        // Two events a job (created, closed): 4,000 fit the default queue of 16,384.
        let good = 4_000
        for index in 0..<good { try harness.write(String(format: "j%05d.job", index), Self.waitingJob(index)) }
        agent.signal(SIGCONT)
        #expect(eventually(within: 60) { ((try? harness.events().filter { $0.type == "created" }.count) ?? 0) > 0 })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 30) == 0)
        #expect(!agent.stderr.contains("more jobs arrived than inotify could queue"), "a burst, not an overflow")
        #expect(try harness.events().filter { $0.type == "created" }.count < good, "the stop waited for the whole burst")

        let again = try harness.startAgent()
        #expect(eventually(within: 120) { allRecorded(harness, good) })
        again.signal(SIGTERM)
        #expect(again.wait(seconds: 30) == 0)
        try expectEachJobOnce(harness, good: good, bad: [])
    }

    /// SIGTERM in the middle of a long backlog stops the agent there (it
    /// used to take the whole backlog first); the next start takes the
    /// rest, each job once.
    @Test func aStopInTheMiddleOfABacklogEndsItAndTheRestIsTakenLater() throws {
        let harness = try AgentHarness()
        let good = 10_000
        for index in 0..<good { try harness.drop(String(format: "j%05d.job", index), Self.waitingJob(index)) }
        let agent = try harness.startAgent()
        #expect(eventually(within: 60) { ((try? harness.events().filter { $0.type == "created" }.count) ?? 0) > 0 })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 60) == 0)
        let events = try harness.events()
        #expect(events.last?.type == "agent_stopped" && events.last?.data["reason"] as? String == "SIGTERM")
        #expect(events.filter { $0.type == "created" }.count < good)
        #expect(!harness.jobFiles().isEmpty)

        let again = try harness.startAgent()
        #expect(eventually(within: 120) { allRecorded(harness, good) })
        again.signal(SIGTERM)
        #expect(again.wait(seconds: 30) == 0)
        try expectEachJobOnce(harness, good: good, bad: [])
    }

    /// The maildir way: written elsewhere, hard-linked in, the other name
    /// removed at once. inotify says only "created", and by the time the
    /// agent looks the file has one link, like one still being written;
    /// no close follows. Found by an adversary: such jobs waited in the
    /// inbox until the next start. Now taken after the grace period.
    @Test func aJobLinkedInWhoseOtherNameIsRemovedAtOnceIsTaken() throws {
        let harness = try AgentHarness()
        let staging = harness.directory.file("staging")
        try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started", within: 30))
        let good = 50
        for index in 0..<good {
            let name = String(format: "j%05d.job", index)
            try Self.waitingJob(index).write(toFile: staging + "/" + name, atomically: false, encoding: .utf8)
            guard link(staging + "/" + name, harness.inbox + "/" + name) == 0, unlink(staging + "/" + name) == 0 else {
                throw TestFailure("cannot link \(name) in")
            }
        }
        #expect(eventually(within: 60) { allRecorded(harness, good) })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 30) == 0)
        try expectEachJobOnce(harness, good: good, bad: [])
    }
}

import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

@Suite("kill -9 at any instant", .serialized)
struct TortureTests {
    /// SPEC §6 rules 2–3 under fire: 50 jobs (three of 64–256 MiB), the agent
    /// SIGKILLed at random instants 24 times and restarted each time.
    @Test func everyJobFinishesExactlyOnceThroughTwentyFourKills() throws {
        let harness = try AgentHarness()
        // Every waiting job lives in the log, read back as its task starts: that too under fire.
        harness.extraEnvironment["SYNCAGENT_QUEUE_HELD_WHOLE"] = "0"
        let nginx = try Nginx(in: harness.directory)
        let daemon = try NotificationDaemon(in: harness.directory)
        harness.busAddress = daemon.busAddress
        let progressIntervalBytes = 8 << 20

        // Three big files, served at 8 MB/s each so the kills land mid-transfer.
        var served: [String: Data] = [:]
        var jobs: [(name: String, text: String)] = []
        for (index, mebibytes) in [64, 128, 256].enumerated() {
            let name = "big\(index).bin"
            served[name] = try nginx.serve(name, size: mebibytes << 20, seed: UInt64(index))
            jobs.append(("big\(index).job", "url = \"\(nginx.url("slow/\(name)"))\"\npriority = 1\n"))
        }
        for index in 0..<47 {
            let name = "small\(index).bin"
            served[name] = try nginx.serve(name, size: 1000 + index * 4099, seed: UInt64(100 + index))
            jobs.append(("small\(index).job", "url = \"\(nginx.url(name))\"\n"))
        }

        var random = SplitMix64(seed: 20261122)
        var kills = 0
        var interruptedTransfers = 0
        var pending = jobs[...]
        while kills < 24 {
            let agent = try harness.startAgent()
            // Jobs arrive while the agent starts, runs and dies: intake is under fire too.
            for job in pending.prefix(10) { try harness.drop(job.name, job.text) }
            pending = pending.dropFirst(10)
            // A seeded random instant: the kill must be able to land anywhere.
            usleep(UInt32.random(in: 100_000...900_000, using: &random))
            agent.signal(SIGKILL)
            #expect(agent.wait(seconds: 10) != nil)
            kills += 1
            interruptedTransfers += try harness.statusTasks().filter { $0["state"] as? String == "running" }.count
        }
        #expect(pending.isEmpty)

        let last = try harness.startAgent(exitWhenIdle: true)
        #expect(last.wait(seconds: 300) == 0, "agent stderr: \(last.stderr.suffix(2000))")

        for (name, data) in served {
            #expect(FileManager.default.contents(atPath: "\(harness.downloads)/\(name)") == data, "\(name)")
        }
        let leftovers = (try FileManager.default.contentsOfDirectory(atPath: harness.downloads)).filter { served[$0] == nil }
        #expect(leftovers.isEmpty, "unexpected files: \(leftovers)")
        #expect(harness.jobFiles().isEmpty)

        let events = try harness.events()
        let created = events.filter { $0.type == "created" }
        #expect(created.count == 50)
        let sources = created.compactMap { ($0.data["source"] as? [String: Any])?["file"] as? String }
        #expect(Set(sources) == Set(jobs.map(\.name)))
        let finished = events.filter { $0.type == "finished" }.compactMap(\.task)
        #expect(finished.count == 50)
        #expect(Set(finished).count == 50)
        #expect(daemon.notifyCalls.count == 1)
        #expect(daemon.notifyCalls.first?.contains("\"50 transfers finished\"") == true)
        #expect(try harness.run(["replay", "--verify"]).status == 0)

        // What the server sent beyond the files themselves: re-fetched bytes.
        let sent = nginx.requests.filter { $0.status == 200 || $0.status == 206 }.map(\.bytesSent).reduce(0, +)
        let needed = served.values.map(\.count).reduce(0, +)
        let refetched = sent - needed
        print("torture: \(kills) kills, \(interruptedTransfers) transfers interrupted, \(refetched) bytes re-fetched "
            + "(\(refetched / max(interruptedTransfers, 1)) per interrupted transfer; interval \(progressIntervalBytes))")
        #expect(refetched >= 0)
        #expect(refetched < interruptedTransfers * progressIntervalBytes)
    }

    /// `replay --until SEQ` prints the plan a restart at that point would
    /// follow; an agent started on the log cut at SEQ does exactly that.
    @Test func replayUntilPredictsWhatTheAgentDoes() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("p.bin", size: 32 << 20)
        try harness.drop("p.job", "url = \"\(nginx.url("slow/p.bin"))\"\nid = \"p\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) {
            ((try? harness.events()) ?? []).filter { $0.type == "progressed" }.count >= 2
        })
        agent.signal(SIGKILL)
        #expect(agent.wait(seconds: 10) != nil)

        let progress = try harness.events().filter { $0.type == "progressed" }
        let point = try #require(progress.first)
        let offset = try #require(point.data["bytes"] as? Int)
        let etag = try #require(point.data["etag"] as? String)
        let plan = try harness.replayTasks(["--until", "\(point.seq)"]).first?["plan"] as? String
        #expect(plan == "resume at byte \(offset) with If-Range: \(etag)")

        // Time travel: the log as it was at that seq (the partial file holds more; the log wins).
        try truncateLog("\(harness.stateDir)/events.sqlite", after: point.seq)
        let restarted = try harness.startAgent(exitWhenIdle: true)
        #expect(restarted.wait(seconds: 60) == 0)
        let events = try harness.events().filter { $0.seq > point.seq }
        #expect(events.first { $0.type == "resumed" }?.data["bytes"] as? Int == offset)
        #expect(events.first { $0.type == "started" }?.data["offset"] as? Int == offset)
        let resumedRequest = nginx.requests.last
        #expect(resumedRequest?.status == 206)
        #expect(resumedRequest?.range == "bytes=\(offset)-")
        #expect(resumedRequest?.ifRange == etag)
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/p.bin") == data)
    }

    /// Drops every event after `seq`, with Python's sqlite3 (not the agent's code).
    func truncateLog(_ path: String, after seq: Int) throws {
        try pythonSQLite(path, "DELETE FROM events WHERE seq > \(seq)")
    }
}

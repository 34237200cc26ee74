import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A server that trickles: the attempt ends, naming the speed, and the next
/// one goes on from the bytes already durable.
@Suite("Lowest speed against a trickling server", .serialized)
struct LowSpeedCLITests {
    @Test func aTrickleEndsItsAttemptAndTheRetryKeepsItsBytes() throws {
        let harness = try AgentHarness(config: "min_speed = \"1K\"\nmin_speed_time = 2\nretries = 1\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("crawl.bin", size: 50_000)
        try harness.drop("c.job", "id = \"c\"\nurl = \"\(server.url("crawl.bin", "rate=300&chunk=100"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
        let events = try harness.events().filter { $0.task == "c" }
        let failed = try #require(events.last { $0.type == "failed" })
        let error = failed.data["reason"] as? String ?? ""
        #expect(error.contains("(min_speed) for 2 s") && error.contains("B/s from"), "\(error)")
        let starts = events.filter { $0.type == "started" }.compactMap { $0.data["offset"] as? Int }
        #expect(starts.count == 2)
        #expect(starts.last ?? 0 > 0, "the retry went on from its durable bytes: \(starts)")
    }

    /// The job's own `min_speed` and `min_speed_time` over a config that never checks.
    @Test func aJobsOwnMinSpeedEndsATrickleTheConfigLetsRun() throws {
        let harness = try AgentHarness(config: "min_speed = 0\nretries = 1\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("crawl.bin", size: 50_000)
        try harness.drop("c.job", "id = \"c\"\nurl = \"\(server.url("crawl.bin", "rate=300&chunk=100"))\"\n"
                         + "min_speed = \"1K\"\nmin_speed_time = 2\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
        let events = try harness.events().filter { $0.task == "c" }
        let failed = try #require(events.last { $0.type == "failed" })
        let error = failed.data["reason"] as? String ?? ""
        #expect(error.contains("slower than 1.0 KiB/s (min_speed) for 2 s"), "\(error)")
        let starts = events.filter { $0.type == "started" }.compactMap { $0.data["offset"] as? Int }
        #expect(starts.count == 2 && starts.last ?? 0 > 0, "the retry went on from its durable bytes: \(starts)")
        let detail = try harness.run(["status", "--task", "c"]).stdout
        #expect(detail.contains("min speed:   1.0 KiB/s (the job's min_speed) over 2 s"), "\(detail)")
    }

    /// `min_speed = 0` in a job turns the config's check off for that job alone.
    @Test func aJobsMinSpeedZeroLetsItCrawlWhereTheConfigWouldNot() throws {
        let harness = try AgentHarness(config: "min_speed = \"1K\"\nmin_speed_time = 1\nretries = 0\n")
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("slow.bin", size: 1_500)
        try server.serve("other.bin", size: 1_500, seed: 3)
        try harness.drop("s.job", "id = \"s\"\nurl = \"\(server.url("slow.bin", "rate=500&chunk=100"))\"\nmin_speed = 0\n")
        try harness.drop("o.job", "id = \"o\"\nurl = \"\(server.url("other.bin", "rate=500&chunk=100"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
        #expect(contents(harness.downloads + "/slow.bin") == data)
        #expect(harness.state(of: "s") == "finished")
        #expect(try harness.events().filter { $0.task == "s" && ($0.type == "retrying" || $0.type == "failed") }.isEmpty)
        // The same trickle without the job's key: the config's check ends it.
        #expect(harness.state(of: "o") == "failed")
    }

    @Test(arguments: [("min_speed = \"fast\"\n", "min_speed"), ("min_speed = -1\n", "min_speed"),
                      ("min_speed_time = 0\n", "min_speed_time")])
    func aBadValueIsRejectedNamingItsKey(line: String, key: String) throws {
        let harness = try AgentHarness()
        try harness.drop("bad.job", "url = \"http://127.0.0.1:9/x\"\n" + line)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        let error = try String(contentsOfFile: harness.inbox + "/rejected/bad.job.error", encoding: .utf8)
        #expect(error.contains("key \"\(key)\""), "\(error)")
    }

    @Test func minSpeedZeroLetsATrickleRun() throws {
        let harness = try AgentHarness(config: "min_speed = 0\nmin_speed_time = 1\n")
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("slow.bin", size: 1_500)
        try harness.drop("s.job", "id = \"s\"\nurl = \"\(server.url("slow.bin", "rate=500&chunk=100"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        #expect(contents(harness.downloads + "/slow.bin") == data)
    }
}

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

    @Test func minSpeedZeroLetsATrickleRun() throws {
        let harness = try AgentHarness(config: "min_speed = 0\nmin_speed_time = 1\n")
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("slow.bin", size: 1_500)
        try harness.drop("s.job", "id = \"s\"\nurl = \"\(server.url("slow.bin", "rate=500&chunk=100"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        #expect(contents(harness.downloads + "/slow.bin") == data)
    }
}

import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `max_overall_speed` shared by every transfer, and `max_speed` lowered
/// by SIGHUP under a running one.
@Suite("Speed caps", .serialized)
struct SpeedLimitTests {
    /// Three downloads under max_overall_speed = 1M: together they can never
    /// take less than their bytes over the cap (a lower bound only: a slow
    /// machine makes it longer, never shorter).
    @Test func anOverallCapHoldsAllTransfersTogether() throws {
        let harness = try AgentHarness(config: "max_overall_speed = \"1M\"\n")
        let nginx = try Nginx(in: harness.directory)
        for index in 0..<3 {
            try nginx.serve("s\(index).bin", size: 1_000_000, seed: UInt64(index))
            try harness.drop("s\(index).job", "url = \"\(nginx.url("s\(index).bin"))\"\n")
        }
        let started = Date()
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let elapsed = Date().timeIntervalSince(started)
        #expect(elapsed >= 3_000_000 / 1_048_576 * 0.7, "3 MB in \(elapsed) s under a 1 MiB/s cap")
    }

    /// SIGHUP lowering `max_speed` holds the running download to it too, not only later
    /// attempts: "applied" in the log means applied.
    @Test func sighupLoweringMaxSpeedHoldsTheRunningTransferToo() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("big.bin", size: 30_000_000)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL); _ = agent.wait(seconds: 10) }
        try harness.drop("big.job", "id = \"big\"\nurl = \"\(server.url("big.bin", "rate=2000000"))\"\n")
        let part = harness.downloads + "/big.bin.part"
        func written() -> Int { (try? FileManager.default.attributesOfItem(atPath: part)[.size] as? Int) ?? 0 }
        #expect(eventually(within: 20) { written() > 1_000_000 })
        let config = try String(contentsOfFile: harness.configFile, encoding: .utf8)
        try (config + "max_speed = \"20K\"\n").write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        #expect(harness.waitForEvent("config_reloaded", within: 10))
        // What the socket and curl's buffer held comes first; then 20 KB/s. At the server's
        // 2 MB/s, 4 s would bring 8 MB: a bound far from both. (Slept: bytes over time are
        // what a cap is, and nothing is logged per chunk to wait on instead.)
        Thread.sleep(forTimeInterval: 1)
        let before = written()
        Thread.sleep(forTimeInterval: 4)
        #expect(written() - before < 2_000_000, "\(written() - before) bytes in 4 s")
    }
}

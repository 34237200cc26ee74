import Testing
@testable import SyncAgentCore

/// `min_speed` over `min_speed_time`: when a transfer is judged too slow.
@Suite("Lowest speed: a transfer that crawls")
struct LowSpeedTests {
    /// Feeds one observation a second at `bytesPerS` for `seconds`; the first verdict that is not nil, and when.
    static func firstVerdict(_ watch: inout LowSpeedWatch, from start: Int64 = 0, bytes: Int64 = 0,
                             bytesPerS: Int64, seconds: Int, cap: Int64? = nil) -> (atS: Int, speed: Int64)? {
        var moved = bytes
        for second in 1...seconds {
            moved += bytesPerS
            if let speed = watch.observe(nowMs: start + Int64(second) * 1000, bytes: moved, cap: cap) { return (second, speed) }
        }
        return nil
    }

    @Test func aTransferFasterThanTheBarIsLeftAlone() {
        var watch = LowSpeedWatch(minBytesPerS: 1024, windowS: 10, startMs: 0)
        #expect(Self.firstVerdict(&watch, bytesPerS: 1100, seconds: 60) == nil)
    }

    @Test func aCrawlIsJudgedOnlyAfterAWholeWindow() {
        var watch = LowSpeedWatch(minBytesPerS: 1024, windowS: 10, startMs: 0)
        let verdict = Self.firstVerdict(&watch, bytesPerS: 100, seconds: 60)
        #expect(verdict?.atS == 10)
        #expect(verdict?.speed == 100)
    }

    @Test func aFastStartThenACrawlIsCaughtAWindowAfterTheCrawlBegins() {
        var watch = LowSpeedWatch(minBytesPerS: 1024, windowS: 10, startMs: 0)
        #expect(Self.firstVerdict(&watch, bytesPerS: 1 << 20, seconds: 30) == nil)
        // From second 30 on, 10 B/s: the window's average falls below 1 KiB/s once the burst leaves it.
        let verdict = Self.firstVerdict(&watch, from: 30_000, bytes: 30 << 20, bytesPerS: 10, seconds: 60)
        #expect(verdict?.atS == 10, "\(String(describing: verdict))")
        #expect(verdict?.speed == 10)
    }

    @Test func aCapBelowTheBarLowersIt() {
        let watch = LowSpeedWatch(minBytesPerS: 1024, windowS: 10, startMs: 0)
        #expect(watch.threshold(cap: nil) == 1024)
        #expect(watch.threshold(cap: 600) == 300)
        #expect(watch.threshold(cap: 1 << 20) == 1024)
        // Held to 600 B/s by max_speed and moving at it: slow by the user's choice, not a crawl.
        var capped = LowSpeedWatch(minBytesPerS: 1024, windowS: 10, startMs: 0)
        #expect(Self.firstVerdict(&capped, bytesPerS: 600, seconds: 60, cap: 600) == nil)
        // Then 100 B/s: caught once the window's average falls below half the cap (7 s in, at 250 B/s).
        let verdict = Self.firstVerdict(&capped, from: 60_000, bytes: 36_000, bytesPerS: 100, seconds: 60, cap: 600)
        #expect(verdict?.atS == 7 && verdict?.speed == 250, "\(String(describing: verdict))")
    }

    @Test func observationsCloserThanASecondKeepTheWindowBounded() {
        var watch = LowSpeedWatch(minBytesPerS: 1024, windowS: 5, startMs: 0)
        var moved: Int64 = 0
        for tick in 1...10_000 {
            moved += 200
            _ = watch.observe(nowMs: Int64(tick) * 10, bytes: moved, cap: nil)
        }
        // 100 s at 20 KB/s in 10 ms steps: fast, and a verdict only from whole windows.
        #expect(watch.observe(nowMs: 100_010, bytes: moved, cap: nil) == nil)
    }

    @Test func minSpeedIsReadFromTheConfig() throws {
        #expect(try AgentConfig.parse("").minSpeed == 1024)
        #expect(try AgentConfig.parse("").minSpeedTimeS == 120)
        #expect(try AgentConfig.parse("min_speed = \"4K\"\nmin_speed_time = 30").minSpeed == 4096)
        #expect(try AgentConfig.parse("min_speed = 0").minSpeed == nil)
        #expect(throws: (any Error).self) { try AgentConfig.parse("min_speed = \"fast\"") }
        #expect(throws: (any Error).self) { try AgentConfig.parse("min_speed_time = 0") }
    }
}

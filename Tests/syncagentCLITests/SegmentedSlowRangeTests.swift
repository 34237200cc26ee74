import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 38 item 1's last sentence: in a segmented download `min_speed` is
/// judged per connection. A range served at a crawl moves to a fresh
/// connection instead of holding the file back; a server slow on every
/// connection still ends the attempt, naming the speed.
@Suite("Segmented downloads: a slow range moves", .serialized)
struct SegmentedSlowRangeTests {
    static let size = 16 << 20
    /// The third of four ranges (16 MiB): 4 MiB from here.
    static let slowStart = 8 << 20
    /// One range at 300 B/s, the others at 1 MB/s: a window of `min_speed_time = 1` ends long before they do.
    static let slowRange = "rate=300&chunk=300&slow_start=\(slowStart)&fast_rate=1000000"
    static let config = "min_speed = \"1K\"\nmin_speed_time = 1\nretries = 0\n"
    /// The plain GET (it keeps the first 64 KiB), three ranges, and the rest of the first range:
    /// the request after these is the first a move or a split makes.
    static let plannedRequests = 5

    func job(_ url: String) -> String { "url = \"\(url)\"\nid = \"s\"\ndest = \"s.bin\"\nconnections = 4\n" }

    /// An agent with `config`, the fault server serving the test's file with `faults`, and the job for it dropped.
    func dropped(faults: String) throws -> (harness: AgentHarness, server: FaultServer, data: Data) {
        let harness = try AgentHarness(config: Self.config)
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("f.bin", size: Self.size)
        try harness.drop("s.job", job(server.url("f.bin", faults)))
        return (harness, server, data)
    }

    /// Each moved range as the log tells it.
    func moves(_ harness: AgentHarness) throws -> [String] {
        try harness.events().filter { $0.task == "s" && $0.type == "progressed" }.compactMap { $0.data["moved"] as? String }
    }

    /// Where the first moved range began: "bytes A-B moved …" → A.
    func movedStart(_ moved: [String]) -> Int? {
        moved.first.flatMap { Int($0.dropFirst("bytes ".count).prefix { $0 != "-" }) }
    }

    /// `bytes=A-B` as `A ..< B + 1`.
    func span(_ range: String) -> Range<Int>? {
        let bounds = range.dropFirst("bytes=".count).split(separator: "-").compactMap { Int($0) }
        return bounds.count == 2 ? bounds[0]..<(bounds[1] + 1) : nil
    }

    @Test func aSlowRangeAmongFourMovesAndTheFileIsWhole() throws {
        let (harness, server, data) = try dropped(faults: Self.slowRange)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 90) == 0)
        #expect(sha256Hex(ofFile: harness.downloads + "/s.bin") == sha256Hex(data))
        let moved = try moves(harness)
        #expect(moved.count == 1, "\(moved)")
        // Moved from where the slow connection got to (a few hundred bytes a second for a second or two).
        let from = try #require(movedStart(moved))
        #expect(from > Self.slowStart && from < Self.slowStart + 5000, "\(moved)")
        #expect(moved.first?.contains("slower than 1.0 KiB/s (min_speed) for 1 s") == true, "\(moved)")
        // One attempt: the move is no failure.
        let events = try harness.events().filter { $0.task == "s" }
        #expect(events.filter { $0.type == "started" }.count == 1)
        #expect(!events.contains { $0.type == "retrying" })
        // The slow connection's bytes were kept: its rest was asked for from where it got to.
        let ranges = server.rangedRequests.map(\.range)
        #expect(ranges.contains { span($0)?.lowerBound == Self.slowStart }, "\(ranges)")
        #expect(ranges.contains { ($0 as String).hasPrefix("bytes=\(from)-") }, "\(ranges)")
        // The plain GET kept the first 64 KiB; a bounded range fetched the rest of the first range.
        #expect(ranges.contains { ($0 as String).hasPrefix("bytes=65536-") }, "\(ranges)")
        #expect(try harness.run(["replay", "--verify"]).status == 0)
    }

    /// With `min_speed` off, nothing ends the crawl: the connections that
    /// finish their ranges take the lagging one over (as aria2 does).
    @Test func aRangeFarBehindIsTakenOverByAConnectionThatRanOutOfWork() throws {
        let harness = try AgentHarness(config: "min_speed = 0\nretries = 0\n")
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("f.bin", size: Self.size)
        try harness.drop("s.job", job(server.url("f.bin", Self.slowRange)))
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 90) == 0)
        #expect(sha256Hex(ofFile: harness.downloads + "/s.bin") == sha256Hex(data))
        let moved = try moves(harness)
        #expect(moved.contains { $0.contains("its own was far behind") }, "\(moved)")
        #expect(try harness.events().filter { $0.task == "s" && $0.type == "started" }.count == 1)
        #expect(try harness.run(["replay", "--verify"]).status == 0)
    }

    @Test func aServerSlowOnEveryConnectionEndsTheAttemptNamingTheSpeed() throws {
        let harness = try AgentHarness(config: "min_speed = \"1K\"\nmin_speed_time = 2\nretries = 0\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("f.bin", size: 8 << 20)
        try harness.drop("s.job", job(server.url("f.bin", "rate=300&chunk=100")))
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
        let failed = try #require(try harness.events().last { $0.task == "s" && $0.type == "failed" })
        let reason = failed.data["reason"] as? String ?? ""
        #expect(reason.contains("slower than 1.0 KiB/s (min_speed) for 2 s: ") && reason.contains(" B/s from "), "\(reason)")
        // Not a range was moved: the four connections crawled together, and the attempt ended with the first window.
        #expect(try moves(harness).isEmpty)
        // (The plain GET's 64 KiB never came whole at 300 B/s: the rest of its range never opened.)
        #expect(server.requests.count == 4, "\(server.requests)")
    }

    /// A server that is slow on every connection it opens after the first
    /// planned ones: moving the range again and again would never end.
    @Test func aServerSlowOnEveryNewConnectionEndsAfterABoundedNumberOfMoves() throws {
        let (harness, server, _) = try dropped(faults: Self.slowRange + "&slow_from=\(Self.plannedRequests + 1)")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 90) == 4)
        let moved = try moves(harness)
        #expect(!moved.isEmpty && moved.count <= 4, "\(moved)")
        let failed = try #require(try harness.events().last { $0.task == "s" && $0.type == "failed" })
        let reason = failed.data["reason"] as? String ?? ""
        #expect(reason.contains("slower than 1.0 KiB/s (min_speed) for 1 s"), "\(reason)")
        #expect(server.requests.count <= Self.plannedRequests + 4 + 4, "\(server.requests.count) requests")
        #expect(try harness.run(["replay", "--verify"]).status == 0)
    }

    /// SIGKILL just after a move: the restart fetches only what no range of the log holds.
    @Test func killedRightAfterAMoveItFetchesOnlyWhatNoRangeHolds() throws {
        let (harness, server, data) = try dropped(faults: Self.slowRange)
        let agent = try harness.startAgent()
        let moved = harness.waitForEvent("progressed", task: "s", within: 60) { $0.data["moved"] != nil }
        agent.signal(SIGKILL)
        _ = agent.wait(seconds: 10)
        #expect(moved)
        let held = try harness.events().last { $0.task == "s" && $0.type == "progressed" && $0.data["ranges"] != nil }
        let spans = (held?.data["ranges"] as? [[Int]] ?? []).map { $0[0]..<$0[1] }
        #expect(spans.contains { $0.lowerBound == Self.slowStart && $0.count > 0 }, "the slow range's bytes are held: \(spans)")
        let asked = server.rangedRequests.count
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 90) == 0)
        #expect(sha256Hex(ofFile: harness.downloads + "/s.bin") == sha256Hex(data))
        let after = server.rangedRequests.dropFirst(asked).compactMap { span($0.range) }
        #expect(!after.isEmpty)
        for range in after {
            #expect(!spans.contains { $0.overlaps(range) }, "\(range) was held already: \(spans)")
        }
        #expect(try harness.run(["replay", "--verify"]).status == 0)
    }

    /// The moved range's server now has another file (another ETag): the
    /// If-Range of the move keeps the two from being mixed.
    @Test func aMovedRangeAnsweredFromAnotherFileIsNeverMixed() throws {
        let (harness, server, data) = try dropped(faults: Self.slowRange + "&etag_changes_from=\(Self.plannedRequests + 1)")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 90) == 0)
        #expect(sha256Hex(ofFile: harness.downloads + "/s.bin") == sha256Hex(data))
        let from = try #require(movedStart(try moves(harness)))
        let ranged = server.rangedRequests
        let moved = try #require(ranged.first { $0.range.hasPrefix("bytes=\(from)-") })
        #expect(moved.ifRange == ranged.first?.ifRange && moved.ifRange != nil, "\(ranged)")
        // Nothing of the first file is kept: the download starts over from 0, one connection.
        let events = try harness.events().filter { $0.task == "s" }
        let retry = try #require(events.first { $0.type == "retrying" })
        #expect(retry.data["bytes"] as? Int == 0, "\(retry.data)")
        #expect(server.requests.last?.range == nil)
    }

    /// The server ignores Range on the moved range's request (200, the whole
    /// file): the download falls back to one connection from 0.
    @Test func aMovedRangeAnsweredWithTheWholeFileFallsBackToOneConnection() throws {
        let (harness, server, data) = try dropped(faults: Self.slowRange + "&ignore_range_from=\(Self.plannedRequests + 1)")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 90) == 0)
        #expect(sha256Hex(ofFile: harness.downloads + "/s.bin") == sha256Hex(data))
        #expect(try moves(harness).count == 1)
        let retry = try #require(try harness.events().first { $0.task == "s" && $0.type == "retrying" })
        #expect((retry.data["reason"] as? String ?? "").hasSuffix("one connection from now on"), "\(retry.data)")
        #expect(server.requests.last?.status == 200 && server.requests.last?.range == nil)
    }
}

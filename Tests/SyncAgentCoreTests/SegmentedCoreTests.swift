import Foundation
import Testing
@testable import SyncAgentCore

/// Segmented downloads (issue 14 §1) in the pure core: the spans a log
/// vouches for, how a file is shared among connections, and what a restart does.
@Suite("Segmented downloads: ranges, plans, fold")
struct SegmentedCoreTests {
    @Test func rangesMergeAndReportTheirGaps() {
        var ranges = ByteRanges([ByteSpan(50, 70), ByteSpan(0, 10), ByteSpan(10, 20), ByteSpan(60, 65), ByteSpan(5, 5)])
        #expect(ranges.spans == [ByteSpan(0, 20), ByteSpan(50, 70)])
        #expect(ranges.covered == 40)
        #expect(!ranges.isPrefix)
        #expect(ranges.missing(upTo: 100) == [ByteSpan(20, 50), ByteSpan(70, 100)])
        ranges.insert(ByteSpan(15, 55))
        #expect(ranges.spans == [ByteSpan(0, 70)])
        #expect(ranges.isPrefix)
        #expect(ranges.missing(upTo: 70).isEmpty)
        #expect(ranges.fits(in: 70))
        #expect(!ranges.fits(in: 69))
        #expect(ByteRanges().missing(upTo: 5) == [ByteSpan(0, 5)])
        // Adjacent spans become one; a span inside another changes nothing.
        #expect(ByteRanges([ByteSpan(0, 4), ByteSpan(4, 8), ByteSpan(2, 3)]).spans == [ByteSpan(0, 8)])
    }

    @Test func aFileIsSplitIntoEqualAlignedRanges() {
        let mib: Int64 = 1 << 20
        let ranges = SegmentPlan.initialRanges(missing: [ByteSpan(0, 64 * mib)], connections: 8)
        #expect(ranges.count == 8)
        #expect(ranges.allSatisfy { $0.length == 8 * mib })
        #expect(ByteRanges(ranges).spans == [ByteSpan(0, 64 * mib)])
        // Gaps a restart left: every gap is fetched, the largest split first.
        let gaps = [ByteSpan(0, mib), ByteSpan(10 * mib, 30 * mib)]
        let resumed = SegmentPlan.initialRanges(missing: gaps, connections: 3)
        #expect(resumed.count == 3)
        #expect(ByteRanges(resumed).spans == ByteRanges(gaps).spans)
        // More gaps than connections: all of them wait in the plan, none split.
        let many = (0..<5).map { ByteSpan(Int64($0) * 10 * mib, Int64($0) * 10 * mib + mib) }
        #expect(SegmentPlan.initialRanges(missing: many, connections: 2) == many)
        // Too small to be worth a second connection.
        #expect(SegmentPlan.initialRanges(missing: [ByteSpan(0, mib + 1)], connections: 8) == [ByteSpan(0, mib + 1)])
    }

    /// The first answer of a fresh download keeps 64 KiB of the first range; a ranged request takes the rest.
    @Test func theFirstAnswerKeepsAFirstPieceOfItsRange() {
        let mib: Int64 = 1 << 20
        #expect(SegmentPlan.firstPiece(of: ByteSpan(0, 8 * mib)) == ByteSpan(0, 64 << 10))
        // A range hardly larger than the piece stays whole: a second request would not pay.
        #expect(SegmentPlan.firstPiece(of: ByteSpan(0, 100 << 10)) == ByteSpan(0, 100 << 10))
    }

    @Test func withoutSpeedsAnIdleConnectionTakesHalfOfTheLargestRemainder() {
        let mib: Int64 = 1 << 20
        let running = [SegmentPlan.Running(position: 0 * mib, end: 4 * mib), SegmentPlan.Running(position: 10 * mib, end: 30 * mib),
                       SegmentPlan.Running(position: 40 * mib, end: 41 * mib)]
        #expect(SegmentPlan.relieve(running: running, idleBytesPerS: nil) == .split(index: 1, at: 20 * mib))
        // Nothing worth splitting: the connection goes.
        #expect(SegmentPlan.relieve(running: [SegmentPlan.Running(position: 0, end: mib)], idleBytesPerS: nil) == nil)
        #expect(SegmentPlan.relieve(running: [], idleBytesPerS: nil) == nil)
    }

    /// The range that would finish last is split, not the largest: a small
    /// range at a crawl outlasts a large one at full speed.
    @Test func theRangeThatFinishesLastIsSplitSoBothFinishTogether() {
        let mib: Int64 = 1 << 20
        let running = [SegmentPlan.Running(position: 0, end: 8 * mib, bytesPerS: 8 * mib),          // 1 s left
                       SegmentPlan.Running(position: 10 * mib, end: 14 * mib, bytesPerS: 1 * mib)]  // 4 s left
        guard case .split(let index, let at)? = SegmentPlan.relieve(running: running, idleBytesPerS: 3 * mib) else {
            Issue.record("expected a split"); return
        }
        #expect(index == 1)
        // 4 MiB at 1 MiB/s beside a fresh 3 MiB/s: the slow one keeps a quarter (1 s each), on an aligned boundary.
        #expect(at == 11 * mib)
        #expect(at % (64 << 10) == 0)
    }

    @Test func equalSpeedsSplitTheRemainderInHalves() {
        let mib: Int64 = 1 << 20
        let running = [SegmentPlan.Running(position: 0, end: 6 * mib, bytesPerS: 5_000_000),
                       SegmentPlan.Running(position: 8 * mib, end: 10 * mib, bytesPerS: 5_000_000)]
        #expect(SegmentPlan.relieve(running: running, idleBytesPerS: 5_000_000) == .split(index: 0, at: 3 * mib))
    }

    /// A piece smaller than a few hundred KiB, or than a tenth of a second
    /// at the idle connection's speed, is not worth a new request.
    @Test func aPieceNotWorthARequestIsLeftWhole() {
        let kib: Int64 = 1 << 10
        // 400 KiB at 5 MB/s each: the idle one would get 200 KiB.
        let small = [SegmentPlan.Running(position: 0, end: 400 * kib, bytesPerS: 5_000_000)]
        #expect(SegmentPlan.relieve(running: small, idleBytesPerS: 5_000_000) == nil)
        // 4 MiB left at 50 MB/s: the idle one's half (2 MiB) is 40 ms of its 50 MB/s.
        let fast = [SegmentPlan.Running(position: 0, end: 4 << 20, bytesPerS: 50_000_000)]
        #expect(SegmentPlan.relieve(running: fast, idleBytesPerS: 50_000_000) == nil)
        // The same at 5 MB/s is 0.4 s of work: split.
        let slower = [SegmentPlan.Running(position: 0, end: 4 << 20, bytesPerS: 5_000_000)]
        #expect(SegmentPlan.relieve(running: slower, idleBytesPerS: 5_000_000) == .split(index: 0, at: 2 << 20))
    }

    /// A range whose connection would keep less than one aligned block (or
    /// that has stopped sending) is handed over whole to the idle connection.
    @Test func aRangeFarBehindIsTakenOverWhole() {
        let mib: Int64 = 1 << 20
        let crawling = [SegmentPlan.Running(position: 4 * mib + 700, end: 5 * mib, bytesPerS: 300),
                        SegmentPlan.Running(position: 6 * mib, end: 7 * mib, bytesPerS: 5_000_000)]
        #expect(SegmentPlan.relieve(running: crawling, idleBytesPerS: 5_000_000) == .takeOver(index: 0))
        let silent = [SegmentPlan.Running(position: 0, end: 2 * mib, bytesPerS: 0)]
        #expect(SegmentPlan.relieve(running: silent, idleBytesPerS: 5_000_000) == .takeOver(index: 0))
    }

    /// A connection not measured yet is taken to run at the idle one's speed.
    @Test func anUnmeasuredRangeCountsAtTheIdleSpeed() {
        let mib: Int64 = 1 << 20
        let running = [SegmentPlan.Running(position: 0, end: 3 * mib, bytesPerS: nil),
                       SegmentPlan.Running(position: 8 * mib, end: 10 * mib, bytesPerS: 4 * mib)]
        #expect(SegmentPlan.relieve(running: running, idleBytesPerS: 2 * mib) == .split(index: 0, at: 3 * mib / 2))
    }

    /// A connection below `min_speed`: its range moves, unless the others
    /// crawl too or the moves of this attempt are spent.
    @Test func aCrawlingRangeMovesUnlessTheServerIsSlowOnEveryConnection() {
        #expect(SegmentPlan.crawl(others: [5_000_000, 4_000_000, nil], threshold: 1024, moves: 0, maximumMoves: 4) == .move)
        // Alone: a fresh connection may do better (a bounded number of times).
        #expect(SegmentPlan.crawl(others: [], threshold: 1024, moves: 1, maximumMoves: 4) == .move)
        #expect(SegmentPlan.crawl(others: [300, 500, 1000], threshold: 1024, moves: 0, maximumMoves: 4) == .endAttempt)
        // One other not measured yet: it may be fast.
        #expect(SegmentPlan.crawl(others: [300, nil], threshold: 1024, moves: 0, maximumMoves: 4) == .move)
        #expect(SegmentPlan.crawl(others: [5_000_000], threshold: 1024, moves: 4, maximumMoves: 4) == .endAttempt)
    }

    @Test func aSpeedMeterTellsTheRecentSpeedFromTheFirstByte() {
        var meter = SpeedMeter()
        #expect(meter.bytesPerS(nowMs: 0, bytes: 0) == nil)
        // A slow first answer (2 s) does not count: the speed is measured from the first byte.
        meter.record(nowMs: 2000, bytes: 1000)
        #expect(meter.bytesPerS(nowMs: 2400, bytes: 41000) == nil)
        for step in 1...50 { meter.record(nowMs: 2000 + Int64(step) * 100, bytes: 1000 + Int64(step) * 10_000) }
        #expect(meter.bytesPerS(nowMs: 7000, bytes: 501_000) == 100_000)
        // Silence: the speed falls as time passes without a byte.
        #expect(meter.bytesPerS(nowMs: 10_000, bytes: 501_000) == 0)
        // Samples come at most every 100 ms.
        var busy = SpeedMeter()
        for ms in 0...1000 { busy.record(nowMs: Int64(ms), bytes: Int64(ms) * 1000) }
        #expect(busy.bytesPerS(nowMs: 1000, bytes: 1_000_000) == 1_000_000)
    }

    @Test func theFoldKeepsRangesWhileTheByteCountAgrees() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 999, total: 100, etag: "\"v\"", ranges: [ByteSpan(0, 10), ByteSpan(50, 60)])),
                    task: "t")
        var task = log.state["t"]!
        // The count is what the spans cover, whatever `bytes` said.
        #expect(task.bytes == 20)
        #expect(task.doneRanges?.spans == [ByteSpan(0, 10), ByteSpan(50, 60)])
        #expect(RecoveryPlan.plan(for: task, nowMs: 0)
            == .resumeRanges(missing: [ByteSpan(10, 50), ByteSpan(60, 100)], ifRange: "\"v\""))
        // A pause or restart that keeps them says the same count.
        _ = log.add(.paused(Paused(bytes: 20, reason: .agentStopping)), task: "t")
        _ = log.add(.resumed(Resumed(bytes: 20, reason: "agent restarted")), task: "t")
        _ = log.add(.started(Started(attempt: 2, offset: 20, url: "http://h/x")), task: "t")
        #expect(log.state["t"]?.doneRanges != nil)
        // A retry from 0 ends them.
        _ = log.add(.retrying(Retrying(attempt: 2, reason: "the file changed", delayMs: 0, bytes: 0)), task: "t")
        task = log.state["t"]!
        #expect(task.doneRanges == nil)
        #expect(task.bytes == 0)
        // Ranges that grow into one prefix are plain bytes again.
        _ = log.add(.progressed(Progressed(bytes: 30, ranges: [ByteSpan(0, 30)])), task: "t")
        #expect(log.state["t"]?.doneRanges == nil)
        #expect(log.state["t"]?.bytes == 30)
        _ = log.add(.progressed(Progressed(bytes: 30, fallback: "no Accept-Ranges")), task: "t")
        #expect(log.state["t"]?.singleConnectionReason == "no Accept-Ranges")
    }

    @Test func rangesBeyondTheFileRestartFromZero() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.progressed(Progressed(bytes: 20, total: 50, etag: "\"v\"", ranges: [ByteSpan(0, 10), ByteSpan(60, 70)])),
                    task: "t")
        #expect(RecoveryPlan.plan(for: log.state["t"]!, nowMs: 0)
            == .restartFromZero(reason: "the logged ranges do not fit the file's size"))
        let words = RecoveryPlan.resumeRanges(missing: [ByteSpan(10, 50)], ifRange: "\"v\"").words
        #expect(words == "resume 1 range (40 bytes missing: 10-50) with If-Range: \"v\"")
    }

    @Test func aDamagedLogCannotMakeANegativeSpan() {
        #expect(throws: (any Error).self) { try EventCoding.body(type: "progressed", data: #"{"bytes":1,"ranges":[[5,2]]}"#) }
        #expect(throws: (any Error).self) { try EventCoding.body(type: "progressed", data: #"{"bytes":1,"ranges":[[-1,2]]}"#) }
        #expect(throws: (any Error).self) { try EventCoding.body(type: "progressed", data: #"{"bytes":1,"ranges":[[1]]}"#) }
        let spec = try? EventCoding.body(type: "created", data: #"{"url":"http://h/x","dest":"/d/x","connections":1000}"#)
        #expect(spec == .created(TaskSpec(url: "http://h/x", dest: "/d/x", connections: 16)))
    }

    @Test func extraConnectionsCountAgainstMaxPerHost() {
        var log = LogBuilder()
        log.create("a")
        log.create("b")
        let limits = SchedulerLimits(maxActive: 4, maxPerHost: 3)
        #expect(SchedulerPolicy.tasksToStart(in: log.state, nowMs: 0, limits: limits).count == 2)
        // Another task's download holds three connections of the host: none is free.
        let host = log.state["a"]!.hostKey
        #expect(SchedulerPolicy.tasksToStart(in: log.state, nowMs: 0, limits: limits, extraConnections: [host: 3]).isEmpty)
        #expect(SchedulerPolicy.tasksToStart(in: log.state, nowMs: 0, limits: limits, extraConnections: [host: 2]).count == 1)
    }

    @Test func connectionsIsADownloadKeyFrom1To16() throws {
        let parser = JobParser(downloadDir: "/d")
        guard case .transfer(_, let spec) = try parser.parse(Array("url = \"http://h/x\"\nconnections = 8\n".utf8)) else {
            Issue.record("not a transfer")
            return
        }
        #expect(spec.connections == 8)
        for (text, message) in [
            ("url = \"http://h/x\"\nconnections = 17\n", "connections"),
            ("url = \"http://h/x\"\nconnections = 0\n", "connections"),
            ("url = \"http://h/x\"\nkind = \"upload\"\nbody_file = \"/a\"\nconnections = 2\n", "applies to downloads only"),
        ] {
            #expect { try parser.parse(Array(text.utf8)) } throws: { "\($0)".contains(message) }
        }
        #expect(try AgentConfig.parse("connections = 4").connections == 4)
        #expect(throws: (any Error).self) { try AgentConfig.parse("connections = 32") }
    }
}

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

    @Test func anIdleConnectionTakesHalfOfTheLargestRemainder() {
        let mib: Int64 = 1 << 20
        let running = [(position: 0 * mib, end: 4 * mib), (position: 10 * mib, end: 30 * mib), (position: 40 * mib, end: 41 * mib)]
        let split = SegmentPlan.splitLargest(running: running)
        #expect(split?.index == 1)
        #expect(split?.at == 20 * mib)
        // Nothing worth splitting: the connection goes.
        #expect(SegmentPlan.splitLargest(running: [(position: 0, end: mib)]) == nil)
        #expect(SegmentPlan.splitLargest(running: []) == nil)
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

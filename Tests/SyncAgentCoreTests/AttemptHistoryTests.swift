import Foundation
import Testing
@testable import SyncAgentCore

@Suite("Attempts, their metrics, and what a restart does with uploads")
struct AttemptHistoryTests {
    let metrics = AttemptMetrics(ttfbUs: 900, totalUs: 1500, httpVersion: "1.1", status: 206,
                                 remoteAddress: "127.0.0.1", remotePort: 8080, bytesReceived: 4096)

    @Test func eachStartIsPairedWithTheEventThatEndedIt() {
        var log = LogBuilder()
        log.create("a")
        let url = "http://127.0.0.1:8080/a"
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: url)), task: "a")
        _ = log.add(.progressed(Progressed(bytes: 50)), task: "a")
        _ = log.add(.retrying(Retrying(attempt: 1, reason: "reset", delayMs: 1000, bytes: 50, metrics: metrics)), task: "a")
        _ = log.add(.started(Started(attempt: 2, offset: 50, url: url)), task: "a")
        // The agent died here: the next one resumes.
        _ = log.add(.resumed(Resumed(bytes: 50, reason: "agent restarted after an unclean stop")), task: "a")
        _ = log.add(.started(Started(attempt: 3, offset: 50, url: url)), task: "a")
        _ = log.add(.finished(Finished(bytes: 100, dest: "/downloads/a.bin", metrics: metrics)), task: "a")

        let history = AttemptRecord.history(of: log.events)
        #expect(history.map(\.attempt) == [1, 2, 3])
        #expect(history.map(\.offset) == [0, 50, 50])
        #expect(history.map(\.endedBy) == ["retrying", "agent restart", "finished"])
        #expect(history.map(\.metrics) == [metrics, nil, metrics])
    }

    @Test func metricsInWords() {
        #expect(metrics.words == "HTTP/1.1 206 127.0.0.1:8080 new connection; dns 0.0 ms, connect 0.0 ms, "
                + "first byte 0.9 ms, total 1.5 ms; 4096 bytes in, 0 out")
        let none = AttemptMetrics()
        #expect(none.words.hasPrefix("no response 0 - new connection"))
    }

    @Test func anInterruptedUploadIsSentAgainFromItsFirstByte() {
        var log = LogBuilder()
        let spec = TaskSpec(url: "http://127.0.0.1:8080/up", kind: .upload, dest: nil, bodyFile: "/v/a.mp4")
        _ = log.add(.created(spec), task: "u")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: spec.url)), task: "u")
        _ = log.add(.progressed(Progressed(bytes: 8 << 20, total: 100 << 20)), task: "u")
        let task = log.state["u"]!
        #expect(RecoveryPlan.plan(for: task, nowMs: log.nowMs) == .restartFromZero(reason: "an upload is sent again from its first byte"))
        #expect(task.partPath == nil)
        #expect(task.displayName == "a.mp4")
    }

    @Test func firstStartIsKeptAcrossAttempts() {
        var log = LogBuilder()
        log.create("a")
        let first = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/a")), task: "a")
        _ = log.add(.retrying(Retrying(attempt: 1, reason: "reset", delayMs: 1000, bytes: 0)), task: "a", afterMs: 5000)
        _ = log.add(.started(Started(attempt: 2, offset: 0, url: "http://h/a")), task: "a")
        #expect(log.state["a"]?.firstStartedAtMs == first.atMs)
    }
}

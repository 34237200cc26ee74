import Foundation
import Testing
@testable import SyncAgentCore

@Suite("Scheduler policy")
struct SchedulerTests {
    let roomy = SchedulerLimits(maxActive: 10, maxPerHost: 10)

    @Test func higherPriorityFirstThenFIFO() {
        var log = LogBuilder()
        log.create("low1", priority: 0)
        log.create("high", priority: 5)
        log.create("low2", priority: 0)
        log.create("mid", priority: 1)
        let order = SchedulerPolicy.tasksToStart(in: log.state, nowMs: log.nowMs, limits: roomy)
        #expect(order == ["high", "mid", "low1", "low2"])
    }

    @Test func maxActiveCountsRunningTasks() {
        var log = LogBuilder()
        for id in ["a", "b", "c", "d"] { log.create(id) }
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://x/a")), task: "a")
        let chosen = SchedulerPolicy.tasksToStart(in: log.state, nowMs: log.nowMs, limits: SchedulerLimits(maxActive: 2, maxPerHost: 10))
        #expect(chosen == ["b"])
    }

    @Test func maxPerHostSkipsToOtherHosts() {
        var log = LogBuilder()
        log.create("a1", url: "http://a.test/1")
        log.create("a2", url: "http://a.test:80/2")
        log.create("b1", url: "http://b.test/1")
        let chosen = SchedulerPolicy.tasksToStart(in: log.state, nowMs: log.nowMs, limits: SchedulerLimits(maxActive: 10, maxPerHost: 1))
        #expect(chosen == ["a1", "b1"])
    }

    @Test func notBeforeAndBackoffWait() {
        var log = LogBuilder()
        log.create("later", notBeforeMs: 5_000_000)
        log.create("now")
        let state = log.state
        #expect(SchedulerPolicy.tasksToStart(in: state, nowMs: log.nowMs, limits: roomy) == ["now"])
        #expect(SchedulerPolicy.nextWakeMs(in: state, nowMs: log.nowMs) == 5_000_000)
        #expect(SchedulerPolicy.tasksToStart(in: state, nowMs: 5_000_000, limits: roomy).contains("later"))
    }

    /// The next wake follows the queue as timed tasks come and go: a retry's
    /// backoff sets it, and once that task starts again nothing is waited for.
    @Test func theNextWakeFollowsTimedTasksInAndOutOfTheQueue() {
        var log = LogBuilder()
        log.create("plain")
        log.create("retried")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://x/r")), task: "retried")
        #expect(SchedulerPolicy.nextWakeMs(in: log.state, nowMs: log.nowMs) == nil)
        let retried = log.add(.retrying(Retrying(attempt: 1, reason: "reset", delayMs: 4000, bytes: 0)), task: "retried")
        #expect(log.state.runQueue.timedCount == 1)
        #expect(SchedulerPolicy.nextWakeMs(in: log.state, nowMs: log.nowMs) == retried.atMs + 4000)
        _ = log.add(.started(Started(attempt: 2, offset: 0, url: "http://x/r")), task: "retried")
        #expect(log.state.runQueue.timedCount == 0)
        #expect(SchedulerPolicy.nextWakeMs(in: log.state, nowMs: log.nowMs) == nil)
        #expect(SchedulerPolicy.tasksToStart(in: log.state, nowMs: log.nowMs, limits: roomy) == ["plain"])
    }

    @Test func pausedAndEndedTasksNeverStart() {
        var log = LogBuilder()
        log.create("p")
        log.create("f")
        _ = log.add(.paused(Paused(bytes: 0, reason: .user)), task: "p")
        log.runToEnd("f")
        #expect(SchedulerPolicy.tasksToStart(in: log.state, nowMs: log.nowMs, limits: roomy).isEmpty)
    }

    /// The waits, attempt by attempt, at both ends of the jitter: from a
    /// second to minutes, never over five.
    @Test(arguments: [
        (1, 1000, 750), (2, 4000, 3000), (3, 16_000, 12_000), (4, 64_000, 48_000), (5, 256_000, 192_000),
        (6, 300_000, 225_000), (7, 300_000, 225_000), (40, 300_000, 225_000), (Int.max, 300_000, 225_000),
        (0, 1000, 750), (-3, 1000, 750),
    ])
    func retryDelayGrowsToMinutes(attempt: Int, longest: Int64, shortest: Int64) {
        #expect(SchedulerPolicy.retryDelayMs(attempt: attempt, retryAfterMs: nil, jitter: 1) == longest)
        #expect(SchedulerPolicy.retryDelayMs(attempt: attempt, retryAfterMs: nil, jitter: 0) == shortest)
        #expect((shortest...longest).contains(SchedulerPolicy.retryDelayMs(attempt: attempt, retryAfterMs: nil, jitter: 0.5)))
    }

    /// The default budget (retries = 5) waits out an outage of four minutes
    /// at least, whatever the jitter; a server's Retry-After wins when longer.
    @Test func theDefaultBudgetCoversAnOutageOfMinutesAndRetryAfterWins() {
        let retries = AgentConfig().retries
        for jitter in [0.0, 0.5, 1.0] {
            let waited = (1...retries).reduce(Int64(0)) { $0 + SchedulerPolicy.retryDelayMs(attempt: $1, retryAfterMs: nil, jitter: jitter) }
            #expect(waited >= 240_000 && waited <= 360_000, "jitter \(jitter): \(waited) ms")
        }
        #expect(SchedulerPolicy.retryDelayMs(attempt: 1, retryAfterMs: 2000, jitter: 1) == 2000)
        #expect(SchedulerPolicy.retryDelayMs(attempt: 5, retryAfterMs: 2000, jitter: 1) == 256_000)
    }

    @Test func retryAfterBeyondTheDeadlineFailsWithAReason() {
        let decide = { (retryAfter: Int64?) in
            RetryDecision.decide(reason: "server answered 503", attemptsUsed: 1, retriesAllowed: 5, retryAfterMs: retryAfter,
                                 nowMs: 1_000_000, deadlineMs: 1_060_000, totalTimeoutS: 60, jitter: 0.5)
        }
        #expect(decide(nil) == .retry(delayMs: 875))
        #expect(decide(30_000) == .retry(delayMs: 30_000))
        guard case .fail(let reason, let code) = decide(.max) else { Issue.record(); return }
        #expect(code == .totalTimeout)
        #expect(reason.hasPrefix("server asked to wait more than ten years before trying again (Retry-After), more than the 60 s left of total_timeout (60 s); last attempt: server answered 503"))
        #expect(RetryDecision.decide(reason: "x", attemptsUsed: 6, retriesAllowed: 5, retryAfterMs: nil, nowMs: 0,
                                     deadlineMs: .max, totalTimeoutS: 60, jitter: 0)
                == .fail(reason: "gave up after 6 attempts: x", code: .retriesExhausted))
        #expect(RetryDecision.decide(reason: "x", attemptsUsed: 1, retriesAllowed: 0, retryAfterMs: nil, nowMs: 0,
                                     deadlineMs: .max, totalTimeoutS: 60, jitter: 0)
                == .fail(reason: "gave up after 1 attempt: x", code: .retriesExhausted))
    }
}

@Suite("What a control job did")
struct ControlOutcomeTests {
    /// What each control would change, phase by phase: what completion offers.
    @Test func whatEachControlWouldChange() {
        var log = LogBuilder()
        for id in ["queued", "running", "paused", "offline", "finished", "failed", "cancelled", "forgotten"] { log.create(id) }
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/r")), task: "running")
        _ = log.add(.paused(Paused(bytes: 0, reason: .user)), task: "paused")
        _ = log.add(.paused(Paused(bytes: 0, reason: .offline)), task: "offline")
        log.runToEnd("finished")
        log.runToEnd("forgotten")
        _ = log.add(.forgotten(Forgotten()), task: "forgotten")
        _ = log.add(.failed(Failed(reason: "404", code: .http(404), bytes: 0)), task: "failed")
        _ = log.add(.cancelled(Cancelled(bytes: 0)), task: "cancelled")
        var child = TaskSpec(url: "http://h/seg", dest: "/d/v/seg")
        child.parent = "queued"
        _ = log.add(.created(child), task: "segment")
        let state = log.state
        func changed(by action: ControlJob.Action) -> [String] { state.orderedTasks.filter { action.changes($0) }.map(\.id) }
        #expect(changed(by: .pause) == ["queued", "running", "offline"])
        #expect(changed(by: .resume) == ["paused", "offline", "failed"])
        #expect(changed(by: .cancel) == ["queued", "running", "paused", "offline", "failed"])
        #expect(changed(by: .forget) == ["finished", "failed", "cancelled"])
        #expect(changed(by: .compact).isEmpty)
    }

    @Test func fewOutcomesAreNamedEachManyAreCountedByKind() {
        let few = (0..<Controlled.outcomesNamed).map { "t\($0): paused at byte \($0 * 10)" }
        #expect(Controlled.outcome(of: few) == few.joined(separator: "; "))

        var many = few
        many += (0..<100_000).map { "p\($0): paused at byte \($0)" }
        many += ["r1: runs again from byte 0", "x7: cannot run again: its segment x7-3 was cancelled; cancel the video and submit it again",
                 "c1: cancelled", "c2: cancelled"]
        let line = Controlled.outcome(of: many)
        #expect(line == few.joined(separator: "; ") + "; and 100004 more: paused at byte … ×100000, runs again from byte … ×1, "
                + "cannot run again: its segment … ×1, cancelled ×2")
    }
}

@Suite("Failures told as they happen")
struct FailureNoticeTests {
    /// What only the user can mend is told at once; an outage waits for the batch.
    @Test(arguments: [
        (FailureCode.http(404), true), (.http(403), true), (.http(401), true), (.http(410), true), (.http(400), true),
        (.checksumMismatch, true), (.diskFull, true), (.destExists, true), (.segmentFailed, true), (.curl(60), true),
        (.http(503), false), (.http(500), false), (.http(429), false), (.http(408), false),
        (.retriesExhausted, false), (.totalTimeout, false), (.curl(7), false), (.curl(28), false), (.curl(6), false),
    ])
    func whatNeedsTheUser(code: FailureCode, told: Bool) {
        #expect(Notices.needsTheUser(code) == told)
    }

    private func failing(_ log: inout LogBuilder, _ id: String, code: FailureCode = .http(404)) {
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://127.0.0.1:8080/\(id)")), task: id)
        _ = log.add(.failed(Failed(reason: "server answered \(code) for \(id)", code: code, bytes: 0)), task: id)
    }

    /// Only a task of a batch that goes on, still failed, is told: its own
    /// notice or its batch's tells the others.
    @Test func whoIsToldAtOnce() {
        var log = LogBuilder()
        log.create("gone")
        log.create("each", notify: .each)
        log.create("quiet", notify: .none)
        log.create("running")
        log.create("nightly", batch: "nightly")
        for id in ["gone", "each", "quiet", "nightly"] { failing(&log, id) }
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://127.0.0.1:8080/running")), task: "running")
        let state = log.state
        #expect(["gone", "each", "quiet", "nightly"].filter { Notices.tellsAtOnce(state["\($0)"]!, code: .http(404)) } == ["gone", "nightly"])
        #expect(!Notices.tellsAtOnce(state["gone"]!, code: .retriesExhausted))
        // "nightly" has no task left running: its batch notice, due now, names it.
        #expect(Notices.stillToTell(["gone", "nightly", "gone"], in: state).map(\.id) == ["gone"])
        // Run again meanwhile: no longer a failure to tell.
        _ = log.add(.resumed(Resumed(bytes: 0, reason: "run again by the user")), task: "gone")
        #expect(Notices.stillToTell(["gone"], in: log.state).isEmpty)
        // Its batch over: the batch's notice tells it.
        var ended = LogBuilder()
        ended.create("a")
        failing(&ended, "a")
        #expect(Notices.stillToTell(["a"], in: ended.state).isEmpty)
    }

    /// One failure names its file and why; several are one critical notice.
    @Test func oneNoticeNamesItsFileSeveralAreCollapsed() throws {
        var log = LogBuilder()
        for id in (1...7).map({ "f\($0)" }) {
            log.create(id)
            failing(&log, id)
        }
        let tasks = (1...7).compactMap { log.state["f\($0)"] }
        let one = Notices.failureNotice(for: [tasks[0]])
        #expect(one.summary == "f1.bin failed" && one.body == "server answered http_404 for f1" && one.critical)
        let many = Notices.failureNotice(for: tasks)
        #expect(many.summary == "7 transfers failed" && many.critical)
        #expect(many.body.split(separator: "\n") == ["✗ f1.bin: server answered http_404 for f1", "✗ f2.bin: server answered http_404 for f2",
                                                    "✗ f3.bin: server answered http_404 for f3", "✗ f4.bin: server answered http_404 for f4",
                                                    "✗ f5.bin: server answered http_404 for f5",
                                                    "… and 2 more (syncagent status --state failed)"])
    }
}

@Suite("Batch notifications")
struct NoticeTests {
    @Test func defaultBatchWaitsForEveryActiveTask() {
        var log = LogBuilder()
        log.create("a")
        log.create("b", batch: "nightly")
        log.runToEnd("a")
        // "b" (another batch) is still queued: the default batch is not drained yet.
        #expect(Notices.drainedBatches(in: log.state).isEmpty)
        log.runToEnd("b")
        let drained = Notices.drainedBatches(in: log.state)
        #expect(drained == [BatchFinished(batch: nil, finished: ["a"], failed: [], unchanged: 0),
                            BatchFinished(batch: "nightly", finished: ["b"], failed: [], unchanged: 0)])
    }

    @Test func namedBatchDrainsOnItsOwn() {
        var log = LogBuilder()
        log.create("n1", batch: "nightly")
        log.create("other")
        log.runToEnd("n1")
        #expect(Notices.drainedBatches(in: log.state) == [BatchFinished(batch: "nightly", finished: ["n1"], failed: [], unchanged: 0)])
    }

    @Test func notifyNoneIsLeftOut() {
        var log = LogBuilder()
        log.create("quiet", notify: .none)
        log.runToEnd("quiet")
        #expect(Notices.drainedBatches(in: log.state).isEmpty)
    }

    /// With `on_batch_end` armed, `notify = "none"` tasks join their batch for
    /// the hook; its notice named and counted them ("3 transfers finished" for 1 wanted).
    @Test func aBatchEndHookDoesNotPutQuietTasksInTheNotice() throws {
        var log = LogBuilder()
        _ = log.add(.agentStarted(AgentStarted(pid: 1, version: "t", hooks: ["batch_end"])))
        log.create("loud")
        log.create("quiet1", notify: .none)
        log.create("quiet2", notify: .none)
        for id in ["loud", "quiet1", "quiet2"] { log.runToEnd(id) }
        let drained = try #require(Notices.drainedBatches(in: log.state).first)
        #expect(drained.finishedTotal == 3)
        let shown = try #require(Notices.noticed(drained, in: log.state))
        #expect(shown.finished == ["loud"] && shown.finishedTotal == 1)
        let notice = Notices.notice(for: shown, in: log.state)
        #expect(notice.summary == "1 transfer finished" && notice.body == "✓ loud.bin")

        // Past the listed ids, the quiet ones listed are taken off the counts.
        var cut = BatchFinished(batch: nil, finished: ["quiet1", "loud", "quiet2"], failed: [], unchanged: 0)
        cut.finishedCount = 150
        #expect(Notices.noticed(cut, in: log.state)?.finishedTotal == 148)
        // A batch of quiet tasks alone shows nothing.
        #expect(Notices.noticed(BatchFinished(batch: nil, finished: ["quiet1", "quiet2"], failed: []), in: log.state) == nil)
    }

    @Test func summaryWords() {
        var log = LogBuilder()
        for index in 0..<20 { log.create("t\(index)") }
        let state = log.state
        let twenty = Notices.notice(for: BatchFinished(batch: nil, finished: (0..<20).map { "t\($0)" }, failed: []), in: state)
        #expect(twenty.summary == "20 transfers finished")
        #expect(twenty.body.isEmpty)
        #expect(!twenty.critical)
        let mixed = Notices.notice(for: BatchFinished(batch: "nightly", finished: (0..<18).map { "t\($0)" }, failed: ["t18", "t19"]), in: state)
        #expect(mixed.summary == "nightly: 18 finished, 2 failed")
        #expect(mixed.critical)
        #expect(Notices.notice(for: BatchFinished(batch: nil, finished: ["t1"], failed: []), in: state).summary == "1 transfer finished")
    }

    /// Issue 12: a batch of 20,000 made one event of 180 KB listing every id.
    @Test func aBigBatchIsRecordedAsCountsWithFewNames() throws {
        var log = LogBuilder()
        for index in 0..<250 { log.create("t\(index)") }
        for index in 0..<250 where index % 50 != 0 { log.runToEnd("t\(index)") }
        for index in stride(from: 0, to: 250, by: 50) {
            _ = log.add(.failed(Failed(reason: "server answered 404", code: .http(404), bytes: 0)), task: "t\(index)")
        }
        let drained = try #require(Notices.drainedBatches(in: log.state).first)
        #expect(drained.finishedTotal == 245 && drained.failedTotal == 5)
        #expect(drained.finished.count == BatchFinished.listedUpTo && drained.failed.count == 5)
        #expect(EventCoding.data(of: .batchFinished(drained)).utf8.count < 2_000)
        #expect(Notices.notice(for: drained, in: log.state).summary == "245 finished, 5 failed")
        // Folding the event announces every task that had ended, listed or not.
        _ = log.add(.batchFinished(drained))
        #expect(log.state.endedSinceNotice.isEmpty)
        #expect(Notices.drainedBatches(in: log.state).isEmpty)
    }

    /// Before counts, an event listed every id: such logs still fold as they did.
    @Test func aBatchEventOfAnOlderAgentStillAnnouncesItsIds() throws {
        var log = LogBuilder()
        log.create("a")
        log.create("b")
        log.runToEnd("a")
        log.runToEnd("b")
        let older = try EventCoding.body(type: "batch_finished", data: #"{"failed":[],"finished":["a"]}"#, seq: 1)
        guard case .batchFinished(let batch) = older else { Issue.record("not a batch"); return }
        #expect(batch.finishedCount == nil && batch.finishedTotal == 1)
        _ = log.add(older)
        #expect(log.state.endedSinceNotice[BatchKey(nil)] == ["b"])
    }

    /// A task that failed while its batch was busy, then was run again and
    /// finished, was counted twice ("2 transfers finished" for one file).
    @Test func aTaskRunAgainIsCountedOnce() {
        var log = LogBuilder()
        log.create("a")
        log.create("b")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://127.0.0.1:8080/a")), task: "a")
        _ = log.add(.failed(Failed(reason: "server answered 503", code: .http(503), bytes: 0)), task: "a")
        _ = log.add(.resumed(Resumed(bytes: 0, reason: "resume")), task: "a")
        log.runToEnd("a")
        log.runToEnd("b")
        let drained = Notices.drainedBatches(in: log.state)
        #expect(drained.map(\.finishedTotal) == [2])
        #expect(drained.first?.finished == ["a", "b"])
    }

    @Test func fewFilesAreNamed() {
        var log = LogBuilder()
        log.create("a")
        log.runToEnd("a")
        let notice = Notices.notice(for: BatchFinished(batch: nil, finished: ["a"], failed: []), in: log.state)
        #expect(notice.body == "✓ a.bin")
    }
}

@Suite("Recovery plans")
struct RecoveryPlanTests {
    func task(_ build: (inout LogBuilder) -> Void) -> TaskState {
        var log = LogBuilder()
        log.create("t")
        build(&log)
        return log.state["t"]!
    }

    @Test func finishedNeedsNothing() {
        let finished = task { $0.runToEnd("t") }
        #expect(RecoveryPlan.plan(for: finished, nowMs: 0).words == "nothing: finished")
    }

    @Test func queuedStartsFromZero() {
        #expect(RecoveryPlan.plan(for: task { _ in }, nowMs: 0) == .startFromZero)
    }

    @Test func interruptedWithStrongETagResumes() {
        let running = task {
            _ = $0.add(.started(Started(attempt: 1, offset: 0, url: "http://h/t")), task: "t")
            _ = $0.add(.progressed(Progressed(bytes: 4096, total: 9000, etag: "\"abc\"")), task: "t")
        }
        #expect(RecoveryPlan.plan(for: running, nowMs: 0).words == "resume at byte 4096 with If-Range: \"abc\"")
    }

    @Test func weakETagFallsBackToLastModified() {
        let running = task {
            _ = $0.add(.progressed(Progressed(bytes: 10, etag: "W/\"abc\"", lastModified: "Sun, 22 Nov 2026 02:00:00 GMT")), task: "t")
        }
        #expect(RecoveryPlan.plan(for: running, nowMs: 0) == .resume(at: 10, ifRange: "Sun, 22 Nov 2026 02:00:00 GMT"))
    }

    /// A weak ETag alone cannot guard a resume: said so, not "no validator".
    @Test func aWeakETagAloneRestartsSayingWhy() {
        let running = task { _ = $0.add(.progressed(Progressed(bytes: 10, etag: "W/\"abc\"")), task: "t") }
        #expect(RecoveryPlan.plan(for: running, nowMs: 0).words == "restart from 0: the server's only validator is a weak ETag "
                + "(W/\"abc\"), and RFC 9110 §13.1.5 lets If-Range resume only against a strong one")
    }

    @Test func noValidatorRestarts() {
        let running = task { _ = $0.add(.progressed(Progressed(bytes: 10)), task: "t") }
        #expect(RecoveryPlan.plan(for: running, nowMs: 0).words == "restart from 0: the server sent no validator (ETag or Last-Modified) to resume against")
    }

    @Test func userPauseStaysPaused() {
        let paused = task { _ = $0.add(.paused(Paused(bytes: 55, reason: .user)), task: "t") }
        #expect(RecoveryPlan.plan(for: paused, nowMs: 0) == .staysPaused(at: 55))
    }
}

import Foundation
import Testing
@testable import SyncAgentCore

@Suite("The fold: every event type")
struct FoldTests {
    @Test func createdAddsAQueuedTaskInOrder() {
        var log = LogBuilder()
        log.create("b")
        log.create("a")
        let state = log.state
        #expect(Array(state.tasks.keys) == ["b", "a"])
        #expect(state["a"]?.phase == .queued)
        #expect(state["a"]?.currentURL == state["a"]?.spec.url)
        #expect(state.activeCount == 2)
        #expect(state.takenSources == ["identity-a", "identity-b"])
        #expect(state.lastSeq == 2)
    }

    /// Tasks live in chunks of 1,024: ids, order and in-place updates hold
    /// across chunk boundaries, a duplicate id stays an orphan, and a snapshot
    /// of them reads back the same.
    @Test func thousandsOfTasksKeepTheirOrderAndUpdatesAcrossChunks() throws {
        var log = LogBuilder()
        let ids = (0..<2_600).map { "t\($0)" }
        for id in ids { log.create(id) }
        for id in ["t0", "t1023", "t1024", "t2047", "t2048", "t2599"] { log.runToEnd(id, bytes: 7) }
        log.create("t1024")
        let state = log.state
        #expect(state.tasks.count == ids.count)
        #expect(Array(state.tasks.keys) == ids)
        #expect(state.orphanEvents == [Int64(log.events.count)])
        for (position, id) in ids.enumerated() {
            #expect(state.tasks.index(forKey: id) == position)
            #expect(state[id]?.id == id)
        }
        #expect(state.tasks.filter { $0.phase == .finished }.map(\.id) == ["t0", "t1023", "t1024", "t2047", "t2048", "t2599"])
        #expect(state["t1024"]?.bytes == 7 && state["t1025"]?.phase == .queued)
        #expect(state.activeCount == ids.count - 6)
        #expect(try Snapshot.decode(Snapshot.encode(state)) == state)
    }

    @Test func startedProgressedFinished() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        #expect(log.state["t"]?.phase == .running)
        #expect(log.state["t"]?.attempts == 1)
        _ = log.add(.progressed(Progressed(bytes: 500, total: 1000, etag: "\"v1\"", lastModified: "Mon")), task: "t", afterMs: 1000)
        var task = log.state["t"]!
        #expect(task.bytes == 500)
        #expect(task.total == 1000)
        #expect(task.etag == "\"v1\"")
        #expect(task.lastModified == "Mon")
        #expect(task.speed == 500)
        #expect(task.percent == 50)
        _ = log.add(.finished(Finished(bytes: 1000, dest: "/downloads/t.1.bin")), task: "t")
        task = log.state["t"]!
        #expect(task.phase == .finished)
        #expect(task.dest == "/downloads/t.1.bin")
        #expect(task.partPath == "/downloads/t.bin.part")
        #expect(task.endedAtMs != nil)
        #expect(log.state.activeCount == 0)
        #expect(log.state.endedSinceNotice[BatchKey(nil)] == ["t"])
    }

    @Test func restartReasonResetsOffsetAndValidators() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 500, total: 1000, etag: "\"v1\"")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 0, restartReason: "the server ignored Range")), task: "t")
        let task = log.state["t"]!
        #expect(task.bytes == 0)
        #expect(task.etag == nil)
        #expect(task.restartReason == "the server ignored Range")
    }

    @Test func pausedAndResumed() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        _ = log.add(.paused(Paused(bytes: 300, reason: .user)), task: "t")
        #expect(log.state["t"]?.phase == .paused)
        #expect(log.state["t"]?.pauseReason == .user)
        #expect(log.state["t"]?.bytes == 300)
        #expect(log.state.activeCount == 0)
        _ = log.add(.resumed(Resumed(bytes: 300, reason: "resumed by the user")), task: "t")
        #expect(log.state["t"]?.phase == .queued)
        #expect(log.state["t"]?.pauseReason == nil)
        #expect(log.state.activeCount == 1)
    }

    /// Which `206` may continue the bytes held (the tenth adversary, and the review of the fix).
    @Test func aResumedAnswerMustBeOfTheFileIfRangeNamed() {
        let date = "Tue, 24 Nov 2026 09:55:25 GMT"
        #expect(RecoveryPlan.anotherFile(ifRange: "\"v1\"", etag: "\"v1\"", lastModified: nil) == nil)
        #expect(RecoveryPlan.anotherFile(ifRange: "\"v1\"", etag: "\"v2\"", lastModified: date)
                    == "the file changed on the server (validator \"v1\" → \"v2\")")
        #expect(RecoveryPlan.anotherFile(ifRange: "\"v1\"", etag: nil, lastModified: date)?.hasPrefix("the server's answer to a resume carried no ETag") == true)
        // A date: the 206 need not repeat it, nor is its ETag (weak, or none at first) the judge.
        #expect(RecoveryPlan.anotherFile(ifRange: date, etag: nil, lastModified: nil) == nil)
        #expect(RecoveryPlan.anotherFile(ifRange: date, etag: "W/\"x\"", lastModified: date) == nil)
        #expect(RecoveryPlan.anotherFile(ifRange: date, etag: nil, lastModified: "Wed, 25 Nov 2026 09:55:25 GMT") != nil)
    }

    @Test func redirectedKeepsOriginalURLAndMovesCurrent() {
        var log = LogBuilder()
        log.create("t", url: "http://a/start")
        _ = log.add(.redirected(Redirected(from: "http://a/start", to: "http://b/next", status: 302)), task: "t")
        _ = log.add(.redirected(Redirected(from: "http://b/next", to: "http://c/final", status: 301)), task: "t")
        let task = log.state["t"]!
        #expect(task.spec.url == "http://a/start")
        #expect(task.currentURL == "http://c/final")
        #expect(task.redirects == 2)
    }

    @Test func retryingQueuesWithBackoff() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        let retry = log.add(.retrying(Retrying(attempt: 1, reason: "server answered 503", delayMs: 2000, bytes: 400)), task: "t")
        let task = log.state["t"]!
        #expect(task.phase == .queued)
        #expect(task.bytes == 400)
        #expect(task.error == "server answered 503")
        #expect(task.notBeforeMs == retry.atMs + 2000)
        _ = log.add(.started(Started(attempt: 2, offset: 400, url: "http://h/x")), task: "t")
        #expect(log.state["t"]?.error == nil)
        #expect(log.state["t"]?.notBeforeMs == nil)
        #expect(log.state["t"]?.attempts == 2)
    }

    @Test func failedKeepsReasonAndCode() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.failed(Failed(reason: "server answered 404 Not Found for http://h/x", code: .http(404), bytes: 0)), task: "t")
        let task = log.state["t"]!
        #expect(task.phase == .failed)
        #expect(task.error == "server answered 404 Not Found for http://h/x")
        #expect(task.errorCode == .http(404))
        #expect(log.state.endedSinceNotice[BatchKey(nil)] == ["t"])
    }

    @Test func cancelledIsEndedButNotAnnounced() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.cancelled(Cancelled(bytes: 10)), task: "t")
        #expect(log.state["t"]?.phase == .cancelled)
        #expect(log.state.activeCount == 0)
        #expect(log.state.endedSinceNotice.isEmpty)
    }

    @Test func rejectedIsAgentLevel() {
        var log = LogBuilder()
        _ = log.add(.rejected(Rejected(file: "bad.job", error: "key \"url\" is missing")))
        #expect(log.state.rejected == [Rejected(file: "bad.job", error: "key \"url\" is missing")])
        #expect(log.state.tasks.isEmpty)
    }

    @Test func agentStartedAndStopped() {
        var log = LogBuilder()
        _ = log.add(.agentStarted(AgentStarted(pid: 42, version: "0.1.0")))
        #expect(log.state.runningAgentPid == 42)
        _ = log.add(.agentStopped(AgentStopped(reason: "idle")))
        #expect(log.state.runningAgentPid == nil)
    }

    @Test func batchFinishedOwesANoticeUntilNotified() {
        var log = LogBuilder()
        log.create("a")
        log.create("b")
        log.runToEnd("a")
        _ = log.add(.failed(Failed(reason: "404", code: .http(404), bytes: 0)), task: "b")
        let batch = BatchFinished(batch: nil, finished: ["a"], failed: ["b"], unchanged: 0)
        #expect(Notices.drainedBatches(in: log.state) == [batch])
        _ = log.add(.batchFinished(batch))
        #expect(log.state.endedSinceNotice.isEmpty)
        #expect(log.state.owedNotices[BatchKey(nil)] == batch)
        #expect(Notices.drainedBatches(in: log.state).isEmpty)
        _ = log.add(.notified(Notified(batch: nil, summary: "1 finished, 1 failed", delivered: true)))
        #expect(log.state.owedNotices.isEmpty)
    }

    @Test func notifiedForOneTaskClearsItsOwnNotice() {
        var log = LogBuilder()
        log.create("t", notify: .each)
        log.runToEnd("t")
        #expect(log.state["t"]?.owesOwnNotice == true)
        _ = log.add(.notified(Notified(batch: nil, summary: "t.bin finished", delivered: true)), task: "t")
        #expect(log.state["t"]?.owesOwnNotice == false)
        #expect(log.state.endedSinceNotice[BatchKey(nil)] == ["t"])
    }

    @Test func eventsForUnknownTasksAreKeptAsOrphans() {
        var log = LogBuilder()
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h")), task: "ghost")
        #expect(log.state.orphanEvents == [1])
        #expect(log.state.tasks.isEmpty)
    }

    @Test func everyEventTypeIsCoveredByTheseTests() {
        // A new event type must come with its fold test above.
        // (`retargeted`'s are in RetargetCoreTests.)
        #expect(EventBody.allTypes.count == 23)
    }

    @Test func compactedChangesNothingButTheSeq() {
        var log = LogBuilder()
        log.create("t")
        log.runToEnd("t")
        let before = log.state
        _ = log.add(.compacted(Compacted(snapshotSeq: 4, tasks: 1, events: 4, olderThanS: 0, bytesBefore: 10, bytesAfter: 5, trigger: "requested")))
        _ = log.add(.compacted(.failed("disk full", olderThanS: 0, trigger: "log_size")))
        var after = log.state
        #expect(after.lastSeq == 6)
        after.lastSeq = before.lastSeq
        #expect(after == before)
    }

    @Test func aForgottenTaskKeepsItsHistoryButLeavesTheList() {
        var log = LogBuilder()
        log.create("a")
        log.runToEnd("a")
        log.create("b")
        _ = log.add(.forgotten(Forgotten()), task: "a")
        #expect(log.state["a"]?.forgotten == true)
        #expect(log.state["a"]?.phase == .finished)
        let listed = StatusView.select(log.state, phases: nil, all: true, nowMs: log.nowMs).tasks.map(\.id)
        #expect(listed == ["b"])
        // Run again: a live transfer is never hidden.
        _ = log.add(.resumed(Resumed(bytes: 0, reason: "run again by the user")), task: "a")
        #expect(log.state["a"]?.forgotten == false)
    }

    /// A hook is owed by an end that happens while the config sets it, once;
    /// `hook_started` pays it; a config without the hook drops what is owed.
    @Test func hooksAreOwedByEndsWhileArmedAndPaidOnce() {
        var log = LogBuilder()
        log.create("before")
        log.runToEnd("before")
        #expect(log.state.owedTaskHooks.isEmpty, "no hook was set when it ended")
        _ = log.add(.agentStarted(AgentStarted(pid: 1, version: "t", hooks: ["task_end", "batch_end"])))
        #expect(log.state.owedTaskHooks.isEmpty, "arming does not reach back")
        log.create("a")
        log.runToEnd("a")
        log.create("b")
        _ = log.add(.failed(Failed(reason: "404", code: .http(404), bytes: 0)), task: "b")
        #expect(log.state.owedTaskHooks == ["a", "b"])
        let batch = log.add(.batchFinished(BatchFinished(batch: nil, finished: ["a"], failed: ["b"])))
        #expect(log.state.owedBatchHooks[batch.seq] != nil)
        let due = HookPlan.due(in: log.state, limit: 10)
        #expect(due.map(\.hook) == [.taskEnd, .taskEnd, .batchEnd])
        #expect(due.first { $0.task == "b" }?.environment["SYNCAGENT_STATE"] == "failed")
        #expect(due.first { $0.task == "b" }?.environment["SYNCAGENT_ERROR"] == "404")
        #expect(due.first { $0.task == "a" }?.environment["SYNCAGENT_DEST"] == "/downloads/a.bin")
        #expect(due.last?.environment["SYNCAGENT_FAILED"] == "1")
        #expect(HookPlan.due(in: log.state, limit: 2).count == 2)

        _ = log.add(.hookStarted(HookStarted(hook: .taskEnd, program: "x")), task: "a")
        _ = log.add(.hookStarted(HookStarted(hook: .batchEnd, batchSeq: batch.seq, program: "x")))
        #expect(log.state.owedTaskHooks == ["b"])
        #expect(log.state.owedBatchHooks.isEmpty)
        // A reload without on_task_end: nothing left to run for b.
        _ = log.add(.configReloaded(ConfigReloaded(file: "/c", applied: ["on_task_end"], needRestart: [], hooks: ["batch_end"])))
        #expect(log.state.owedTaskHooks.isEmpty)
        // A failed reload (hooks nil) changes nothing.
        _ = log.add(.configReloaded(ConfigReloaded(file: "/c", applied: [], needRestart: [], error: "bad")))
        #expect(log.state.armedHooks == [.batchEnd])
    }

    /// A hook run is followed from its `hook_started` to its `hook_ended`.
    /// One whose agent died in between is, once no agent runs, a run that
    /// may not have run; so is one whose end says so (recorded by the next
    /// start), until the same hook starts again for that subject. A
    /// snapshot keeps both; `status` says them under its table.
    @Test func hookRunsWithoutAnEndAreSaidToMayNotHaveRun() throws {
        var log = LogBuilder()
        _ = log.add(.agentStarted(AgentStarted(pid: 1, version: "t", hooks: ["task_end", "batch_end"])))
        log.create("a")
        log.runToEnd("a")
        log.create("b")
        log.runToEnd("b")
        let batch = log.add(.batchFinished(BatchFinished(batch: "nightly", finished: ["a", "b"], failed: [])))
        let startA = log.add(.hookStarted(HookStarted(hook: .taskEnd, program: "x")), task: "a")
        _ = log.add(.hookStarted(HookStarted(hook: .taskEnd, program: "x")), task: "b")
        let startBatch = log.add(.hookStarted(HookStarted(hook: .batchEnd, batchSeq: batch.seq, program: "x")))
        _ = log.add(.hookEnded(HookEnded(hook: .taskEnd, pid: 7, exitStatus: 0, durationMs: 3)), task: "b")
        var state = log.state
        #expect(state.hooksInFlight.count == 2 && state.hooksMayNotHaveRun.isEmpty)
        #expect(state.hookRunsThatMayNotHaveRun(agentRunning: true).isEmpty, "a live agent's hooks are running")
        #expect(state.hookRunsThatMayNotHaveRun(agentRunning: false).map(\.startedSeq) == [startA.seq, startBatch.seq])
        #expect(state.taskHookMayNotHaveRun("a", agentRunning: false)?.words
                == "on_task_end may not have run for task a: the agent stopped after recording its start (seq \(startA.seq)) and before its end; it is not run again")
        #expect(state.taskHookMayNotHaveRun("b", agentRunning: false) == nil)
        #expect(try Snapshot.decode(Snapshot.encode(state)) == state)

        // The next start records what it found unended.
        _ = log.add(.agentStarted(AgentStarted(pid: 2, version: "t", hooks: ["task_end", "batch_end"])))
        _ = log.add(.hookEnded(HookEnded(hook: .taskEnd, pid: nil, durationMs: 0, mayNotHaveRun: true)), task: "a")
        let lostBatch = log.add(.hookEnded(HookEnded(hook: .batchEnd, batchSeq: batch.seq, pid: nil, durationMs: 0, mayNotHaveRun: true)))
        state = log.state
        #expect(state.hooksInFlight.isEmpty)
        let runs = state.hookRunsThatMayNotHaveRun(agentRunning: true)
        #expect(runs.map(\.key) == [HookRunKey(hook: .taskEnd, task: "a", batchSeq: nil), HookRunKey(hook: .batchEnd, task: nil, batchSeq: batch.seq)])
        #expect(runs.last?.words.hasPrefix("on_batch_end may not have run for batch \"nightly\"") == true)
        #expect(runs.last?.endUnknownSinceMs == lostBatch.atMs)
        #expect(TaskReport(state["a"]!, in: state).hookMayNotHaveRun == "on_task_end")
        #expect(TaskReport(state["b"]!, in: state).hookMayNotHaveRun == nil)
        #expect(try Snapshot.decode(Snapshot.encode(state)) == state)

        // Under the table: a's while a is listed; the batch's for a day (always with --all).
        let notes = StatusView.hookNotes(state, listed: [state["a"]!], agentRunning: true, all: false, nowMs: lostBatch.atMs)
        #expect(notes.count == 2 && notes.allSatisfy { $0.hasPrefix("! ") })
        #expect(StatusView.hookNotes(state, listed: [], agentRunning: true, all: false, nowMs: lostBatch.atMs + 2 * 86_400_000).isEmpty)
        #expect(StatusView.hookNotes(state, listed: [], agentRunning: true, all: true, nowMs: lostBatch.atMs + 2 * 86_400_000).count == 1)

        // a's hook starts again (for a later end of a): the earlier run is history.
        _ = log.add(.hookStarted(HookStarted(hook: .taskEnd, program: "x")), task: "a")
        #expect(log.state.taskHookMayNotHaveRun("a", agentRunning: true) == nil)
    }

    /// `overwrite = "update"` asks with the validators a file was published
    /// with, only while the file on disk is still that one; a 304 changes nothing.
    @Test func publishedFilesKeepTheirValidatorsForUpdate() {
        var log = LogBuilder()
        log.create("a")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/a")), task: "a")
        _ = log.add(.progressed(Progressed(bytes: 10, total: 10, etag: "\"v1\"", lastModified: "Sun, 22 Nov 2026 10:00:00 GMT")), task: "a")
        _ = log.add(.finished(Finished(bytes: 10, dest: "/downloads/a.bin", modifiedNs: 77)), task: "a")
        let published = log.state.published["/downloads/a.bin"]
        #expect(published?.etag == "\"v1\"" && published?.size == 10 && published?.modifiedNs == 77)
        let url = log.state["a"]!.spec.url
        #expect(published?.validators(for: url, size: 10, modifiedNs: 77)?.etag == "\"v1\"")
        #expect(published?.validators(for: url, size: 11, modifiedNs: 77) == nil, "changed on disk: ask for the whole file")
        #expect(published?.validators(for: url, size: 10, modifiedNs: 78) == nil)
        #expect(published?.validators(for: "http://elsewhere/a", size: 10, modifiedNs: 77) == nil, "another resource's validators")
        var star = published!
        star.etag = "*"
        #expect(star.validators(for: url, size: 10, modifiedNs: 77)?.etag == nil)

        log.create("b")
        _ = log.add(.finished(Finished(bytes: 10, dest: "/downloads/a.bin", modifiedNs: 77, unchanged: true)), task: "b")
        #expect(log.state["b"]?.unchanged == true)
        #expect(log.state.published["/downloads/a.bin"] == published, "a 304 leaves the record as it was")

        // The batch says what changed.
        let batch = BatchFinished(batch: "hourly", finished: ["a", "b"], failed: [])
        #expect(Notices.notice(for: batch, in: log.state).summary == "hourly: 1 updated, 1 unchanged")
        // A live task already writing the file: a second one is refused, never
        // "finished" without a byte (its URL or checksum may differ).
        log.create("c")
        let decision = Destinations.decide(dest: "/downloads/c.bin", overwrite: .update, in: log.state, exists: { _ in true })
        guard case .refuse(_, let reason) = decision else { Issue.record("\(decision)"); return }
        #expect(reason.contains("two tasks never write one file"))
    }

    @Test func aTaskRunAgainOwesNoHookUntilItEndsAgain() {
        var log = LogBuilder()
        _ = log.add(.agentStarted(AgentStarted(pid: 1, version: "t", hooks: ["task_end"])))
        log.create("a")
        _ = log.add(.failed(Failed(reason: "503", code: .http(503), bytes: 0)), task: "a")
        #expect(log.state.owedTaskHooks == ["a"])
        _ = log.add(.resumed(Resumed(bytes: 0, reason: "run again by the user")), task: "a")
        #expect(log.state.owedTaskHooks.isEmpty)
    }

    @Test func controlOutcomesAndRejectionsMakeTheirJobFilesKnown() {
        var log = LogBuilder()
        _ = log.add(.controlled(Controlled(action: "resume", target: "*", outcome: "nothing to do", identity: "c-1")))
        _ = log.add(.rejected(Rejected(file: "bad.job", error: "bad", identity: "r-1")))
        _ = log.add(.configReloaded(ConfigReloaded(file: "/c", applied: ["retries"], needRestart: [])))
        #expect(log.state.takenSources == ["c-1"])
        #expect(log.state.rejectedSources == ["r-1"])
        #expect(log.state.tasks.isEmpty)
    }

    @Test func replayingAPrefixGivesTheStateAtThatPoint() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 100, total: 200, etag: "\"e\"")), task: "t")
        log.runToEnd("t", bytes: 200)
        let prefix = AgentState.replay(log.events.prefix(3))
        #expect(prefix["t"]?.phase == .running)
        #expect(prefix["t"]?.bytes == 100)
        #expect(prefix.lastSeq == 3)
    }

    @Test func runningAFailedTaskAgainGivesFreshRetriesAndTimeout() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/t")), task: "t")
        _ = log.add(.retrying(Retrying(attempt: 1, reason: "503", delayMs: .max, bytes: 0)), task: "t")
        #expect(log.state["t"]?.notBeforeMs == .max)
        _ = log.add(.started(Started(attempt: 2, offset: 0, url: "http://h/t")), task: "t")
        _ = log.add(.failed(Failed(reason: "gave up", code: .retriesExhausted, bytes: 0)), task: "t")
        _ = log.add(.resumed(Resumed(bytes: 0, reason: "run again by the user")), task: "t")
        let task = log.state["t"]!
        #expect(task.phase == .queued)
        #expect(task.attemptsBeforeRerun == 2)
        #expect(task.firstStartedAtMs == nil)
        #expect(log.state.activeCount == 1)
    }

    @Test func aDamagedLogCannotOverflowTheFold() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.progressed(Progressed(bytes: .max, total: .max)), task: "t", afterMs: 1)
        _ = log.add(.progressed(Progressed(bytes: .min)), task: "t", afterMs: 1)
        _ = log.add(.progressed(Progressed(bytes: .max)), task: "t", afterMs: 1)
        #expect(log.state["t"]?.bytes == .max)
    }
}

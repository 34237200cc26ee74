import Logging
import SyncAgentCore

/// What the agent tells people once the log says it: one notification per
/// drained batch (SPEC §6.3), a task's own when it asked for one, the
/// `on_task_end` and `on_batch_end` hooks, and its own log lines of ends.
/// Each is at most once: its record is committed before it goes out, so a
/// crash in between loses it rather than repeat it.
final class Announcements {
    private unowned let context: RunnerContext
    private let notifier: BackgroundNoticePoster
    let hooks: HookRunner
    /// Notices recorded as posted, with the record's seq: handed to the notifier once it is committed.
    private var noticesAfterCommit: [(seq: Int64, notice: Notice)] = []

    init(context: RunnerContext, notifier: BackgroundNoticePoster, hooks: HookRunner) {
        self.context = context
        self.notifier = notifier
        self.hooks = hooks
    }

    /// A commit made them true, through event `seq` (nil: every event so
    /// far): the log lines of ends are said, the notices posted.
    func committed(through seq: Int64? = nil) {
        let through = seq ?? context.state.lastSeq
        let lines = context.linesAfterCommit.prefix { $0.seq <= through }
        for line in lines { context.logger.log(level: line.level, line.message, metadata: line.metadata) }
        context.linesAfterCommit.removeFirst(lines.count)
        let notices = noticesAfterCommit.prefix { $0.seq <= through }
        for (_, var notice) in notices {
            if !context.config.notifyActions { notice.actions = [] }
            notifier.post(notice)
        }
        noticesAfterCommit.removeFirst(notices.count)
    }

    /// Start-up: batches whose notice a crash left owed are announced.
    func announceOwedBatches() {
        for (_, batch) in context.state.owedNotices.sorted(by: { $0.key < $1.key }) { announce(batch) }
    }

    /// `batch_finished` is committed, then `notified`, then the notice goes
    /// out: a restart never posts one twice.
    func announceDrainedBatches() throws {
        let drained = Notices.drainedBatches(in: context.state)
        let ownNotices = context.state.owedOwnNotices.sorted()
        guard !drained.isEmpty || !ownNotices.isEmpty else { return }
        for id in ownNotices {
            guard let task = context.state[id] else { continue }
            post(Notices.ownNotice(for: task), batch: nil, task: id)
        }
        for batch in drained { context.record(.batchFinished(batch)) }
        try context.commit()
        if !drained.isEmpty { CrashPoint.batchFinishedCommitted.reached() }
        for batch in drained { announce(batch) }
        // `notified` goes to disk, then the notices go out (see `post`).
        try context.commit()
    }

    /// When failure notices last went out (monotonic ms): failures within
    /// `Notices.failureQuietMs` after wait, and go out together.
    private var lastFailureNoticeMs: Int64?

    /// When the failures waiting to be told are due (monotonic ms); nil when none waits.
    var nextFailureNoticeMs: Int64? {
        guard let first = context.failuresToTell.first else { return nil }
        return max(first.atMs + Notices.failureGraceMs, lastFailureNoticeMs.map { $0 + Notices.failureQuietMs } ?? 0)
    }

    /// Failures only the user can mend, told as they happen (a 404 queued
    /// behind twenty downloads is not kept for the batch's end): one
    /// notice for those of the same second, or of the quiet time after the
    /// last notice.
    /// Each task's `notified` is recorded first, as for every notice; the
    /// batch's notice at its end names them again among the rest.
    func tellFailures() {
        guard let due = nextFailureNoticeMs, due <= Posix.monotonicMs else { return }
        let failed = Notices.stillToTell(context.failuresToTell.map(\.id), in: context.state)
        context.failuresToTell.removeAll()
        guard !failed.isEmpty else { return }
        let notice = Notices.failureNotice(for: failed)
        for task in failed { context.record(.notified(Notified(batch: task.spec.batch, summary: notice.summary)), task: task.id) }
        noticesAfterCommit.append((context.state.lastSeq, notice))
        lastFailureNoticeMs = Posix.monotonicMs
    }

    /// A batch's notice, or, for a batch of `notify = "none"` tasks alone (there for
    /// `on_batch_end`), a `notified` that says none was wanted.
    private func announce(_ batch: BatchFinished) {
        guard let shown = Notices.noticed(batch, in: context.state) else {
            context.record(.notified(Notified(batch: batch.batch, summary: Notices.notice(for: batch, in: context.state).summary,
                                              delivered: false, warning: "not shown: its tasks have notify = \"none\"")))
            return
        }
        post(Notices.notice(for: shown, in: context.state), batch: batch.batch, task: nil)
    }

    /// At most once (SPEC §6.3): `notified` is committed before the notice goes out, so a crash
    /// in between loses it rather than repeat it, like a hook's run.
    private func post(_ notice: Notice, batch: String?, task: String?) {
        context.record(.notified(Notified(batch: batch, summary: notice.summary)), task: task)
        noticesAfterCommit.append((context.state.lastSeq, notice))
    }

    /// The last notices are on their way: a desktop session answers in milliseconds.
    func finish(within seconds: Double) { notifier.finish(within: seconds) }

    // MARK: - Hooks

    /// Starts the runs the log says are owed, as slots allow. `hook_started`
    /// is committed before any process is spawned: a crash in between loses
    /// a run rather than repeat it (at most once per end, like notices).
    func startOwedHooks() throws {
        let runs = HookPlan.due(in: context.state, limit: hooks.freeSlots)
        guard !runs.isEmpty else { return }
        var starting: [(run: HookPlan.Run, command: [String])] = []
        for run in runs {
            guard let command = run.hook == .taskEnd ? context.config.onTaskEnd : context.config.onBatchEnd else { continue }
            context.record(.hookStarted(HookStarted(hook: run.hook, batchSeq: run.batchSeq, program: command[0])), task: run.task)
            starting.append((run, command))
        }
        try context.commit()
        CrashPoint.hookStartCommitted.reached()
        for (run, command) in starting {
            if case .failure(let failure) = hooks.spawn(run, command: command, timeoutS: context.config.hookTimeout) {
                context.record(.hookEnded(HookEnded(hook: run.hook, batchSeq: run.batchSeq, pid: nil, durationMs: 0,
                                                    error: failure.description)), task: run.task)
                context.logger.error("hook not started", metadata: ["hook": "\(run.hook.rawValue)", "error": "\(failure)"])
                // Its slot is free again: the next owed run must not wait for an unrelated wake-up.
                context.needsScheduling = true
            }
        }
    }

    /// Start-up: runs an earlier agent recorded as started and never saw end
    /// (it died after `hook_started`, before the spawn or while the hook
    /// ran). At most once, they are not run again; each is recorded as a
    /// `hook_ended` that says it may not have run, once (the fold then no
    /// longer holds it unended), and said in the log.
    func recordHooksLeftUnended() {
        for run in context.state.hooksInFlight.values.sorted(by: { $0.startedSeq < $1.startedSeq }) {
            context.record(.hookEnded(HookEnded(hook: run.key.hook, batchSeq: run.key.batchSeq, pid: nil, durationMs: 0,
                                                mayNotHaveRun: true)), task: run.key.task)
            var metadata: Logger.Metadata = ["hook": "\(run.key.hook.configKey)", "started_seq": "\(run.startedSeq)"]
            if let task = run.key.task { metadata["task.id"] = "\(task)" }
            if let seq = run.key.batchSeq { metadata["batch_seq"] = "\(seq)" }
            context.logger.warning("\(Printable.escaping(run.words))", metadata: metadata)
        }
    }

    /// Records how each finished (or overdue, now killed) hook ended.
    func reapHooks() {
        for (run, ended) in hooks.reap() {
            context.record(.hookEnded(ended), task: run.task)
            if ended.exitStatus != 0 {
                let how = ended.timedOut ? "killed after hook_timeout (\(context.config.hookTimeout) s)"
                    : ended.signal.map { "ended by signal \($0)" } ?? "exit status \(ended.exitStatus ?? -1)"
                context.logger.warning("hook failed", metadata: ["hook": "\(run.hook.rawValue)", "task.id": "\(run.task ?? "-")",
                                                                 "how": "\(how)"])
            }
            // A slot is free: the next owed run can start.
            context.needsScheduling = true
        }
    }

    /// The agent stops: hooks get `graceMs` to finish, then are killed; each end is recorded.
    func stopHooks(graceMs: Int64) {
        for (run, ended) in hooks.stopAll(graceMs: graceMs) { context.record(.hookEnded(ended), task: run.task) }
    }

    /// Nothing is owed: no notice, no hook running or due.
    var areDone: Bool {
        let state = context.state
        return state.owedNotices.isEmpty && hooks.running.isEmpty && state.owedTaskHooks.isEmpty && state.owedBatchHooks.isEmpty
    }
}

import SyncAgentCore

/// The runners of the tasks this process started, one per task: the one
/// map of runtime state the loop keeps (everything else is the log's).
/// A task's runner is made when it first starts (or is controlled) and
/// dropped once the task has ended and nothing of it is in flight.
final class Runners {
    private var byTask: [String: TaskRunner] = [:]
    private unowned let context: RunnerContext

    init(context: RunnerContext) {
        self.context = context
    }

    subscript(id: String) -> TaskRunner? { byTask[id] }

    /// `task`'s runner, made for its kind if it has none yet.
    func runner(for task: TaskState) -> TaskRunner {
        if let runner = byTask[task.id] { return runner }
        let runner = Kinds.runner(for: task, context: context)
        byTask[task.id] = runner
        return runner
    }

    /// Starts an attempt of `task`, unless the link is metered for it, its
    /// destination is taken (`skip`, `fail`) or its `total_timeout` ran out.
    func start(_ task: TaskState) {
        if context.network.forbids(task) {
            pause(task.id, reason: .metered, bytesIfIdle: task.bytes)
            context.needsScheduling = true
            return
        }
        if let dest = task.finalDest, !task.awaitsServerName, Kinds.runnerType(for: task.spec).destinationIsKnownAtStart(task.spec),
           context.endedByExistingDest(task, dest) { return }
        // A segment whose video was retargeted waits, paused, for the new playlist to say where it is.
        if let parent = task.parentID, context.state[parent]?.awaitsRetargetCheck == true {
            pause(task.id, reason: .user, bytesIfIdle: task.bytes)
            context.needsScheduling = true
            return
        }
        if context.deadlineMs(of: task) <= Posix.nowMs {
            context.fail(task, reason: context.totalTimeoutWords, code: .totalTimeout, keeping: task.bytes)
            return
        }
        runner(for: task).start(task)
    }

    /// Records `paused`, stopping the task's attempt if one runs: a download
    /// keeps its durable bytes, anything else will start over. A task with no
    /// attempt keeps `bytesIfIdle`.
    @discardableResult
    func pause(_ id: String, reason: PauseReason, bytesIfIdle: Int64) -> Int64 {
        let stopped = byTask[id]?.stop(flushing: true)
        let bytes = stopped?.bytes ?? bytesIfIdle
        context.record(.paused(Paused(bytes: bytes, reason: reason, metrics: stopped?.metrics)), task: id)
        return bytes
    }

    /// Records `cancelled`, stopping the task's attempt and removing its
    /// partial file (a task that failed keeping nothing has none: one there
    /// is not its to remove).
    func cancel(_ task: TaskState) {
        let stopped = runner(for: task).cancel(task)
        if let part = task.partPath, task.phase != .failed || task.bytes > 0 { context.removePartial(part, of: task.id) }
        context.record(.cancelled(Cancelled(bytes: stopped.bytes, metrics: stopped.metrics)), task: task.id)
    }

    /// The agent stops: every task with something in flight pauses, and so
    /// does a parent waiting for its children.
    func pauseAllForStop() {
        for id in byTask.filter({ $0.value.isBusy }).keys.sorted() {
            pause(id, reason: .agentStopping, bytesIfIdle: 0)
        }
        let state = context.state
        for id in state.families.keys.sorted() where state[id]?.phase == .running {
            pause(id, reason: .agentStopping, bytesIfIdle: 0)
        }
    }

    /// A parent's lost child (failed or cancelled): the others that still
    /// run wait, paused, for `resume` of the whole.
    func pauseActiveChildren(of parent: TaskState) {
        let state = context.state
        for child in (state.children[parent.id] ?? []).compactMap({ state[$0] }) where child.phase.isActive {
            pause(child.id, reason: .user, bytesIfIdle: child.bytes)
        }
    }

    /// Parents whose children all finished (or one was lost) are settled by their runners.
    func settleParents() throws {
        guard !context.state.settledParents.isEmpty else { return }
        // The last children's files take their names at the commit: a parent puts them together after it.
        if context.publishing.hasRenamesDue { try context.commit() }
        for id in context.state.settledParents.sorted() {
            guard let parent = context.state[id], parent.phase == .running, context.state.families[id] != nil else { continue }
            try runner(for: parent).childrenSettled(parent)
        }
    }

    /// Runners whose tasks ended, with nothing in flight, go.
    func dropEnded() {
        let state = context.state
        for (id, runner) in byTask where !runner.isBusy && (state[id]?.phase.isEnded ?? true) { byTask[id] = nil }
    }

    // MARK: - Routing what the workers report

    func synced(_ results: [DataSyncer.Done]) {
        // Progress first: a body's completion may end the attempt the progress belongs to.
        for done in results where !done.complete { byTask[done.taskID]?.synced(done) }
        for done in results where done.complete { byTask[done.taskID]?.synced(done) }
        context.needsScheduling = true
    }

    func prepared(_ results: [PartialPreparer.Prepared]) {
        for prepared in results { byTask[prepared.taskID]?.prepared(prepared) }
        context.needsScheduling = true
    }

    func assembled(_ results: [(id: String, outcome: HLSAssembler.Outcome)]) {
        for (id, outcome) in results { byTask[id]?.assembled(outcome) }
        context.needsScheduling = true
    }

    // MARK: - What the loop and the scheduler ask

    /// Nothing of any task is in flight.
    var areIdle: Bool { !byTask.values.contains { $0.isBusy } }

    /// Running tasks whose transfer is over, waiting only to be recorded finished: they hold no slot.
    var completing: [String] { byTask.filter { $0.value.isCompleting }.map(\.key) }

    /// Connections beyond one that running tasks hold, by host: they count against `max_per_host`.
    var extraConnectionsByHost: [String: Int] {
        var extra: [String: Int] = [:]
        for (id, runner) in byTask where runner.extraConnections > 0 {
            guard let host = context.state[id]?.hostKey else { continue }
            extra[host, default: 0] += runner.extraConnections
        }
        return extra
    }

    var nextWakeMs: Int64? { byTask.values.compactMap(\.nextWakeMs).min() }

    /// Timers that are due, and work runners could not start from inside curl's callbacks.
    func wake() {
        let now = Posix.monotonicMs
        for runner in Array(byTask.values) { runner.wake(nowMs: now) }
    }
}

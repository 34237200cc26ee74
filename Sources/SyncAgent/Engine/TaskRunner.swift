import SyncAgentCore

/// What carries out the tasks of one kind (DESIGN §5): a plain transfer, a
/// download over several connections, a resumable upload, an HLS video. A
/// runner owns its task's runtime state — its exchanges, its partial file's
/// lock, what it learned from earlier attempts — and answers the loop's
/// questions; the loop never asks what kind a task is. It lives from the
/// task's first start in this process until the task ends.
protocol TaskRunner: AnyObject {
    var taskID: String { get }

    init(taskID: String, context: RunnerContext)

    /// What stopping an attempt left: the bytes the log vouches for, and
    /// the metrics of the exchange that was stopped.
    typealias Stopped = (bytes: Int64, metrics: AttemptMetrics?)

    /// Starts an attempt of `task` (the scheduler chose it, or a hop moved
    /// it): `started` is recorded, then the first request goes out.
    func start(_ task: TaskState)

    /// Stops the attempt in flight, if any (a pause, a cancel, the agent stopping).
    /// - Parameter flushing: make what was written durable and claim it first.
    /// - Returns: the bytes the log vouches for once stopped, or nil when no
    ///   attempt was in flight.
    func stop(flushing: Bool) -> Stopped?

    /// The task is cancelled: its attempt stops, and what the server holds
    /// of it (a resumable upload) is let go. The partial file is the loop's to remove.
    func cancel(_ task: TaskState) -> Stopped

    /// Something is in flight: an exchange, a sync, a file being made, an assembly.
    var isBusy: Bool { get }
    /// The transfer is over and only its durability is awaited: it holds no
    /// connection, so no scheduler slot.
    var isCompleting: Bool { get }
    /// Connections it holds beyond one (they count against `max_per_host`).
    var extraConnections: Int { get }

    /// When it next needs the loop (monotonic ms), if it does.
    var nextWakeMs: Int64? { get }
    /// Each turn of the loop, after curl ran: timers that are due, and work
    /// that could not start inside curl's callbacks (a handle cannot be added there).
    func wake(nowMs: Int64)

    /// A sync it asked `DataSyncer` for is done.
    func synced(_ done: DataSyncer.Done)
    /// The partial file it asked `PartialPreparer` for is made.
    func prepared(_ prepared: PartialPreparer.Prepared)
    /// Every child of a parent finished, or one was lost (failed or cancelled).
    func childrenSettled(_ parent: TaskState) throws
    /// An assembly it asked for is done.
    func assembled(_ outcome: HLSAssembler.Outcome)
    /// Control of a parent reached its children; the parent's own part
    /// (a playlist it stops reading, a work folder it removes) follows.
    func childrenControlled(_ action: ControlJob.Action, of parent: TaskState)

    // What the kind answers of its tasks, with or without a runner.

    /// A restart found `task` interrupted: what the log vouches for is kept
    /// (its partial file cut back to it, never trusting more); returns the
    /// offset it resumes at.
    static func recover(_ task: TaskState, in context: RunnerContext) -> Int64
    /// A restart found `task` ended: what a crash may have cut short of its
    /// end (a rename the log vouches for, a work folder) is finished.
    static func tidyAfterRestart(_ task: TaskState, in context: RunnerContext)
    /// Whether the task's destination is known before it starts (and a
    /// `skip` or `fail` task whose destination exists ends there).
    static func destinationIsKnownAtStart(_ spec: TaskSpec) -> Bool
    /// The bytes a failed task keeps when it is run again.
    static func bytesKeptForRunAgain(_ task: TaskState, in context: RunnerContext) -> Int64
    /// Why `task` cannot go on from another URL (`syncagent retarget`), if it cannot.
    static func retargetRefusal(_ task: TaskState, in state: AgentState) -> String?
}

extension TaskRunner {
    func cancel(_ task: TaskState) -> Stopped { stop(flushing: true) ?? (task.bytes, nil) }
    var isCompleting: Bool { false }
    var extraConnections: Int { 0 }
    var nextWakeMs: Int64? { nil }
    func wake(nowMs: Int64) {}
    func synced(_ done: DataSyncer.Done) {}
    func prepared(_ prepared: PartialPreparer.Prepared) {}
    func childrenSettled(_ parent: TaskState) throws {}
    func assembled(_ outcome: HLSAssembler.Outcome) {}
    func childrenControlled(_ action: ControlJob.Action, of parent: TaskState) {}

    static func recover(_ task: TaskState, in context: RunnerContext) -> Int64 {
        let offset = context.resumePoint(for: task).offset
        // Never trust bytes beyond what the log vouches for (no-op if absent).
        if task.spec.behaviour.body == .partialFile, let part = task.partPath { context.truncate(part, of: task.id, to: offset) }
        return offset
    }
    static func tidyAfterRestart(_ task: TaskState, in context: RunnerContext) {}
    static func destinationIsKnownAtStart(_ spec: TaskSpec) -> Bool { true }
    static func bytesKeptForRunAgain(_ task: TaskState, in context: RunnerContext) -> Int64 {
        task.partPath.flatMap(context.root.size) ?? 0
    }
    static func retargetRefusal(_ task: TaskState, in state: AgentState) -> String? {
        // A segment, a key, a part: its parent's playlist or upload says where it is.
        guard let parent = task.parentID else { return nil }
        return "it is a part of task \(parent), which says where its parts are"
    }
}

/// Which run of a hook: `on_task_end` for a task, or `on_batch_end` for
/// the `batch_finished` event it answers. A `hook_started` and its
/// `hook_ended` name the same one.
public struct HookRunKey: Hashable, Sendable {
    public var hook: HookKind
    /// `task_end`: the ended task.
    public var task: String?
    /// `batch_end`: the seq of its `batch_finished`.
    public var batchSeq: Int64?

    public init(hook: HookKind, task: String?, batchSeq: Int64?) {
        self.hook = hook
        // Each hook is known by its own subject only: a stray field cannot make two keys of one run.
        self.task = hook == .taskEnd ? task : nil
        self.batchSeq = hook == .batchEnd ? batchSeq : nil
    }
}

/// A hook run the log saw start (SPEC §5: at most once per end).
/// Kept while its end is not recorded, and kept after an end that says it
/// may not have run, so `status` can say so.
public struct HookRun: Equatable, Sendable {
    public var key: HookRunKey
    /// `batch_end`: the batch's name (nil: the default batch).
    public var batch: String?
    /// The seq of its `hook_started`.
    public var startedSeq: Int64
    /// When the `hook_ended` saying it may not have run was recorded; nil while no end is.
    public var endUnknownSinceMs: Int64?

    public init(key: HookRunKey, batch: String? = nil, startedSeq: Int64, endUnknownSinceMs: Int64? = nil) {
        self.key = key; self.batch = batch; self.startedSeq = startedSeq; self.endUnknownSinceMs = endUnknownSinceMs
    }

    /// "on_task_end may not have run for task c: …", one line.
    public var words: String {
        let subject = key.task.map { "task \($0)" }
            ?? batch.map { "batch \"\($0)\"" } ?? "the default batch"
        return "\(key.hook.configKey) may not have run for \(subject): the agent stopped after recording its start "
            + "(seq \(startedSeq)) and before its end; it is not run again"
    }
}

extension AgentState {
    /// The hook runs that may not have run, oldest first: those whose
    /// `hook_ended` says so, and, when no agent runs (`agentRunning` false),
    /// those with no end recorded yet, since the agent that started them is
    /// gone (its successor records them as such when it starts).
    public func hookRunsThatMayNotHaveRun(agentRunning: Bool) -> [HookRun] {
        let unended = agentRunning ? [] : Array(hooksInFlight.values)
        return (Array(hooksMayNotHaveRun.values) + unended).sorted { $0.startedSeq < $1.startedSeq }
    }

    /// The task's own `on_task_end` run, if it may not have run (see `hookRunsThatMayNotHaveRun`).
    public func taskHookMayNotHaveRun(_ id: String, agentRunning: Bool) -> HookRun? {
        let key = HookRunKey(hook: .taskEnd, task: id, batchSeq: nil)
        return hooksMayNotHaveRun[key] ?? (agentRunning ? nil : hooksInFlight[key])
    }
}

extension StatusView {
    /// The lines `status` prints under its table for hook runs that may not
    /// have run: a task's while the task is listed, a batch's for a day
    /// after its end was found unknown (always with `all`).
    public static func hookNotes(_ state: AgentState, listed: [TaskState], agentRunning: Bool, all: Bool, nowMs: Int64) -> [String] {
        let runs = state.hookRunsThatMayNotHaveRun(agentRunning: agentRunning)
        guard !runs.isEmpty else { return [] }
        let listedIDs = Set(listed.map(\.id))
        let hiddenBefore = hiddenEndedBeforeMs(nowMs: nowMs)
        return runs.filter { run in
            if let task = run.key.task { return listedIDs.contains(task) }
            return all || (run.endUnknownSinceMs ?? .max) >= hiddenBefore
        }.map { "! " + Printable.escaping($0.words) }
    }
}

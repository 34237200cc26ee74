import Foundation

/// What the config's hooks are told (SPEC §5): the environment of each run
/// and which owed runs come next. Pure; `HookRunner` spawns them.
public enum HookPlan {
    /// One run due: for an ended task, or for a drained batch.
    public struct Run: Equatable, Sendable {
        public var hook: HookKind
        public var task: String?
        public var batchSeq: Int64?
        public var environment: [String: String]
    }

    /// Owed runs, oldest end first, at most `limit` of them.
    public static func due(in state: AgentState, limit: Int) -> [Run] {
        guard limit > 0 else { return [] }
        // Ordered and cut first: with 2,000 ends owed and 4 slots, only 4 environments are built.
        var owed: [(seq: Int64, task: TaskState?, batch: BatchFinished?)] = []
        for id in state.owedTaskHooks {
            if let task = state[id] { owed.append((task.lastSeq, task, nil)) }
        }
        for (seq, batch) in state.owedBatchHooks { owed.append((seq, nil, batch)) }
        return owed.sorted { $0.seq < $1.seq }.prefix(limit).map { seq, task, batch in
            if let task { return Run(hook: .taskEnd, task: task.id, batchSeq: nil, environment: environment(for: task)) }
            return Run(hook: .batchEnd, task: nil, batchSeq: seq, environment: environment(for: batch!, in: state))
        }
    }

    /// `SYNCAGENT_TASK_ID`, `_STATE` (finished, failed, cancelled), `_DEST`
    /// (the published path; empty when none), `_ERROR` (empty unless it
    /// failed), with the kind, URL, bytes and batch beside them. Credentials
    /// in URLs and reasons are redacted, as everywhere else.
    public static func environment(for task: TaskState) -> [String: String] {
        [
            "SYNCAGENT_HOOK": HookKind.taskEnd.rawValue,
            "SYNCAGENT_TASK_ID": task.id,
            "SYNCAGENT_STATE": task.phase.rawValue,
            "SYNCAGENT_DEST": task.phase == .finished ? task.dest ?? "" : "",
            "SYNCAGENT_ERROR": task.error.map(Redaction.text) ?? "",
            "SYNCAGENT_KIND": task.spec.kind.rawValue,
            "SYNCAGENT_URL": Redaction.url(task.spec.url),
            "SYNCAGENT_BYTES": "\(task.bytes)",
            "SYNCAGENT_BATCH": task.spec.batch ?? "",
        ]
    }

    /// `SYNCAGENT_BATCH` (empty for the default batch), `_FINISHED` and
    /// `_FAILED` (counts), `_SUMMARY` (the notification's words) and
    /// `_FAILED_IDS` (space-separated, at most 100).
    public static func environment(for batch: BatchFinished, in state: AgentState) -> [String: String] {
        [
            "SYNCAGENT_HOOK": HookKind.batchEnd.rawValue,
            "SYNCAGENT_BATCH": batch.batch ?? "",
            "SYNCAGENT_FINISHED": "\(batch.finishedTotal)",
            "SYNCAGENT_FAILED": "\(batch.failedTotal)",
            "SYNCAGENT_SUMMARY": Notices.notice(for: batch, in: state).summary,
            "SYNCAGENT_FAILED_IDS": batch.failed.prefix(100).joined(separator: " "),
        ]
    }
}

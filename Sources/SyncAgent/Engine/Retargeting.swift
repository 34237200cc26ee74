import SyncAgentCore

/// `syncagent retarget` as the engine carries it out, for a task the user
/// named (`ControlDesk`) or a segment whose video moved (`HLSVideoRunner`).
extension RunnerContext {
    /// Moves `task` to `url`: its running attempt stops (what it received
    /// made durable first), and `retargeted` records the bytes it keeps for
    /// the new URL's first answer to confirm (`RetargetRules`), or why it
    /// starts over. The fold then queues it (a paused task stays paused, a
    /// failed one runs again with fresh retries).
    /// - Returns: what came of it, in words (without the URL).
    func retarget(_ task: TaskState, to url: String) -> String {
        var held = task
        var metrics: AttemptMetrics?
        if task.phase == .failed {
            held.bytes = bytesKeptForRunAgain(task)
        } else if let stopped = runners[task.id]?.stop(flushing: true) {
            metrics = stopped.metrics
            held = state[task.id] ?? task
            held.bytes = stopped.bytes
        }
        let words: String
        let retargeted: Retargeted
        switch RetargetRules.start(for: held) {
        case .keep(let bytes):
            retargeted = Retargeted(from: task.currentURL, to: url, bytes: bytes, metrics: metrics)
            words = "retargeted, keeping \(bytes) bytes if the new URL serves the same file"
        case .startOver(nil):
            retargeted = Retargeted(from: task.currentURL, to: url, bytes: 0, metrics: metrics)
            words = "retargeted"
        case .startOver(let reason?):
            retargeted = Retargeted(from: task.currentURL, to: url, bytes: 0, reason: "retargeted: " + reason, metrics: metrics)
            words = "retargeted; starts over: \(reason)"
        }
        record(.retargeted(retargeted), task: task.id)
        logger.notice("task retargeted", metadata: ["task.id": "\(task.id)", "url": "\(Redaction.url(url))", "bytes": "\(retargeted.bytes)"])
        needsScheduling = true
        return words
    }

    /// The bytes a failed task keeps when it runs again, if what holds them (its partial file, its server) still does.
    func bytesKeptForRunAgain(_ task: TaskState) -> Int64 {
        let kept = Kinds.runnerType(for: task.spec).bytesKeptForRunAgain(task, in: self)
        return task.spec.isResumable && kept >= task.bytes ? task.bytes : 0
    }
}

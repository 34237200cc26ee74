import Foundation

/// A desktop notification to post: the words, how loud, and what it offers to do.
public struct Notice: Equatable, Sendable {
    public var summary: String
    public var body: String
    public var critical: Bool
    /// Shown as buttons only where the notification server offers them.
    public var actions: [NoticeAction]
    public init(summary: String, body: String, critical: Bool, actions: [NoticeAction] = []) {
        self.summary = summary; self.body = body; self.critical = critical; self.actions = actions
    }

    /// The freedesktop category hint: a notification server may file or sound it by this.
    public var category: String { critical ? "transfer.error" : "transfer.complete" }
    /// A freedesktop icon name every icon theme has.
    public var icon: String { critical ? "dialog-error" : "folder-download" }
}

/// When the agent owes the desktop a notification, and what it says (SPEC §8).
public enum Notices {
    /// Batches whose active tasks have all ended since their last notice.
    /// The default batch waits until no task at all is queued or running.
    public static func drainedBatches(in state: AgentState) -> [BatchFinished] {
        var drained: [BatchFinished] = []
        for (key, ended) in state.endedSinceNotice.sorted(by: { $0.key < $1.key }) where !ended.isEmpty {
            let stillActive = key.name == nil ? state.activeCount : state.activeByBatch[key, default: 0]
            guard stillActive == 0 else { continue }
            // A task that failed, was run again and ended again is in `ended` twice: counted once, as it is now.
            var seen = Set<String>()
            let once = ended.filter { seen.insert($0).inserted }
            let finished = once.filter { state.tasks[$0]?.phase == .finished }
            let failed = once.filter { state.tasks[$0]?.phase == .failed }
            let unchanged = finished.filter { state.tasks[$0]?.unchanged == true }.count
            drained.append(BatchFinished(batch: key.name, finished: finished, failed: failed, unchanged: unchanged))
        }
        return drained
    }

    /// The part of a drained batch its notice is about: the tasks that want
    /// one. With `on_batch_end` armed a batch also holds `notify = "none"`
    /// tasks (the hook is told of them all); the notice then reads as it would
    /// without the hook. Nil: none of its tasks wants a notice.
    public static func noticed(_ batch: BatchFinished, in state: AgentState) -> BatchFinished? {
        // An id the state does not know is kept: it cannot be shown to have asked for silence.
        func wanted(_ id: String) -> Bool { state.tasks[id]?.spec.notify != NotifyMode.none }
        let finished = batch.finished.filter(wanted), failed = batch.failed.filter(wanted)
        let leftOut = batch.finished.count - finished.count + batch.failed.count - failed.count
        guard leftOut > 0 else { return batch }
        var shown = batch
        shown.finished = finished
        shown.failed = failed
        // Past `listedUpTo` the ids are not listed, nor then known to want a notice or not:
        // those are counted as wanting one.
        shown.finishedCount = batch.finishedTotal - (batch.finished.count - finished.count)
        shown.failedCount = batch.failedTotal - (batch.failed.count - failed.count)
        if let unchanged = batch.unchangedCount {
            let unchangedLeftOut = batch.finished.filter { !wanted($0) && state.tasks[$0]?.unchanged == true }.count
            shown.unchangedCount = unchanged - unchangedLeftOut
        }
        return shown.finishedTotal + shown.failedTotal > 0 ? shown : nil
    }

    /// Names of files are listed when there are few enough to read at a glance.
    static let namesListedUpTo = 5

    public static func notice(for batch: BatchFinished, in state: AgentState) -> Notice {
        let finished = batch.finishedTotal
        let failed = batch.failedTotal
        // `overwrite = "update"` runs (a cron job's sync) say what changed. (Older events: counted from the ids.)
        let unchanged = batch.unchangedCount ?? batch.finished.filter { state.tasks[$0]?.unchanged == true }.count
        var summary: String
        if unchanged > 0 {
            summary = "\(finished - unchanged) updated, \(unchanged) unchanged" + (failed > 0 ? ", \(failed) failed" : "")
        } else if failed == 0 {
            summary = finished == 1 ? "1 transfer finished" : "\(finished) transfers finished"
        } else if finished == 0 {
            summary = failed == 1 ? "1 transfer failed" : "\(failed) transfers failed"
        } else {
            summary = "\(finished) finished, \(failed) failed"
        }
        if let name = batch.batch { summary = "\(name): \(summary)" }

        // Failures are named first, even among many: they are what the user must act on.
        var lines: [String] = []
        for id in batch.failed.prefix(namesListedUpTo) {
            guard let task = state.tasks[id] else { continue }
            lines.append("✗ \(task.displayName): \(task.error ?? "failed")")
        }
        if failed > namesListedUpTo { lines.append("… and \(failed - namesListedUpTo) more failed (syncagent status --state failed)") }
        if finished + failed <= namesListedUpTo {
            for id in batch.finished {
                guard let task = state.tasks[id] else { continue }
                lines.append("✓ \(task.displayName)")
            }
        }
        return Notice(summary: summary, body: lines.joined(separator: "\n"), critical: failed > 0,
                      actions: actions(finished: batch.finished, failed: batch.failed, in: state))
    }

    /// What a notice about these tasks offers: "Retry" for the failed ones
    /// (those it lists: at most the 100 a batch's event keeps), then "Open
    /// folder" for the files the finished ones published.
    public static func actions(finished: [String], failed: [String], in state: AgentState) -> [NoticeAction] {
        var actions: [NoticeAction] = []
        var seen = Set<String>()
        let retried = failed.filter { state.tasks[$0] != nil && seen.insert($0).inserted }
        if !retried.isEmpty { actions.append(.retry(tasks: retried)) }
        let files = FolderOpening.shown(finished.compactMap { state.tasks[$0]?.publishedPath })
        if !files.isEmpty { actions.append(.openFolder(files: files)) }
        return actions
    }

    /// Whether a failure is one only the user can mend — a wrong or gone
    /// URL, a refusal, a damaged or unwanted file, a full disk — and so is
    /// told as it happens rather than when its batch ends. An outage (the
    /// retries or `total_timeout` spent, a connection that would not come)
    /// is the server's to mend: the batch's notice tells it.
    public static func needsTheUser(_ code: FailureCode) -> Bool {
        switch code {
        case .retriesExhausted, .totalTimeout: false
        // Certificate and TLS failures need the user (a CA file, a URL); other curl errors are the network's.
        case .curl(let code): [35, 51, 53, 54, 58, 59, 60, 64, 66, 77, 80, 82, 83, 90, 91].contains(code)
        case .http(let status): !(500..<600).contains(status) && status != 408 && status != 429
        default: true
        }
    }

    /// The top-level tasks that failed and want telling at once: those
    /// whose notices go with their batch (`notify = "each"` ones get their
    /// own anyway, `none` ones none), for a failure that needs the user.
    public static func tellsAtOnce(_ task: TaskState, code: FailureCode) -> Bool {
        task.spec.parent == nil && task.spec.notify == .batch && needsTheUser(code)
    }

    /// Of the tasks that failed and wanted telling at once, those still to
    /// tell: not one run again or forgotten since (no longer the user's to
    /// mend), nor one whose batch has ended since (its batch's notice,
    /// posted now, names it: not twice).
    public static func stillToTell(_ ids: [String], in state: AgentState) -> [TaskState] {
        var seen = Set<String>()
        return ids.filter { seen.insert($0).inserted }.compactMap { state[$0] }.filter { task in
            let batch = BatchKey(task.spec.batch)
            let batchGoesOn = batch.name == nil ? state.activeCount > 0 : state.activeByBatch[batch, default: 0] > 0
            return task.phase == .failed && !task.forgotten && batchGoesOn
        }
    }

    /// How long a failure waits to be told: failures of the same moment go
    /// out in one notice, and one whose batch ends meanwhile (its last
    /// other task finishing) is told by the batch's notice alone.
    public static let failureGraceMs: Int64 = 1_000

    /// How long failure notices keep quiet after one went out: failures in
    /// that time go out together, in one notice, when it ends.
    public static let failureQuietMs: Int64 = 5_000

    /// Failures told as they happen: one names its file and reason; several
    /// are one notice, named as a batch's failures are.
    public static func failureNotice(for tasks: [TaskState]) -> Notice {
        if tasks.count == 1, let task = tasks.first { return ownNotice(for: task) }
        var lines = tasks.prefix(namesListedUpTo).map { "✗ \($0.displayName): \($0.error ?? "failed")" }
        if tasks.count > namesListedUpTo { lines.append("… and \(tasks.count - namesListedUpTo) more (syncagent status --state failed)") }
        return Notice(summary: "\(tasks.count) transfers failed", body: lines.joined(separator: "\n"), critical: true,
                      actions: [.retry(tasks: tasks.map(\.id))])
    }

    /// `notify = "each"`: one per task, on top of its batch's.
    public static func ownNotice(for task: TaskState) -> Notice {
        let name = task.displayName
        if task.phase == .failed {
            return Notice(summary: "\(name) failed", body: task.error ?? "", critical: true, actions: [.retry(tasks: [task.id])])
        }
        let files = FolderOpening.shown(task.publishedPath.map { [$0] } ?? [])
        return Notice(summary: "\(name) finished", body: ByteCount.format(task.bytes), critical: false,
                      actions: files.isEmpty ? [] : [.openFolder(files: files)])
    }
}

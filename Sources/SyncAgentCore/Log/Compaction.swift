/// What `compact` may drop from the log (SPEC §3, §6), decided from the
/// fold alone. The snapshot keeps every task's state, so the fold after a
/// compaction equals the fold before it; what goes is the raw history of
/// tasks nobody needs to read event by event any more.
public enum Compaction {
    /// The default of `keep_ended`: a week of history stays readable.
    public static let defaultKeepEndedS: Int64 = 7 * 86_400

    /// The agent compacts by itself once this many events were written
    /// since the newest snapshot: start-up then never folds more than
    /// about this many (≈ 0.3 s).
    public static let eventsBetweenSnapshots: Int64 = 200_000

    /// Tasks whose raw events may go: ended before `endedBeforeMs`, owed
    /// nothing (their notification and hook are done), and in a family
    /// that has wholly ended that long ago too, so a video's history goes
    /// with its segments' or not at all.
    public static func prunableTasks(in state: AgentState, endedBeforeMs: Int64) -> [String] {
        func isOld(_ id: String) -> Bool {
            guard let task = state[id], task.phase.isEnded, let ended = task.endedAtMs, ended <= endedBeforeMs else { return false }
            return !state.owedOwnNotices.contains(id) && !state.owedTaskHooks.contains(id)
        }
        // Decided once per family: a live video may have tens of thousands of
        // segments. A task that is not old itself keeps its family, so only
        // families with an old member are looked up: a queue of 100,000 tasks
        // put a 6.7 MB map at the agent's peak of memory.
        var familyIsOld: [String: Bool] = [:]
        return state.tasks.compactMap { task in
            guard isOld(task.id) else { return nil }
            let root = task.parentID ?? task.id
            let old = familyIsOld[root] ?? (isOld(root) && (state.children[root] ?? []).allSatisfy(isOld))
            familyIsOld[root] = old
            return old ? task.id : nil
        }
    }

    /// Whether the agent should compact now, seeing how far the log has grown past its newest snapshot.
    public static func isDue(lastSeq: Int64, snapshotSeq: Int64) -> Bool {
        lastSeq - snapshotSeq >= eventsBetweenSnapshots
    }

    /// After an intake this large (tasks this run created since the newest
    /// snapshot, however many intakes and video segments made them; a run
    /// killed first counts none of its own), once it is over, the agent
    /// snapshots its own state: `status` then reads
    /// that, passing over the queue it does not list (0.04 s for 100,000
    /// queued tasks), rather than fold each task's `created` event (0.3 s).
    public static let tasksBeforeIntakeSnapshot = 10_000

    /// How many tasks were created after `snapshotSeq`: the newest ones, as
    /// tasks are in the order they were created.
    public static func tasksCreated(in state: AgentState, after snapshotSeq: Int64) -> Int {
        let tasks = state.orderedTasks
        var low = tasks.startIndex, high = tasks.endIndex
        while low < high {
            let middle = low + (high - low) / 2
            if tasks[middle].createdSeq <= snapshotSeq { low = middle + 1 } else { high = middle }
        }
        return tasks.endIndex - low
    }
}

/// `"7d"`, `"12h"`, `"30m"`, `"45s"`, `"0"` or a whole number of seconds.
public enum DurationText {
    public static func seconds(_ text: String) -> Int64? {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800]
        var digits = Substring(text)
        var unit: Int64 = 1
        if let last = digits.last, let multiplier = units[last] {
            unit = multiplier
            digits = digits.dropLast()
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber), let count = Int64(digits) else { return nil }
        let (total, overflow) = count.multipliedReportingOverflow(by: unit)
        return overflow ? nil : total
    }
}

import Dispatch
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// `syncagent compact` (SPEC §3, §6): stores the fold as a snapshot, then
/// deletes the raw events of tasks that ended before the cutoff, then gives
/// the freed pages back to the file system.
///
/// Safe at every instant: the snapshot is committed before any event goes,
/// and start-up reads the snapshot and only the events after it, so a crash
/// between any two steps leaves the old state or the new one, and the
/// events still there are merely deleted by the next compaction.
public enum Compactor {
    /// How the work is cut: beside a running agent, small transactions with
    /// pauses, so the agent's commits never wait long for the file.
    public struct Pacing: Sendable {
        var rowsPerTransaction: Int
        var pagesPerTransaction: Int
        var pauseMicroseconds: UInt32
        /// The agent runs: no step may hold the file long, nor rewrite it whole.
        var besideAgent: Bool

        public static let alone = Pacing(rowsPerTransaction: 50_000, pagesPerTransaction: 1 << 16, pauseMicroseconds: 0, besideAgent: false)
        public static let besideAgent = Pacing(rowsPerTransaction: 2_000, pagesPerTransaction: 256, pauseMicroseconds: 2_000, besideAgent: true)
    }

    /// `stopRequested` is asked between steps: the agent stopping cuts a compaction short, safely.
    /// - Parameter given: the agent's own fold, taken right after a commit
    ///   (nothing recorded since), handed over by this call: stored as it is,
    ///   not folded again (a second fold of 100,000 queued tasks would double
    ///   the agent's memory), and let go once stored.
    public static func compact(eventLog path: String, olderThanS: Int64, nowMs: Int64, trigger: String,
                               pacing: Pacing, given: (() -> AgentState?)? = nil, stopRequested: () -> Bool = { false }) throws -> Compacted {
        let store = try EventStore(writingTo: path)
        let bytesBefore = try store.databaseBytes()
        let cutoffMs = olderThanS >= nowMs / 1000 ? Int64.min : nowMs - olderThanS * 1000
        // The agent's own compactions are for their snapshot (start-up and `status` fold less);
        // one asked for is for what it drops.
        let forItsSnapshot = trigger != "requested"
        guard let (snapshotSeq, prunable) = try snapshot(into: store, given: given, nowMs: nowMs, olderThanS: olderThanS,
                                                         cutoffMs: cutoffMs, evenIfNothingDrops: forItsSnapshot,
                                                         stopRequested: stopRequested) else {
            // Nothing to drop: no snapshot, no change. (Written anyway, it doubled the log: 10.3 → 20.6 MiB at 20,000 tasks.)
            return Compacted(snapshotSeq: try store.newestSnapshotSeq(), tasks: 0, events: 0, olderThanS: olderThanS,
                             bytesBefore: bytesBefore, bytesAfter: try store.databaseBytes(), trigger: trigger)
        }
        CrashPoint.compactSnapshotWritten.reached()

        // Many tasks' events per transaction, each transaction short; beside
        // the agent, a pause after every one, so its commits get their turn.
        var remaining = prunable
        var deleted = 0
        var tasksPruned = Set<String>()
        while !stopRequested() {
            let step = try store.deleteEvents(tasks: &remaining, through: snapshotSeq, beforeMs: cutoffMs,
                                              limit: pacing.rowsPerTransaction)
            deleted += step.rows
            tasksPruned.formUnion(step.tasks)
            if deleted > 0 { CrashPoint.compactDeleting.reached() }
            if step.rows < pacing.rowsPerTransaction { break }
            if pacing.pauseMicroseconds > 0 { Posix.sleep(microseconds: Int(pacing.pauseMicroseconds)) }
        }

        if try store.shrinksIncrementally {
            while !stopRequested(), try store.releaseFreePages(pacing.pagesPerTransaction) {
                if pacing.pauseMicroseconds > 0 { Posix.sleep(microseconds: Int(pacing.pauseMicroseconds)) }
            }
        } else if !pacing.besideAgent, deleted > 0 {
            // A log from before snapshots existed: rewritten once, it shrinks by itself from then on.
            try store.rewriteToShrink()
        }
        if !stopRequested() { try store.markCompactionDone(snapshotSeq) }
        if !pacing.besideAgent { try store.checkpoint() }
        if stopRequested() { throw CompactionCutShort(snapshotSeq: snapshotSeq, events: deleted) }
        return Compacted(snapshotSeq: snapshotSeq, tasks: tasksPruned.count, events: deleted, olderThanS: olderThanS,
                         bytesBefore: bytesBefore, bytesAfter: try store.databaseBytes(), trigger: trigger)
    }

    /// Stores the fold (the given one, or the log folded again) as a
    /// snapshot, and returns what the pruning needs of it: the fold itself is
    /// let go on return, not held while events are deleted. Nil, with no
    /// snapshot written, when nothing would be dropped and `evenIfNothingDrops` is false.
    private static func snapshot(into store: EventStore, given: (() -> AgentState?)?, nowMs: Int64, olderThanS: Int64, cutoffMs: Int64,
                                 evenIfNothingDrops: Bool, stopRequested: () -> Bool) throws -> (seq: Int64, prunable: [String])? {
        let state: AgentState
        if let given, let lent = given() {
            // A fold past what the file holds would be a snapshot of events that may never be written.
            guard lent.lastSeq <= store.lastSeq else {
                throw StoreError(message: "the state to snapshot covers seq \(lent.lastSeq), but \(store.path) holds events up to \(store.lastSeq)")
            }
            state = lent
        } else {
            do {
                state = try withoutActuallyEscaping(stopRequested) { try store.replay(stopWhen: $0) }
            } catch is EventStore.ReplayStopped {
                throw CompactionCutShort(snapshotSeq: nil, events: 0)
            }
        }
        let prunable = Compaction.prunableTasks(in: state, endedBeforeMs: cutoffMs)
        if !evenIfNothingDrops, try !store.holdsEventsToDrop(tasks: prunable, through: state.lastSeq, beforeMs: cutoffMs) { return nil }
        try store.writeSnapshot(state, nowMs: nowMs, olderThanS: olderThanS, stopRequested: stopRequested)
        return (state.lastSeq, prunable)
    }

}

/// The agent stopped during a compaction: what it did stands, the rest is
/// done at its next start (the snapshot is not marked done).
public struct CompactionCutShort: Error, CustomStringConvertible {
    /// Nil: stopped before its snapshot, so nothing was compacted.
    public var snapshotSeq: Int64?
    public var events: Int
    public var description: String {
        guard let snapshotSeq else { return "cut short by the agent stopping before anything was compacted; run syncagent compact again" }
        return "cut short by the agent stopping after \(events) events of the snapshot at seq \(snapshotSeq); its next start finishes it"
    }
}

/// Runs compactions off the event loop for the agent: one at a time, on its
/// own connection to the log; the result comes back through a pipe the loop
/// polls, and the loop records it.
final class BackgroundCompactor {
    typealias Outcome = (trigger: String, olderThanS: Int64, result: Result<Compacted, Error>)

    var fd: Int32 { finished.fd }
    private let finished: WorkerResults<Outcome>
    private let queue = DispatchQueue(label: "syncagent.compaction")
    /// A compaction is running (touched by the loop only).
    private(set) var busy = false
    private let stopping = StopFlag()

    init() throws {
        finished = try WorkerResults()
    }

    deinit {
        if !busy { finished.close() }
    }

    /// The compaction folds the committed log itself, on its own connection,
    /// or, given the loop's state (`given`), stores that: shared, not copied.
    /// Until it is stored, the loop's first change to a part of it copies
    /// that part, once: a chunk of 1,024 tasks, or a whole index (the run
    /// queue, the id, destination or source index: some MB each with 100,000
    /// tasks). Folding again would have made all of it twice.
    func start(eventLog: String, olderThanS: Int64, trigger: String, given: AgentState? = nil) {
        busy = true
        let lent = given.map(LentState.init)
        queue.async { [finished, stopping, lent] in
            finished.post((trigger, olderThanS, Result {
                try Compactor.compact(eventLog: eventLog, olderThanS: olderThanS, nowMs: FileSystem.nowMs,
                                      trigger: trigger, pacing: .besideAgent, given: lent.map { lent in { lent.take() } },
                                      stopRequested: { stopping.isSet })
            }))
        }
    }

    /// Cuts a running compaction short at its next step and waits for it.
    func stop() -> [Outcome] {
        guard busy else { return [] }
        stopping.set()
        queue.sync {}
        return drain()
    }

    func drain() -> [Outcome] {
        let done = finished.drain()
        if !done.isEmpty { busy = false }
        return done
    }
}

/// The loop's state lent to the compaction's thread: taken once, so that
/// once stored no one holds it but the loop (whose changes then copy nothing).
private final class LentState: @unchecked Sendable {
    private let lock = NSLock()
    private var state: AgentState?
    init(_ state: AgentState) { self.state = state }
    func take() -> AgentState? {
        lock.lock(); defer { lock.unlock() }
        defer { state = nil }
        return state
    }
}

/// A flag set by one thread and read by another.
private final class StopFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.lock(); defer { lock.unlock() }; return value }
    func set() { lock.lock(); value = true; lock.unlock() }
}

extension Compactor {
    /// `syncagent compact` with no agent running: the CLI takes the agent's
    /// lock for the duration (an agent starting meanwhile waits for none and
    /// says one runs), compacts at full speed, and records what it did.
    /// Throws `AgentAlreadyRunning` when an agent holds the lock: the
    /// request then goes to that agent instead.
    public static func compactAlone(paths: AgentPaths, olderThanS: Int64) throws -> Compacted {
        try StrictModes.makeTrustedStateDir(paths.stateDir)
        let lock = try StateLock(path: paths.lockFile, stateDir: paths.stateDir)
        defer { withExtendedLifetime(lock) {} }
        let report = try compact(eventLog: paths.eventLog, olderThanS: olderThanS, nowMs: FileSystem.nowMs, trigger: "requested",
                                 pacing: .alone)
        let store = try EventStore(writingTo: paths.eventLog)
        try store.append([Event(seq: store.lastSeq + 1, atMs: FileSystem.nowMs, task: nil, body: .compacted(report))])
        return report
    }
}

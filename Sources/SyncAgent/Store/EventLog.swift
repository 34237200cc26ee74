import Foundation
import SyncAgentCore

/// The agent's one owner of state: every fact is numbered, applied to the
/// in-memory fold at once, and written to SQLite with the rest of its
/// batch at `commit()`. So the state the agent acts on is always the fold
/// of the log it is writing (SPEC §6 rule 1).
final class EventLog {
    let store: EventStore
    private(set) var state: AgentState
    private var pending: [Event] = []
    private let clock: () -> Int64

    init(store: EventStore, clock: @escaping () -> Int64 = { FileSystem.nowMs }) throws {
        self.store = store
        self.clock = clock
        self.state = try store.replay()
    }

    @discardableResult
    func record(_ body: EventBody, task: String? = nil) -> Event {
        let event = Event(seq: state.lastSeq + 1, atMs: clock(), task: task, body: body)
        state.apply(event)
        recorded?(event)
        pending.append(event)
        if case .created = body { creationsUncommitted = true }
        return event
    }

    /// Something recorded is not yet known to be durable: waiting for a
    /// commit, or in the commit in flight.
    var hasPending: Bool { !pending.isEmpty || inFlight != nil }
    /// Events recorded since the last commit began.
    var hasUncommitted: Bool { !pending.isEmpty }
    /// A group commit was handed to the commit thread and is not finished.
    var commitInFlight: Bool { inFlight != nil }

    /// The group commit the commit thread writes: its events, whether it
    /// creates tasks, its error once done, and what follows it on the loop.
    private var inFlight: (events: [Event], creates: Bool, outcome: CommitOutcome, thenOnLoop: () -> Void)?
    private final class CommitOutcome: @unchecked Sendable {
        var error: Error?
    }
    /// Made at the first group commit handed over.
    private var commitThread: CommitThread?
    /// Readable once the commit in flight is done (`finishCommitInFlight`).
    var commitFd: Int32? { commitThread?.fd }

    /// Told of each event as it is applied, and of each batch once it is
    /// committed (the RPC's view of the downloads, and its notifications).
    var recorded: ((Event) -> Void)?
    var committed: (([Event]) -> Void)?

    /// A task was created whose `created` is not yet durable: it may not
    /// start (nor create a file on disk) before it is.
    var hasPendingCreations: Bool { creationsUncommitted || inFlight?.creates == true }
    private var creationsUncommitted = false

    /// Set once `SpecArchive` reads jobs back from this log (see
    /// `startLettingWaitingJobsGo`): a waiting task's job is then let go
    /// once the event that made it wait is committed.
    private(set) var releasesWaitingJobs = false
    /// Up to this many queued tasks keep their jobs: reading a job back costs
    /// a task that starts at once about 15 µs, and a short queue's jobs cost
    /// little memory (about 400 bytes each).
    private var queueHeldWhole = 0
    /// This thread's failed reads of jobs let go, when letting go began.
    private var failuresBefore = 0

    /// One transaction for everything recorded since the last commit,
    /// once the commit in flight (if any) is finished.
    func commit() throws {
        try finishCommitInFlight()
        guard !pending.isEmpty else { return }
        try refuseAfterFailedRead()
        try store.append(pending)
        committed?(pending)
        if releasesWaitingJobs { releaseJobs(waitingAfter: pending) }
        pending.removeAll(keepingCapacity: true)
        creationsUncommitted = false
    }

    /// Hands everything recorded so far to the commit thread, and returns:
    /// `thenOnThread` runs there once it is written (the renames it vouches
    /// for), `thenOnLoop` on the loop when it is finished
    /// (`finishCommitInFlight`). Events recorded meanwhile wait for the next
    /// commit; nothing here reads or writes the store until it is done.
    func beginCommit(thenOnThread: @escaping @Sendable () -> Void, thenOnLoop: @escaping () -> Void) throws {
        try finishCommitInFlight()
        guard !pending.isEmpty else { return thenOnLoop() }
        try refuseAfterFailedRead()
        let events = pending, outcome = CommitOutcome()
        pending.removeAll(keepingCapacity: true)
        inFlight = (events, creationsUncommitted, outcome, thenOnLoop)
        creationsUncommitted = false
        if commitThread == nil { commitThread = try CommitThread() }
        let store = UncheckedStore(store)
        commitThread!.start {
            do {
                try store.store.append(events)
                thenOnThread()
            } catch {
                outcome.error = error
            }
        }
    }

    /// Waits for the commit in flight, if one is, and finishes it on the
    /// loop: what waited for its events follows, or its error is thrown
    /// (as a commit's on the loop would be).
    func finishCommitInFlight() throws {
        guard let (events, _, outcome, thenOnLoop) = inFlight else { return }
        commitThread?.wait()
        inFlight = nil
        if let error = outcome.error { throw error }
        committed?(events)
        if releasesWaitingJobs { releaseJobs(waitingAfter: events) }
        thenOnLoop()
    }

    /// The log closes: a commit in flight is waited for (its error, if any,
    /// is the agent's already), and the thread ends.
    func close() {
        commitThread?.stop()
        commitThread = nil
        store.close()
    }

    /// The store, handed to the commit thread while the loop leaves it alone.
    private struct UncheckedStore: @unchecked Sendable {
        let store: EventStore
        init(_ store: EventStore) { self.store = store }
    }

    /// Recorded on a placeholder job (one that could not be read back): never made durable.
    private func refuseAfterFailedRead() throws {
        if releasesWaitingJobs, let failure = SpecArchive.failure(since: failuresBefore) { throw StoreError(message: failure) }
    }

    /// The jobs of top-level tasks these events left waiting (queued or
    /// paused), once the events are durable: a new task's at once, one that
    /// waits again (a retry, a pause) if the log still holds its `created`.
    private func releaseJobs(waitingAfter events: [Event]) {
        guard state.runQueue.entries.count > queueHeldWhole else { return }
        for event in events {
            guard let id = event.task else { continue }
            switch event.body {
            case .created:
                state.releaseSpec(of: id)
            case .retrying, .paused, .resumed:
                // Best effort: the events are durable already, and a job kept costs only memory.
                _ = try? releaseIfTheLogHoldsIt(id)
            default:
                continue
            }
        }
    }

    /// Keeps a task's job in memory from now on: it is about to start, and
    /// its every step reads the job. Throws when it cannot be read back.
    func holdJob(of id: String) throws {
        state.holdSpec(of: id)
        try refuseAfterFailedRead()
    }

    /// From now on, lets waiting jobs go while more than `queueHeldWhole`
    /// tasks are queued (`SpecArchive` must read them back from this log):
    /// at once those of the waiting (queued or paused) top-level tasks whose
    /// `created` the log still holds (one run again after compaction dropped
    /// its events has none). Returns how many went.
    func startLettingWaitingJobsGo(queueHeldWhole: Int = 4096) throws -> Int {
        releasesWaitingJobs = true
        self.queueHeldWhole = queueHeldWhole
        failuresBefore = SpecArchive.failuresOnThisThread
        guard state.runQueue.entries.count > queueHeldWhole else { return 0 }
        var released = 0
        for position in state.tasks.indices where state.tasks[position].mayLetSpecGo {
            if try releaseIfTheLogHoldsIt(state.tasks[position].id) { released += 1 }
        }
        return released
    }

    /// Lets a waiting task's job go if the log still holds its `created`
    /// (one run again after compaction dropped its events has none). Whether it did.
    private func releaseIfTheLogHoldsIt(_ id: String) throws -> Bool {
        guard let task = state[id], task.mayLetSpecGo, try store.holdsCreated(of: id, at: task.createdSeq) else { return false }
        return state.releaseSpec(of: id)
    }
}

/// The log's `created` events, read back on a connection of their own for
/// `SpecArchive`, which calls `read` one call at a time (under its lock),
/// from the agent's thread or its compaction's.
final class JobReader: @unchecked Sendable {
    private let store: EventStore

    init(eventLog path: String) throws { store = try EventStore(readingFrom: path, cacheKiB: 256) }

    /// Installs a reader of this log as `SpecArchive`'s.
    static func install(eventLog path: String) throws {
        let reader = try JobReader(eventLog: path)
        SpecArchive.install { id, seq in try reader.read(id, seq) }
    }

    func read(_ id: String?, _ seq: Int64) throws -> TaskSpec {
        guard let spec = try store.createdSpec(of: id, at: seq) else {
            throw StoreError(message: "event log \(store.path) holds no created event at seq \(seq)\(id.map { " for task \($0)" } ?? "")")
        }
        return spec
    }
}

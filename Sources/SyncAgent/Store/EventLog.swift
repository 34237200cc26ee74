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
        pending.append(event)
        if case .created = body { hasPendingCreations = true }
        return event
    }

    var hasPending: Bool { !pending.isEmpty }

    /// A task was created since the last commit: it may not start (nor
    /// create a file on disk) before its `created` is durable.
    private(set) var hasPendingCreations = false

    /// Set once `SpecArchive` reads jobs back from this log: a waiting
    /// task's job is then let go once its `created` is committed.
    var releasesWaitingJobs = false

    /// One transaction for everything recorded since the last commit.
    func commit() throws {
        guard !pending.isEmpty else { return }
        // Recorded on a placeholder job (one that could not be read back): never made durable.
        if let failure = SpecArchive.failure { throw StoreError(message: failure) }
        try store.append(pending)
        if releasesWaitingJobs, hasPendingCreations {
            for event in pending { if case .created = event.body, let id = event.task { state.releaseSpec(of: id) } }
        }
        pending.removeAll(keepingCapacity: true)
        hasPendingCreations = false
    }

    /// Keeps a task's job in memory from now on: it is about to start, and
    /// its every step reads the job. Throws when it cannot be read back.
    func holdJob(of id: String) throws {
        state.holdSpec(of: id)
        if let failure = SpecArchive.failure { throw StoreError(message: failure) }
    }

    /// Lets go the jobs of the waiting top-level tasks whose `created` this
    /// log still holds (one run again after compaction dropped its events
    /// has none): the agent's start-up, after the fold. Returns how many.
    func releaseWaitingJobs() throws -> Int {
        var released = 0
        for entry in state.runQueue.entries {
            let task = state.tasks[entry.position]
            guard task.holdsSpec, task.parentID == nil, try store.holdsCreated(of: task.id, at: task.createdSeq) else { continue }
            if state.releaseSpec(of: task.id) { released += 1 }
        }
        return released
    }
}

/// The log's `created` events, read back on a connection of their own for
/// `SpecArchive`, which calls `read` one call at a time (under its lock),
/// from the agent's thread or its compaction's.
final class JobReader: @unchecked Sendable {
    private let store: EventStore

    init(eventLog path: String) throws { store = try EventStore(readingFrom: path) }

    func read(_ id: String?, _ seq: Int64) throws -> TaskSpec {
        guard let spec = try store.createdSpec(of: id, at: seq) else {
            throw StoreError(message: "event log \(store.path) holds no created event at seq \(seq)\(id.map { " for task \($0)" } ?? "")")
        }
        return spec
    }
}

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

    /// One transaction for everything recorded since the last commit.
    func commit() throws {
        guard !pending.isEmpty else { return }
        try store.append(pending)
        pending.removeAll(keepingCapacity: true)
        hasPendingCreations = false
    }
}

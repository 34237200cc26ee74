import DequeModule

/// The downloads as aria2's clients see them: top-level tasks not
/// forgotten (an HLS video's segments and an upload's parts are their
/// parent's business), each by its GID, sorted into aria2's three lists.
/// Kept beside the fold as events are recorded, so a client polling
/// `tellActive`, `tellWaiting`, `tellStopped` and `getGlobalStat` every
/// second (as AriaNg does) costs what the lists hold, not a walk over
/// every task ever created.
public struct RPCView: Equatable, Sendable {
    public enum List: Equatable, Sendable { case active, waiting, stopped }

    /// GID → task id.
    public private(set) var tasksByGID: [String: String] = [:]
    /// Task id → the list it is in.
    private var lists: [String: List] = [:]
    /// Stopped tasks, least recently stopped first (`tellStopped`'s order).
    /// A task that leaves the list (run again, forgotten) stays here until
    /// the list is next read, when entries that no longer match go.
    private var stoppedOrder: Deque<String> = []
    private var stoppedOrderIsExact = true
    /// The active and the waiting tasks (few, next to the stopped ones of a long log).
    public private(set) var active: Set<String> = []
    public private(set) var waiting: Set<String> = []
    public private(set) var stoppedCount = 0
    /// aria2's `numStoppedTotal` (stops of this session, purged or not): here
    /// the stopped downloads the log held when the view was made, and every
    /// stop since; never fewer than the stopped downloads listed.
    public var stoppedTotal: Int { max(stoppedSinceMade, stoppedCount) }
    private var stoppedSinceMade = 0

    public init() {}

    /// Everything the fold holds now.
    public init(state: AgentState) {
        var stopped: [(endedAtMs: Int64, seq: Int64, id: String)] = []
        for task in state.orderedTasks where Self.isShown(task) {
            tasksByGID[RPCGID.of(taskID: task.id)] = task.id
            let list = Self.list(of: task)
            set(task.id, to: list, appendingStopped: false)
            if list == .stopped { stopped.append((task.endedAtMs ?? task.updatedAtMs, task.lastSeq, task.id)) }
        }
        stoppedOrder = Deque(stopped.sorted { ($0.endedAtMs, $0.seq) < ($1.endedAtMs, $1.seq) }.map(\.id))
        stoppedSinceMade = stoppedCount
    }

    /// After `event` was applied to `state`: the task it names moves to the list it is in now.
    public mutating func note(_ event: Event, in state: AgentState) {
        guard let id = event.task, let task = state[id] else { return }
        if case .created = event.body, task.parentID == nil {
            tasksByGID[RPCGID.of(taskID: id)] = id
        } else if lists[id] == nil {
            // A child task: its parent is the download.
            return
        }
        if task.forgotten {
            set(id, to: nil, appendingStopped: false)
            tasksByGID[RPCGID.of(taskID: id)] = nil
        } else {
            set(id, to: Self.list(of: task), appendingStopped: true)
        }
    }

    /// What a client's name for a download comes to.
    public enum Lookup: Equatable, Sendable {
        case found(String)
        case notFound
        /// A prefix of more than one GID.
        case notUnique
    }

    /// The task a client names: a whole GID or a unique prefix of one (as aria2 allows).
    public func lookup(_ query: String) -> Lookup {
        guard let gid = RPCGID.normalizedQuery(query) else { return .notFound }
        if let id = tasksByGID[gid] { return .found(id) }
        guard gid.utf8.count < 16 else { return .notFound }
        var found: String?
        for (candidate, id) in tasksByGID where candidate.hasPrefix(gid) {
            guard found == nil else { return .notUnique }
            found = id
        }
        return found.map(Lookup.found) ?? .notFound
    }

    /// The task a client names, if it names one alone.
    public func task(named query: String) -> String? {
        if case .found(let id) = lookup(query) { return id }
        return nil
    }

    public func list(of id: String) -> List? { lists[id] }

    /// Stopped task ids, least recently stopped first (the list itself: no copy).
    public mutating func stopped() -> Deque<String> {
        if !stoppedOrderIsExact || stoppedOrder.count != stoppedCount {
            // Each stopped task where it last stopped; those that left the list go.
            var seen = Set<String>()
            var kept: Deque<String> = []
            for id in stoppedOrder.reversed() where lists[id] == .stopped && seen.insert(id).inserted { kept.prepend(id) }
            stoppedOrder = kept
            stoppedOrderIsExact = true
        }
        return stoppedOrder
    }

    private mutating func set(_ id: String, to list: List?, appendingStopped: Bool) {
        let old = lists[id]
        guard old != list else { return }
        switch old {
        case .active?: active.remove(id)
        case .waiting?: waiting.remove(id)
        case .stopped?:
            stoppedCount -= 1
            stoppedOrderIsExact = false
        case nil: break
        }
        switch list {
        case .active?: active.insert(id)
        case .waiting?: waiting.insert(id)
        case .stopped?:
            stoppedCount += 1
            if appendingStopped {
                stoppedOrder.append(id)
                stoppedSinceMade += 1
            }
        case nil: break
        }
        lists[id] = list
    }

    static func isShown(_ task: TaskState) -> Bool { task.parentID == nil && !task.forgotten }

    static func list(of task: TaskState) -> List {
        switch task.phase {
        case .running: .active
        case .queued, .paused: .waiting
        case .finished, .failed, .cancelled: .stopped
        }
    }
}

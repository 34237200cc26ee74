/// Top-level tasks by their aria2 GID (`RPCGID`), which is how the RPC's
/// clients name a download: two tasks with one GID could not be told
/// apart (a `remove` would reach one of them, the other no call at all).
/// Entries are positions under a hash of the GID (`PositionTable`), each
/// hit checked against the task's own id; the hash is Swift's, seeded per
/// process, since a client chooses GIDs and must not aim them at one slot.
struct GIDIndex: Equatable, Sendable {
    private var table = PositionTable()

    /// The position of the top-level task whose GID is `gid`, if there is one.
    func position(of gid: UInt64, in tasks: TaskList) -> Int? {
        table.first(hash: gid.hashValue) { RPCGID.number(of: tasks[$0].id) == gid }
    }

    mutating func insert(_ gid: UInt64, position: Int) {
        table.insert(hash: gid.hashValue, position: position)
    }
}

/// Why a new task may not take an id.
public enum TaskIDConflict: Equatable, Sendable {
    /// Another task has the id.
    case taken
    /// Another task has the GID the id would have.
    case sharesGID(gid: String, with: String)

    /// What is wrong, after the id itself: `"x" is already used by another task`.
    public func sentence(for id: String) -> String {
        switch self {
        case .taken:
            "\"\(Printable.escaping(id))\" is already used by another task"
        case .sharesGID(let gid, let other):
            "\"\(Printable.escaping(id))\" would have the aria2 RPC GID \(gid), which task \(Printable.escaping(other)) has: "
                + "choose another id"
        }
    }
}

extension AgentState {
    /// Why a new task may not be given `id`, if it may not: another task
    /// has that id, or (for a top-level task) that id's GID. Every source
    /// of a task id asks here — a job file's `id`, `submit --id`, an RPC
    /// `gid`, and the ids the agent draws itself.
    public func conflict(ofNewTaskID id: String) -> TaskIDConflict? {
        if tasks[id] != nil { return .taken }
        // Tasks whose ids are GIDs (16 hex digits) are indexed under them too: a name hashed onto one meets it.
        let gid = RPCGID.number(of: id)
        guard let position = gidIndex.position(of: gid, in: tasks) else { return nil }
        return .sharesGID(gid: RPCGID.hex(gid), with: tasks[position].id)
    }

    /// Indexes the GID of the task at `position`, if it is a top-level task:
    /// as the fold creates it, or a snapshot is read.
    mutating func indexGIDOfTask(at position: Int) {
        guard tasks[position].parentID == nil else { return }
        gidIndex.insert(RPCGID.number(of: tasks[position].id), position: position)
    }
}

import Foundation

/// Tasks found by a string of their own job — a destination, a job file's
/// identity — holding no copy of the strings: an entry is the key's hash
/// and the task's position (`PositionTable`), and a hit is checked against
/// the task's own string (read back from the log for a job let go). With
/// 100,000 jobs queued, the strings and the dictionaries keyed by them cost
/// 25 MB.
///
/// The hash is Swift's, seeded per process: the index is never stored
/// (a snapshot holds the strings), so no one can aim keys at one slot.
struct TaskKeyIndex: Equatable, Sendable {
    private var table = PositionTable()
    /// For tests: every key hashes alike, so keys always meet.
    private var everyKeyCollides = false

    init(everyKeyCollides: Bool = false) { self.everyKeyCollides = everyKeyCollides }

    private func hash(_ key: String) -> Int { everyKeyCollides ? 0 : key.hashValue }

    var count: Int { table.count }
    var isEmpty: Bool { table.count == 0 }

    /// The position of the task in `tasks` that holds `key`; `keyOf` reads a task's key.
    func position(of key: String, in tasks: TaskList, keyOf: (TaskState) -> String?) -> Int? {
        table.first(hash: hash(key)) { keyOf(tasks[$0]) == key }
    }

    /// Gives `key` to the task at `position` unless another task holds it;
    /// whether it did.
    @discardableResult
    mutating func insert(_ key: String, position: Int, in tasks: TaskList, keyOf: (TaskState) -> String?) -> Bool {
        let keyHash = hash(key)
        if table.first(hash: keyHash, where: { keyOf(tasks[$0]) == key }) != nil { return false }
        table.insert(hash: keyHash, position: position)
        return true
    }

    /// Takes `key` from the task at `position`, if that task holds it (a
    /// task has one key of a kind: its entry is the one under that hash).
    mutating func remove(_ key: String, position: Int) {
        table.remove(hash: hash(key), position: position)
    }

    /// The positions of the tasks holding a key, in creation order.
    var positions: [Int] { table.positions }

    static func == (lhs: TaskKeyIndex, rhs: TaskKeyIndex) -> Bool { lhs.table == rhs.table }
}

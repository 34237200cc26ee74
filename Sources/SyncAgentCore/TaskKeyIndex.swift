import Foundation

/// Tasks found by a string of their own job — a destination, a job file's
/// identity — holding no copy of the strings: an entry is the key's hash
/// and the task's position, and a hit is checked against the task's own
/// string (read back from the log for a job let go). With 100,000 jobs
/// queued, the strings and the dictionaries keyed by them cost 25 MB.
///
/// The hash is Swift's, seeded per process: the index is never stored
/// (a snapshot holds the strings), so no one can aim keys at one slot.
struct TaskKeyIndex: Equatable, Sendable {
    private var byHash: [Int: Int32] = [:]
    /// A key whose hash another key holds already (almost never).
    private var collided: [String: Int32] = [:]
    /// For tests: every key hashes alike, so the rare path is taken.
    private var everyKeyCollides = false

    init(everyKeyCollides: Bool = false) { self.everyKeyCollides = everyKeyCollides }

    private func hash(_ key: String) -> Int { everyKeyCollides ? 0 : key.hashValue }

    var count: Int { byHash.count + collided.count }
    var isEmpty: Bool { byHash.isEmpty && collided.isEmpty }

    /// The position of the task in `tasks` that holds `key`; `keyOf` reads a task's key.
    func position(of key: String, in tasks: TaskList, keyOf: (TaskState) -> String?) -> Int? {
        if let position = byHash[hash(key)], keyOf(tasks[Int(position)]) == key { return Int(position) }
        return collided.isEmpty ? nil : collided[key].map(Int.init)
    }

    /// Gives `key` to the task at `position` unless another task holds it;
    /// whether it did.
    @discardableResult
    mutating func insert(_ key: String, position: Int, in tasks: TaskList, keyOf: (TaskState) -> String?) -> Bool {
        // (A key may sit in `collided` while its slot is free again: its first holder let go.)
        if !collided.isEmpty, collided[key] != nil { return false }
        let slot = hash(key)
        guard let holder = byHash[slot] else {
            byHash[slot] = Int32(position)
            return true
        }
        if keyOf(tasks[Int(holder)]) == key { return false }
        collided[key] = Int32(position)
        return true
    }

    /// Takes `key` from the task at `position`, if that task holds it.
    mutating func remove(_ key: String, position: Int, in tasks: TaskList, keyOf: (TaskState) -> String?) {
        let slot = hash(key)
        if byHash[slot] == Int32(position), keyOf(tasks[position]) == key {
            byHash[slot] = nil
        } else if collided[key] == Int32(position) {
            collided[key] = nil
        }
    }

    /// The positions of the tasks holding a key, in creation order.
    var positions: [Int32] {
        var positions = Array(byHash.values)
        positions.append(contentsOf: collided.values)
        positions.sort()
        return positions
    }
}

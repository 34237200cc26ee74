/// Task positions found by a hash of one of the task's strings (its id,
/// its destination, its job file's identity): open addressing over 8-byte
/// slots, 32 bits of the hash and 32 of the position, grown when 7/8 full.
/// A dictionary keyed by the strings kept 2.6 slots a task at 100,000 (its
/// 3/4 load, then doubled) of 12 to 20 bytes each; this keeps 1.3 of 8.
/// The hash bits only narrow the search: the caller checks each candidate
/// against the task's own string, so keys whose hashes meet live side by side.
struct PositionTable: Sendable {
    /// 0: empty; else the hash's low 32 bits above the position plus one.
    private var slots: [UInt64] = []
    private(set) var count = 0

    private var mask: Int { slots.count - 1 }

    private static func tag(_ hash: Int) -> UInt64 { UInt64(UInt32(truncatingIfNeeded: hash)) }
    private static func position(_ slot: UInt64) -> Int { Int(slot & 0xFFFF_FFFF) - 1 }
    private func home(_ tag: UInt64) -> Int { Int(truncatingIfNeeded: tag) & mask }

    /// The first position stored under `hash` that `matches` accepts.
    func first(hash: Int, where matches: (Int) -> Bool) -> Int? {
        guard count > 0 else { return nil }
        let tag = Self.tag(hash)
        var index = home(tag)
        while slots[index] != 0 {
            if slots[index] >> 32 == tag, matches(Self.position(slots[index])) { return Self.position(slots[index]) }
            index = (index + 1) & mask
        }
        return nil
    }

    /// Stores `position` under `hash` (beside any others there).
    mutating func insert(hash: Int, position: Int) {
        precondition(position >= 0 && position < Int(UInt32.max), "a task position past 32 bits")
        if (count + 1) * 8 > slots.count * 7 { grow() }
        place(Self.tag(hash) << 32 | UInt64(position + 1))
        count += 1
    }

    /// Removes `position` from under `hash`, if it is there.
    mutating func remove(hash: Int, position: Int) {
        guard count > 0, position >= 0, position < Int(UInt32.max) else { return }
        let wanted = Self.tag(hash) << 32 | UInt64(position + 1)
        var hole = home(Self.tag(hash))
        while slots[hole] != wanted {
            if slots[hole] == 0 { return }
            hole = (hole + 1) & mask
        }
        slots[hole] = 0
        count -= 1
        // Later slots of the run that would no longer be found past the hole move back into it.
        var index = hole
        while true {
            index = (index + 1) & mask
            let slot = slots[index]
            if slot == 0 { return }
            let from = home(slot >> 32)
            if (index - from) & mask >= (index - hole) & mask {
                slots[hole] = slot
                slots[index] = 0
                hole = index
            }
        }
    }

    /// Every position stored, in increasing order.
    var positions: [Int] {
        var positions: [Int] = []
        positions.reserveCapacity(count)
        for slot in slots where slot != 0 { positions.append(Self.position(slot)) }
        positions.sort()
        return positions
    }

    mutating func reserveCapacity(_ wanted: Int) {
        var capacity = max(slots.count, 16)
        while wanted * 8 > capacity * 7 { capacity *= 2 }
        if capacity > slots.count { rehash(into: capacity) }
    }

    private mutating func place(_ slot: UInt64) {
        var index = home(slot >> 32)
        while slots[index] != 0 { index = (index + 1) & mask }
        slots[index] = slot
    }

    private mutating func grow() { rehash(into: max(16, slots.count * 2)) }

    private mutating func rehash(into capacity: Int) {
        let old = slots
        slots = [UInt64](repeating: 0, count: capacity)
        for slot in old where slot != 0 { place(slot) }
    }
}

extension PositionTable: Equatable {
    /// The same positions under the same hashes, wherever their slots are.
    static func == (lhs: PositionTable, rhs: PositionTable) -> Bool {
        lhs.count == rhs.count && lhs.slots.filter { $0 != 0 }.sorted() == rhs.slots.filter { $0 != 0 }.sorted()
    }
}

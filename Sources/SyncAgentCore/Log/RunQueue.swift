import DequeModule

/// The queued tasks in the order they should start: higher priority first,
/// first created first within a priority. Kept by the fold, so a scheduling
/// pass walks entries from the front instead of sorting every task.
public struct RunQueue: Equatable, Sendable {
    /// 32 bytes: a queue of 100,000 tasks holds 131,072 of them. The task's
    /// id and host are read from the task at `position` when it is chosen.
    public struct Entry: Equatable, Sendable {
        public var priority: Int
        public var seq: Int64
        /// Where the task is in `AgentState.tasks`.
        public var position: Int
        /// An optional's flag byte would round the entry up to 40 bytes.
        private var wake: OptionalInt64

        public init(priority: Int, seq: Int64, position: Int, notBeforeMs: Int64?) {
            self.priority = priority; self.seq = seq; self.position = position
            self.wake = OptionalInt64(notBeforeMs)
        }

        /// Not startable before this (not_before, retry backoff).
        public var notBeforeMs: Int64? { wake.value }

        /// Whether it must wait at `nowMs`.
        func waits(at nowMs: Int64) -> Bool { (wake.value ?? .min) > nowMs }

        /// Sort order: priority descending, then creation ascending.
        func precedes(_ other: Entry) -> Bool {
            priority != other.priority ? priority > other.priority : seq < other.seq
        }
    }

    /// A deque: tasks mostly leave from the front, which an array paid for
    /// by moving every other entry (quadratic in a queue of 100,000).
    public private(set) var entries: Deque<Entry> = []
    /// Entries that wait for a time (not_before, a retry's backoff): while
    /// none does, the next wake is known without a walk of the queue, which
    /// every scheduling pass asks for.
    public private(set) var timedCount = 0

    public init() {}

    public var count: Int { entries.count }

    /// First index whose entry does not precede `entry` (binary search).
    private func insertionIndex(of entry: Entry) -> Int {
        var low = 0, high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].precedes(entry) { low = middle + 1 } else { high = middle }
        }
        return low
    }

    mutating func insert(_ entry: Entry) {
        entries.insert(entry, at: insertionIndex(of: entry))
        if entry.notBeforeMs != nil { timedCount += 1 }
    }

    /// Adds an entry known to follow every other (a snapshot read back in order).
    mutating func append(_ entry: Entry) {
        entries.append(entry)
        if entry.notBeforeMs != nil { timedCount += 1 }
    }

    mutating func remove(priority: Int, seq: Int64) {
        let probe = Entry(priority: priority, seq: seq, position: 0, notBeforeMs: nil)
        let index = insertionIndex(of: probe)
        if index < entries.count, entries[index].seq == seq {
            if entries.remove(at: index).notBeforeMs != nil { timedCount -= 1 }
        }
    }
}

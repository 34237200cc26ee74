import Testing
@testable import SyncAgentCore

/// A queue of 100,000 tasks holds, per task, a `TaskState` in the task list,
/// its `TaskSpec` in a box of its own, and a run-queue entry (issue 12). A
/// field added, or one put where it pads its neighbours, shows here first.
@Suite("Per-task memory layout")
struct LayoutTests {
    @Test func aQueuedTaskTakesNoMoreBytesThanItDid() {
        // 208, 160 and 64 bytes before their counts and optional times were packed;
        // TaskState 168 before its counts, bytes and times went out of line (`TaskActivity`).
        #expect(MemoryLayout<TaskState>.stride <= 88, "TaskState grew: keep rarely set fields in its details or activity")
        #expect(MemoryLayout<TaskSpec>.stride <= 136, "TaskSpec grew: keep rarely set keys in its rare box")
        #expect(MemoryLayout<RunQueue.Entry>.stride <= 32)
        #expect(MemoryLayout<OptionalInt64>.stride == 8)
    }

    /// The last seq and time are kept as distances from the creation's: set
    /// in either order, with any values a damaged log may hold, they read back.
    @Test func theLastSeqAndTimeReadBackWhateverOrderTheyAreSetIn() {
        let pairs: [(Int64, Int64)] = [(1, 5), (5, 1), (.max, .min), (.min, .max), (0, 0), (-7, .max)]
        for (created, last) in pairs {
            var task = TaskState(id: "t", spec: TaskSpec(url: "http://h.test/x", dest: nil), seq: 3, atMs: 4)
            task.lastSeq = last
            task.updatedAtMs = last
            task.createdSeq = created
            task.createdAtMs = created
            #expect(task.lastSeq == last && task.createdSeq == created && task.updatedAtMs == last && task.createdAtMs == created)
            task.createdSeq = last
            task.lastSeq = created
            #expect(task.lastSeq == created && task.createdSeq == last)
        }
        // Set together, as a snapshot does, they read back too.
        for (created, last) in pairs {
            var task = TaskState(id: "t", spec: TaskSpec(url: "http://h.test/x", dest: nil), seq: 3, atMs: 4)
            task.setSeqsAndTimes(createdSeq: created, lastSeq: last, createdAtMs: last, updatedAtMs: created)
            #expect(task.createdSeq == created && task.lastSeq == last && task.createdAtMs == last && task.updatedAtMs == created)
            #expect((task.activity.box == nil) == (created == last), "a box only for what differs from the creation")
        }
        // A task nothing happened to since its creation holds no activity.
        let waiting = TaskState(id: "w", spec: TaskSpec(url: "http://h.test/w", dest: "/d/w"), seq: 7, atMs: 9)
        #expect(waiting.activity.box == nil && waiting.lastSeq == 7 && waiting.updatedAtMs == 9)
    }

    @Test func anOptionalTimeInEightBytesReadsBackAsItWasSet() {
        for value: Int64? in [nil, 0, -1, 1, .max, .min + 1, 1_795_000_000_000] {
            #expect(OptionalInt64(value).value == value)
            var stored = OptionalInt64(42)
            stored.value = value
            #expect(stored.value == value)
        }
        // The one value it cannot hold, from a damaged log, is still a value.
        #expect(OptionalInt64(.min).value == .min + 1)
    }

    /// A task that ended at `Int64.min` (a damaged log) was pruned and its
    /// header written by the build before, with the value itself: the
    /// header must still describe the task it reads back as.
    @Test func aHeaderWrittenWithTheSentinelStillDescribesItsTask() throws {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "t", body: .created(TaskSpec(url: "http://h.test/f", dest: "/d/f"))))
        state.apply(Event(seq: 2, atMs: .min, task: "t", body: .cancelled(Cancelled(bytes: 0))))
        let task = try #require(state["t"])
        #expect(task.endedAtMs == .min + 1)
        #expect(TaskHeader(phase: .cancelled, flags: 0, endedAtMs: .min, parent: nil).describes(task))
        #expect(try Snapshot.decode(Snapshot.encode(state)) == state)
    }

    /// The agent records `nextAttempt` and then looks for it in the task:
    /// at the 32-bit limit the two must still agree, or the task would wait
    /// for its own start forever.
    @Test func theNextAttemptIsTheOneTheFoldStores() throws {
        for recorded in [0, 1, Int(Int32.max) - 1, Int(Int32.max), Int(Int32.max) + 7, Int.max] {
            var state = AgentState()
            state.apply(Event(seq: 1, atMs: 1, task: "t", body: .created(TaskSpec(url: "http://h.test/f", dest: "/d/f"))))
            state.apply(Event(seq: 2, atMs: 2, task: "t", body: .started(Started(attempt: recorded, offset: 0, url: "http://h.test/f"))))
            let next = try #require(state["t"]).nextAttempt
            state.apply(Event(seq: 3, atMs: 3, task: "t", body: .started(Started(attempt: next, offset: 0, url: "http://h.test/f"))))
            #expect(state["t"]?.attempts == next, "after attempt \(recorded)")
        }
    }
}

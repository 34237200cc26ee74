import Testing
@testable import SyncAgentCore

/// A queue of 100,000 tasks holds, per task, a `TaskState` in the task list,
/// its `TaskSpec` in a box of its own, and a run-queue entry (issue 12). A
/// field added, or one put where it pads its neighbours, shows here first.
@Suite("Per-task memory layout")
struct LayoutTests {
    @Test func aQueuedTaskTakesNoMoreBytesThanItDid() {
        // 208, 160 and 64 bytes before their counts and optional times were packed.
        #expect(MemoryLayout<TaskState>.stride <= 168, "TaskState grew: keep rarely set fields in its details")
        #expect(MemoryLayout<TaskSpec>.stride <= 136, "TaskSpec grew: keep rarely set keys in its rare box")
        #expect(MemoryLayout<RunQueue.Entry>.stride <= 32)
        #expect(MemoryLayout<OptionalInt64>.stride == 8)
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

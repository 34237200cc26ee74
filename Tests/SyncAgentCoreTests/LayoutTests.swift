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
    }
}

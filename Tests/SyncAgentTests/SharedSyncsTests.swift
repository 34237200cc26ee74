import Foundation
@testable import SyncAgent
import Synchronization
import Testing

@Suite("Directory syncs shared by the files made before them")
struct SharedSyncsTests {
    struct Refused: Error {}

    /// A sync held open until the test lets it go, counting how many ran.
    final class HeldSync: Sendable {
        let runs = Mutex(0)
        let release = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let failing = Mutex(false)

        func run() throws {
            runs.withLock { $0 += 1 }
            entered.signal()
            release.wait()
            if failing.withLock({ $0 }) { throw Refused() }
        }

        /// Waits for the next run to begin (bounded: a run that never comes fails the test).
        func awaitRun() throws {
            try #require(entered.wait(timeout: .now() + 30) == .success, "no sync ran")
        }
    }

    /// Calls `sync` on `count` threads of their own (a blocked pool would
    /// add threads only slowly); the results once they return.
    func callers(_ count: Int, _ syncs: SharedSyncs, _ held: HeldSync) -> () -> [Bool] {
        let results = Mutex<[Bool]>([])
        let group = DispatchGroup()
        for _ in 0..<count {
            group.enter()
            Thread {
                let succeeded = (try? syncs.sync("dir") { try held.run() }) != nil
                results.withLock { $0.append(succeeded) }
                group.leave()
            }.start()
        }
        return { group.wait(); return results.withLock { $0 } }
    }

    func waitUntil(_ syncs: SharedSyncs, has count: Int) throws {
        let deadline = Date().addingTimeInterval(30)
        while syncs.callers("dir") < count {
            try #require(Date() < deadline, "callers never arrived")
            usleep(1000)
        }
    }

    /// One caller's sync held running while `count` more arrive; then the
    /// first let go and the next sync (held in turn) begun. Returns the
    /// first caller's results and the late callers'.
    func lateCallers(_ count: Int, _ syncs: SharedSyncs, _ held: HeldSync) throws -> (first: () -> [Bool], late: () -> [Bool]) {
        let first = callers(1, syncs, held)
        try held.awaitRun()
        let late = callers(count, syncs, held)
        try waitUntil(syncs, has: count + 1)
        held.release.signal()
        try held.awaitRun()
        return (first, late)
    }

    @Test func callersArrivingDuringASyncShareTheNextOneNotTheRunningOne() throws {
        let syncs = SharedSyncs()
        let held = HeldSync()
        // Five files made while the first sync runs: it started before their
        // names existed, so it cannot cover them; one more sync covers all five.
        let (first, late) = try lateCallers(5, syncs, held)
        held.release.signal()
        #expect(first() == [true])
        #expect(late() == Array(repeating: true, count: 5))
        #expect(held.runs.withLock { $0 } == 2)
        #expect(syncs.callers("dir") == 0)
    }

    @Test func aFailedSharedSyncFailsEveryCallerItWasToCoverAndTheNextCallSyncsAgain() throws {
        let syncs = SharedSyncs()
        let held = HeldSync()
        let (first, late) = try lateCallers(3, syncs, held)
        held.failing.withLock { $0 = true }
        held.release.signal()
        #expect(first() == [true])
        #expect(late() == [false, false, false])

        held.failing.withLock { $0 = false }
        let again = callers(1, syncs, held)
        try held.awaitRun()
        held.release.signal()
        #expect(again() == [true])
        #expect(held.runs.withLock { $0 } == 3)
    }

    @Test func differentFoldersDoNotWaitForEachOther() throws {
        let syncs = SharedSyncs()
        let held = HeldSync()
        let first = callers(1, syncs, held)
        try held.awaitRun()
        // Another folder's sync runs while "dir"'s is held.
        var ran = false
        try syncs.sync("other") { ran = true }
        #expect(ran)
        held.release.signal()
        #expect(first() == [true])
    }
}

@Suite("Flush threads: flushes issued together")
struct FlushThreadsTests {
    @Test func sixFlushesAreInTheKernelAtOnceOnAnyNumberOfCores() throws {
        let threads = FlushThreads(name: "test.flush", limit: 16)
        defer { threads.stop() }
        let inside = Mutex(0)
        let sawAllSix = Mutex(0)
        let allInside = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        for _ in 0..<6 {
            done.enter()
            threads.run {
                // Each waits (bounded) until all six are running: only true when they run side by side.
                if inside.withLock({ $0 += 1; return $0 }) == 6 { for _ in 0..<6 { allInside.signal() } }
                if allInside.wait(timeout: .now() + 30) == .success { sawAllSix.withLock { $0 += 1 } }
                done.leave()
            }
        }
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(sawAllSix.withLock { $0 } == 6)
    }

    @Test func workQueuedBeyondTheLimitStillRuns() throws {
        let threads = FlushThreads(name: "test.flush", limit: 2)
        defer { threads.stop() }
        let ran = Mutex(0)
        let done = DispatchGroup()
        for _ in 0..<50 {
            done.enter()
            threads.run { ran.withLock { $0 += 1 }; done.leave() }
        }
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(ran.withLock { $0 } == 50)
    }
}

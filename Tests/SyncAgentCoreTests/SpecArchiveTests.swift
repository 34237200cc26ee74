import Foundation
import Testing
import TestSupport
@testable import SyncAgentCore

/// The agent lets a waiting task's job go and reads it back from the log
/// (`SpecArchive`); the indexes of destinations and job files hold hashes
/// and positions, not strings (`TaskKeyIndex`). Neither may change what
/// the state says or what is decided from it.
@Suite("Jobs let go from memory")
struct SpecArchiveTests {
    /// The reader the agent installs, over a list of events instead of SQLite.
    static func reader(over events: [Event]) -> SpecArchive.Reader {
        var created: [Int64: (task: String?, spec: TaskSpec)] = [:]
        for event in events { if case .created(let spec) = event.body { created[event.seq] = (event.task, spec) } }
        let recorded = created
        return { id, seq in
            guard let found = recorded[seq], id == nil || found.task == id else { throw ArchiveMiss(seq: seq) }
            return found.spec
        }
    }

    struct ArchiveMiss: Error { var seq: Int64 }

    /// Every answer the state gives that could differ if a job read back were another.
    func expectSameAnswers(_ released: AgentState, _ held: AgentState, nowMs: Int64) {
        #expect(released == held)
        #expect(Snapshot.encode(released) == Snapshot.encode(held))
        let limits = SchedulerLimits(maxActive: 3, maxPerHost: 2)
        #expect(SchedulerPolicy.tasksToStart(in: released, nowMs: nowMs, limits: limits)
                == SchedulerPolicy.tasksToStart(in: held, nowMs: nowMs, limits: limits))
        #expect(released.recoveryPlans(nowMs: nowMs) == held.recoveryPlans(nowMs: nowMs))
        #expect(released.reservedPaths == held.reservedPaths)
        #expect(released.takenSources == held.takenSources)
        for task in held.tasks {
            if let dest = task.spec.dest {
                #expect(released.holder(ofDestination: dest) == held.holder(ofDestination: dest))
                #expect(Destinations.holder(of: dest + ".part", in: released) == Destinations.holder(of: dest + ".part", in: held))
            }
            if let identity = task.spec.source?.identity { #expect(released.hasTaken(identity)) }
        }
        #expect(!released.hasTaken("never-taken") && released.holder(ofDestination: "/nowhere") == nil)
    }

    @Test(arguments: 1...12)
    func aJobLetGoAnswersAsTheJobHeld(seed: UInt64) {
        SpecArchiveUse.exclusively {
            let (events, _) = RandomLog.make(seed: seed, count: 400)
            SpecArchive.install(Self.reader(over: events))
            let failuresBefore = SpecArchive.failuresOnThisThread
            var random = SplitMix64(seed: seed)
            var held = AgentState(), released = AgentState()
            var letGo = 0
            for event in events {
                // As the agent does: a task about to start has its job read back first (but the fold must not need it).
                if case .started = event.body, let id = event.task, Bool.random(using: &random) { released.holdSpec(of: id) }
                held.apply(event)
                released.apply(event)
                if Int.random(in: 0..<4, using: &random) == 0 {
                    for entry in released.runQueue.entries {
                        if released.releaseSpec(of: released.tasks[entry.position].id) { letGo += 1 }
                    }
                }
                if event.seq % 50 == 0 { expectSameAnswers(released, held, nowMs: event.atMs) }
            }
            expectSameAnswers(released, held, nowMs: events.last!.atMs)
            #expect(letGo > 0, "the log let some job go")
            // Read back from a snapshot, the jobs are held again, and the state is the same.
            let bytes = Snapshot.encode(released)
            let reread = try? bytes.withUnsafeBytes { try Snapshot.decode($0) }
            #expect(reread == held)
            #expect(reread?.tasks.allSatisfy(\.holdsSpec) == true)
            #expect(SpecArchive.failure(since: failuresBefore) == nil)
        }
    }

    @Test func onlyAWaitingTopLevelTaskLetsItsJobGo() {
        SpecArchiveUse.exclusively {
            var log = LogBuilder()
            log.create("a")
            log.create("b")
            _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://127.0.0.1:8080/b")), task: "b")
            var child = TaskSpec(url: "http://127.0.0.1:8080/c", dest: "/downloads/c.ts", parent: "b")
            child.source = nil
            _ = log.add(.created(child), task: "c")
            SpecArchive.install(Self.reader(over: log.events))
            var state = log.state
            let letGo = ["a", "b", "c", "nobody"].map { state.releaseSpec(of: $0) }
            // b runs: its every step reads the job; c is a child: the fold reads its parent on every event.
            #expect(letGo == [true, false, false, false])
            #expect(state["a"]?.holdsSpec == false && state["a"]?.spec == log.state["a"]?.spec)
            #expect(state["a"]?.currentURL == log.state["a"]?.spec.url)
            state.holdSpec(of: "a")
            #expect(state["a"]?.holdsSpec == true && state == log.state)
        }
    }

    /// An ended task's events may be compacted away: a job let go while it
    /// waited is read back as it ends (a cancel, a failure before it ever
    /// ran), so nothing asks the log for it once its events are gone.
    @Test func aTaskThatEndsHoldsItsJobAgain() {
        SpecArchiveUse.exclusively {
            var log = LogBuilder()
            log.create("cancelled")
            log.create("failed")
            log.create("paused")
            SpecArchive.install(Self.reader(over: log.events))
            var state = log.state
            let letGo = ["cancelled", "failed", "paused"].map { state.releaseSpec(of: $0) }
            #expect(letGo == [true, true, true])
            for event in [log.add(.cancelled(Cancelled(bytes: 0)), task: "cancelled"),
                          log.add(.failed(Failed(reason: "x", code: .other("x"), bytes: 0)), task: "failed"),
                          log.add(.paused(Paused(bytes: 0, reason: .user)), task: "paused")] {
                state.apply(event)
            }
            #expect(state["cancelled"]?.holdsSpec == true && state["failed"]?.holdsSpec == true)
            #expect(state["paused"]?.holdsSpec == false, "paused: still live, its events stay")
            // The log has nothing to give any more: the ended tasks do not ask it.
            SpecArchive.install { _, seq in throw ArchiveMiss(seq: seq) }
            let failuresBefore = SpecArchive.failuresOnThisThread
            #expect(state["cancelled"]?.spec == log.state["cancelled"]?.spec && state["failed"]?.spec == log.state["failed"]?.spec)
            #expect(SpecArchive.failure(since: failuresBefore) == nil)
        }
    }

    /// A job the log no longer holds (a failing disk, a row deleted behind
    /// the agent's back) is said, and stands for nothing: no URL, no file.
    @Test func aJobThatCannotBeReadBackIsSaidAndHasNoTarget() {
        SpecArchiveUse.exclusively {
            var log = LogBuilder()
            log.create("a")
            var state = log.state
            SpecArchive.install { _, seq in throw ArchiveMiss(seq: seq) }
            let failuresBefore = SpecArchive.failuresOnThisThread
            let letGo = state.releaseSpec(of: "a")
            #expect(letGo && SpecArchive.failure(since: failuresBefore) == nil)
            let spec = state["a"]!.spec
            #expect(spec.url.isEmpty && spec.dest == nil && spec.notify == .none)
            #expect(SpecArchive.failure(since: failuresBefore)?.contains("seq 1") == true)
            // Never kept as the job: held, it is still let go, and asked of the log again.
            state.holdSpec(of: "a")
            #expect(state["a"]?.holdsSpec == false && SpecArchive.failuresOnThisThread == failuresBefore + 2)
            // Counted on this thread only: another thread's work (the agent's, while a snapshot failed) goes on.
            let done = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var elsewhere = -1
            let thread = Thread {
                elsewhere = SpecArchive.failuresOnThisThread
                done.signal()
            }
            thread.start()
            done.wait()
            #expect(elsewhere == 0)
        }
    }

    /// Keys whose hashes meet: the index answers as a dictionary whose first claim holds.
    @Test(arguments: [false, true])
    func theKeyIndexAnswersAsADictionary(everyKeyCollides: Bool) {
        var tasks = TaskList()
        let keys = (0..<8).map { "/d/\($0)" }
        for index in 0..<40 {
            tasks.append(TaskState(id: "t\(index)", spec: TaskSpec(url: "http://h/\(index)", dest: keys[index % keys.count]), seq: Int64(index + 1), atMs: 0))
        }
        var index = TaskKeyIndex(everyKeyCollides: everyKeyCollides)
        var model: [String: Int] = [:]
        var random = SplitMix64(seed: everyKeyCollides ? 2 : 1)
        for _ in 0..<2_000 {
            let position = Int.random(in: 0..<tasks.count, using: &random)
            let key = tasks[position].spec.dest!
            if Bool.random(using: &random) {
                let took = index.insert(key, position: position, in: tasks, keyOf: \.spec.dest)
                let free = model[key] == nil
                #expect(took == free)
                if model[key] == nil { model[key] = position }
            } else {
                index.remove(key, position: position)
                if model[key] == position { model[key] = nil }
            }
            for key in keys { #expect(index.position(of: key, in: tasks, keyOf: \.spec.dest) == model[key]) }
            #expect(index.count == model.count)
            #expect(index.positions == model.values.sorted())
        }
    }
}

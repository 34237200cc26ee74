import Foundation
import Synchronization
import Testing
import TestSupport
@testable import SyncAgent
@testable import SyncAgentCore

@Suite("SQLite event log")
struct EventStoreTests {
    let directory = TempDirectory()
    var path: String { directory.file("events.sqlite") }

    func event(_ seq: Int64, _ body: EventBody, task: String? = "t") -> Event {
        Event(seq: seq, atMs: 1000 + seq, task: task, body: body)
    }

    @Test func freshLogIsMigratedPrivateAndInWALMode() throws {
        let store = try EventStore(writingTo: path)
        #expect(try store.schemaVersion() == EventStore.migrations.count)
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        try store.append([event(1, .agentStarted(AgentStarted(pid: 1, version: "x")), task: nil)])
        #expect(FileManager.default.fileExists(atPath: path + "-wal"))
        let walMode = try FileManager.default.attributesOfItem(atPath: path + "-wal")[.posixPermissions] as? Int
        #expect(walMode == 0o600)
    }

    /// A store error keeps SQLite's result code: the agent can tell a log it
    /// must not trust from a disk that only needs room.
    @Test func aDamagedLogAndAFullDiskAreToldApart() throws {
        try Data(repeating: 0x5A, count: 8192).write(to: URL(fileURLWithPath: path))
        do {
            let store = try EventStore(writingTo: path)
            _ = try store.replay()
            Issue.record("a file of garbage opened as an event log")
        } catch let error as StoreError {
            #expect(error.isDamaged && !error.isDiskFull, "\(error) (code \(error.sqliteCode.map(String.init) ?? "none"))")
        }

        let folder = directory.file("small")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        guard let mount = TestMount(tmpfsAt: folder, size: "256k") else { return }  // (Mounting needs root.)
        let store = try EventStore(writingTo: folder + "/events.sqlite")
        let spec = TaskSpec(url: "http://h/" + String(repeating: "x", count: 2000), dest: "/d/x")
        var seq: Int64 = 0
        var full: StoreError?
        while full == nil, seq < 10_000 {
            do {
                try store.append((1...20).map { _ in seq += 1; return event(seq, .created(spec), task: "t\(seq)") })
            } catch let error as StoreError {
                full = error
            }
        }
        #expect(full?.isDiskFull == true && full?.isDamaged == false, "\(full.map(String.init(describing:)) ?? "never full")")
        withExtendedLifetime(mount) {}
    }

    @Test func appendedEventsReadBackInOrderAfterReopen() throws {
        let spec = TaskSpec(url: "http://h/x", dest: "/d/x")
        let events = [
            event(1, .created(spec)),
            event(2, .started(Started(attempt: 1, offset: 0, url: "http://h/x"))),
            event(3, .progressed(Progressed(bytes: 5, total: 10))),
            event(4, .finished(Finished(bytes: 10, dest: "/d/x"))),
        ]
        do {
            let store = try EventStore(writingTo: path)
            try store.append(Array(events.prefix(2)))
            try store.append(Array(events.suffix(2)))
            #expect(store.lastSeq == 4)
        }
        let reopened = try EventStore(writingTo: path)
        #expect(reopened.lastSeq == 4)
        var read: [Event] = []
        try reopened.forEach { read.append($0) }
        #expect(read == events)
        #expect(try reopened.replay() == AgentState.replay(events))
        #expect(try reopened.replay(through: 2)["t"]?.phase == .running)
    }

    /// The reader reuses the ids of the last few rows it read: rows of more
    /// tasks than it remembers, in turn, with ids of one length that differ
    /// in a byte, and agent-level rows between them, come back as written.
    @Test func rowsOfManyTasksInTurnKeepTheirOwnIds() throws {
        var events: [Event] = []
        for round in 0..<3 {
            for index in 0..<11 {
                let id = "t\(index + 10)"
                let seq = Int64(events.count + 1)
                events.append(round == 0 ? event(seq, .created(TaskSpec(url: "http://h/\(id)", dest: "/d/\(id)")), task: id)
                                         : event(seq, .progressed(Progressed(bytes: Int64(round), total: 10)), task: id))
                if index == 5 { events.append(event(seq + 1, .agentStopped(AgentStopped(reason: "idle")), task: nil)) }
            }
        }
        let store = try EventStore(writingTo: path)
        try store.append(events)
        var read: [Event] = []
        try store.forEach { read.append($0) }
        #expect(read == events)
        #expect(try store.replay() == AgentState.replay(events))
    }

    @Test func readerSeesCommittedEventsWhileWriterIsOpen() throws {
        let writer = try EventStore(writingTo: path)
        try writer.append([event(1, .created(TaskSpec(url: "http://h/x", dest: "/d/x")))])
        let reader = try EventStore(readingFrom: path)
        #expect(try reader.replay().tasks.count == 1)
        try writer.append([event(2, .cancelled(Cancelled(bytes: 0)))])
        #expect(try reader.replay()["t"]?.phase == .cancelled)
    }

    @Test func missingLogReadsAsEmpty() throws {
        let reader = try EventStore(readingFrom: directory.file("nothing.sqlite"))
        #expect(try reader.replay() == AgentState())
        #expect(!FileManager.default.fileExists(atPath: directory.file("nothing.sqlite")))
    }

    @Test func duplicateSeqRollsBackTheWholeBatch() throws {
        let store = try EventStore(writingTo: path)
        try store.append([event(1, .cancelled(Cancelled(bytes: 0)))])
        #expect(throws: StoreError.self) {
            try store.append([event(2, .cancelled(Cancelled(bytes: 0))), event(1, .cancelled(Cancelled(bytes: 0)))])
        }
        var count = 0
        try store.forEachRow { _ in count += 1 }
        #expect(count == 1)
    }

    @Test func taskFilterUsesOnlyThatTasksRows() throws {
        let store = try EventStore(writingTo: path)
        try store.append([event(1, .cancelled(Cancelled(bytes: 0)), task: "a"),
                          event(2, .cancelled(Cancelled(bytes: 0)), task: "b")])
        var tasks: [String?] = []
        try store.forEachRow(task: "b") { tasks.append($0.task) }
        #expect(tasks == ["b"])
    }
}

@Suite("The agent's event log: record, apply, commit")
struct EventLogTests {
    let directory = TempDirectory()

    @Test func stateIsTheFoldOfWhatWasWritten() throws {
        let log = try EventLog(store: EventStore(writingTo: directory.file("events.sqlite")), clock: { 5000 })
        log.record(.created(TaskSpec(url: "http://h/x", dest: "/d/x")), task: "t")
        log.record(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        #expect(log.state["t"]?.phase == .running)
        #expect(log.hasPending)
        try log.commit()
        #expect(!log.hasPending)
        let replayed = try EventStore(readingFrom: directory.file("events.sqlite")).replay()
        #expect(replayed == log.state)
        // Numbering continues across reopen.
        let again = try EventLog(store: EventStore(writingTo: directory.file("events.sqlite")))
        #expect(again.record(.cancelled(Cancelled(bytes: 0)), task: "t").seq == 3)
    }

    /// The loop's group commit, written on the commit thread: what follows
    /// it there (the renames) sees its events on disk; what follows it on
    /// the loop waits for it; what was recorded meanwhile is not in it,
    /// and a new task's `created` holds its start back until it is durable.
    @Test func aCommitInFlightIsDurableBeforeWhatFollowsIt() throws {
        let path = directory.file("events.sqlite")
        let log = try EventLog(store: EventStore(writingTo: path), clock: { 5000 })
        var committedSeqs: [[Int64]] = []
        log.committed = { events in committedSeqs.append(events.map(\.seq)) }
        log.record(.created(TaskSpec(url: "http://h/x", dest: "/d/x")), task: "t")
        let onDisk = Mutex<AgentState?>(nil)
        var followedOnLoop = false
        try log.beginCommit(thenOnThread: {
            onDisk.withLock { $0 = try? EventStore(readingFrom: path).replay() }
        }, thenOnLoop: { followedOnLoop = true })
        #expect(log.commitInFlight && log.hasPending && !log.hasUncommitted)
        #expect(log.hasPendingCreations, "a task may start before its created is durable")
        log.record(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        try log.finishCommitInFlight()
        #expect(followedOnLoop)
        #expect(committedSeqs == [[1]])
        #expect(onDisk.withLock { $0?["t"]?.phase } == .queued, "the renames ran before the commit was on disk")
        #expect(!log.hasPendingCreations && log.hasUncommitted && !log.commitInFlight)
        // A commit on the loop waits for one in flight, and writes the rest.
        try log.beginCommit(thenOnThread: {}, thenOnLoop: {})
        log.record(.cancelled(Cancelled(bytes: 0)), task: "t")
        try log.commit()
        #expect(committedSeqs == [[1], [2], [3]])
        #expect(try EventStore(readingFrom: path).replay() == log.state)
        log.close()
    }
}

import Foundation
import Logging
import Testing
import TestSupport
@testable import SyncAgent
@testable import SyncAgentCore

@Suite("The live agent's state is the replay of its log", .serialized)
struct LiveStateTests {
    @Test func replayOfTheRecordedLogGivesTheStateTheAgentHeld() throws {
        // The agent installs its reader of jobs let go: no other test's may stand in meanwhile.
        try SpecArchiveUse.exclusively { try runSevenJobs() }
    }

    private func runSevenJobs() throws {
        let directory = TempDirectory()
        let nginx = try Nginx(in: directory)
        let paths = AgentPaths(stateDir: directory.file("state"), inbox: directory.file("inbox"),
                               downloadDir: directory.file("downloads"))
        try FileManager.default.createDirectory(atPath: paths.inbox, withIntermediateDirectories: true)
        for index in 0..<6 {
            try nginx.serve("f\(index).bin", size: 50_000 * (index + 1))
            try "url = \"\(nginx.url("f\(index).bin"))\"\npriority = \(index % 3)\n"
                .write(toFile: "\(paths.inbox)/j\(index).job", atomically: true, encoding: .utf8)
        }
        try "url = \"\(nginx.url("absent"))\"\n".write(toFile: "\(paths.inbox)/missing.job", atomically: true, encoding: .utf8)

        let agent = try Agent(config: AgentConfig(), paths: paths, logger: Logger(label: "test"))
        let exit = try agent.run(exitWhenIdle: true)
        #expect(exit == Agent.exitSomeFailed)

        let replayed = try EventStore(readingFrom: paths.eventLog).replay()
        #expect(replayed == agent.state)
        #expect(replayed.tasks.count == 7)
        #expect(replayed.tasks.filter { $0.phase == .finished }.count == 6)
        #expect(replayed.tasks.filter { $0.phase == .failed }.count == 1)
    }

    /// A new log whose waiting jobs go (beyond `queueHeldWhole` queued),
    /// read back through a reader installed for it: as the agent starts.
    private func logLettingJobsGo(at path: String, queueHeldWhole: Int) throws -> EventLog {
        let log = try EventLog(store: EventStore(writingTo: path))
        try JobReader.install(eventLog: path)
        #expect(try log.startLettingWaitingJobsGo(queueHeldWhole: queueHeldWhole) == 0)
        return log
    }

    /// A waiting job lives in the log once its `created` is durable, and is
    /// read back as its task starts; one the log no longer holds stops the
    /// agent (nothing more is committed) with the task and seq named.
    @Test func aWaitingJobIsLetGoOnceDurableAndReadBackToStart() throws {
        try SpecArchiveUse.exclusively {
            let directory = TempDirectory()
            let path = directory.file("events.sqlite")
            let log = try logLettingJobsGo(at: path, queueHeldWhole: 0)
            let spec = TaskSpec(url: "http://127.0.0.1:9/a", dest: "/d/a.bin", source: JobSource(file: "a.job", identity: "1:2:3:abc"))
            log.record(.created(spec), task: "a")
            #expect(log.state["a"]?.holdsSpec == true, "held until its created is durable")
            try log.commit()
            #expect(log.state["a"]?.holdsSpec == false)
            #expect(log.state["a"]?.spec == spec && log.state.hasTaken("1:2:3:abc") && log.state.holder(ofDestination: "/d/a.bin") == "a")
            #expect(try EventStore(readingFrom: path).replay() == log.state)
            try log.holdJob(of: "a")
            #expect(log.state["a"]?.holdsSpec == true && log.state["a"]?.spec == spec)
            // Started, then waiting again for a retry: let go again once that is durable.
            log.record(.started(Started(attempt: 1, offset: 0, url: spec.url)), task: "a")
            try log.commit()
            #expect(log.state["a"]?.holdsSpec == true, "running: its every step reads the job")
            log.record(.retrying(Retrying(attempt: 1, reason: "503", delayMs: 1000, bytes: 0)), task: "a")
            try log.commit()
            #expect(log.state["a"]?.holdsSpec == false && log.state["a"]?.spec == spec)
            try log.holdJob(of: "a")

            log.record(.created(TaskSpec(url: "http://127.0.0.1:9/b", dest: "/d/b.bin")), task: "b")
            try log.commit()
            #expect(log.state["b"]?.holdsSpec == false)
            let script = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); db.execute('DELETE FROM events WHERE task = \\'b\\'')"
            let child = try ChildProcess("/usr/bin/python3", ["-c", script, path], environment: ProcessInfo.processInfo.environment,
                                         outputIn: directory.path)
            #expect(child.wait(seconds: 30) == 0, "\(child.stderr)")
            #expect {
                try log.holdJob(of: "b")
            } throws: { error in
                "\(error)".contains("seq 4") && "\(error)".contains("task b")
            }
            log.record(.cancelled(Cancelled(bytes: 0)), task: "a")
            #expect(throws: StoreError.self) { try log.commit() }
            #expect(try EventStore(readingFrom: path).replay()["a"]?.phase == .queued, "nothing recorded on a placeholder was committed")
        }
    }

    /// At start-up, the waiting jobs the fold read in are let go too, but
    /// only those whose `created` the log still holds: a task run again
    /// after compaction dropped its events has none to be read back from.
    @Test func startUpLetsGoOnlyJobsTheLogStillHolds() throws {
        try SpecArchiveUse.exclusively {
            let directory = TempDirectory()
            let path = directory.file("events.sqlite")
            let store = try EventStore(writingTo: path)
            let spec = { (name: String) in TaskSpec(url: "http://127.0.0.1:9/\(name)", dest: "/d/\(name).bin") }
            try store.append([
                Event(seq: 1, atMs: 1, task: "waits", body: .created(spec("waits"))),
                Event(seq: 2, atMs: 2, task: "runs", body: .created(spec("runs"))),
                Event(seq: 3, atMs: 3, task: "runs", body: .started(Started(attempt: 1, offset: 0, url: "http://127.0.0.1:9/runs"))),
                Event(seq: 4, atMs: 4, task: "dropped", body: .created(spec("dropped"))),
                Event(seq: 5, atMs: 5, task: "paused", body: .created(spec("paused"))),
                Event(seq: 6, atMs: 6, task: "paused", body: .paused(Paused(bytes: 0, reason: .user))),
            ])
            store.close()
            let script = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); db.execute('DELETE FROM events WHERE seq = 4')"
            // The fold read before the row went, as from a snapshot that covers it.
            let log = try EventLog(store: EventStore(writingTo: path))
            let child = try ChildProcess("/usr/bin/python3", ["-c", script, path], environment: ProcessInfo.processInfo.environment,
                                         outputIn: directory.path)
            #expect(child.wait(seconds: 30) == 0, "\(child.stderr)")
            try JobReader.install(eventLog: path)
            let failuresBefore = SpecArchive.failuresOnThisThread
            #expect(try log.startLettingWaitingJobsGo(queueHeldWhole: 0) == 2)
            #expect(log.state["waits"]?.holdsSpec == false && log.state["waits"]?.spec == spec("waits"))
            #expect(log.state["paused"]?.holdsSpec == false && log.state["paused"]?.spec == spec("paused"))
            #expect(log.state["runs"]?.holdsSpec == true && log.state["dropped"]?.holdsSpec == true)
            #expect(SpecArchive.failure(since: failuresBefore) == nil)
        }
    }

    /// A short queue keeps its jobs (reading one back costs a task that
    /// starts at once more than its memory is worth): jobs go only while
    /// more than the limit wait, and then those of the tasks just created.
    @Test func aShortQueueKeepsItsJobs() throws {
        try SpecArchiveUse.exclusively {
            let directory = TempDirectory()
            let log = try logLettingJobsGo(at: directory.file("events.sqlite"), queueHeldWhole: 2)
            for name in ["a", "b"] { log.record(.created(TaskSpec(url: "http://127.0.0.1:9/\(name)", dest: "/d/\(name)")), task: name) }
            try log.commit()
            #expect(log.state["a"]?.holdsSpec == true && log.state["b"]?.holdsSpec == true)
            log.record(.created(TaskSpec(url: "http://127.0.0.1:9/c", dest: "/d/c")), task: "c")
            try log.commit()
            #expect(log.state["a"]?.holdsSpec == true && log.state["b"]?.holdsSpec == true && log.state["c"]?.holdsSpec == false)
            #expect(log.state["c"]?.spec.url == "http://127.0.0.1:9/c")
        }
    }
}

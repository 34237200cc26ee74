import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The running agent's hold on its world: the state dir's lock, its log,
/// download_dir and the inbox taken away or replaced under it, a damaged
/// log, and the signals it is sent.
@Suite("The running agent: its lock, log, folders and signals", .serialized)
struct AgentLifecycleTests {
    /// Deleting `agent.lock` once let a second agent start on the same log
    /// (and lose a job): the lock is on the state directory itself.
    @Test func deletingTheLockFileLetsNoSecondAgentIn() throws {
        let harness = try AgentHarness()
        let first = try harness.startAgent()
        #expect(eventually(within: 10) { harness.statusSaysAgentRuns })
        try FileManager.default.removeItem(atPath: harness.stateDir + "/agent.lock")
        #expect(try harness.run(["status"]).stdout.hasPrefix("agent: running"), "the directory's lock still tells")
        let second = try harness.startAgent()
        #expect(second.wait(seconds: 10) == 3, "\(second.stderr)")
        #expect(first.isRunning)
        first.signal(SIGTERM)
        #expect(first.wait(seconds: 10) == 0)
    }

    /// A file where the agent's folder goes was reported with whatever
    /// errno ran last ("Inappropriate ioctl for device").
    @Test func aFileWhereAFolderGoesIsNamedAsSuch() throws {
        let harness = try AgentHarness()
        for folder in [harness.stateDir, harness.downloads] {
            try? FileManager.default.removeItem(atPath: harness.stateDir)
            try Data("x".utf8).write(to: URL(fileURLWithPath: folder))
            let result = try harness.run(["run", "--exit-when-idle"], seconds: 30)
            #expect(result.status == 1)
            #expect(result.stderr.contains("create directory \(folder) (something other than a folder is in the way): Not a directory"),
                    "\(result.stderr)")
            try FileManager.default.removeItem(atPath: folder)
        }
    }

    /// A state directory deleted under the running agent took the log with
    /// it: the agent went on taking jobs into a file nothing reads, deleting
    /// each job file, and a second agent could start beside it.
    @Test func aStateDirectoryDeletedUnderTheAgentStopsItAndLosesNoJob() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("late.bin", size: 4000)
        let agent = try harness.startAgent()
        #expect(harness.pastStartUp(agent))
        try FileManager.default.removeItem(atPath: harness.stateDir)
        try harness.drop("late.job", "id = \"late\"\nurl = \"\(server.url("late.bin"))\"\n")
        #expect(agent.wait(seconds: 30) == 1)
        #expect(agent.stderr.contains("the event log \(harness.stateDir)/events.sqlite was deleted, moved or replaced while the agent ran"),
                "\(agent.stderr.suffix(1500))")
        // The job waits (in the inbox, or taken but not yet recorded in a log anyone reads): the next agent runs it.
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(try harness.tasksByID()["late"]?["state"] as? String == "finished")
        #expect(contents(harness.downloads + "/late.bin") == data)
    }

    /// download_dir or the inbox replaced under the running agent: it
    /// published into the folder moved away (the log naming the new one), or
    /// never saw a job dropped into the new inbox. It stops, and the next
    /// start works in the folders now there.
    @Test(arguments: ["downloads", "inbox", "inbox/.taken"])
    func aFolderReplacedUnderTheAgentStopsItAndTheNextStartUsesTheNewOne(_ folder: String) throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("r.bin", size: 4000)
        let agent = try harness.startAgent()
        #expect(harness.pastStartUp(agent))
        let path = harness.directory.file(folder)
        try FileManager.default.moveItem(atPath: path, toPath: path + ".old")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        try harness.drop("r.job", "id = \"r\"\nurl = \"\(server.url("r.bin"))\"\n")
        #expect(agent.wait(seconds: 30) == 1)
        #expect(agent.stderr.contains("\(path) was deleted, moved or replaced while the agent ran"), "\(agent.stderr.suffix(1500))")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(try harness.tasksByID()["r"]?["state"] as? String == "finished")
        #expect(contents(harness.downloads + "/r.bin") == data)
        #expect(!FileManager.default.fileExists(atPath: harness.downloads + ".old/r.bin"))
    }

    /// "task finished" is said only of a `finished` that was committed: an agent that stops at the
    /// check of its folders first never says it. (Without that rule, this fails unless the 2 s check
    /// happens to fall in the 0.3 s the download has left.)
    @Test func aFinishTheAgentNeverCommittedIsNeverSaid() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("slow.bin", size: 600_000)
        let agent = try harness.startAgent()
        #expect(harness.pastStartUp(agent))
        try harness.drop("slow.job", "id = \"slow\"\nurl = \"\(server.url("slow.bin", "rate=1000000"))\"\n")
        #expect(eventually(within: 10) { harness.state(of: "slow") == "running" })
        try FileManager.default.moveItem(atPath: harness.downloads, toPath: harness.downloads + ".old")
        try FileManager.default.createDirectory(atPath: harness.downloads, withIntermediateDirectories: false)
        #expect(agent.wait(seconds: 30) == 1)
        #expect(try harness.tasksByID()["slow"]?["state"] as? String != "finished")
        #expect(!agent.stderr.contains("task finished"), "\(agent.stderr.suffix(1500))")
    }

    @Test func aDamagedLogIsAnErrorNeverAnEmptyLog() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("g.bin", size: 3000)
        for index in 0..<30 { try harness.drop("g\(index).job", "url = \"\(nginx.url("g.bin"))\"\ndest = \"g\(index).bin\"\n") }
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let log = harness.stateDir + "/events.sqlite"
        let whole = try #require(contents(log))
        for damaged in [Data("this is not a database, just some text\n".utf8) + Data(repeating: 7, count: 5000),
                        whole.prefix(whole.count / 2)] {
            try damaged.write(to: URL(fileURLWithPath: log))
            for command in [["status"], ["status", "--json"], ["replay", "--verify"], ["events"]] {
                let result = try harness.run(command)
                #expect(result.status != 0, "\(command) on a damaged log: \(result.stdout.prefix(300))")
                #expect(result.stderr.contains(log), "\(command): \(result.stderr)")
            }
            let agent = try harness.startAgent(exitWhenIdle: true)
            #expect(agent.wait(seconds: 30) != 0)
            #expect(agent.stderr.contains(log))
            #expect(contents(log) == damaged, "run must not start a fresh log over a damaged one")
        }
    }

    /// A SIGHUP a service manager sends while the agent is still starting is
    /// a reload, never a death by the default action.
    @Test func aSighupDuringStartUpDoesNotKillTheAgent() throws {
        let harness = try AgentHarness()
        for round in 0..<5 {
            let agent = try harness.startAgent()
            // A random instant of its start-up.
            usleep(UInt32.random(in: 0...30_000))
            agent.signal(SIGHUP)
            // Taken as a reload, the signal is in the log as this start's config_reloaded; a death ends the wait too.
            _ = eventually { !agent.isRunning || harness.events("config_reloaded").count > round }
            #expect(agent.isRunning, "exit \(agent.wait(seconds: 0) ?? -1): \(agent.stderr)")
            agent.signal(SIGTERM)
            #expect(agent.wait(seconds: 10) == 0)
        }
    }

    @Test func sighupReloadsTheConfigAndKeepsTheOldOneIfItIsBroken() throws {
        let harness = try AgentHarness(config: "retries = 3\n")
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started"))
        try "download_dir = \"\(harness.downloads)\"\nretries = 7\nmax_speed = \"1M\"\ninbox = \"/elsewhere\"\n"
            .write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        #expect(harness.waitForEvent("config_reloaded"))
        try "download_dir = \"\(harness.downloads)\"\ncolour = \"red\"\n".write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        // The CLI reads the same (now broken) config: read the log without it.
        let reloads = { () -> [[String: Any]] in
            ((try? harness.events(readingConfig: false)) ?? []).filter { $0.type == "config_reloaded" }.map(\.data)
        }
        #expect(eventually { reloads().count == 2 })
        #expect(agent.isRunning)
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let reloaded = reloads()
        try #require(reloaded.count == 2)
        #expect(reloaded[0]["applied"] as? [String] == ["retries", "max_speed"])
        #expect(reloaded[0]["need_restart"] as? [String] == ["inbox"])
        #expect(reloaded[0]["error"] == nil)
        #expect((reloaded[1]["error"] as? String)?.contains("key \"colour\" is not a known key") == true)
    }
}

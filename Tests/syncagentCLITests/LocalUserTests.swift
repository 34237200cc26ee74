import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Another user of the machine must not act through the agent (issue 42,
/// SPEC §4.1): not with jobs of hers, nor through folders she may write or
/// made first, nor through a log she wrote. The agent runs as the tests do,
/// as root (its user, "alice" below); the other user is a real one, made
/// with useradd, who does what she does herself, with her own rights
/// (setpriv). Root is the user with the most to lose: every root-only
/// file is one of its own.
@Suite("Another local user cannot act through the agent", .serialized)
struct LocalUserTests {
    /// The tests' folder opened to other users as a home directory is (0755),
    /// so the other user can reach the inbox while it is left open to her.
    func harness(config: String = "") throws -> AgentHarness {
        let harness = try AgentHarness(config: config)
        #expect(chmod(harness.directory.path, 0o755) == 0)
        return harness
    }

    func owner(_ path: String) -> uid_t? {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_uid : nil
    }

    func lines(of text: String, containing needle: String) -> Int {
        text.split(separator: "\n").count { $0.contains(needle) }
    }

    // MARK: Her jobs

    /// She dropped them while the inbox was open to everyone (then closed
    /// again): an upload of a root-only file, a data job posting it to her
    /// server, a job replacing a file of alice's, a link to the root-only
    /// file and a FIFO. Each is left where it is, unread, named once.
    @Test func jobsAnotherUserDroppedAreLeftWhereTheyAreUnread() throws {
        let harness = try harness()
        let mallory = try LocalUser()
        let server = try FaultServer(in: harness.directory)
        try server.serve("evil.bin", size: 1000)
        try FileManager.default.createDirectory(atPath: harness.downloads, withIntermediateDirectories: true)
        let notes = harness.downloads + "/notes.txt"
        try "alice's notes\n".write(toFile: notes, atomically: true, encoding: .utf8)
        let jobs = [
            "upload.job": "url = \"\(server.url("u"))\"\nkind = \"upload\"\nbody_file = \"/etc/shadow\"\n",
            "data.job": "url = \"\(server.url("d"))\"\nkind = \"data\"\nmethod = \"POST\"\nbody_file = \"/etc/shadow\"\n",
            "replace.job": "url = \"\(server.url("evil.bin"))\"\ndest = \"notes.txt\"\noverwrite = \"replace\"\n",
        ]
        #expect(chmod(harness.inbox, 0o1777) == 0)
        for (name, text) in jobs { try mallory.shell("printf '%s' '\(text)' > \(harness.inbox)/\(name)", in: harness.directory.path) }
        try mallory.shell("ln -s /etc/shadow \(harness.inbox)/link.job && mkfifo \(harness.inbox)/fifo.job", in: harness.directory.path)
        #expect(chmod(harness.inbox, 0o755) == 0)

        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "\(agent.stderr.suffix(2000))")
        #expect(server.requests.isEmpty, "\(server.requests)")
        #expect(contents(notes) == Data("alice's notes\n".utf8))
        for name in Array(jobs.keys) + ["link.job", "fifo.job"] {
            let path = harness.inbox + "/" + name
            #expect(owner(path) == mallory.uid, "\(name) is still hers, where she left it")
            #expect(lines(of: agent.stderr, containing: "not taking \(path): it is owned by user \(mallory.name)") == 1,
                    "\(agent.stderr.suffix(2000))")
        }
        let events = try harness.events()
        #expect(!events.contains { ["created", "rejected", "controlled"].contains($0.type) }, "\(events.map(\.type))")
    }

    /// A file of alice's that others may write: she wrote her job into it and
    /// hard-linked it into the inbox (fs.protected_hardlinks lets a user link
    /// another's file only when she may write it). The file is alice's, the
    /// words are hers: not taken.
    @Test func aHardLinkedFileOthersMayWriteIsNotTaken() throws {
        let harness = try harness()
        let mallory = try LocalUser()
        let server = try FaultServer(in: harness.directory)
        let template = harness.directory.file("template.job")
        try "url = \"\(server.url("ok"))\"\n".write(toFile: template, atomically: true, encoding: .utf8)
        #expect(chmod(template, 0o666) == 0)
        #expect(chmod(harness.inbox, 0o1777) == 0)
        let job = "url = \"\(server.url("u"))\"\nkind = \"upload\"\nbody_file = \"/etc/shadow\"\n"
        try mallory.shell("printf '%s' '\(job)' > \(template) && ln \(template) \(harness.inbox)/linked.job", in: harness.directory.path)
        #expect(chmod(harness.inbox, 0o755) == 0)
        #expect(owner(harness.inbox + "/linked.job") == 0)

        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "\(agent.stderr.suffix(2000))")
        #expect(server.requests.isEmpty, "\(server.requests)")
        #expect(FileManager.default.fileExists(atPath: harness.inbox + "/linked.job"))
        #expect(lines(of: agent.stderr, containing: "not taking \(harness.inbox)/linked.job: others may write it (mode 0666)") == 1,
                "\(agent.stderr.suffix(2000))")
    }

    // MARK: Folders she may write

    /// Each place `run` refuses, with the one line that names it, what is
    /// wrong and the fix; the job waiting in the inbox is not taken. A
    /// sticky folder others may write (as /tmp) is a fine place to be in.
    @Test func placesAnotherUserMayWriteOrOwnAreRefused() throws {
        let mallory = try LocalUser()
        let cases: [(String, (AgentHarness) throws -> Void, (AgentHarness) -> [String])] = [
            ("an inbox open to all", { #expect(chmod($0.inbox, 0o1777) == 0) },
             { ["inbox \($0.inbox) is writable by its group and others (mode 01777)", "fix: chmod go-w \($0.inbox)"] }),
            ("an inbox her group may write", { #expect(chown($0.inbox, 0, mallory.gid) == 0 && chmod($0.inbox, 0o775) == 0) },
             { ["inbox \($0.inbox) is writable by its group (mode 0775)", "fix: chmod go-w \($0.inbox)"] }),
            ("a state dir open to all", { try FileManager.default.createDirectory(atPath: $0.stateDir, withIntermediateDirectories: true)
                                          #expect(chmod($0.stateDir, 0o777) == 0) },
             { ["state dir \($0.stateDir) is writable by its group and others (mode 0777)", "fix: chmod go-w \($0.stateDir)"] }),
            // (The config file is there too: it is the first place found open, and refused the same way.)
            ("a folder above all open to all", { #expect(chmod($0.directory.path, 0o777) == 0) },
             { ["\($0.directory.path), a folder on the way to the config file \($0.configFile), is writable by its group and others "
                + "(mode 0777): without the sticky bit", "fix: chmod go-w \($0.directory.path)"] }),
            ("an inbox she made", { harness in
                try FileManager.default.removeItem(atPath: harness.inbox)
                #expect(chmod(harness.directory.path, 0o1777) == 0)
                try mallory.shell("mkdir -m 700 \(harness.inbox)", in: harness.directory.path)
                #expect(chmod(harness.directory.path, 0o755) == 0) },
             { ["inbox \($0.inbox) is owned by user \(mallory.name) (uid \(mallory.uid)), not by you"] }),
        ]
        for (what, prepare, expected) in cases {
            let harness = try harness()
            try prepare(harness)
            if owner(harness.inbox) == 0 { try harness.drop("a.job", "url = \"http://127.0.0.1:9/a.bin\"\nretries = 0\n") }
            let jobsBefore = harness.jobFiles()
            let result = try harness.run(["run", "--exit-when-idle"], seconds: 30)
            #expect(result.status == 1, "\(what): \(result.stderr.suffix(1500))")
            let said = result.stderr.split(separator: "\n")
            #expect(said.count == 1, "\(what): one line: \(result.stderr)")
            for words in expected(harness) { #expect(said.first?.contains(words) == true, "\(what): \(result.stderr)") }
            #expect(harness.jobFiles() == jobsBefore, "\(what): nothing taken")
        }

        // Under a folder anyone may write with the sticky bit, as under /tmp: no one renames another's
        // folder. And a group whose only member is the user (user private groups, umask 002) is no one else.
        let sticky = try harness()
        #expect(chmod(sticky.directory.path, 0o1777) == 0)
        let privateGroup = try harness()
        #expect(chown(privateGroup.inbox, 0, 0) == 0 && chmod(privateGroup.inbox, 0o770) == 0)
        for harness in [sticky, privateGroup] {
            try harness.drop("a.job", "url = \"http://127.0.0.1:9/a.bin\"\nretries = 0\n")
            try harness.runUntilIdle(expecting: 4, seconds: 60)
            #expect(harness.jobFiles().isEmpty)
        }
    }

    /// The state dir was open to all and she replaced the log with one of
    /// hers (a copy of a real one, whose paused task she would point
    /// anywhere); the folder closed again, the file is still hers: refused.
    /// `status` still shows what the log says, after saying why it may not be the agent's.
    @Test func aLogAnotherUserPutInTheStateDirIsRefused() throws {
        let harness = try harness()
        let mallory = try LocalUser()
        try harness.drop("a.job", "url = \"http://127.0.0.1:9/a.bin\"\nretries = 0\n")
        try harness.runUntilIdle(expecting: 4, seconds: 60)
        let log = harness.stateDir + "/events.sqlite"
        let copy = harness.directory.file("hers.sqlite")
        try FileManager.default.copyItem(atPath: log, toPath: copy)
        #expect(chmod(copy, 0o644) == 0)
        #expect(chmod(harness.stateDir, 0o777) == 0)
        try mallory.shell("cp \(copy) \(log).hers && mv -f \(log).hers \(log)", in: harness.directory.path)
        #expect(chmod(harness.stateDir, 0o700) == 0)
        #expect(owner(log) == mallory.uid)

        let result = try harness.run(["run", "--exit-when-idle"], seconds: 30)
        #expect(result.status == 1)
        #expect(result.stderr == "syncagent: file in the state dir \(log) is owned by user \(mallory.name) (uid \(mallory.uid)), "
                + "not by you: the agent replays and writes what is there, and they could change it; "
                + "fix: remove it and let syncagent make its own, or chown it to root\n")
        let status = try harness.run(["status"])
        #expect(status.status == 0)
        #expect(status.stderr.hasPrefix("syncagent: warning: file in the state dir \(log) is owned by user \(mallory.name)"))
        #expect(status.stdout.contains("failed"))

        // Nor through a link of the user's own: what it names is what is opened.
        try FileManager.default.moveItem(atPath: log, toPath: copy + ".hers")
        // (Reading her log as root, `status` left a -wal and -shm that SQLite gave her too.)
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: log + suffix) }
        #expect(symlink(copy + ".hers", log) == 0)
        let linked = try harness.run(["run", "--exit-when-idle"], seconds: 30)
        #expect(linked.status == 1)
        #expect(linked.stderr.hasPrefix("syncagent: file in the state dir \(log) is owned by user \(mallory.name)"), "\(linked.stderr)")
    }

    /// An inbox opened to others while the agent runs stops it, with the
    /// words a start would refuse it with.
    @Test func anInboxOpenedWhileTheAgentRunsStopsIt() throws {
        let harness = try harness()
        let agent = try harness.startAgent()
        #expect(harness.pastStartUp(agent))
        #expect(chmod(harness.inbox, 0o777) == 0)
        #expect(agent.wait(seconds: 20) == 1, "\(agent.stderr.suffix(1500))")
        #expect(agent.stderr.contains("syncagent: inbox \(harness.inbox) is writable by its group and others (mode 0777)"))
    }

    // MARK: Folders she made

    /// She made the agent's folders in the inbox first (it was open to all):
    /// `rejected/`, where alice's rejected job would have gone with its
    /// bearer token for her to read, or `.taken/`. Refused, never used; and
    /// so is one alice made herself that others may write.
    @Test func foldersAnotherUserMadeInTheInboxAreRefused() throws {
        let mallory = try LocalUser()
        for folder in ["rejected", ".taken"] {
            let harness = try harness()
            #expect(chmod(harness.inbox, 0o1777) == 0)
            try mallory.shell("mkdir -m 777 \(harness.inbox)/\(folder)", in: harness.directory.path)
            #expect(chmod(harness.inbox, 0o755) == 0)
            try harness.drop("bad.job", "url = \"http://127.0.0.1:9/x\"\ncolour = 1\n[headers]\nAuthorization = \"Bearer s3cret\"\n")
            let result = try harness.run(["run", "--exit-when-idle"], seconds: 30)
            #expect(result.status == 1, "\(folder): \(result.stderr)")
            let words = folder == "rejected" ? "the inbox's rejected folder" : "the inbox's .taken folder"
            #expect(result.stderr.hasPrefix("syncagent: \(words) \(harness.inbox)/\(folder) is owned by user \(mallory.name)"),
                    "\(result.stderr)")
            #expect(harness.jobFiles() == ["bad.job"])
            #expect(try FileManager.default.contentsOfDirectory(atPath: harness.inbox + "/" + folder).isEmpty)
        }
        let harness = try harness()
        try FileManager.default.createDirectory(atPath: harness.inbox + "/.taken", withIntermediateDirectories: true)
        #expect(chmod(harness.inbox + "/.taken", 0o777) == 0)
        let result = try harness.run(["run", "--exit-when-idle"], seconds: 30)
        #expect(result.status == 1)
        #expect(result.stderr.contains("the inbox's .taken folder \(harness.inbox)/.taken is writable by its group and others "
                                       + "(mode 0777)"))
        #expect(result.stderr.contains("fix: chmod go-w \(harness.inbox)/.taken"))
    }

    // MARK: A log is input too

    /// A log in which someone else's hand changed where tasks go: one paused
    /// task now points outside download_dir, a queued one up a `..`. Each
    /// fails, naming its task and why, before a byte is written; its partial
    /// file stays as it was.
    @Test func aDestinationTheLogGivesIsCheckedAgainBeforeAnythingIsWritten() throws {
        let harness = try harness(config: "max_active = 1\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("big.bin", size: 3_000_000, seed: 1)
        try server.serve("small.bin", size: 5000)
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(server.url("big.bin", "rate=1000000"))\"\ndest = \"a.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { ((try? harness.tasksByID()["a"]?["bytes"] as? Int) ?? 0) > 0 })
        try harness.drop("b.job", "id = \"b\"\nurl = \"\(server.url("small.bin"))\"\ndest = \"b.bin\"\n")
        #expect(eventually(within: 20) { harness.state(of: "b") == "queued" })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let part = harness.downloads + "/a.bin.part"
        let partBefore = contents(part)
        #expect(partBefore.map { !$0.isEmpty } == true)

        let outside = harness.directory.file("outside")
        let forged = ["a": outside + "/a.bin", "b": harness.downloads + "/../outside/b.bin"]
        for (task, dest) in forged {
            try pythonSQLite(harness.stateDir + "/events.sqlite",
                             "UPDATE events SET data = json_set(data, '$.dest', '\(dest)') WHERE type = 'created' AND task = '\(task)'")
        }
        let restarted = try harness.startAgent(exitWhenIdle: true)
        #expect(restarted.wait(seconds: 30) == 4, "\(restarted.stderr.suffix(2000))")
        let tasks = try harness.tasksByID()
        for (task, dest) in forged {
            #expect(tasks[task]?["state"] as? String == "failed")
            #expect(tasks[task]?["error_code"] as? String == "dest_refused")
            #expect((tasks[task]?["error"] as? String)?.hasPrefix("the log's dest \"\(dest)\"") == true, "\(tasks[task] ?? [:])")
            #expect(restarted.stderr.contains("task.id=\(task) [SyncAgent] a task read from the log is refused"))
        }
        #expect(!FileManager.default.fileExists(atPath: outside))
        #expect(contents(part) == partBefore)
    }

    /// A refused task ends without taking its slot: the task queued behind
    /// it (max_active = 1) runs (found by an adversary: the queue stalled).
    @Test func aTaskRefusedFromTheLogLeavesItsSlotToTheNext() throws {
        let harness = try harness(config: "max_active = 1\n")
        let server = try FaultServer(in: harness.directory)
        let small = try server.serve("small.bin", size: 5000)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        // Two tasks written into the log by another hand, never started: the first goes outside download_dir.
        for (task, dest) in [("bad", harness.directory.file("outside/x.bin")), ("good", harness.downloads + "/ok.bin")] {
            let data = "{\"dest\":\"\(dest)\",\"form\":[],\"headers\":[],\"kind\":\"download\",\"notify\":\"batch\","
                + "\"overwrite\":\"replace\",\"priority\":0,\"url\":\"\(server.url("small.bin"))\"}"
            try pythonSQLite(harness.stateDir + "/events.sqlite",
                             "INSERT INTO events(at_ms, task, type, data) VALUES (1, '\(task)', 'created', '\(data)')")
        }
        let restarted = try harness.startAgent(exitWhenIdle: true)
        #expect(restarted.wait(seconds: 30) == 4, "\(restarted.stderr.suffix(2000))")
        #expect(harness.state(of: "bad") == "failed")
        #expect(harness.state(of: "good") == "finished")
        #expect(contents(harness.downloads + "/ok.bin") == small)
    }

    /// `replay --verify` reads what the log names: a file placed outside
    /// download_dir by another hand is not read (found by an adversary: it
    /// printed the size and SHA-256 of a root-only file).
    @Test func verifyReadsNoFileTheLogPlacesOutsideDownloadDir() throws {
        let harness = try harness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("f.bin", size: 100)
        try harness.drop("f.job", "id = \"f\"\nurl = \"\(server.url("f.bin"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        let secret = harness.directory.file("secret")
        try String(repeating: "s", count: 100).write(toFile: secret, atomically: true, encoding: .utf8)
        try pythonSQLite(harness.stateDir + "/events.sqlite",
                         "UPDATE events SET data = json_set(data, '$.dest', '\(secret)') WHERE type IN ('created', 'finished') AND task = 'f'")
        let verify = try harness.run(["replay", "--verify"])
        #expect(verify.stdout.contains("not checked: f: the log's dest \"\(secret)\" is outside download_dir"), "\(verify.stdout)")
        #expect(!verify.stdout.contains("has sha256"), "\(verify.stdout)")
    }

    // MARK: The config file

    /// The config names the commands hooks run: a config file she may
    /// write, or one she owns, is refused by every command, at start and
    /// at a SIGHUP (found by an adversary: her hook ran as root).
    @Test func aConfigFileAnotherUserCouldChangeIsRefused() throws {
        let harness = try harness()
        let mallory = try LocalUser()
        let proof = harness.directory.file("pwned")
        let hook = "on_task_end = [\"/bin/sh\", \"-c\", \"id > \(proof)\"]\n"
        #expect(chmod(harness.configFile, 0o666) == 0)
        try mallory.shell("printf '%s' 'download_dir = \"\(harness.downloads)\"\n\(hook)' > \(harness.configFile)", in: harness.directory.path)
        let server = try FaultServer(in: harness.directory)
        try server.serve("ok.bin", size: 100)
        try harness.drop("ok.job", "url = \"\(server.url("ok.bin"))\"\n")
        for command in [["run", "--exit-when-idle"], ["status"], ["submit", server.url("ok.bin")]] {
            let refused = try harness.run(command)
            #expect(refused.status != 0, "\(command)")
            #expect(refused.stderr.contains("config file \(harness.configFile) is writable by its group and others (mode 0666)")
                    && refused.stderr.contains("fix: chmod go-w \(harness.configFile)"), "\(command): \(refused.stderr)")
        }
        #expect(chmod(harness.configFile, 0o644) == 0)
        try mallory.own(harness.configFile)
        let owned = try harness.run(["run", "--exit-when-idle"])
        #expect(owned.status != 0 && owned.stderr.contains("is owned by user \(mallory.name)"), "\(owned.stderr)")
        #expect(!FileManager.default.fileExists(atPath: proof), "her hook never runs")
        #expect(server.requests.isEmpty)
    }

    @Test func aConfigFileMadeWritableWhileRunningIsNotReloaded() throws {
        let harness = try harness()
        let mallory = try LocalUser()
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started"))
        let proof = harness.directory.file("pwned")
        #expect(chmod(harness.configFile, 0o666) == 0)
        try mallory.shell("printf '%s' 'download_dir = \"\(harness.downloads)\"\non_task_end = [\"/bin/touch\", \"\(proof)\"]\n' > \(harness.configFile)",
                          in: harness.directory.path)
        agent.signal(SIGHUP)
        // Read with the state dir alone: the config file is refused to every command now.
        func logged() -> [AgentHarness.LoggedEvent] { (try? harness.events(readingConfig: false)) ?? [] }
        #expect(eventually(within: 10) { logged().contains { $0.type == "config_reloaded" } })
        let reload = try #require(logged().last { $0.type == "config_reloaded" })
        #expect((reload.data["error"] as? String)?.contains("is writable by its group and others") == true, "\(reload.data)")
        #expect((reload.data["applied"] as? [Any])?.isEmpty != false)
        let server = try FaultServer(in: harness.directory)
        try server.serve("ok.bin", size: 100)
        try harness.drop("ok.job", "id = \"ok\"\nurl = \"\(server.url("ok.bin"))\"\n")
        #expect(eventually(within: 10) { logged().contains { $0.type == "finished" && $0.task == "ok" } })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        #expect(!FileManager.default.fileExists(atPath: proof), "her hook never runs")
    }

    // MARK: submit

    /// A job may carry credentials: `submit` writes it for its user alone,
    /// whatever the umask and the inbox's mode.
    @Test func submitWritesJobsOnlyTheirUserMayRead() throws {
        let harness = try harness()
        #expect(chmod(harness.inbox, 0o777) == 0)
        let command = "umask 000; exec \(syncagentBinary) submit \(harness.globalFlags.joined(separator: " ")) "
            + "--header 'Authorization: Bearer s3cret' http://127.0.0.1:9/a.bin http://127.0.0.1:9/b.bin"
        let child = try ChildProcess("/bin/sh", ["-c", command], environment: harness.environment, outputIn: harness.directory.path)
        #expect(child.wait(seconds: 30) == 0, "\(child.stderr)")
        let jobs = harness.jobFiles()
        #expect(jobs.count == 2)
        for job in jobs {
            var info = stat()
            #expect(stat(harness.inbox + "/" + job, &info) == 0)
            #expect(info.st_mode & 0o7777 == 0o600, "\(job): mode \(String(info.st_mode & 0o7777, radix: 8))")
        }
    }
}

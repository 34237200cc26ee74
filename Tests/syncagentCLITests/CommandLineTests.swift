import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

@Suite("The syncagent command line", .serialized)
struct CommandLineTests {
    @Test(arguments: ["run", "submit", "status", "replay", "events", "pause", "resume", "cancel"])
    func everyCommandsHelpShowsAnExample(_ command: String) throws {
        let harness = try AgentHarness()
        let result = try harness.run([command, "--help"], flags: false)
        #expect(result.status == 0)
        #expect(result.stdout.contains("Example"))
        #expect(result.stdout.contains("--state-dir"))
    }

    @Test func unknownConfigKeyIsAnErrorNamingIt() throws {
        let harness = try AgentHarness(config: "max_actve = 3\n")
        let result = try harness.run(["status"])
        #expect(result.status != 0)
        #expect(result.stderr.contains("key \"max_actve\" is not a known key"))
        #expect(result.stderr.contains(harness.configFile))
    }

    @Test func aConfigThatIsNotUTF8SaysSoWithTheOffset() throws {
        let harness = try AgentHarness()
        try (Data("download_dir = \"\(harness.downloads)\"\nuser_agent = \"caf".utf8) + Data([0xE9]) + Data("\"\n".utf8))
            .write(to: URL(fileURLWithPath: harness.configFile))
        let result = try harness.run(["status"])
        #expect(result.status != 0)
        #expect(result.stderr.contains("\(harness.configFile): the config file is not UTF-8 text (the first bad byte is at offset "),
                "\(result.stderr)")
    }

    @Test func submitWritesAJobTheAgentTakes() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("s.bin", size: 3000)
        let submitted = try harness.run(["submit", nginx.url("s.bin"), "--dest", "sub/s.bin", "--priority", "3",
                                         "--header", "Authorization: Bearer topsecret"])
        #expect(submitted.status == 0)
        // The task's id, as a script would capture it; the job waits in the inbox.
        let id = submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(id.count == 6 && !id.contains("/"), "\(submitted.stdout)")
        let waiting = try FileManager.default.contentsOfDirectory(atPath: harness.inbox).filter { $0.hasSuffix(".job") }
        #expect(waiting.count == 1 && waiting[0].contains(id))
        #expect(submitted.stderr.contains("no agent is running"), "\(submitted.stderr)")

        let bad = try harness.run(["submit", "ftp://127.0.0.1/x"])
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("key \"url\" must be an http or https URL"))

        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0)
        let task = try harness.statusTasks().first
        #expect(task?["id"] as? String == id)
        #expect(task?["state"] as? String == "finished")
        #expect(task?["priority"] as? Int == 3)
        #expect(task?["dest"] as? String == "\(harness.downloads)/sub/s.bin")
        #expect(task?["headers"] as? [String] == ["Authorization: <redacted>"])

        // No command prints the credential.
        for command in [["status"], ["status", "--json"], ["replay"], ["replay", "--json"], ["events"], ["events", "--json"]] {
            let output = try harness.run(command).stdout
            #expect(!output.contains("topsecret"), "\(command)")
        }
        #expect(try harness.run(["events"]).stdout.contains("<redacted>"))
    }

    @Test func oneAgentPerStateDirectory() throws {
        let harness = try AgentHarness()
        let first = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started"))
        let second = try harness.run(["run"], seconds: 30)
        #expect(second.status == 3)
        #expect(second.stderr.contains("agent pid \(first.pid) is already running on state dir \(harness.stateDir)"))
        first.signal(SIGTERM)
        #expect(first.wait(seconds: 5) == 0)
        #expect(try harness.events().last?.type == "agent_stopped")
    }

    /// Two agents with state dirs of their own on one inbox each took what the other had
    /// moved to `.taken/` and not yet recorded: one job, a task in each log.
    @Test func oneAgentPerInbox() throws {
        let harness = try AgentHarness()
        let other = try AgentHarness()
        let first = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started"))
        let second = try other.run(["run", "--config", other.configFile, "--state-dir", other.stateDir, "--inbox", harness.inbox],
                                   seconds: 30, flags: false)
        #expect(second.status == 3)
        // The pid is read from /proc/locks (a file system whose devices it names otherwise gets "another agent").
        #expect(second.stderr.contains("is already watching inbox \(harness.inbox) (with another state dir); one agent per inbox"),
                "\(second.stderr)")
        #expect(!FileManager.default.fileExists(atPath: other.stateDir + "/events.sqlite"))
        first.signal(SIGTERM)
        #expect(first.wait(seconds: 5) == 0)
        // Once it has stopped, the inbox is free for the other.
        #expect(try other.run(["run", "--config", other.configFile, "--state-dir", other.stateDir, "--inbox", harness.inbox,
                               "--exit-when-idle"], seconds: 30, flags: false).status == 0)
    }

    /// SIGTERM pauses a running transfer at its durable offset and exits 0
    /// within 5 s; the next start resumes it with Range and finishes the file.
    @Test func sigtermPausesAndTheNextStartResumes() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("big.bin", size: 8 << 20)
        try harness.drop("big.job", "url = \"\(nginx.url("big.bin"))\"\nid = \"big\"\nmax_speed = \"2M\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) {
            ((try? harness.statusTasks().first?["bytes"] as? Int) ?? 0) > 0
        })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 5) == 0)
        let paused = try harness.events().last { $0.type == "paused" }
        let offset = paused?.data["bytes"] as? Int ?? 0
        #expect(paused?.data["reason"] as? String == "agent_stopping")
        #expect(offset > 0 && offset < data.count)
        let replay = try harness.replayTasks().first
        #expect(replay?["state"] as? String == "paused")
        #expect((replay?["plan"] as? String)?.hasPrefix("resume at byte \(offset) with If-Range: \"") == true)

        let again = try harness.startAgent(exitWhenIdle: true)
        #expect(again.wait(seconds: 60) == 0)
        let events = try harness.events()
        #expect(events.last { $0.type == "resumed" }?.data["bytes"] as? Int == offset)
        #expect(events.last { $0.type == "started" }?.data["offset"] as? Int == offset)
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/big.bin") == data)
        // The second request asked for the rest only: nginx answered 206.
        let log = try String(contentsOfFile: nginx.accessLog, encoding: .utf8)
        #expect(log.contains("/big.bin 206 \(data.count - offset)"))
        #expect(try harness.run(["replay", "--verify"]).stdout.contains("every file on disk matches the log"))
    }

    @Test func pauseResumeAndCancelTravelThroughTheInbox() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("slow.bin", size: 4 << 20)
        try nginx.serve("other.bin", size: 4 << 20, seed: 2)
        try harness.drop("slow.job", "url = \"\(nginx.url("slow.bin"))\"\nid = \"slow\"\nmax_speed = \"1M\"\n")
        try harness.drop("other.job", "url = \"\(nginx.url("other.bin"))\"\nid = \"other\"\nmax_speed = \"1M\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { harness.state(of: "slow") == "running" && harness.state(of: "other") == "running" })

        // With an agent running, each command prints what the agent did, once it did it, and exits
        // 0 only when it changed something.
        let pause = try harness.run(["pause", "slow"])
        #expect(pause.status == 0, "\(pause.stderr)")
        #expect(pause.stdout.hasPrefix("task slow: paused at byte "), "\(pause.stdout)")
        #expect(harness.state(of: "slow") == "paused", "applied before the command returned")
        #expect(FileManager.default.fileExists(atPath: "\(harness.downloads)/slow.bin.part"))
        let again = try harness.run(["pause", "slow"])
        #expect(again.status == 1 && again.stdout.isEmpty, "\(again.stdout)")
        #expect(again.stderr == "syncagent: task slow: nothing to do: task already paused\n", "\(again.stderr)")

        let cancel = try harness.run(["cancel", "other"])
        #expect(cancel.status == 0 && cancel.stdout == "task other: cancelled\n", "\(cancel.stdout) \(cancel.stderr)")
        #expect(harness.state(of: "other") == "cancelled")
        #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/other.bin.part"))
        let late = try harness.run(["cancel", "other"])
        #expect(late.status == 1 && late.stderr == "syncagent: task other: nothing to do: task already cancelled\n", "\(late.stderr)")

        let resume = try harness.run(["resume", "--all"])
        #expect(resume.status == 0 && resume.stdout.hasPrefix("resume --all: slow: resumed at byte "), "\(resume.stdout)")
        #expect(eventually(within: 30) { harness.state(of: "slow") == "finished" })
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/slow.bin")
            == FileManager.default.contents(atPath: "\(nginx.root)/slow.bin"))
        let nothing = try harness.run(["pause", "--all"])
        #expect(nothing.status == 1 && nothing.stderr == "syncagent: nothing to do: no task to pause\n", "\(nothing.stderr)")

        let unknown = try harness.run(["pause", "nope"])
        #expect(unknown.status != 0)
        #expect(unknown.stderr.contains("no task has the id \"nope\""))
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 5) == 0)

        // With none running, the request waits for the next start, and the command says so.
        let forget = try harness.run(["forget", "other"])
        #expect(forget.status == 0 && forget.stdout.hasPrefix("forget requested for task other: \(harness.inbox)/"), "\(forget.stdout)")
        #expect(forget.stderr.contains("no agent is running") && forget.stderr.contains("applies when the agent starts"), "\(forget.stderr)")
    }

    @Test func replayUntilShowsThePast() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("r.bin", size: 5000)
        try harness.drop("r.job", "url = \"\(nginx.url("r.bin"))\"\nid = \"r\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0)
        let events = try harness.events()
        let created = try #require(events.first { $0.type == "created" })
        let past = try harness.replayTasks(["--until", "\(created.seq)"]).first
        #expect(past?["state"] as? String == "queued")
        #expect(past?["plan"] as? String == "start from 0")
        #expect(past?["last_seq"] as? Int == created.seq)
        let now = try harness.replayTasks().first
        #expect(now?["plan"] as? String == "nothing: finished")
        // No seq is negative: said so, not taken for "before a compaction".
        let negative = try harness.run(["replay", "--until=-1"])
        #expect(negative.status == 64 && negative.stderr.contains("--until takes a seq, 0 or more; got -1"), "\(negative.stderr)")

        // Found by an adversary: with no sha256 in the job, a byte changed in place passed.
        // The size is the same; the SHA-256 `finished` recorded is not.
        let handle = try #require(FileHandle(forUpdatingAtPath: "\(harness.downloads)/r.bin"))
        try handle.seek(toOffset: 100)
        try handle.write(contentsOf: Data([0x42]))
        try handle.close()
        let edited = try harness.run(["replay", "--verify"])
        #expect(edited.status == 5)
        #expect(edited.stdout.contains("r.bin has sha256 ") && edited.stdout.contains("bytes 0-5000 differ"), "\(edited.stdout)")

        try FileManager.default.removeItem(atPath: "\(harness.downloads)/r.bin")
        let verify = try harness.run(["replay", "--verify"])
        #expect(verify.status == 5)
        #expect(verify.stdout.contains("mismatch: r: \(harness.downloads)/r.bin is missing"))
    }

    @Test func verifyChecksTheSha256AJobGave() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("s.bin", size: 5000)
        try harness.drop("s.job", "url = \"\(nginx.url("s.bin"))\"\nsha256 = \"\(sha256Hex(data))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        try expectVerifyClean(harness)
        try Data(repeating: 0x41, count: 5000).write(to: URL(fileURLWithPath: harness.downloads + "/s.bin"))
        let verify = try harness.run(["replay", "--verify"])
        #expect(verify.status == 5)
        // The file's SHA-256 was checked against the job's before `finished` recorded it.
        #expect(verify.stdout.contains("s.bin has sha256 ") && verify.stdout.contains("the log says \(sha256Hex(data))"), "\(verify.stdout)")
    }

    /// libcurl is opened by the agent, not linked: a command that only
    /// reads the log starts without it (and its 30 libraries). Here it is
    /// made unloadable (an empty file mounted over it, in a mount namespace
    /// of this run): `status` and `submit` still work, and `run` stops at
    /// once saying what is missing, before it takes a job.
    @Test func commandsThatReadTheLogRunWithoutLibcurlAndTheAgentSaysItIsMissing() throws {
        let harness = try AgentHarness()
        let probe = try ChildProcess("/usr/bin/unshare", ["--mount", "/bin/true"], environment: harness.environment,
                                     outputIn: harness.directory.path)
        guard probe.wait(seconds: 10) == 0 else {
            print("skipped: no mount namespace can be made here (it needs root): \(probe.stderr)")
            return
        }
        try harness.drop("a.job", "id = \"a\"\nurl = \"http://127.0.0.1:9/a.bin\"\nretries = 0\n")
        func withoutLibcurl(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
            let script = """
                library=$(/sbin/ldconfig -p | awk '/libcurl[.]so[.]4 / { print $NF; exit }')
                [ -n "$library" ] || { echo "no libcurl.so.4 known to ldconfig" >&2; exit 97; }
                mount --bind /dev/null "$(readlink -f "$library")" || exit 98
                exec "$@"
                """
            let child = try ChildProcess("/usr/bin/unshare", ["--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh",
                                                              syncagentBinary] + [arguments[0]] + harness.globalFlags + arguments.dropFirst(),
                                         environment: harness.environment, outputIn: harness.directory.path)
            guard let status = child.wait(seconds: 30) else { throw TestFailure("syncagent \(arguments) still running after 30 s") }
            return (status, child.stdout, child.stderr)
        }
        let status = try withoutLibcurl(["status"])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.hasPrefix("agent: not running\n"), "\(status.stdout)")
        let submitted = try withoutLibcurl(["submit", "--id", "b", "--retries", "0", "http://127.0.0.1:9/b.bin"])
        #expect(submitted.status == 0, "\(submitted.stderr)")

        let agent = try withoutLibcurl(["run", "--exit-when-idle"])
        #expect(agent.status != 0)
        #expect(agent.stderr.contains("cannot load libcurl.so.4 (install libcurl4)"), "\(agent.stderr)")
        #expect(harness.jobFiles().count == 2 && harness.jobFiles().contains("a.job"),
                "no job is taken by an agent that cannot transfer: \(harness.jobFiles())")

        // With libcurl back, the same jobs are taken and tried (port 9 refuses them).
        let restored = try harness.run(["run", "--exit-when-idle"], seconds: 60)
        #expect(harness.jobFiles().isEmpty, "\(restored.stderr)")
        #expect(try harness.tasksByID()["a"]?["state"] as? String == "failed")
        #expect(try harness.tasksByID()["b"]?["state"] as? String == "failed")
    }

    @Test func errorsAreOneLineNamingWhatIsWrong() throws {
        let harness = try AgentHarness(config: "max_actve = 3\n")
        let status = try harness.run(["status"])
        #expect(status.status != 0)
        let lines = status.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].contains(harness.configFile) && lines[0].contains("max_actve"), "\(status.stderr)")
        #expect(!status.stderr.contains("Usage"))

        let missing = try harness.run(["status", "--config", harness.directory.file("nope.toml")], flags: false)
        #expect(missing.stderr.contains("nope.toml: cannot read the config file: No such file or directory"), "\(missing.stderr)")

        let fine = try AgentHarness(config: "retries = 0\n")
        #expect(try fine.run(["submit", "http://127.0.0.1:9/x"]).status == 0)
        #expect(try fine.startAgent(exitWhenIdle: true).wait(seconds: 60) != nil)
        let events = try fine.run(["events", "--task", "nope"])
        #expect(events.status != 0 && events.stderr == "syncagent: no task has the id \"nope\"\n")
        let pause = try fine.run(["pause", "--all", "abc"])
        #expect(pause.status != 0 && pause.stderr.contains("not both") && !pause.stderr.contains("Usage"))
        // --help is never preceded by a complaint about what it was not given.
        for command in ["submit", "pause", "resume", "forget", "status"] {
            let help = try fine.run([command, "--help"], flags: false)
            #expect(help.status == 0 && help.stderr.isEmpty && help.stdout.contains("USAGE:"), "\(command): \(help.stderr)")
        }
    }

    /// Ids as the agent would read them: "*" is no id (it would act on every
    /// task); a job still in the inbox cannot be forgotten (the agent would
    /// refuse it); a symlinked job the agent refuses holds no id against
    /// submit; `events --task --follow` of an unknown id says it waits; an
    /// id repeated within one list is blamed on the list, not the log.
    @Test func idsOnTheCommandLineAreWhatTheAgentWouldSay() throws {
        let harness = try AgentHarness()
        for (command, hint) in [(["cancel", "*"], ""), (["pause", "*"], "--all"), (["resume", "*"], "--all"), (["forget", "*"], "--ended")] {
            let result = try harness.run(command)
            #expect(result.status != 0 && result.stderr.contains("\"*\" is not a task id") && (hint.isEmpty || result.stderr.contains(hint)), "\(command): \(result.stderr)")
        }
        #expect(harness.jobFiles().isEmpty)

        #expect(try harness.run(["submit", "http://127.0.0.1:9/a", "--id", "waiting"]).status == 0)
        let forget = try harness.run(["forget", "waiting"])
        #expect(forget.status != 0 && forget.stderr.contains("task waiting is waiting in"), "\(forget.stderr)")
        #expect(try harness.run(["pause", "waiting"]).status == 0, "a job waiting in the inbox can be paused")
        let noEvents = try harness.run(["events", "--task", "waiting"])
        #expect(noEvents.status == 0 && noEvents.stdout.isEmpty && noEvents.stderr.contains("task waiting is a job waiting in"), "\(noEvents.stderr)")

        let elsewhere = harness.directory.file("elsewhere.job")
        try "url = \"http://127.0.0.1:9/b\"\nid = \"linked\"\n".write(toFile: elsewhere, atomically: true, encoding: .utf8)
        #expect(symlink(elsewhere, harness.inbox + "/linked.job") == 0)
        #expect(try harness.run(["submit", "http://127.0.0.1:9/b", "--id", "linked"]).status == 0, "the agent would refuse the link")

        let list = harness.directory.file("twice.txt")
        try "http://127.0.0.1:9/c\n  id=twice\nhttp://127.0.0.1:9/d\n  id=twice\n".write(toFile: list, atomically: true, encoding: .utf8)
        let twice = try harness.run(["submit", "-i", list])
        #expect(twice.status != 0 && twice.stderr.contains("an earlier URL of this submit"), "\(twice.stderr)")

        let follow = try ChildProcess(syncagentBinary, ["events", "--task", "nosuch", "--follow"] + harness.globalFlags,
                                      environment: harness.environment, outputIn: harness.directory.path)
        #expect(eventually(within: 10) { follow.stderr.contains("no task has the id \"nosuch\" yet; waiting for its events") }, "\(follow.stderr)")
        follow.signal(SIGTERM)
        follow.wait(seconds: 10)
    }

    /// `events -n N` prints the last N; `--follow` starts with the last 10,
    /// as `tail -f` does, instead of the whole log, then goes on with new ones.
    @Test func eventsStartsWithTheLastOnesWhenAskedAndWhenFollowing() throws {
        let harness = try AgentHarness()
        try FileManager.default.createDirectory(atPath: harness.stateDir, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: FixtureLogTests.folder + "/all-events/events.sqlite",
                                         toPath: harness.stateDir + "/events.sqlite")
        let all = try harness.run(["events"]).stdout.split(separator: "\n").map(String.init)
        #expect(all.count > 20)
        #expect(try harness.run(["events", "-n", "5"]).stdout.split(separator: "\n").map(String.init) == Array(all.suffix(5)))
        #expect(try harness.run(["events", "-n", "0"]).stdout.isEmpty)
        #expect(try harness.run(["events", "-n", "100000"]).stdout.split(separator: "\n").map(String.init) == all)
        let refused = try harness.run(["events", "--lines=-1"])
        #expect(refused.status != 0 && refused.stderr.contains("-n wants a number of events"), "\(refused.stderr)")

        let oneTask = try harness.run(["events", "--json"]).stdout.split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .compactMap { $0["task"] as? String }
        let busiest = try #require(Dictionary(grouping: oneTask, by: { $0 }).max { $0.value.count < $1.value.count }?.key)
        let ofTask = try harness.run(["events", "--task", busiest]).stdout.split(separator: "\n").map(String.init)
        #expect(ofTask.count > 3)
        #expect(try harness.run(["events", "--task", busiest, "-n", "3"]).stdout.split(separator: "\n").map(String.init)
                == Array(ofTask.suffix(3)))

        let follow = try ChildProcess(syncagentBinary, ["events", "--follow"] + harness.globalFlags,
                                      environment: harness.environment, outputIn: harness.directory.path)
        defer { follow.signal(SIGTERM); follow.wait(seconds: 10) }
        #expect(eventually(within: 10) { follow.stdout.split(separator: "\n").count >= 10 })
        // A compaction adds an event: it follows the ten, nothing of the older log comes between.
        #expect(try harness.run(["compact"]).status == 0)
        #expect(eventually(within: 10) { follow.stdout.contains("\tcompacted\t") && follow.stdout.split(separator: "\n").count > 10 },
                "\(follow.stdout)")
        let followed = follow.stdout.split(separator: "\n").map(String.init)
        #expect(Array(followed.prefix(10)) == Array(all.suffix(10)))
        #expect(followed.dropFirst(10).allSatisfy { !all.contains($0) })
    }

    @Test func forgetTakesEndedTasksOffTheListAndKeepsTheirHistory() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("f.bin", size: 1000)
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(nginx.url("f.bin"))\"\ndest = \"a.bin\"\n")
        try harness.drop("b.job", "id = \"b\"\nurl = \"\(nginx.url("f.bin"))\"\ndest = \"b.bin\"\n")
        try harness.drop("later.job", "id = \"later\"\nurl = \"\(nginx.url("f.bin"))\"\nnot_before = \"2099-01-01T00:00:00Z\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { (try? harness.tasksByID())?.values.filter { $0["state"] as? String == "finished" }.count == 2 })

        #expect(try harness.run(["forget", "a"]).status == 0)
        #expect(eventually(within: 10) { (try? harness.tasksByID())?["a"] == nil })
        #expect(!(try harness.run(["status"])).stdout.contains("a.bin"))
        #expect(try harness.events().contains { $0.task == "a" && $0.type == "finished" }, "the log keeps the fact")
        #expect(try harness.run(["status", "--task", "a"]).stdout.contains("forgotten:   yes"))

        // A live task is refused at once (and by the agent, were the job dropped by hand).
        let live = try harness.run(["forget", "later"])
        #expect(live.status != 0 && live.stderr.contains("task later is queued; only an ended task can be forgotten"), "\(live.stderr)")
        try harness.drop("forget-later.job", "action = \"forget\"\ntask = \"later\"\n")
        #expect(try harness.run(["forget", "--ended"]).status == 0)
        #expect(eventually(within: 10) { (try? harness.tasksByID()).map { Array($0.keys) } == ["later"] })
        let outcome = try harness.events().last { $0.type == "controlled" && $0.task == "later" }
        #expect((outcome?.data["outcome"] as? String)?.contains("cancel it first") == true)
        // Run again after being forgotten: a live transfer is listed again.
        try harness.drop("nf.job", "id = \"nf\"\nurl = \"\(nginx.url("not-yet.bin"))\"\n")
        #expect(eventually(within: 10) { harness.state(of: "nf") == "failed" })
        #expect(try harness.run(["forget", "nf"]).status == 0)
        #expect(eventually(within: 10) { (try? harness.tasksByID())?["nf"] == nil })
        try nginx.serve("not-yet.bin", size: 1000)
        #expect(try harness.run(["resume", "nf"]).status == 0)
        #expect(eventually(within: 10) { harness.state(of: "nf") == "finished" }, "resumed, so listed again")
        // "all" means what the user still sees: a forgotten failure is not run again by resume --all.
        try harness.drop("gone.job", "id = \"gone\"\nurl = \"\(nginx.url("never.bin"))\"\n")
        #expect(eventually(within: 10) { harness.state(of: "gone") == "failed" })
        #expect(try harness.run(["forget", "gone"]).status == 0)
        #expect(eventually(within: 10) { (try? harness.tasksByID())?["gone"] == nil })
        let resumeAll = try harness.run(["resume", "--all"])
        #expect(resumeAll.status == 1 && resumeAll.stderr == "syncagent: nothing to do: no task to resume\n", "\(resumeAll.stderr)")
        #expect(eventually(within: 10) { ((try? harness.events()) ?? []).filter { $0.type == "controlled" && $0.data["action"] as? String == "resume" && $0.data["target"] as? String == "*" }.count == 1 })
        #expect(try harness.events().filter { $0.task == "gone" && $0.type == "resumed" }.isEmpty)
        let both = try harness.run(["forget", "--ended", "a"])
        #expect(both.status != 0 && both.stderr.contains("not both"))
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }
}

@Suite("Control while the agent is stopped", .serialized)
struct StoppedControlTests {
    @Test func pauseResumeAndCancelWaitInTheInboxForTheNextStart() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("k.bin", size: 2 << 20)
        try nginx.serve("c.bin", size: 2 << 20, seed: 3)
        try harness.drop("k.job", "url = \"\(nginx.url("k.bin"))\"\nid = \"keep\"\n")
        try harness.drop("c.job", "url = \"\(nginx.url("c.bin"))\"\nid = \"drop\"\n")

        // Both tasks exist only as jobs in the inbox; no agent runs.
        #expect(try harness.run(["pause", "keep"]).status == 0)
        #expect(try harness.run(["cancel", "drop"]).status == 0)
        let first = try harness.startAgent(exitWhenIdle: true)
        #expect(first.wait(seconds: 60) == 0)
        func states() throws -> [String: String] {
            Dictionary(uniqueKeysWithValues: try harness.statusTasks().map { ($0["id"] as! String, $0["state"] as! String) })
        }
        #expect(try states() == ["keep": "paused", "drop": "cancelled"])
        #expect(try harness.replayTasks(["--task", "keep"]).first?["plan"] as? String == "stay paused at byte 0 until resumed")

        #expect(try harness.run(["resume", "keep"]).status == 0)
        let second = try harness.startAgent(exitWhenIdle: true)
        #expect(second.wait(seconds: 60) == 0)
        #expect(try states() == ["keep": "finished", "drop": "cancelled"])
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/k.bin") == data)
        #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/c.bin"))
        #expect(try harness.events().filter { $0.type == "started" }.count == 1)
    }

    @Test func everyControlJobHasAnOutcomeAndResumeRunsAFailedTaskAgain() throws {
        let harness = try AgentHarness(config: "retries = 0\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("c.bin", size: 20_000)
        let data = try server.serve("flaky.bin", size: 30_000)
        try harness.drop("done.job", "id = \"done\"\nurl = \"\(server.url("c.bin"))\"\ndest = \"done.bin\"\n")
        try harness.drop("flaky.job", "id = \"flaky\"\nurl = \"\(server.url("flaky.bin", "fail_status=503&fail_times=1"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
        #expect(try harness.tasksByID()["flaky"]?["state"] as? String == "failed")

        // With no agent to answer, the command itself says a finished task stays so, and leaves no request behind.
        for action in ["pause", "resume", "cancel"] {
            let said = try harness.run([action, "done"])
            #expect(said.status == 1 && said.stderr.contains("task done: nothing to do: task already finished"), "\(said.stderr)")
        }
        #expect(harness.jobFiles().isEmpty)
        // The agent answers such requests all the same when they come as files.
        for action in ["pause", "resume", "cancel"] {
            try harness.drop("\(action).job", "action = \"\(action)\"\ntask = \"done\"\n")
        }
        #expect(try harness.run(["resume", "flaky"]).status == 0)
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "a control job on an ended task must not wedge --exit-when-idle")
        let outcomes = try harness.events().filter { $0.type == "controlled" }.compactMap { $0.data["outcome"] as? String }
        #expect(outcomes == ["done: nothing to do: task already finished", "done: nothing to do: task already finished",
                             "done: nothing to do: task already finished", "flaky: runs again from byte 0"], "\(outcomes)")
        #expect(try harness.tasksByID()["flaky"]?["state"] as? String == "finished")
        #expect(contents("\(harness.downloads)/flaky.bin") == data)
        #expect(harness.jobFiles().isEmpty)
        try expectVerifyClean(harness)
    }
}

import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 9, as an attacker would try it: hostile servers, racing scripts,
/// odd names, symlinks, damaged logs. Each test runs the real binary and
/// ends with the log and the disk agreeing (`replay --verify`).
@Suite("Hardening against a hostile world", .serialized)
struct HardeningTests {
    func contents(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

    // MARK: 1. One destination, many tasks

    @Test func tasksWithOneDestinationNeverMixTheirBytes() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        var sources: [Data] = []
        for index in 0..<3 {
            sources.append(try nginx.serve("v\(index).bin", size: 300_000 + index, seed: UInt64(index)))
        }
        for index in 0..<3 {
            try FileManager.default.createDirectory(atPath: "\(nginx.root)/dir\(index)", withIntermediateDirectories: true)
            sources.append(try nginx.serve("dir\(index)/same.bin", size: 200_000 + index, seed: UInt64(10 + index)))
        }
        // Three jobs naming one dest, and three URLs whose names are all same.bin.
        for index in 0..<3 {
            try harness.drop("named\(index).job", "url = \"\(nginx.url("v\(index).bin"))\"\ndest = \"same.bin\"\n")
            try harness.drop("url\(index).job", "url = \"\(nginx.url("dir\(index)/same.bin"))\"\n")
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "\(agent.stderr.suffix(1500))")
        let published = try FileManager.default.contentsOfDirectory(atPath: harness.downloads).filter { !$0.hasSuffix(".part") }
        #expect(published.count == 6, "\(published)")
        let got = Set(published.compactMap { contents("\(harness.downloads)/\($0)") })
        #expect(got == Set(sources), "every published file is exactly one source")
        let dests = Set(try harness.statusTasks().compactMap { $0["dest"] as? String })
        #expect(dests.count == 6)
        try expectVerifyClean(harness)
    }

    @Test func replaceSkipAndFailAreDecidedAgainstReservedNames() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let slow = try server.serve("slow.bin", size: 400_000)
        try server.serve("other.bin", size: 1000)
        // Running for about eight seconds: the three below arrive while it holds x.bin. (With two, a
        // loaded CI machine once took the last of them after `a` had ended: `dest_exists`, not `dest_reserved`.)
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(server.url("slow.bin", "rate=50000"))\"\ndest = \"x.bin\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(eventually(within: 20) { (try? harness.events().contains { $0.type == "started" && $0.task == "a" }) ?? false })
        for mode in ["replace", "skip", "fail"] {
            try harness.drop("\(mode).job", "id = \"\(mode)\"\nurl = \"\(server.url("other.bin"))\"\ndest = \"x.bin\"\noverwrite = \"\(mode)\"\n")
        }
        #expect(agent.wait(seconds: 60) == 4)
        #expect(contents("\(harness.downloads)/x.bin") == slow)
        let tasks = try harness.tasksByID()
        #expect(tasks["a"]?["state"] as? String == "finished")
        #expect(tasks["replace"]?["state"] as? String == "failed")
        #expect(tasks["replace"]?["error_code"] as? String == "dest_reserved")
        #expect((tasks["replace"]?["error"] as? String)?.contains("is the destination of task a") == true)
        #expect(tasks["fail"]?["error_code"] as? String == "dest_reserved")
        #expect(tasks["skip"]?["state"] as? String == "finished")
        // Found by this stop's adversary: a skip read as a download. It is said to be one.
        #expect((tasks["skip"]?["skipped"] as? String)?.contains("x.bin") == true && tasks["a"]?["skipped"] is NSNull)
        let status = try harness.run(["status"]).stdout
        #expect(status.contains("skipped") && status.contains("(1 skipped)"))
        #expect(try harness.run(["status", "--task", "skip"]).stdout.contains("skipped:     skipped: "))
        // None of the three sent a request.
        #expect(!server.requests.contains { $0.path.hasPrefix("/other.bin") })
        try expectVerifyClean(harness)
    }

    // MARK: 2–3. Numbers and ranges a server sends

    @Test func absurdNumbersFromAServerNeverCrashTheAgent() throws {
        let harness = try AgentHarness(config: "retries = 1\ntotal_timeout = 600\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("f.bin", size: 100_000)
        let hostile = [
            "retry": "fail_status=503&retry_after=99999999999999999",
            "length": "content_length=9223372036854775807&drop_after=5000",
            "range": "partial_from=0&header=Content-Range:bytes%200-9223372036854775806/9223372036854775807",
            "junk": "fail_status=503&retry_after=soon%2C%20maybe",
            // Two lengths: curl framed the body by the second and published half the file.
            "twolengths": "extra_length=50000",
        ]
        for (id, faults) in hostile.sorted(by: { $0.key < $1.key }) {
            try harness.drop("\(id).job", "id = \"\(id)\"\nurl = \"\(server.url("f.bin", faults))\"\ndest = \"\(id).bin\"\n")
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4, "\(agent.stderr.suffix(2000))")
        let tasks = try harness.tasksByID()
        for id in hostile.keys {
            #expect(tasks[id]?["state"] as? String == "failed", "\(id)")
            #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/\(id).bin"), "\(id)")
        }
        // A Retry-After past total_timeout fails at once, saying so.
        let retry = tasks["retry"]?["error"] as? String ?? ""
        #expect(retry.hasPrefix("server asked to wait more than ten years before trying again (Retry-After)"), "\(retry)")
        #expect(tasks["retry"]?["error_code"] as? String == "total_timeout")
        #expect((tasks["length"]?["error"] as? String)?.contains("unreadable Content-Length") == true)
        #expect((tasks["range"]?["error"] as? String)?.contains("nowhere (an unreadable Content-Range)") == true)
        #expect((tasks["twolengths"]?["error"] as? String)?.contains("two different Content-Length") == true,
                "\(tasks["twolengths"] ?? [:])")
        // The agent restarts on that log without crashing.
        let again = try harness.startAgent(exitWhenIdle: true)
        #expect(again.wait(seconds: 30) == 0)
        try expectVerifyClean(harness)
    }

    @Test func retryAfterAsAnHTTPDateIsHonoured() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("d.bin", size: 10_000)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let date = formatter.string(from: Date().addingTimeInterval(4))
        let escaped = date.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        try harness.drop("d.job", "id = \"d\"\nurl = \"\(server.url("d.bin", "fail_status=503&fail_times=1&retry_after=\(escaped)"))\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0)
        #expect(contents("\(harness.downloads)/d.bin") == data)
        let retry = try #require(try harness.events().first { $0.type == "retrying" })
        // Asked for about 4 s (one second of it may pass in whole-second dates); the backoff alone is under 1 s.
        #expect((retry.data["delay_ms"] as? Int ?? 0) >= 2000, "\(retry.data)")
    }

    @Test func aPartialAnswerToAPlainRequestIsNeverPublished() throws {
        let harness = try AgentHarness(config: "retries = 2\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("p.bin", size: 100_000)
        try harness.drop("p.job", "id = \"p\"\nurl = \"\(server.url("p.bin", "partial_from=50000"))\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/p.bin"))
        let task = try #require(try harness.tasksByID()["p"])
        #expect(task["state"] as? String == "failed")
        #expect((task["error"] as? String)?.contains("server sent bytes from 50000 when asked for 0") == true)
        try expectVerifyClean(harness)
    }

    // MARK: 4. Symlinks and the agent's own folders

    @Test func aSymlinkedFolderInsideDownloadDirIsNeverFollowed() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("x.bin", size: 5000)
        let elsewhere = harness.directory.file("elsewhere")
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: harness.downloads + "/real", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: harness.downloads + "/link", withDestinationPath: elsewhere)
        try FileManager.default.createSymbolicLink(atPath: harness.downloads + "/real/deeper", withDestinationPath: elsewhere)
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(nginx.url("x.bin"))\"\ndest = \"link/x.bin\"\n")
        try harness.drop("b.job", "id = \"b\"\nurl = \"\(nginx.url("x.bin"))\"\ndest = \"real/deeper/sub/x.bin\"\n")
        try harness.drop("c.job", "id = \"c\"\nurl = \"\(nginx.url("x.bin"))\"\ndest = \"fine/x.bin\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere).isEmpty)
        let tasks = try harness.tasksByID()
        for id in ["a", "b"] {
            #expect(tasks[id]?["state"] as? String == "failed")
            #expect((tasks[id]?["error"] as? String)?.contains("a symbolic link inside download_dir is never followed") == true,
                    "\(tasks[id]?["error"] ?? "")")
        }
        #expect(tasks["c"]?["state"] as? String == "finished")
        try expectVerifyClean(harness)
    }

    @Test func destinationsInsideTheStateDirOrInboxAreRejected() throws {
        // download_dir is the harness folder itself: state dir and inbox lie inside it.
        let harness = try AgentHarness()
        try "download_dir = \"\(harness.directory.path)\"\n".write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        try harness.drop("evil.job", "url = \"http://127.0.0.1:1/x\"\ndest = \"state/events.sqlite\"\n")
        try harness.drop("sneaky.job", "url = \"http://127.0.0.1:1/x\"\ndest = \"inbox/more.job\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0)
        let evil = try String(contentsOfFile: harness.inbox + "/rejected/evil.job.error", encoding: .utf8)
        #expect(evil.contains("key \"dest\" \"state/events.sqlite\" is inside the agent's own folder"))
        #expect(FileManager.default.fileExists(atPath: harness.inbox + "/rejected/sneaky.job.error"))
    }

    // MARK: 5. A job renamed over the name of a job just taken

    @Test func aJobRenamedOverATakenJobsNameIsNotLost() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("r.bin", size: 100)
        let agent = try harness.startAgent()
        #expect(eventually { (try? harness.events().contains { $0.type == "agent_started" }) ?? false })
        let watch = try InboxAccessWatch(harness.inbox)
        let rounds = 15
        for round in 0..<rounds {
            try harness.drop("same.job", "id = \"a\(round)\"\nurl = \"\(nginx.url("r.bin"))\"\ndest = \"a\(round).bin\"\n")
            // The agent is reading or moving the first job: rename the second over its name now.
            #expect(watch.waitForAccess(to: "same.job", seconds: 10))
            try harness.drop("same.job", "id = \"b\(round)\"\nurl = \"\(nginx.url("r.bin"))\"\ndest = \"b\(round).bin\"\n")
            #expect(watch.waitForAccess(to: "same.job", seconds: 10))
        }
        #expect(eventually(within: 30) { ((try? harness.statusTasks()) ?? []).filter { $0["state"] as? String == "finished" }.count == 2 * rounds })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let ids = Set(try harness.statusTasks().compactMap { $0["id"] as? String })
        #expect(ids == Set((0..<rounds).flatMap { ["a\($0)", "b\($0)"] }))
        #expect(harness.jobFiles().isEmpty)
    }

    // MARK: 6. Rejections that cannot be written as asked

    /// Found by the second adversary of the intake work: with download_dir a
    /// link to the folder that holds the inbox and the state dir, a job could
    /// download into the inbox (the file then ran as a job) or over the log.
    @Test func aLinkedDownloadDirStillKeepsTheAgentsFoldersOut() throws {
        let harness = try AgentHarness()
        #expect(symlink(".", harness.downloads) == 0, "downloads → its own parent")
        try harness.drop("into-inbox.job", "url = \"http://127.0.0.1:9/x.job\"\ndest = \"inbox/x.job\"\n")
        try harness.drop("over-log.job", "url = \"http://127.0.0.1:9/x\"\ndest = \"state/events.sqlite\"\noverwrite = \"replace\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "--exit-when-idle must exit")
        let rejected = try harness.events().filter { $0.type == "rejected" }
        #expect(rejected.count == 2)
        #expect(rejected.allSatisfy { ($0.data["error"] as? String)?.contains("inside the agent's own folder") == true }, "\(rejected.map(\.data))")
        #expect(try harness.events().filter { $0.type == "created" }.isEmpty)
        // The log is still a log: status reads it.
        #expect(try harness.run(["status"]).status == 0)
    }

    @Test func aRejectionIsRecordedOnceWhateverItsName() throws {
        let harness = try AgentHarness()
        let longName = String(repeating: "x", count: 242) + ".job"
        try harness.drop(longName, "colour = \"red\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "--exit-when-idle must exit")
        #expect(try harness.events().filter { $0.type == "rejected" }.count == 1)
        let rejected = try FileManager.default.contentsOfDirectory(atPath: harness.inbox + "/rejected")
        #expect(rejected.count == 2, "\(rejected)")
        #expect(rejected.contains { $0.hasSuffix(".error") && $0.utf8.count <= 255 })
        #expect(harness.jobFiles().isEmpty)
    }

    /// A date whose digits are another script's crashed the agent at intake,
    /// and again at every restart (the job waits in `.taken/`).
    @Test func aDateWithForeignDigitsIsRejectedNotACrash() throws {
        let harness = try AgentHarness()
        try harness.drop("arabic.job", "url = \"http://127.0.0.1:9/x\"\nnot_before = 1\u{662}\u{663}\u{664}-01-01\n")
        try harness.drop("time.job", "url = \"http://127.0.0.1:9/y\"\nnot_before = 2026-01-01T10:00:0\u{664}Z\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "--exit-when-idle must exit")
        #expect(try harness.events().filter { $0.type == "rejected" }.count == 2)
        let error = try String(contentsOfFile: harness.inbox + "/rejected/time.job.error", encoding: .utf8)
        #expect(error.contains("is not a valid date or time"), "\(error)")
        #expect(harness.jobFiles().isEmpty)
    }

    @Test func aRejectedFolderDeletedWhileRunningIsMadeAgain() throws {
        let harness = try AgentHarness()
        let agent = try harness.startAgent()
        // (Past start-up: taken away while start-up makes it, a folder of the agent's stops it.)
        #expect(harness.pastStartUp())
        try FileManager.default.removeItem(atPath: harness.inbox + "/rejected")
        try harness.drop("bad.job", "colour = \"red\"\n")
        #expect(eventually { FileManager.default.fileExists(atPath: harness.inbox + "/rejected/bad.job.error") },
                "\(agent.stderr.suffix(2000))")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0, "\(agent.stderr.suffix(2000))")
        #expect(try harness.events().filter { $0.type == "rejected" }.count == 1)
        #expect(FileManager.default.fileExists(atPath: harness.inbox + "/rejected/bad.job"))
    }

    @Test func jobNamesThatAreNotUTF8AreTakenOrRejected() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("latin.bin", size: 3000)
        // "café.job" in Latin-1: 0xE9 is not UTF-8.
        for (stem, text) in [([0x63, 0x61, 0x66, 0xE9] as [UInt8], "url = \"\(nginx.url("latin.bin"))\"\n"),
                             ([0x62, 0x61, 0x64, 0xFF], "colour = 1\n")] {
            let path = Array((harness.inbox + "/").utf8) + stem + Array(".job".utf8) + [0]
            let fd = path.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_WRONLY | O_CREAT, 0o644) } }
            #expect(fd >= 0)
            _ = Array(text.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0)
        #expect(contents("\(harness.downloads)/latin.bin") == data)
        #expect(FileManager.default.fileExists(atPath: harness.inbox + "/rejected/bad%FF.job.error"))
        #expect(try InboxAccessWatch.rawEntries(harness.inbox).filter { $0.hasSuffix(".job") }.isEmpty)
    }

    // MARK: 8. Control jobs aimed at ended tasks; running a failed task again

    @Test func everyControlJobHasAnOutcomeAndResumeRunsAFailedTaskAgain() throws {
        let harness = try AgentHarness(config: "retries = 0\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("c.bin", size: 20_000)
        let data = try server.serve("flaky.bin", size: 30_000)
        try harness.drop("done.job", "id = \"done\"\nurl = \"\(server.url("c.bin"))\"\ndest = \"done.bin\"\n")
        try harness.drop("flaky.job", "id = \"flaky\"\nurl = \"\(server.url("flaky.bin", "fail_status=503&fail_times=1"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
        #expect(try harness.tasksByID()["flaky"]?["state"] as? String == "failed")

        for action in ["pause", "resume", "cancel"] {
            #expect(try harness.run([action, "done"]).status == 0)
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

    // MARK: 9–10. Header injection; secrets in URLs

    @Test func headerValuesCannotInjectHeaders() throws {
        let harness = try AgentHarness()
        try harness.drop("inject.job", "url = \"http://127.0.0.1:1/x\"\n[headers]\nX-A = \"a\\r\\nX-Injected: 1\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        let error = try String(contentsOfFile: harness.inbox + "/rejected/inject.job.error", encoding: .utf8)
        #expect(error == "inject.job: key \"headers.X-A\" must not contain CR, LF or NUL\n")
        let submit = try harness.run(["submit", "http://127.0.0.1:1/x", "--header", "X-A: a\rX-Injected: 1"])
        #expect(submit.status != 0)
        #expect(submit.stderr.contains("headers.X-A"))
    }

    @Test func secretsInURLsNeverReachOutput() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("s.bin", size: 4000)
        let secretURL = "http://alice:hunter2@127.0.0.1:\(server.port)/s.bin?access_token=TOKEN1&X-Amz-Signature=SIG2&page=1"
        let missingURL = "http://127.0.0.1:\(server.port)/missing.bin?sig=SIG3"
        try harness.drop("s.job", "id = \"s\"\nurl = \"\(secretURL)\"\n")
        try harness.drop("m.job", "id = \"m\"\nurl = \"\(missingURL)\"\n")
        try harness.drop("ftp.job", "url = \"ftp://bob:PASS4@127.0.0.1/x\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 4)
        var outputs = [agent.stderr, agent.stdout]
        for command in [["status"], ["status", "--json"], ["status", "--task", "s"], ["status", "--task", "m"],
                        ["replay"], ["replay", "--json"], ["events"], ["events", "--json"]] {
            let result = try harness.run(command)
            #expect(result.status == 0)
            outputs += [result.stdout, result.stderr]
        }
        for file in try FileManager.default.contentsOfDirectory(atPath: harness.inbox + "/rejected") where file.hasSuffix(".error") {
            outputs.append(try String(contentsOfFile: harness.inbox + "/rejected/" + file, encoding: .utf8))
        }
        let all = outputs.joined(separator: "\n")
        for secret in ["hunter2", "TOKEN1", "SIG2", "SIG3", "PASS4"] {
            #expect(!all.contains(secret), "\(secret) leaked")
        }
        #expect(all.contains("access_token=<redacted>"))
        #expect(try harness.tasksByID()["s"]?["state"] as? String == "finished")
    }

    // MARK: 11. A damaged log

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

    // MARK: 12. SIGHUP

    @Test func sighupReloadsTheConfigAndKeepsTheOldOneIfItIsBroken() throws {
        let harness = try AgentHarness(config: "retries = 3\n")
        let agent = try harness.startAgent()
        #expect(eventually { (try? harness.events().contains { $0.type == "agent_started" }) ?? false })
        try "download_dir = \"\(harness.downloads)\"\nretries = 7\nmax_speed = \"1M\"\ninbox = \"/elsewhere\"\n"
            .write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        #expect(eventually { (try? harness.events().contains { $0.type == "config_reloaded" }) ?? false })
        try "download_dir = \"\(harness.downloads)\"\ncolour = \"red\"\n".write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        // The CLI reads the same (now broken) config: read the log without it.
        let reloads = { () -> [[String: Any]] in
            let result = try? harness.run(["events", "--json", "--state-dir", harness.stateDir], flags: false)
            return (result?.stdout ?? "").split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }.filter { $0["type"] as? String == "config_reloaded" }.compactMap { $0["data"] as? [String: Any] }
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

    /// A FIFO put where the agent's own files were: opening it used to wait
    /// for a writer (or reader) for ever, with the loop and stop signals.
    @Test func aFIFOInPlaceOfAnAgentsFileFailsTheTaskNotTheAgent() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("f.bin", size: 2 << 20)
        try server.serve("u.bin", size: 10)
        let body = harness.directory.file("body.bin")
        try Data(count: 4 << 20).write(to: URL(fileURLWithPath: body))
        try harness.drop("f.job", "id = \"f\"\nurl = \"\(server.url("f.bin", "rate=200000"))\"\n")
        try harness.drop("u.job", "id = \"u\"\nkind = \"upload\"\nurl = \"\(server.url("up"))\"\nbody_file = \"\(body)\"\n"
                         + "max_speed = \"200K\"\n")
        let first = try harness.startAgent()
        #expect(eventually(within: 20) {
            let progressed = Set(((try? harness.events()) ?? []).filter { $0.type == "progressed" }.compactMap(\.task))
            return progressed.isSuperset(of: ["f", "u"])
        })
        first.signal(SIGKILL)
        _ = first.wait(seconds: 10)
        for path in [harness.downloads + "/f.bin.part", body] {
            #expect(unlink(path) == 0 && mkfifo(path, 0o644) == 0)
        }
        let second = try harness.startAgent(exitWhenIdle: true)
        let status = second.wait(seconds: 30)
        if status == nil { second.signal(SIGKILL) }
        #expect(status == 4, "the agent must neither hang nor crash: \(second.stderr.suffix(1500))")
        let tasks = try harness.tasksByID()
        #expect((tasks["f"]?["error"] as? String)?.contains("f.bin.part is not a regular file") == true, "\(tasks["f"] ?? [:])")
        #expect((tasks["u"]?["error"] as? String)?.contains("is not a regular file") == true, "\(tasks["u"] ?? [:])")
    }
}

/// `replay --verify` after a hostile run: the disk agrees with the log.
func expectVerifyClean(_ harness: AgentHarness, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let verify = try harness.run(["replay", "--verify"])
    #expect(verify.status == 0, "replay --verify: \(verify.stdout.suffix(1500)) \(verify.stderr)", sourceLocation: sourceLocation)
}

/// inotify from the test's side: tells when the agent opens or moves a
/// file in the inbox, to rename another job over it at that very moment.
final class InboxAccessWatch {
    private let fd: Int32

    init(_ directory: String) throws {
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0, inotify_add_watch(fd, directory, UInt32(IN_OPEN) | UInt32(IN_MOVED_FROM)) >= 0 else {
            throw TestFailure("inotify on \(directory) failed")
        }
    }

    deinit { close(fd) }

    /// Waits until the agent opens or moves `name` out (ignoring our own renames in).
    func waitForAccess(to name: String, seconds: Double) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            var offset = 0
            while count > 0, offset + 16 <= count {
                let length = buffer.withUnsafeBytes { Int($0.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)) }
                let nameBytes = buffer[(offset + 16)..<(offset + 16 + length)].prefix { $0 != 0 }
                if String(decoding: nameBytes, as: UTF8.self) == name { return true }
                offset += 16 + length
            }
        }
        return false
    }

    /// Names in a directory as raw bytes decoded leniently (FileManager skips invalid UTF-8).
    static func rawEntries(_ directory: String) throws -> [String] {
        guard let stream = opendir(directory) else { throw TestFailure("cannot list \(directory)") }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            names.append(withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) })
        }
        return names.filter { $0 != "." && $0 != ".." }
    }
}

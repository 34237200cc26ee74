import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

@Suite("End to end: the real binary, nginx and a notification daemon", .serialized)
struct EndToEndTests {
    /// SPEC §4.1 + §8, issue 2's first proof: 20 jobs at once, 20 identical
    /// files, the whole lifecycle in the log, exactly one notification.
    @Test func twentyJobsDroppedAtOnce() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let daemon = try NotificationDaemon(in: harness.directory)
        harness.busAddress = daemon.busAddress

        var served: [String: Data] = [:]
        for index in 0..<20 {
            let size = index < 3 ? (index + 1) << 20 : 4096 * (index + 1)
            served["file\(index).bin"] = try nginx.serve("file\(index).bin", size: size, seed: UInt64(index))
        }
        // The first job is throttled so the agent is surely running when the rest arrive.
        try harness.drop("job00.job", "url = \"\(nginx.url("file0.bin"))\"\nmax_speed = \"512K\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(harness.waitForEvent("started", within: 20))

        let staging = harness.directory.file("staging")
        try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
        for index in 1..<20 {
            try "url = \"\(nginx.url("file\(index).bin"))\"\n".write(toFile: "\(staging)/job\(index).job", atomically: false, encoding: .utf8)
        }
        for index in 1..<20 {
            #expect(rename("\(staging)/job\(index).job", "\(harness.inbox)/job\(index).job") == 0)
        }

        #expect(agent.wait(seconds: 120) == 0, "agent stderr: \(agent.stderr.suffix(2000))")
        for (name, data) in served {
            #expect(FileManager.default.contents(atPath: "\(harness.downloads)/\(name)") == data, "\(name)")
        }
        #expect(harness.jobFiles().isEmpty)

        let tasks = try harness.statusTasks()
        #expect(tasks.count == 20)
        #expect(tasks.allSatisfy { $0["state"] as? String == "finished" })

        let events = try harness.events()
        for task in tasks {
            let id = task["id"] as? String
            let types = Set(events.filter { $0.task == id }.map(\.type))
            #expect(types.isSuperset(of: ["created", "started", "progressed", "finished"]), "\(id ?? "?"): \(types)")
        }
        let calls = daemon.notifyCalls
        #expect(calls.count == 1)
        #expect(calls.first?.contains("\"syncagent\"") == true)
        #expect(calls.first?.contains("\"20 transfers finished\"") == true)
        #expect(calls.first?.contains("\"urgency\": 1") == true, "normal urgency when nothing failed")
        #expect(events.filter { $0.type == "notified" }.count == 1)
    }

    /// Jobs dropped while no agent runs are taken by the start-up scan.
    @Test func jobsDroppedWhileStoppedAreTakenAtStart() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        for index in 0..<5 {
            try nginx.serve("offline\(index).bin", size: 10_000 + index)
            let job = "url = \"\(nginx.url("offline\(index).bin"))\"\ndest = \"offline/\(index).bin\"\n"
            // Both ways a job can arrive: renamed in, or written in place.
            if index % 2 == 0 { try harness.drop("o\(index).job", job) } else { try harness.write("o\(index).job", job) }
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "agent stderr: \(agent.stderr.suffix(2000))")
        #expect(harness.jobFiles().isEmpty)
        let tasks = try harness.statusTasks()
        #expect(tasks.count == 5)
        #expect(tasks.allSatisfy { $0["state"] as? String == "finished" })
        for index in 0..<5 {
            #expect(FileManager.default.contents(atPath: "\(harness.downloads)/offline/\(index).bin")
                == FileManager.default.contents(atPath: "\(nginx.root)/offline\(index).bin"))
        }
    }

    /// Every rejection case of SPEC §4.1: the job moves to rejected/ with its
    /// sentence beside it, a `rejected` event is logged, the agent goes on.
    @Test func badJobsAreRejectedWithTheirReason() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("good.bin", size: 1000)
        let url = nginx.url("good.bin")
        let huge = "url = \"\(url)\"\n#" + String(repeating: "x", count: 70_000)
        let cases: [(name: String, job: String, error: String)] = [
            ("unparsable.job", "url = \"\(url)\"\nnot toml at all", "unparsable.job: is not valid TOML:"),
            ("unknown.job", "url = \"\(url)\"\ncolour = \"red\"", "unknown.job: key \"colour\" is not a known key"),
            ("nourl.job", "dest = \"x.bin\"", "nourl.job: key \"url\" is missing: every transfer job needs a url"),
            ("badvalue.job", "url = \"\(url)\"\npriority = \"high\"", "badvalue.job: key \"priority\" must be an integer, not a string"),
            ("escape.job", "url = \"\(url)\"\ndest = \"../../etc/passwd\"", "escape.job: key \"dest\" \"../../etc/passwd\" is outside download_dir \(harness.downloads)"),
            ("huge.job", huge, "huge.job: the job file is \(huge.utf8.count) bytes, over the 64 KiB limit"),
            ("scheme.job", "url = \"ftp://127.0.0.1/x\"", "scheme.job: key \"url\" must be an http or https URL, not ftp: \"ftp://127.0.0.1/x\""),
            ("nobody.job", "url = \"\(url)\"\nkind = \"upload\"\nbody_file = \"\(harness.directory.file("absent.mp4"))\"",
             "nobody.job: key \"body_file\": \(harness.directory.file("absent.mp4")) cannot be read: No such file or directory"),
            ("dirbody.job", "url = \"\(url)\"\nkind = \"upload\"\nbody_file = \"\(harness.directory.path)\"",
             "dirbody.job: key \"body_file\": \(harness.directory.path) is not a regular file"),
        ]
        for bad in cases { try harness.drop(bad.name, bad.job) }
        try harness.drop("good.job", "url = \"\(url)\"\n")

        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "agent stderr: \(agent.stderr.suffix(2000))")
        for bad in cases {
            let moved = "\(harness.inbox)/rejected/\(bad.name)"
            #expect(FileManager.default.contents(atPath: moved) == Data(bad.job.utf8), "\(bad.name) kept as it was")
            let sentence = (try? String(contentsOfFile: moved + ".error", encoding: .utf8)) ?? ""
            #expect(sentence.hasPrefix(bad.error), "\(bad.name): \(sentence)")
        }
        #expect(harness.jobFiles().isEmpty)
        let events = try harness.events()
        #expect(Set(events.filter { $0.type == "rejected" }.compactMap { $0.data["file"] as? String }) == Set(cases.map(\.name)))
        #expect(try harness.statusTasks().map { $0["state"] as? String } == ["finished"])
    }

    /// A job's body goes to a server: none may name the agent's own files
    /// (the log holds every job's headers), directly or through a link, nor
    /// the kernel's (`/proc/self/environ`). A file of the user's elsewhere is
    /// the user's to send.
    @Test func aBodyFileIsNeverTheAgentsOwnOrTheKernels() throws {
        let harness = try AgentHarness()
        let log = harness.stateDir + "/events.sqlite"
        let link = harness.directory.file("innocent.bin")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: log)
        let mine = harness.directory.file("mine.json")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: mine))
        func job(_ body: String) -> String { "url = \"http://127.0.0.1:9/in\"\nkind = \"data\"\nmethod = \"POST\"\nbody_file = \"\(body)\"\n" }
        let cases: [(name: String, body: String, error: String)] = [
            ("log.job", log, "key \"body_file\" names \(log), inside the agent's own folder \(harness.stateDir), which no job may send"),
            ("link.job", link, "key \"body_file\" names \(link) (which leads to \(log)), inside the agent's own folder"),
            ("environ.job", "/proc/self/environ", "key \"body_file\" names /proc/self/environ, inside /proc, the kernel's, which no job may send"),
            ("inbox.job", harness.inbox + "/rejected/../x.job", "key \"body_file\" names \(harness.inbox)/rejected/../x.job, inside the agent's own folder \(harness.inbox)"),
        ]
        for bad in cases { try harness.drop(bad.name, job(bad.body)) }
        try harness.drop("mine.job", "id = \"mine\"\nretries = 0\n" + job(mine))
        let agent = try harness.startAgent(exitWhenIdle: true)
        _ = agent.wait(seconds: 60)
        for bad in cases {
            let sentence = (try? String(contentsOfFile: "\(harness.inbox)/rejected/\(bad.name).error", encoding: .utf8)) ?? ""
            #expect(sentence.hasPrefix("\(bad.name): \(bad.error)"), "\(bad.name): \(sentence)")
        }
        #expect(try harness.events().filter { $0.type == "created" }.map { $0.task } == ["mine"])
    }

    /// A FIFO or a directory named *.job must neither block the agent nor
    /// keep an --exit-when-idle agent from finishing.
    @Test func jobsThatAreNotRegularFilesAreRejected() throws {
        let harness = try AgentHarness()
        #expect(mkfifo("\(harness.inbox)/pipe.job", 0o644) == 0)
        try FileManager.default.createDirectory(atPath: "\(harness.inbox)/folder.job", withIntermediateDirectories: false)
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "agent stderr: \(agent.stderr.suffix(2000))")
        for name in ["pipe.job", "folder.job"] {
            let sentence = try? String(contentsOfFile: "\(harness.inbox)/rejected/\(name).error", encoding: .utf8)
            #expect(sentence == "\(name): the job is not a regular file\n")
        }
        #expect(harness.jobFiles().isEmpty)
    }

    @Test func withoutADBusSessionTheAgentWarnsOnceAndGoesOn() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        for index in 0..<2 {
            try nginx.serve("n\(index).bin", size: 2000)
            try harness.drop("n\(index).job", "url = \"\(nginx.url("n\(index).bin"))\"\n")
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0)
        #expect(agent.stderr.components(separatedBy: "no desktop notification").count - 1 == 1, "\(agent.stderr)")
        let notified = try harness.events().filter { $0.type == "notified" }
        #expect(notified.count == 1)
        // Recorded as handed over, before the answer (at most once): the answer is the warning above.
        #expect(notified.first?.data["delivered"] == nil)
        #expect(notified.first?.data["summary"] as? String == "2 transfers finished")
    }

    @Test func failedTaskMakesExitStatusFourAndSaysWhy() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try harness.drop("gone.job", "url = \"\(nginx.url("gone.bin"))\"\nid = \"gone\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        let task = try harness.statusTasks().first
        #expect(task?["state"] as? String == "failed")
        #expect(task?["error"] as? String == "server answered 404 Not Found for \(nginx.url("gone.bin"))")
        #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/gone.bin"))
        #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/gone.bin.part"))

        // A task that never reaches its server has nothing to claim: no 0-byte progress per attempt
        // (an adversary saw 40,000 failing tasks write 40,000 of them).
        try harness.drop("closed.job", "url = \"http://127.0.0.1:\(freePort())/x.bin\"\nid = \"closed\"\nretries = 1\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
        let closed = try harness.events().filter { $0.task == "closed" }.map(\.type)
        #expect(closed.contains("failed") && !closed.contains("progressed"), "\(closed)")
    }
}

@Suite("Transfers against nginx", .serialized)
struct TransferTests {
    @Test func redirectChainIsFollowedAndLoggedHopByHop() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("target.bin", size: 7000)
        try harness.drop("r.job", "url = \"\(nginx.url("hop2/target.bin"))\"\nid = \"r\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0)
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/target.bin") == data)
        let hops = try harness.events().filter { $0.type == "redirected" }
        #expect(hops.map { $0.data["from"] as? String } == [nginx.url("hop2/target.bin"), nginx.url("hop/target.bin")])
        #expect(hops.map { $0.data["to"] as? String } == [nginx.url("hop/target.bin"), nginx.url("target.bin")])
        #expect(hops.map { $0.data["status"] as? Int } == [301, 302])
        let task = try harness.statusTasks().first
        #expect(task?["url"] as? String == nginx.url("hop2/target.bin"))
        #expect(task?["current_url"] as? String == nginx.url("target.bin"))
    }

    @Test func redirectToFileIsRefused() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try harness.drop("f.job", "url = \"\(nginx.url("to-file"))\"\ndest = \"f.txt\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        let task = try harness.statusTasks().first
        #expect(task?["state"] as? String == "failed")
        #expect((task?["error"] as? String)?.hasPrefix("refused a redirect to a scheme other than http or https") == true)
        #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/f.txt"))
    }

    @Test func checksumIsVerifiedBeforePublishing() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("c.bin", size: 100_000)
        let good = sha256Hex(data)
        let bad = String(repeating: "0", count: 64)
        try harness.drop("good.job", "url = \"\(nginx.url("c.bin"))\"\ndest = \"good.bin\"\nsha256 = \"\(good)\"\n")
        try harness.drop("bad.job", "url = \"\(nginx.url("c.bin"))\"\ndest = \"bad.bin\"\nsha256 = \"\(bad)\"\nid = \"bad\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/good.bin") == data)
        #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/bad.bin"))
        let failed = try harness.statusTasks().first { $0["id"] as? String == "bad" }
        #expect(failed?["error"] as? String == "sha256 mismatch: expected \(bad), got \(good)")
    }

    @Test func existingDestinationIsKeptAndTheNewFileRenamed() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("doc.txt", size: 100)
        try FileManager.default.createDirectory(atPath: harness.downloads, withIntermediateDirectories: true)
        try Data("mine".utf8).write(to: URL(fileURLWithPath: "\(harness.downloads)/doc.txt"))
        try harness.drop("d.job", "url = \"\(nginx.url("doc.txt"))\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0)
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/doc.txt") == Data("mine".utf8))
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/doc.1.txt") == data)
        #expect(try harness.statusTasks().first?["dest"] as? String == "\(harness.downloads)/doc.1.txt")
    }
}

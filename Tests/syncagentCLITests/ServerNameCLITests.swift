import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `name_from_server`: a download without `dest` named as its server says,
/// against the real binary and the fault server's `disposition` knob, and
/// what a hostile server makes of it.
@Suite("Names the server gives, against the real binary", .serialized)
struct ServerNameCLITests {
    static func escaped(_ value: String) -> String { value.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! }
    static func disposition(_ value: String) -> String { "disposition=" + escaped(value) }

    static func job(_ id: String, _ url: String, _ extra: String = "name_from_server = true\n") -> String {
        "id = \"\(id)\"\nurl = \"\(url)\"\n" + extra
    }

    func files(_ harness: AgentHarness) -> Set<String> {
        Set((try? FileManager.default.contentsOfDirectory(atPath: harness.downloads)) ?? [])
    }

    @Test func aDownloadIsNamedAsItsServerSaysAndStatusAndReplaySayIt() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("get", size: 40_000)
        let header = "attachment; filename=\"plain.pdf\"; filename*=UTF-8''%E2%82%AC%20rates.pdf"
        try harness.drop("n.job", Self.job("n", server.url("get", Self.disposition(header))))
        try harness.runUntilIdle()
        let named = harness.downloads + "/€ rates.pdf"
        #expect(contents(named) == data)
        #expect(files(harness) == ["€ rates.pdf"])
        // Recorded as its answer came: before any of its bytes were claimed, so before it was published.
        let events = try harness.events().filter { $0.task == "n" }
        let naming = try #require(events.firstIndex { $0.type == "progressed" && $0.data["dest"] as? String == named })
        let firstBytes = try #require(events.firstIndex { $0.type == "progressed" && ($0.data["bytes"] as? Int ?? 0) > 0 })
        #expect(naming < firstBytes)
        #expect(events.last { $0.type == "finished" }?.data["dest"] as? String == named)
        #expect(try harness.tasksByID()["n"]?["dest"] as? String == named)
        #expect(try harness.replayTasks().first { $0["id"] as? String == "n" }?["dest"] as? String == named)
        let detail = try harness.run(["status", "--task", "n"]).stdout
        #expect(detail.contains("dest:        \(named)") && detail.contains("name:        given by its server's answer"), "\(detail)")
        try expectVerifyClean(harness)
    }

    /// Each hostile name becomes a plain name in download_dir; nothing is written anywhere else.
    @Test func hostileNamesBecomePlainNamesInDownloadDir() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let cases: [(id: String, header: String, expected: String)] = [
            ("dots", "attachment; filename=\"../../.bashrc\"", "bashrc"),
            ("slashes", "attachment; filename*=UTF-8''%2e%2e%2f", "slashes.bin"),
            ("absolute", "attachment; filename=\"/etc/cron.d/evil\"", "evil"),
            ("backslash", "attachment; filename=\"..\\\\..\\\\win.ini\"", "win.ini"),
            ("nul", "attachment; filename*=UTF-8''evil%00.txt", "evil_.txt"),
            ("escape", "attachment; filename*=UTF-8''esc%1B%5B2J.txt", "esc_[2J.txt"),
            ("bidi", "attachment; filename*=UTF-8''invoice%E2%80%AEfdp.exe", "invoice_fdp.exe"),
            ("dotdot", "attachment; filename=\"..\"", "dotdot.bin"),
            ("hidden", "attachment; filename=\".profile\"", "profile"),
        ]
        var data: [String: Data] = [:]
        for (index, item) in cases.enumerated() {
            data[item.id] = try server.serve("\(item.id).bin", size: 5_000 + index, seed: UInt64(index))
            try harness.drop("\(item.id).job", Self.job(item.id, server.url("\(item.id).bin", Self.disposition(item.header))))
        }
        // A name of 10,000 bytes (5,000 "é"): cut between characters to fit, its extension kept.
        let long = try server.serve("long.bin", size: 3_000)
        try harness.drop("long.job", Self.job("long", server.url("long.bin", Self.disposition("attachment; filename=\"{pad}.iso\"")
                                                                     + "&disposition_pad=5000")))
        try harness.runUntilIdle()
        let tasks = try harness.tasksByID()
        for item in cases {
            #expect(tasks[item.id]?["dest"] as? String == harness.downloads + "/" + item.expected, "\(item.id)")
            #expect(contents(harness.downloads + "/" + item.expected) == data[item.id], "\(item.id)")
        }
        let longName = try #require((tasks["long"]?["dest"] as? String).map { ($0 as NSString).lastPathComponent })
        #expect(longName.utf8.count <= 240 && longName.hasSuffix("é.iso") && longName.allSatisfy { $0 == "é" || ".iso".contains($0) })
        #expect(contents(harness.downloads + "/" + longName) == long)
        #expect(files(harness) == Set(cases.map(\.expected) + [longName]))
        for escapee in [harness.directory.file(".bashrc"), harness.directory.file("home/.bashrc"), "/etc/cron.d/evil",
                        harness.directory.file("win.ini")] {
            #expect(!FileManager.default.fileExists(atPath: escapee), "\(escapee)")
        }
        // What status prints holds none of the control characters the server sent.
        let table = try harness.run(["status", "--all"]).stdout
        #expect(!table.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x202E || $0.value == 0 }, "\(table)")
        try expectVerifyClean(harness)
    }

    /// Two live tasks their servers name alike: the second takes the next
    /// free name (`rename`), is skipped (`skip`) or fails (`fail`) as its
    /// answer comes, never writing the first one's file.
    @Test func twoTasksNamedAlikeNeverShareAFile() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let same = Self.disposition("attachment; filename=\"report.pdf\"")
        var data: [String: Data] = [:]
        for (index, id) in ["a", "b", "c", "d"].enumerated() {
            data[id] = try server.serve("\(id).bin", size: 200_000, seed: UInt64(index))
        }
        let agent = try harness.startAgent()
        defer {
            agent.signal(SIGKILL)
            _ = agent.wait(seconds: 10)
        }
        // a and b run for seconds: each holds its name while the others' answers come.
        try harness.drop("a.job", Self.job("a", server.url("a.bin", same + "&rate=60000")))
        #expect(harness.waitForEvent("progressed", task: "a", within: 20) { $0.data["dest"] != nil }, "\(agent.stderr.suffix(2000))")
        try harness.drop("b.job", Self.job("b", server.url("b.bin", same + "&rate=60000")))
        #expect(harness.waitForEvent("progressed", task: "b", within: 20) { $0.data["dest"] != nil }, "\(agent.stderr.suffix(2000))")
        try harness.drop("c.job", Self.job("c", server.url("c.bin", same), "name_from_server = true\noverwrite = \"skip\"\n"))
        try harness.drop("d.job", Self.job("d", server.url("d.bin", same), "name_from_server = true\noverwrite = \"fail\"\n"))
        #expect(harness.waitForEvent("finished", task: "c", within: 20), "\(agent.stderr.suffix(2000))")
        #expect(harness.waitForEvent("failed", task: "d", within: 20), "\(agent.stderr.suffix(2000))")
        #expect(harness.waitForEvent("finished", task: "b", within: 30), "\(agent.stderr.suffix(2000))")
        #expect(harness.waitForEvent("finished", task: "a", within: 30))
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)

        let tasks = try harness.tasksByID()
        #expect(tasks["a"]?["dest"] as? String == harness.downloads + "/report.pdf")
        #expect(tasks["b"]?["dest"] as? String == harness.downloads + "/report.1.pdf")
        #expect(contents(harness.downloads + "/report.pdf") == data["a"])
        #expect(contents(harness.downloads + "/report.1.pdf") == data["b"])
        let skipped = tasks["c"]?["skipped"] as? String ?? ""
        #expect(skipped.contains("already brings") && skipped.contains("report"), "\(skipped)")
        #expect(tasks["d"]?["state"] as? String == "failed")
        let refusal = tasks["d"]?["error"] as? String ?? ""
        #expect(refusal.contains("two tasks never write one file"), "\(refusal)")
        // Neither kept a byte: no partial file is left behind.
        #expect(files(harness) == ["report.pdf", "report.1.pdf"])
        try expectVerifyClean(harness)
    }

    /// The first answer's name holds: a retry resumed at its durable bytes,
    /// answered with another name, publishes under the first.
    @Test func theFirstNameHoldsWhateverLaterAnswersSay() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("moving.bin", size: 300_000)
        let faults = Self.disposition("attachment; filename=\"v{n}.bin\"") + "&drop_after=120000&drop_times=1"
        try harness.drop("m.job", Self.job("m", server.url("moving.bin", faults)))
        try harness.runUntilIdle()
        #expect(contents(harness.downloads + "/v1.bin") == data)
        #expect(files(harness) == ["v1.bin"])
        let starts = try harness.events().filter { $0.task == "m" && $0.type == "started" }.compactMap { $0.data["offset"] as? Int }
        #expect(starts.count == 2 && starts.last ?? 0 > 0, "the retry went on from its bytes: \(starts)")
        #expect(server.requests.filter { $0.path.hasPrefix("/moving.bin") }.count == 2)
        try expectVerifyClean(harness)
    }

    /// Killed with -9 after its name was recorded, the next agent resumes
    /// into that name, though the server now gives another.
    @Test func aRestartAfterKillResumesIntoTheSameName() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("slow.bin", size: 400_000)
        try harness.drop("k.job", Self.job("k", server.url("slow.bin", Self.disposition("attachment; filename=\"take{n}.bin\"")
                                                             + "&rate=100000")))
        let agent = try harness.startAgent()
        let named = harness.downloads + "/take1.bin"
        #expect(harness.waitForEvent("progressed", task: "k", within: 20) { ($0.data["bytes"] as? Int ?? 0) > 0 },
                "\(agent.stderr.suffix(2000))")
        agent.signal(SIGKILL)
        _ = agent.wait(seconds: 10)
        // The log holds the name: shown while no agent runs, and resumed into.
        #expect(try harness.tasksByID()["k"]?["dest"] as? String == named)
        #expect(try harness.run(["replay"]).stdout.contains("take1.bin"))
        try harness.runUntilIdle()
        #expect(contents(named) == data)
        #expect(files(harness) == ["take1.bin"])
        let starts = try harness.events().filter { $0.task == "k" && $0.type == "started" }.compactMap { $0.data["offset"] as? Int }
        #expect(starts.count == 2 && starts.last ?? 0 > 0, "\(starts)")
        try expectVerifyClean(harness)
    }

    /// A 302's Content-Disposition names nothing: the final answer's does,
    /// and without one the final URL's last segment.
    @Test func onlyTheFinalAnswerNamesTheFile() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let plain = try server.serve("target.bin", size: 7_000, seed: 1)
        let disposed = try server.serve("other.bin", size: 8_000, seed: 2)
        let hopName = Self.disposition("attachment; filename=\"from-redirect.exe\"")
        try harness.drop("r1.job", Self.job("r1", server.url("hop1", hopName + "&redirect_to=" + Self.escaped(server.url("target.bin")))))
        let target = server.url("other.bin", Self.disposition("attachment; filename=\"from-final.dat\""))
        try harness.drop("r2.job", Self.job("r2", server.url("hop2", hopName + "&redirect_to=" + Self.escaped(target))))
        try harness.runUntilIdle()
        #expect(contents(harness.downloads + "/target.bin") == plain)
        #expect(contents(harness.downloads + "/from-final.dat") == disposed)
        #expect(files(harness) == ["target.bin", "from-final.dat"])
    }

    /// A job's `dest` and `name_from_server` do not go together; the
    /// config's `name_from_server` is a default, which a job's `dest` overrides.
    @Test func destAndNameFromServer() throws {
        let harness = try AgentHarness(config: "name_from_server = true\n")
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("get", size: 6_000)
        let url = server.url("get", Self.disposition("attachment; filename=\"server.txt\""))
        try harness.drop("both.job", Self.job("both", url, "name_from_server = true\ndest = \"mine.txt\"\n"))
        try harness.drop("own.job", Self.job("own", url, "dest = \"mine.txt\"\n"))
        try harness.drop("default.job", Self.job("default", url, ""))
        try harness.runUntilIdle()
        let error = try String(contentsOfFile: harness.inbox + "/rejected/both.job.error", encoding: .utf8)
        #expect(error.contains("key \"name_from_server\"") && error.contains("dest"), "\(error)")
        #expect(contents(harness.downloads + "/mine.txt") == data)
        #expect(contents(harness.downloads + "/server.txt") == data)
        #expect(files(harness) == ["mine.txt", "server.txt"])
    }

    /// A server naming a file after the agent's own folders (here inside
    /// download_dir) gets the name its URL gave instead; an empty body is
    /// named as any other.
    @Test func aNameThatIsTheAgentsOwnFolderKeepsTheURLsName() throws {
        let harness = try AgentHarness()
        // download_dir is the folder that holds the state dir and the inbox.
        try "download_dir = \"\(harness.directory.path)\"\n".write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        let server = try FaultServer(in: harness.directory)
        let inboxData = try server.serve("a.bin", size: 3_000, seed: 1)
        let stateData = try server.serve("b.bin", size: 3_000, seed: 2)
        try server.serve("empty", size: 0)
        try harness.drop("a.job", Self.job("a", server.url("a.bin", Self.disposition("attachment; filename=\"inbox\""))))
        try harness.drop("b.job", Self.job("b", server.url("b.bin", Self.disposition("attachment; filename=\"state\""))))
        try harness.drop("e.job", Self.job("e", server.url("empty", Self.disposition("attachment; filename=\"empty.txt\""))))
        try harness.runUntilIdle()
        #expect(contents(harness.directory.file("a.bin")) == inboxData)
        #expect(contents(harness.directory.file("b.bin")) == stateData)
        #expect(contents(harness.directory.file("empty.txt")) == Data())
        var isFolder: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: harness.inbox, isDirectory: &isFolder) && isFolder.boolValue)
        #expect(FileManager.default.fileExists(atPath: harness.stateDir + "/events.sqlite"))
        try expectVerifyClean(harness)
    }

    /// `submit` writes the keys, and refuses a folder or a file name beside `--name-from-server`.
    @Test func submitWritesTheKeys() throws {
        let harness = try AgentHarness()
        let submitted = try harness.run(["submit", "--name-from-server", "--min-speed", "0", "--min-speed-time", "30",
                                         "https://h.example/get"])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let job = try String(contentsOfFile: harness.inbox + "/" + (harness.jobFiles().first ?? "-"), encoding: .utf8)
        #expect(job.contains("name_from_server = true") && job.contains("min_speed = \"0\"") && job.contains("min_speed_time = 30"),
                "\(job)")
        for flag in [["--dir", "isos"], ["--dest", "x.iso"]] {
            let refused = try harness.run(["submit", "--name-from-server"] + flag + ["https://h.example/get"])
            #expect(refused.status != 0 && refused.stderr.contains("--name-from-server"), "\(refused.stderr)")
        }
        #expect(harness.jobFiles().count == 1)
    }

    /// Over several connections the first answer names the file, before
    /// another connection writes a range; the ranges' answers rename nothing.
    @Test func aDownloadOverSeveralConnectionsIsNamedByItsFirstAnswer() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("big.bin", size: 3_000_000)
        try harness.drop("s.job", Self.job("s", server.url("big.bin", Self.disposition("attachment; filename=\"part{n}.bin\"")),
                                           "name_from_server = true\nconnections = 4\n"))
        try harness.runUntilIdle()
        #expect(contents(harness.downloads + "/part1.bin") == data)
        #expect(files(harness) == ["part1.bin"])
        #expect(server.requests.contains { $0.range != nil }, "no range was asked: \(server.requests)")
        try expectVerifyClean(harness)
    }
}

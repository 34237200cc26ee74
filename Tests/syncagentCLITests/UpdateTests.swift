import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 14 §2: `overwrite = "update"` fetches only what changed (wget -N,
/// curl -z), with the validators the file was published with.
@Suite(.serialized) struct UpdateTests {
    @Test func aSecondRunAsksIfChangedAndLeavesAnUnchangedFileAlone() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let first = try nginx.serve("sync.bin", size: 200_000)
        let job = "url = \"\(nginx.url("sync.bin"))\"\ndest = \"sync.bin\"\noverwrite = \"update\"\n"
        let dest = harness.downloads + "/sync.bin"

        try harness.drop("a.job", "id = \"a\"\n" + job)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(FileManager.default.contents(atPath: dest) == first)
        let published = try FileManager.default.attributesOfItem(atPath: dest)

        // Same file on the server: one 304, no byte written, the file untouched.
        let folderBefore = try FileManager.default.attributesOfItem(atPath: harness.downloads)[.modificationDate] as? Date
        // Time passing is the point: a write to the folder from now on gives it another modification time.
        usleep(20_000)
        try harness.drop("b.job", "id = \"b\"\n" + job)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        // Not even a partial file made and removed: the folder was not written (a 304 brings no body).
        #expect(try FileManager.default.attributesOfItem(atPath: harness.downloads)[.modificationDate] as? Date == folderBefore)
        let requests = nginx.requests.filter { $0.uri == "/sync.bin" }
        #expect(requests.map(\.status) == [200, 304], "\(requests.map(\.status))")
        #expect(requests.last?.bytesSent == 0)
        let after = try FileManager.default.attributesOfItem(atPath: dest)
        #expect(after[.systemFileNumber] as? Int == published[.systemFileNumber] as? Int, "the same inode: never rewritten")
        #expect(after[.modificationDate] as? Date == published[.modificationDate] as? Date)
        let b = try harness.tasksByID()["b"]
        #expect(b?["state"] as? String == "finished" && b?["unchanged"] as? Bool == true)
        #expect(try harness.run(["status"]).stdout.contains(" unchanged "))
        #expect(!FileManager.default.fileExists(atPath: dest + ".part"))

        // Changed on the server (new size, so a new ETag even within the second): fetched and replaced.
        let second = try nginx.serve("sync.bin", size: 150_000, seed: 9)
        try harness.drop("c.job", "id = \"c\"\n" + job)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(nginx.requests.filter { $0.uri == "/sync.bin" }.last?.status == 200)
        #expect(FileManager.default.contents(atPath: dest) == second)
        #expect(try harness.tasksByID()["c"]?["unchanged"] as? Bool == false)

        // Changed here (a byte appended): the validators no longer describe it, so no condition is sent.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: dest))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data([0x42]))
        try handle.close()
        try harness.drop("d.job", "id = \"d\"\n" + job)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(nginx.requests.filter { $0.uri == "/sync.bin" }.last?.status == 200)
        #expect(FileManager.default.contents(atPath: dest) == second)

        // A file this agent never published is fetched whole and replaced.
        try "someone else's".write(toFile: harness.downloads + "/foreign.bin", atomically: true, encoding: .utf8)
        try harness.drop("e.job", "id = \"e\"\nurl = \"\(nginx.url("sync.bin"))\"\ndest = \"foreign.bin\"\noverwrite = \"update\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(FileManager.default.contents(atPath: harness.downloads + "/foreign.bin") == second)
        #expect(try harness.run(["replay", "--verify"]).status == 0)
        // Forgetting the first publisher moves its last event, not who published the file last.
        #expect(try harness.run(["forget", "a"]).status == 0)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(try harness.run(["replay", "--verify"]).status == 0)
    }

    /// A cron job drops the same jobs every hour: the notification says what changed.
    @Test func aBatchOfUpdatesIsSummedUpAsUpdatedAndUnchanged() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        for name in ["x", "y", "z"] { try nginx.serve("\(name).bin", size: 5000) }
        func dropAll(_ round: Int) throws {
            for name in ["x", "y", "z"] {
                try harness.drop("\(name)\(round).job", """
                    url = "\(nginx.url("\(name).bin"))"
                    dest = "mirror/\(name).bin"
                    overwrite = "update"
                    batch = "hourly"
                    """)
            }
        }
        try dropAll(1)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        try nginx.serve("z.bin", size: 6000, seed: 3)
        try dropAll(2)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let notices = try harness.events().filter { $0.type == "notified" }.compactMap { $0.data["summary"] as? String }
        #expect(notices == ["hourly: 3 transfers finished", "hourly: 1 updated, 2 unchanged"], "\(notices)")
        #expect(try harness.run(["status"]).stdout.contains("6 finished (2 unchanged)"))

        // submit --update writes the same job; update is for downloads only.
        let submitted = try harness.run(["submit", "--update", nginx.url("x.bin"), "--dest", "mirror/x.bin"])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let id = submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try harness.tasksByID()[id]?["unchanged"] as? Bool == true)
        let data = try harness.run(["submit", "--kind", "data", "--update", nginx.url("x.bin"), "--dest", "d.bin"])
        #expect(data.status != 0 && data.stderr.contains("key \"overwrite\" \"update\" (fetch only if changed) applies to downloads"))
    }

    // MARK: - What an adversary found

    /// The agent's start-up finished the rename of any finished task whose
    /// DEST.part existed: an update killed while fetching a changed file had
    /// its half-written body published over the good file.
    @Test func aKilledUpdateNeverPublishesItsHalfFileOverTheGoodOne() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let good = try nginx.serve("big.bin", size: 3_000_000)
        let dest = harness.downloads + "/big.bin"
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(nginx.url("big.bin"))\"\noverwrite = \"update\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        try nginx.serve("big.bin", size: 20_000_000, seed: 5)
        try harness.drop("b.job", "id = \"b\"\nurl = \"\(nginx.url("big.bin"))\"\noverwrite = \"update\"\nmax_speed = \"1M\"\n")
        let first = try harness.startAgent()
        #expect(eventually(within: 20) { ((try? FileManager.default.attributesOfItem(atPath: dest + ".part"))?[.size] as? Int ?? 0) > 1_000_000 })
        first.signal(SIGKILL)
        _ = first.wait(seconds: 10)
        let startsBefore = harness.events("agent_started").count
        let second = try harness.startAgent()
        // Past its start-up: what its recovery does is committed with its agent_started.
        _ = eventually(within: 20) { harness.events("agent_started").count > startsBefore }
        #expect(FileManager.default.contents(atPath: dest) == good, "the published file stays until the update has it all")
        second.signal(SIGTERM)
        #expect(second.wait(seconds: 10) == 0)
        #expect(FileManager.default.contents(atPath: dest) == good)
        #expect(try harness.run(["replay", "--verify"]).status == 0)
        // A partial file of the user's beside a published file is never renamed over it either.
        try harness.drop("c.job", "id = \"c\"\nurl = \"\(nginx.url("big.bin"))\"\ndest = \"notes.txt\"\nmax_speed = \"100M\"\n")
        try harness.drop("cancel.job", "action = \"cancel\"\ntask = \"b\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        try "my own notes".write(toFile: harness.downloads + "/notes.txt.part", atomically: true, encoding: .utf8)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(try String(contentsOfFile: harness.downloads + "/notes.txt.part", encoding: .utf8) == "my own notes")
        #expect(FileManager.default.contents(atPath: harness.downloads + "/notes.txt")?.count == 20_000_000)
    }

    /// A download over several connections asks "only if changed" on its
    /// first connection: a 304 there is judged against the ETag it asked with,
    /// like a single connection's.
    @Test func a304NamingAnotherETagIsNotBelievedOnTheFirstOfSeveralConnections() throws {
        let harness = try AgentHarness(config: "connections = 4\n")
        let faults = try FaultServer(in: harness.directory)
        _ = try faults.serve("f.bin", size: 50_000)
        let lying = faults.url("f.bin", "not_modified=%22another%22")
        for id in ["a", "b"] {
            try harness.drop("\(id).job", "id = \"\(id)\"\nurl = \"\(lying)\"\ndest = \"f.bin\"\noverwrite = \"update\"\n")
            #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        }
        #expect(faults.requests.filter { $0.path.hasPrefix("/f.bin") }.map(\.status).prefix(3) == [200, 304, 200])
        #expect(try harness.tasksByID()["b"]?["unchanged"] as? Bool == false)
        #expect(try harness.events().contains { $0.task == "b" && $0.type == "retrying" && ($0.data["reason"] as? String)?.contains("ETag \"another\"") == true })
    }

    /// A 304 is believed only when it confirms what is on disk: another ETag,
    /// a file that fails the job's sha256, or validators of another URL
    /// fetch the whole file; a second live update of one path is refused.
    @Test func a304IsBelievedOnlyWhenItConfirmsTheFile() throws {
        let harness = try AgentHarness()
        let faults = try FaultServer(in: harness.directory)
        let served = try faults.serve("f.bin", size: 50_000)
        let lying = faults.url("f.bin", "not_modified=%22another%22")
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(lying)\"\ndest = \"f.bin\"\noverwrite = \"update\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        try harness.drop("b.job", "id = \"b\"\nurl = \"\(lying)\"\ndest = \"f.bin\"\noverwrite = \"update\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(faults.requests.filter { $0.path.hasPrefix("/f.bin") }.map(\.status) == [200, 304, 200])
        let b = try harness.tasksByID()["b"]
        #expect(b?["state"] as? String == "finished" && b?["unchanged"] as? Bool == false)
        #expect(try harness.events().contains { $0.task == "b" && $0.type == "retrying" && ($0.data["reason"] as? String)?.contains("ETag \"another\"") == true })

        // The file edited in place with its size and mtime put back, then a job that names its
        // sha256: the file was never checked against it, so a 304 cannot vouch for it.
        let nginx = try Nginx(in: harness.directory)
        let original = try nginx.serve("s.bin", size: 40_000)
        let sha = sha256Hex(original)
        let job = "url = \"\(nginx.url("s.bin"))\"\ndest = \"s.bin\"\noverwrite = \"update\"\n"
        try harness.drop("s1.job", job)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let path = harness.downloads + "/s.bin"
        var info = stat()
        #expect(stat(path, &info) == 0)
        var tampered = original
        tampered[0] ^= 0xFF
        try tampered.write(to: URL(fileURLWithPath: path))
        var times = [info.st_atim, info.st_mtim]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
        try harness.drop("s2.job", job + "sha256 = \"\(sha)\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(FileManager.default.contents(atPath: path) == original, "fetched whole and checked")
        #expect(nginx.requests.filter { $0.uri == "/s.bin" }.map(\.status) == [200, 304, 200])

        // Another URL for the same path: that resource's file is fetched, never a 304 on the old one's validators.
        try nginx.serve("other.bin", size: 30_000, seed: 4)
        try harness.drop("o.job", "url = \"\(nginx.url("other.bin"))\"\ndest = \"s.bin\"\noverwrite = \"update\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(nginx.requests.filter { $0.uri == "/other.bin" }.map(\.status) == [200])
        #expect(FileManager.default.contents(atPath: path)?.count == 30_000)

        // Two live updates of one path: the second is refused, never "finished" without a byte.
        try harness.drop("p1.job", "id = \"p1\"\nurl = \"\(nginx.url("s.bin"))\"\ndest = \"p.bin\"\noverwrite = \"update\"\nnot_before = \"2099-01-01T00:00:00Z\"\n")
        try harness.drop("p2.job", "id = \"p2\"\nurl = \"\(nginx.url("other.bin"))\"\ndest = \"p.bin\"\noverwrite = \"update\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { harness.state(of: "p2") == "failed" })
        #expect(try harness.tasksByID()["p2"]?["error_code"] as? String == "dest_reserved")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        _ = served
    }
}

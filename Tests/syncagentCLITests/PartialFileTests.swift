import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `DEST.part` is the agent's while its task writes it: a file of anyone
/// else's there is never truncated, published or removed, and one changed
/// under the agent is noticed before anything is published.
@Suite("Partial files: only the agent's own are written, published or removed", .serialized)
struct PartialFileTests {
    @Test func aPartialFileNoTaskOwnsIsNeverTruncated() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("a.bin", size: 3000)
        try FileManager.default.createDirectory(atPath: harness.downloads, withIntermediateDirectories: true)
        let mine = Data("USERDATA\n".utf8)
        for mode in ["replace", "fail", "skip", "rename"] {
            try mine.write(to: URL(fileURLWithPath: "\(harness.downloads)/\(mode).part"))
            try harness.drop("\(mode).job", "id = \"\(mode)\"\nurl = \"\(nginx.url("a.bin"))\"\ndest = \"\(mode)\"\noverwrite = \"\(mode)\"\n")
        }
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
        let tasks = try harness.tasksByID()
        for mode in ["replace", "fail", "skip", "rename"] {
            #expect(contents("\(harness.downloads)/\(mode).part") == mine, "\(mode).part was touched")
        }
        for mode in ["replace", "fail", "skip"] {
            #expect(tasks[mode]?["state"] as? String == "failed")
            #expect((tasks[mode]?["error"] as? String)?.contains("\(mode).part exists and is not a partial file of this agent's") == true)
        }
        #expect(contents("\(harness.downloads)/rename.1") == data)
        try expectVerifyClean(harness)
    }

    /// A file the agent refused to touch at intake is neither removed by
    /// `cancel` nor truncated by `resume` (partial files are made on a worker).
    @Test func aPartialFileATaskWasRefusedOverSurvivesCancelAndResume() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("x.bin", size: 3000)
        try FileManager.default.createDirectory(atPath: harness.downloads, withIntermediateDirectories: true)
        let mine = Data("the user's own notes\n".utf8)
        let notes = harness.downloads + "/x.bin.part"
        try mine.write(to: URL(fileURLWithPath: notes))
        try harness.drop("t.job", "id = \"t\"\nurl = \"\(nginx.url("x.bin"))\"\ndest = \"x.bin\"\noverwrite = \"replace\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
        #expect(try harness.tasksByID()["t"]?["error_code"] as? String == "dest_reserved")
        #expect(try harness.run(["resume", "t"]).status == 0)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        #expect(contents(notes) == mine, "resume must not truncate a file that is not the task's")
        let refusal = try harness.events().last { $0.type == "controlled" && $0.task == "t" }
        #expect((refusal?.data["outcome"] as? String)?.contains("cannot run again: \(notes) exists and is not this task's") == true,
                "\(refusal?.data ?? [:])")
        #expect(try harness.run(["cancel", "t"]).status == 0)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) != nil)
        #expect(try harness.tasksByID()["t"]?["state"] as? String == "cancelled")
        #expect(contents(notes) == mine, "cancel must not remove a file that is not the task's")
    }

    @Test func twoAgentsOnOneDownloadDirNeverWriteOnePartialFile() throws {
        let first = try AgentHarness()
        let second = try AgentHarness(config: "max_active = 1\n")
        try "download_dir = \"\(first.downloads)\"\nmax_active = 1\n".write(toFile: second.configFile, atomically: true, encoding: .utf8)
        let server = try FaultServer(in: first.directory)
        try server.serve("blocker.bin", size: 100_000)
        let mine = try server.serve("one.bin", size: 300_000, seed: 1)
        try server.serve("two.bin", size: 300_000, seed: 2)
        // The second agent reserves r.bin while its task waits behind a slow one…
        try second.drop("blocker.job", "id = \"blocker\"\nurl = \"\(server.url("blocker.bin", "rate=50000"))\"\n")
        try second.drop("r.job", "id = \"two\"\nurl = \"\(server.url("two.bin"))\"\ndest = \"r.bin\"\n")
        let secondAgent = try second.startAgent(exitWhenIdle: true)
        #expect(second.waitForEvent("created", task: "two", within: 20))
        // … and the first agent writes r.bin.part meanwhile.
        try first.drop("r.job", "id = \"one\"\nurl = \"\(server.url("one.bin", "rate=100000"))\"\ndest = \"r.bin\"\n")
        let firstAgent = try first.startAgent(exitWhenIdle: true)
        #expect(firstAgent.wait(seconds: 60) == 0)
        #expect(secondAgent.wait(seconds: 60) == 4)
        #expect(contents(first.downloads + "/r.bin") == mine)
        let two = try #require(try second.tasksByID()["two"])
        #expect(two["error_code"] as? String == "dest_busy", "\(two)")
        try expectVerifyClean(first)
        try expectVerifyClean(second)
    }

    /// Whatever is at DEST.part when the body is complete, if it is not the
    /// file the agent wrote (a 7-byte file, a FIFO, a symlink out of
    /// download_dir), is never renamed into place nor logged `finished`.
    @Test func aPartialFileSwappedUnderTheAgentIsNeverPublished() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("f.bin", size: 300_000)
        // The server holds the body's second half until the swap is made.
        try harness.drop("f.job", "id = \"f\"\nurl = \"\(server.url("f.bin", "hold_after=150000&release=swapped"))\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(harness.waitForEvent("progressed", task: "f", within: 20))
        let part = harness.downloads + "/f.bin.part", foreign = Data("FOREIGN".utf8)
        try foreign.write(to: URL(fileURLWithPath: harness.downloads + "/swap"))
        #expect(rename(harness.downloads + "/swap", part) == 0)
        try Data().write(to: URL(fileURLWithPath: server.root + "/swapped"))
        #expect(agent.wait(seconds: 30) == 4)
        let task = try #require(try harness.tasksByID()["f"])
        #expect(task["error_code"] as? String == "part_changed", "\(task)")
        #expect((task["error"] as? String)?.contains("is not the file the agent wrote (300000 bytes): it is 7 bytes") == true, "\(task)")
        #expect(!FileManager.default.fileExists(atPath: harness.downloads + "/f.bin"), "nothing is published")
        #expect(contents(part) == foreign, "a file the agent did not write is not its to remove")
        try expectVerifyClean(harness)
    }

    /// `truncate -s 1000 big.bin.part` mid-download: the agent must not go on writing at its own
    /// offset, over a hole of zeros, and publish the file `finished`.
    @Test func aPartialFileCutShortUnderTheAgentIsFetchedAgainNotPublishedWithAHole() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("big.bin", size: 3_000_000)
        try harness.drop("big.job", "id = \"big\"\nurl = \"\(server.url("big.bin", "rate=1000000"))\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        let part = harness.downloads + "/big.bin.part"
        #expect(eventually(within: 20) { ((try? FileManager.default.attributesOfItem(atPath: part)[.size] as? Int) ?? 0) > 1_000_000 })
        #expect(truncate(part, 1000) == 0)
        #expect(agent.wait(seconds: 60) == 0)
        #expect(contents(harness.downloads + "/big.bin") == data)
        let restart = try harness.events().compactMap { $0.data["restart_reason"] as? String ?? $0.data["reason"] as? String }
        #expect(restart.contains { $0.contains("was cut short under the agent") }, "\(restart)")
        try expectVerifyClean(harness)
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

    /// A paused task's partial file replaced by a symbolic link or a FIFO:
    /// its next start fails, and what was put there stays (found by an
    /// adversary: the failure removed the link and the FIFO it never made).
    @Test(arguments: ["link", "fifo"])
    func whatWasPutInAPartialFilesPlaceIsNotRemoved(_ kind: String) throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("big.bin", size: 3_000_000, seed: 3)
        // Held at 1 MB (never released): however slow the machine, the file is partial when the agent stops.
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(server.url("big.bin", "hold_after=1000000&release=never"))\"\ndest = \"a.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { ((try? harness.tasksByID()["a"]?["bytes"] as? Int) ?? 0) > 0 })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let part = harness.downloads + "/a.bin.part"
        let kept = harness.directory.file("kept.bin")
        try FileManager.default.moveItem(atPath: part, toPath: kept)
        let before = contents(kept)
        if kind == "link" {
            try FileManager.default.createSymbolicLink(atPath: part, withDestinationPath: kept)
        } else {
            #expect(mkfifo(part, 0o600) == 0)
        }
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
        #expect(harness.state(of: "a") == "failed")
        var info = stat()
        #expect(lstat(part, &info) == 0, "\(kind) at \(part) is gone")
        #expect((info.st_mode & S_IFMT) == (kind == "link" ? S_IFLNK : S_IFIFO))
        #expect(contents(kept) == before)
    }
}

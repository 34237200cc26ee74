import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Where a finished file goes: one task per destination at a time, never
/// outside download_dir nor into the agent's own folders, through no
/// symbolic link, and published once it can be.
@Suite("Destinations: reserved names, the folders around them, publishing", .serialized)
struct DestinationTests {
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
        // A skip is said to be one, not shown as a download.
        #expect((tasks["skip"]?["skipped"] as? String)?.contains("x.bin") == true && tasks["a"]?["skipped"] is NSNull)
        let status = try harness.run(["status"]).stdout
        #expect(status.contains("skipped") && status.contains("(1 skipped)"))
        #expect(try harness.run(["status", "--task", "skip"]).stdout.contains("skipped:     skipped: "))
        // None of the three sent a request.
        #expect(!server.requests.contains { $0.path.hasPrefix("/other.bin") })
        try expectVerifyClean(harness)
    }

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

    /// With download_dir a link to the folder that holds the inbox and the
    /// state dir, a job must not download into the inbox (the file would run
    /// as a job) nor over the log.
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
}

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
        #expect(harness.waitForEvent("started", task: "a", within: 20))
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

    /// A job for a destination whose previous task has just finished (its
    /// body renamed at the next commit, a few ms later) is taken: the agent's
    /// own finished body is not a stranger's file.
    @Test func aJobForADestinationJustFinishedIsTakenNotRefused() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        var bodies: [String: Data] = [:]
        for index in 0..<30 {
            bodies["a\(index)"] = try nginx.serve("a\(index).bin", size: 4000 + index)
            bodies["b\(index)"] = try nginx.serve("b\(index).bin", size: 5000 + index)
        }
        let agent = try harness.startAgent()
        #expect(eventually { harness.statusSaysAgentRuns })
        for index in 0..<30 {
            for (name, file) in [("a", "a\(index).bin"), ("b", "b\(index).bin")] {
                try harness.drop("\(name)\(index).job", "id = \"\(name)\(index)\"\nurl = \"\(nginx.url(file))\"\n"
                                 + "dest = \"d\(index).bin\"\noverwrite = \"replace\"\n")
                // Spread over the few milliseconds a download takes, so that some land between a finish and its rename.
                usleep(UInt32(1000 * (index % 6)))
            }
        }
        #expect(eventually(within: 60) {
            ((try? harness.statusTasks()) ?? []).filter { ["finished", "failed"].contains($0["state"] as? String ?? "") }.count == 60
        })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 20) == 0)
        let tasks = try harness.tasksByID()
        // Dropped a before b, but a loaded machine may take them in either order: the file holds the body of
        // whichever finished last in the log.
        let finishedSeq = Dictionary(try harness.events().filter { $0.type == "finished" }.compactMap { event in
            event.task.map { ($0, event.seq) }
        }, uniquingKeysWith: max)
        for index in 0..<30 {
            let (a, b) = ("a\(index)", "b\(index)")
            // The later one is refused only while the other is live, never because of its finished body.
            for (task, other) in [(a, b), (b, a)] where tasks[task]?["state"] as? String == "failed" {
                #expect((tasks[task]?["error"] as? String)?.contains("is the destination of task \(other)") == true, "\(tasks[task] ?? [:])")
            }
            let last = [a, b].filter { finishedSeq[$0] != nil }.max { finishedSeq[$0]! < finishedSeq[$1]! }
            #expect(last != nil, "neither \(a) nor \(b) finished")
            if let last { #expect(contents(harness.downloads + "/d\(index).bin") == bodies[last], "d\(index).bin") }
        }
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

    /// `more_dirs` lets jobs save outside download_dir, in folders the
    /// config names, each reached as download_dir is: a symbolic link in
    /// one is never followed, the agent's own folders stay out, and one
    /// that is not there keeps the agent from starting. A folder not named
    /// is refused, saying how to allow it.
    @Test func moreDirsAreRootsCheckedAsDownloadDirIs() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("x.bin", size: 5000)
        let media = harness.directory.file("media")
        let elsewhere = harness.directory.file("elsewhere")
        for folder in [media, elsewhere] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        try FileManager.default.createSymbolicLink(atPath: media + "/link", withDestinationPath: elsewhere)
        let config = "download_dir = \"\(harness.downloads)\"\nmore_dirs = [\"\(media)\", \"\(harness.inbox)\"]\n"
        try config.write(toFile: harness.configFile, atomically: true, encoding: .utf8)

        let submitted = try harness.run(["submit", "--id", "saved", "-d", media + "/isos", nginx.url("x.bin")])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let refused = try harness.run(["submit", "-d", elsewhere, nginx.url("x.bin")])
        #expect(refused.status != 0 && harness.jobFiles().count == 1)
        #expect(refused.stderr.contains("is outside download_dir \(harness.downloads) and more_dirs; to let jobs save in \(elsewhere), add it to "
                                        + "more_dirs in the config (more_dirs = [\"\(elsewhere)\"]) and restart the agent"), "\(refused.stderr)")
        // submit holds a job to the agent's rules: the inbox stays the agent's own, named in more_dirs or not.
        let ownFolder = try harness.run(["submit", "-d", harness.inbox + "/sub", nginx.url("x.bin")])
        #expect(ownFolder.status != 0 && ownFolder.stderr.contains("is inside the agent's own folder \(harness.inbox)") && harness.jobFiles().count == 1,
                "\(ownFolder.stderr)")
        try harness.drop("linked.job", "id = \"linked\"\nurl = \"\(nginx.url("x.bin"))\"\ndest = \"\(media)/link/x.bin\"\n")
        // Named in more_dirs, the inbox is still the agent's own.
        try harness.drop("own.job", "id = \"own\"\nurl = \"\(nginx.url("x.bin"))\"\ndest = \"\(harness.inbox)/more.job\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
        #expect(FileManager.default.contents(atPath: media + "/isos/x.bin") == FileManager.default.contents(atPath: nginx.root + "/x.bin"))
        let tasks = try harness.tasksByID()
        #expect(tasks["saved"]?["state"] as? String == "finished" && tasks["saved"]?["dest"] as? String == media + "/isos/x.bin")
        #expect(tasks["linked"]?["state"] as? String == "failed")
        #expect((tasks["linked"]?["error"] as? String)?.contains("a symbolic link inside download_dir or more_dirs is never followed") == true,
                "\(tasks["linked"]?["error"] ?? "")")
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere).isEmpty)
        let own = try String(contentsOfFile: harness.inbox + "/rejected/own.job.error", encoding: .utf8)
        #expect(own.contains("is inside the agent's own folder"), "\(own)")
        try expectVerifyClean(harness)
        // replay --verify reads a file in more_dirs as it reads download_dir's (one the log puts outside both it does not read).
        let saved = media + "/isos/x.bin"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: saved))
        bytes[0] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: saved))
        let verify = try harness.run(["replay", "--verify"])
        #expect(verify.status == 5 && verify.stdout.contains("mismatch: ") && verify.stdout.contains(saved)
                && !verify.stdout.contains("not checked: saved"), "\(verify.stdout)\(verify.stderr)")
        bytes[0] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: saved))

        // A folder of more_dirs that is not there (a disk not mounted): the agent does not start.
        try (config + "").replacingOccurrences(of: media, with: media + "-unmounted")
            .write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        let missing = try harness.startAgent(exitWhenIdle: true)
        #expect(missing.wait(seconds: 30) == 1)
        #expect(missing.stderr.contains("more_dirs names \(media)-unmounted, which cannot be opened (No such file or directory); make it, "
                                        + "or mount its disk, or take it out of more_dirs"), "\(missing.stderr.suffix(500))")
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

    /// download_dir changed (SIGHUP says it needs a restart) and the agent restarted: tasks made
    /// before the change are outside it, and a destination the log gives is held to the rules a
    /// job's is (SPEC §6 rule 3): each fails at once, saying so, with its bytes and partial file
    /// kept as they were. With the old download_dir back, `resume --all` runs them on from those
    /// bytes, and a symbolic link planted in the old folder meanwhile is still not followed.
    @Test func tasksMadeUnderAnotherDownloadDirFailAndRunOnWhenItIsBack() throws {
        let harness = try AgentHarness(config: "max_active = 1\n")
        let server = try FaultServer(in: harness.directory)
        let big = try server.serve("big.bin", size: 3_000_000, seed: 1)
        let small = try server.serve("small.bin", size: 5000, seed: 2)
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(server.url("big.bin", "hold_after=1000000&release=back"))\"\ndest = \"sub/big.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { ((try? harness.statusTasks().first?["bytes"] as? Int) ?? 0) > 0 })
        // Queued behind it (max_active = 1): made under the old folder, never started there.
        try harness.drop("b.job", "id = \"b\"\nurl = \"\(server.url("small.bin"))\"\ndest = \"queued/small.bin\"\n")
        // … and one whose folder is not made yet (reached from that folder, then missing).
        try harness.drop("n.job", "id = \"n\"\nurl = \"\(server.url("small.bin"))\"\ndest = \"new/deeper/n.bin\"\n")
        try harness.drop("s.job", "id = \"s\"\nurl = \"\(server.url("small.bin"))\"\ndest = \"link/deeper/s.bin\"\n")
        #expect(eventually(within: 20) { ["b", "n", "s"].allSatisfy { id in (try? harness.tasksByID()[id]) != nil } })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let paused = try #require(try harness.tasksByID()["a"]?["bytes"] as? Int)
        #expect(paused > 0)
        let part = harness.downloads + "/sub/big.bin.part"
        let partBefore = contents(part)

        let outside = harness.directory.file("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: harness.downloads + "/link", withDestinationPath: outside)
        let moved = harness.directory.file("elsewhere")
        let config = try String(contentsOfFile: harness.configFile, encoding: .utf8)
        try "download_dir = \"\(moved)\"\n".write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        try harness.drop("c.job", "id = \"c\"\nurl = \"\(server.url("small.bin"))\"\ndest = \"c.bin\"\n")
        let restarted = try harness.startAgent(exitWhenIdle: true)
        #expect(restarted.wait(seconds: 60) == 4, "\(restarted.stderr.suffix(2000))")
        let refused = try harness.tasksByID()
        for id in ["a", "b", "n", "s"] {
            #expect(refused[id]?["state"] as? String == "failed")
            #expect(refused[id]?["error_code"] as? String == "dest_refused")
            #expect((refused[id]?["error"] as? String)?.contains("is outside download_dir \(moved); nothing is written there") == true,
                    "\(refused[id] ?? [:])")
        }
        #expect(refused["a"]?["bytes"] as? Int == paused)
        #expect(contents(part) == partBefore)
        #expect(contents(moved + "/c.bin") == small)

        // The old folder back: they run on where they were going, from their bytes.
        try config.write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        try Data().write(to: URL(fileURLWithPath: server.root + "/back"))
        #expect(try harness.run(["resume", "--all"]).status == 0)
        let again = try harness.startAgent(exitWhenIdle: true)
        #expect(again.wait(seconds: 60) == 4, "\(again.stderr.suffix(2000))")
        let linked = try #require(try harness.tasksByID()["s"])
        #expect((linked["error"] as? String)?.contains("symbolic link") == true, "\(linked)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
        #expect(contents(harness.downloads + "/sub/big.bin") == big)
        #expect(contents(harness.downloads + "/queued/small.bin") == small)
        #expect(contents(harness.downloads + "/new/deeper/n.bin") == small)
        // Resumed where the log said, not from 0.
        let starts = try harness.events().filter { $0.type == "started" && $0.task == "a" }.compactMap { $0.data["offset"] as? Int }
        #expect(starts.last.map { $0 >= paused } == true, "\(starts)")
    }

    @Test func aPublishThatCannotHappenIsAFailureNotAFinish() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("x.bin", size: 3000)
        try FileManager.default.createDirectory(atPath: harness.downloads + "/adir", withIntermediateDirectories: true)
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(nginx.url("x.bin"))\"\ndest = \"adir\"\noverwrite = \"replace\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
        let task = try #require(try harness.tasksByID()["a"])
        #expect(task["state"] as? String == "failed")
        #expect((task["error"] as? String)?.contains("is a folder") == true)
        try expectVerifyClean(harness)
    }

    /// The download folder made immutable as a download ends: `finished` is committed and the
    /// rename fails. A running agent tries again every 2 s, and an idle exit with one left out
    /// says so in its status, 4.
    @Test func aFinishedFileThatCouldNotBeMovedIntoPlaceIsMovedOnceItCan() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("big.bin", size: 2_000_000)
        let folder = harness.downloads + "/sub"
        // Its own ext4, where chattr works whatever the file system of the test's folder (overlayfs, tmpfs).
        guard let disk = TestMount(failingExt4At: folder, backing: harness.directory.file("backing"),
                                   imageSize: "32M", backingSize: "40m") else { return }
        defer { chattr("-i", folder); withExtendedLifetime(disk) {} }
        for (round, exitWhenIdle) in [(1, false), (2, true)] {
            try harness.drop("r\(round).job", "id = \"r\(round)\"\nurl = \"\(server.url("big.bin", "rate=1000000"))\"\n"
                             + "dest = \"sub/r\(round).bin\"\n")
            let agent = try harness.startAgent(exitWhenIdle: exitWhenIdle)
            #expect(eventually(within: 20) { FileManager.default.fileExists(atPath: folder + "/r\(round).bin.part") })
            try #require(chattr("+i", folder), "chattr +i is not supported here")
            #expect(eventually(within: 30) { harness.state(of: "r\(round)") == "finished" })
            #expect(!FileManager.default.fileExists(atPath: folder + "/r\(round).bin"))
            if exitWhenIdle {
                #expect(agent.wait(seconds: 30) == 4)
                // The next start, with the folder still so, says 4 too …
                #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
                #expect(chattr("-i", folder))
                // … and once it can be, the next one moves the file.
                #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
            } else {
                // The rename after the commit has been tried and refused: what follows is the retry's.
                _ = eventually(within: 10) { agent.stderr.contains("cannot publish") }
                #expect(chattr("-i", folder))
                #expect(eventually(within: 10) { FileManager.default.fileExists(atPath: folder + "/r\(round).bin") })
                agent.signal(SIGTERM)
                #expect(agent.wait(seconds: 10) == 0)
            }
            #expect(contents(folder + "/r\(round).bin") == data)
        }
        try expectVerifyClean(harness)
    }
}

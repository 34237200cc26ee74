import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// What survives a power cut under strict POSIX rules (a name is durable
/// only once its folder is synced): each window the power-cut torture found
/// open, reproduced alone and deterministically on forgetfs, and kept shut.
@Suite("What survives a power cut", .serialized)
struct PowerCutDurabilityTests {
    /// A job's move into `INBOX/.taken/` is durable before its task is
    /// committed: after a cut it is not back in the inbox, to be taken
    /// again with a new ctime (a new identity) as a second task.
    @Test func aJobTakenBeforeACutIsNotTakenAgainAfterIt() throws {
        guard let world = try PowerCutWorld() else { return }
        let nginx = try Nginx(in: world.harness.directory)
        try nginx.serve("a.bin", size: 5000)
        try world.drop("a.job", "url = \"\(nginx.url("a.bin"))\"\n")
        #expect(try world.runUntilIdle() == 0)
        #expect(try world.created(from: "a.job").count == 1)
        try world.cut(nil)
        #expect(try world.runUntilIdle() == 0)
        let tasks = try world.created(from: "a.job").count
        #expect(tasks == 1)
        #expect(!FileManager.default.fileExists(atPath: world.harness.downloads + "/a.1.bin"))
    }

    /// A partial file's name is durable before any of its progress is
    /// claimed: after a cut the log never vouches for bytes of a file that
    /// is not there (`replay --verify` clean, the restart resumes).
    @Test func aPartialFileKeepsItsNameOnceItsProgressIsClaimed() throws {
        guard let world = try PowerCutWorld() else { return }
        let nginx = try Nginx(in: world.harness.directory)
        try nginx.serve("big.bin", size: 64 << 20)
        try world.drop("big.job", "url = \"\(nginx.url("slow/big.bin"))\"\nid = \"big\"\n")
        let agent = try world.harness.startAgent()
        let claimed = eventually(within: 30) {
            ((try? world.harness.events()) ?? []).contains { $0.type == "progressed" && ($0.data["bytes"] as? Int ?? 0) > 0 }
        }
        #expect(claimed)
        try world.cut(agent)
        let bytes = try world.harness.events().last { $0.type == "progressed" }?.data["bytes"] as? Int ?? 0
        let part = world.harness.downloads + "/big.bin.part"
        let verify = try world.harness.run(["replay", "--verify"])
        #expect(world.size(part) >= bytes, "\(bytes) bytes claimed, \(world.size(part)) held")
        #expect(verify.status == 0, "\(verify.stdout)")
    }

    /// Folders made for a destination (`dest = "a/b/f.bin"`) are synced
    /// into their parents as they are made: a finished file is not lost with
    /// its folder.
    @Test func aFinishedFileInAFolderMadeForItSurvivesACut() throws {
        guard let world = try PowerCutWorld() else { return }
        let nginx = try Nginx(in: world.harness.directory)
        let data = try nginx.serve("n.bin", size: 7000)
        try world.drop("n.job", "url = \"\(nginx.url("n.bin"))\"\ndest = \"made/for/n.bin\"\n")
        #expect(try world.runUntilIdle() == 0)
        try world.cut(nil)
        let verify = try world.harness.run(["replay", "--verify"])
        #expect(FileManager.default.contents(atPath: world.harness.downloads + "/made/for/n.bin") == data)
        #expect(verify.status == 0, "\(verify.stdout)")
    }

    /// A rejected job is rejected once across a cut: its moves are
    /// durable, and a job left with two names by a cut between them (its
    /// rename changed its ctime) is known again by its inode in rejected/.
    @Test func aRejectedJobIsRejectedOnceAcrossACut() throws {
        guard let world = try PowerCutWorld() else { return }
        try world.drop("bad.job", "url = \"http://127.0.0.1:9/x\"\nbogus = 1\n")
        #expect(try world.runUntilIdle() == 0)
        try world.cut(nil)
        #expect(try world.runUntilIdle() == 0)
        let rejected = try world.harness.events().filter { $0.type == "rejected" && $0.data["file"] as? String == "bad.job" }
        #expect(rejected.count == 1)
    }

    /// The state dir the agent makes survives a cut: a folder made is
    /// synced into its parent, or the whole log would go with it.
    @Test func theStateDirTheAgentMadeSurvivesACut() throws {
        guard let world = try PowerCutWorld(stateDirMade: false) else { return }
        let nginx = try Nginx(in: world.harness.directory)
        try nginx.serve("s.bin", size: 3000)
        try world.drop("s.job", "url = \"\(nginx.url("s.bin"))\"\n")
        #expect(try world.runUntilIdle() == 0)
        try world.cut(nil)
        let tasks = (try? world.created(from: "s.job").count) ?? 0
        #expect(FileManager.default.fileExists(atPath: world.harness.stateDir + "/events.sqlite"))
        #expect(tasks == 1)
    }

    /// An HLS video's work folder (`DEST.part/`, where its segments land)
    /// is synced into download_dir as it is made: a cut does not lose the
    /// segments of children the log calls finished.
    @Test func theSegmentsOfFinishedHLSChildrenSurviveACut() throws {
        guard let world = try PowerCutWorld() else { return }
        let server = try FaultServer(in: world.harness.directory)
        let segments = try PowerCutWorkload.makeHLS(in: server.root + "/hls")
        // The first half of the segments at once, the rest stalled on their first request: the cut lands between.
        var playlist = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-PLAYLIST-TYPE:VOD\n"
        for index in segments.indices {
            let name = String(format: "seg%03d.ts", index)
            playlist += "#EXTINF:2.0,\n" + server.url("hls/" + name, index < segments.count / 2 ? "" : "stall_after=1000&stall=20&stall_request=1") + "\n"
        }
        try (playlist + "#EXT-X-ENDLIST\n").write(toFile: server.root + "/hls/mixed.m3u8", atomically: true, encoding: .utf8)
        try world.drop("v.job", "id = \"v\"\nkind = \"hls\"\nurl = \"\(server.url("hls/mixed.m3u8"))\"\ndest = \"video\"\n")
        let agent = try world.harness.startAgent()
        let half = eventually(within: 30) {
            ((try? world.harness.statusTasks()) ?? []).filter { $0["parent"] as? String == "v" && $0["state"] as? String == "finished" }.count
                >= segments.count / 2
        }
        #expect(half)
        #expect(try world.harness.statusTasks().first { $0["id"] as? String == "v" }?["state"] as? String == "running")
        try world.cut(agent)
        let verify = try world.harness.run(["replay", "--verify"])
        let status = try world.runUntilIdle(seconds: 120)
        let parent = try world.harness.statusTasks().first { $0["id"] as? String == "v" }
        let published = segments.indices.map { FileManager.default.contents(atPath: world.harness.downloads + "/video/\($0).ts") }
        #expect(verify.status == 0, "\(verify.stdout)")
        #expect(status == 0, "the video: \(parent?["state"] ?? "") \(parent?["error"] ?? "")")
        #expect(published == segments.map { Optional($0) })
    }

    /// `finished` is committed before the rename (the next start completes
    /// it): the partial file's name and bytes are durable by then, so a cut
    /// in that window leaves a file the next start publishes.
    @Test func aTaskCommittedFinishedKeepsItsBytesWhenTheCutFallsBeforeItsRename() throws {
        guard let world = try PowerCutWorld() else { return }
        let nginx = try Nginx(in: world.harness.directory)
        let data = try nginx.serve("f.bin", size: 200_000)
        try world.drop("f.job", "url = \"\(nginx.url("f.bin"))\"\nid = \"f\"\n")
        world.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = "finished-committed"
        #expect(try world.runUntilIdle() == 137)
        world.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        try world.cut(nil)
        let finished = try world.harness.events().contains { $0.type == "finished" && $0.task == "f" }
        #expect(finished)
        let part = world.size(world.harness.downloads + "/f.bin.part")
        #expect(try world.runUntilIdle() == 0)
        #expect(part == data.count, "DEST.part after the cut")
        #expect(FileManager.default.contents(atPath: world.harness.downloads + "/f.bin") == data)
    }

    /// Between a committed `finished` and its rename, `replay --verify`
    /// knows the next start publishes the partial file: not a mismatch.
    @Test func replayVerifyKnowsAPublishThatThePendingRenameCompletes() throws {
        guard let world = try PowerCutWorld() else { return }
        let nginx = try Nginx(in: world.harness.directory)
        let data = try nginx.serve("g.bin", size: 200_000)
        try world.drop("g.job", "url = \"\(nginx.url("g.bin"))\"\nid = \"g\"\n")
        world.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = "finished-committed"
        #expect(try world.runUntilIdle() == 137)
        world.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        try world.fs.syncfs()
        try world.cut(nil)
        #expect(FileManager.default.contents(atPath: world.harness.downloads + "/g.bin.part") == data)
        let verify = try world.harness.run(["replay", "--verify"])
        #expect(try world.runUntilIdle() == 0)
        #expect(FileManager.default.contents(atPath: world.harness.downloads + "/g.bin") == data, "the next start publishes it")
        #expect(verify.status == 0, "\(verify.stdout)")
    }

    /// `submit` into an inbox it makes: the inbox is synced into its parent,
    /// so the ids it printed name jobs a cut cannot take away.
    @Test func aJobSubmitPrintedSurvivesACutWhenSubmitMadeTheInbox() throws {
        guard let world = try PowerCutWorld() else { return }
        let inbox = world.harness.inbox
        #expect(rmdir(inbox) == 0)
        try Durably.syncDirectory((inbox as NSString).deletingLastPathComponent)
        let submit = try world.harness.run(["submit", "http://127.0.0.1:9/x.bin"])
        #expect(submit.status == 0, "\(submit.stderr)")
        let id = submit.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try world.cut(nil)
        let jobs = ((try? FileManager.default.contentsOfDirectory(atPath: inbox)) ?? []).filter { $0.hasSuffix(".job") }
        #expect(jobs.contains { (try? String(contentsOfFile: inbox + "/" + $0, encoding: .utf8))?.contains("\"\(id)\"") == true },
                "the job of \(id) after the cut: \(jobs)")
    }

    /// A restart completes a rename `finished` vouches for only if the part
    /// file has the modification time `finished` recorded: the complete body
    /// gets a full fsync (not fdatasync), so that time is durable with it.
    @Test func aFinishedBodyIsPublishedAfterACutThatKeptItsBytesButNotItsMtime() throws {
        guard let world = try PowerCutWorld() else { return }
        let nginx = try Nginx(in: world.harness.directory)
        let data = try nginx.serve("m.bin", size: 24 << 20)
        try world.drop("m.job", "url = \"\(nginx.url("slow/m.bin"))\"\nid = \"m\"\n")
        world.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = "finished-committed"
        let agent = try world.harness.startAgent()
        let part = world.harness.downloads + "/m.bin.part"
        #expect(eventually(within: 30) { world.size(part) > 0 })
        try Durably.syncDirectory(world.harness.downloads)
        #expect(agent.wait(seconds: 60) == 137)
        world.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        try world.cut(nil)
        #expect(FileManager.default.contents(atPath: part) == data, "every byte was flushed before finished")
        #expect(try world.runUntilIdle() == 0)
        let published = FileManager.default.contents(atPath: world.harness.downloads + "/m.bin")
        #expect(published == data)
    }

    /// A job's identity is its inode, ctime and bytes, not its device
    /// number, which a FUSE or btrfs mount may get anew at each boot: a job
    /// recorded and left in `.taken/` is known after such a boot.
    @Test func aRecordedJobIsKnownAfterABootThatRenumberedTheDevice() throws {
        guard let world = try PowerCutWorld() else { return }
        let nginx = try Nginx(in: world.harness.directory)
        try nginx.serve("d.bin", size: 4000)
        try world.drop("d.job", "url = \"\(nginx.url("d.bin"))\"\n")
        world.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = "intake-committed"
        #expect(try world.runUntilIdle() == 137)
        world.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        try world.fs.syncfs()
        var before = stat(), after = stat()
        #expect(stat(world.fs.path, &before) == 0)
        try world.fs.cut()
        // Another mount takes the device number first, as at a boot in another order.
        let other = try #require(try ForgetFS(in: world.directory, name: "other"))
        try world.fs.mount()
        #expect(stat(world.fs.path, &after) == 0)
        guard before.st_dev != after.st_dev else {
            // Another test's mount freed a lower number meanwhile, and ours got its own back.
            print("skipped: the device kept its number this time")
            return
        }
        #expect(try world.runUntilIdle() == 0)
        let tasks = try world.created(from: "d.job").count
        withExtendedLifetime(other) {}
        #expect(tasks == 1)
    }
}

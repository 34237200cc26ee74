import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `syncagent retarget ID URL` against the real binary and the fault
/// server: a link that expires midway goes on from a fresh one without
/// fetching its bytes again, another file starts over saying why, the move
/// survives kill -9, and every phase answers as the docs say.
@Suite("Retarget", .serialized)
struct RetargetTests {
    let size = 3 << 20
    let dropAt = 1 << 20

    /// A harness, a fault server serving `f.bin`, and `fresh/f.bin`: the same
    /// file (a hard link: the same ETag and Last-Modified) at another path.
    func world(config: String = "") throws -> (AgentHarness, FaultServer, Data) {
        let harness = try AgentHarness(config: config)
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("f.bin", size: size)
        try FileManager.default.createDirectory(atPath: server.root + "/fresh", withIntermediateDirectories: true)
        guard link(server.root + "/f.bin", server.root + "/fresh/f.bin") == 0 else { throw TestFailure("cannot link") }
        return (harness, server, data)
    }

    func downloaded(_ harness: AgentHarness, _ name: String = "f.bin") -> Data? {
        FileManager.default.contents(atPath: "\(harness.downloads)/\(name)")
    }

    /// Bytes the server sent in bodies, over every request.
    func bodyBytes(_ server: FaultServer) -> Int {
        server.requests.filter { $0.status == 200 || $0.status == 206 }.map(\.bytesSent).reduce(0, +)
    }

    /// (1) The link answers 403 once it expired: the task fails keeping its
    /// bytes; retargeted to a fresh link of the same file, it fetches only the rest.
    @Test func anExpiredLinkGoesOnFromAFreshOneWithoutFetchingItsBytesAgain() throws {
        let (harness, server, data) = try world()
        let expiring = server.url("f.bin", "drop_after=\(dropAt)&drop_times=1&fail_status=403&fail_from=2")
        try harness.drop("x.job", "url = \"\(expiring)\"\nid = \"x\"\ndest = \"f.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { harness.state(of: "x") == "failed" })
        let failed = try harness.tasksByID()["x"]
        #expect(failed?["error_code"] as? String == "http_403")
        #expect(failed?["bytes"] as? Int == dropAt, "an expired link says nothing against the bytes it gave")

        let fresh = server.url("fresh/f.bin", "Expires=2&sig=new")
        let result = try harness.run(["retarget", "x", fresh])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "task x: retargeted, keeping \(dropAt) bytes if the new URL serves the same file; runs again; "
                    + "now at \(server.url("fresh/f.bin", "Expires=2&sig=<redacted>"))\n", "\(result.stdout)")
        #expect(eventually(within: 30) { harness.state(of: "x") == "finished" })
        #expect(downloaded(harness) == data)
        // The rest only: one ranged request at the new URL, no byte fetched twice.
        let atFresh = server.requests.filter { $0.path.hasPrefix("/fresh/") }
        #expect(atFresh.map(\.range) == ["bytes=\(dropAt)-"] && atFresh.map(\.status) == [206])
        #expect(bodyBytes(server) == size)
        // The job's URL stays its identity; status shows where it goes on from.
        let task = try harness.tasksByID()["x"]
        #expect(task?["url"] as? String == expiring)
        #expect(task?["current_url"] as? String == server.url("fresh/f.bin", "Expires=2&sig=<redacted>"))
        let retargeted = harness.events("retargeted", task: "x")
        #expect(retargeted.count == 1 && retargeted.first?.data["bytes"] as? Int == dropAt)
        #expect(retargeted.first?.data["to"] as? String == server.url("fresh/f.bin", "Expires=2&sig=<redacted>"), "redacted in events")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        try expectVerifyClean(harness)
    }

    /// (2) Another file at the new URL (another ETag and size): it starts over, says why, and
    /// publishes the new file, never the old bytes joined to the new ones.
    @Test func anotherFileAtTheNewURLStartsOverSayingWhy() throws {
        let (harness, server, _) = try world()
        let other = try server.serve("v2.bin", size: size + 4096, seed: 99)
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "drop_after=\(dropAt)&drop_times=1&fail_status=410&fail_from=2"))\"\n"
                         + "id = \"x\"\ndest = \"f.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { harness.state(of: "x") == "failed" })
        let result = try harness.run(["retarget", "x", server.url("v2.bin")])
        #expect(result.status == 0 && result.stdout.contains("keeping \(dropAt) bytes"), "\(result.stdout) \(result.stderr)")
        #expect(eventually(within: 30) { harness.state(of: "x") == "finished" })
        #expect(downloaded(harness) == other)
        let restart = harness.events("progressed", task: "x") { $0.data["restart_reason"] != nil }.last
        let reason = restart?.data["restart_reason"] as? String ?? ""
        #expect(reason.hasPrefix("the new URL serves another file (ETag \""), "\(reason)")
        #expect(restart?.data["bytes"] as? Int == 0)
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// A hostile new server: the ETag the bytes came with, on a file of another size, and
    /// If-Range ignored. The size gives it away: from 0, never the rest of it joined to the bytes held.
    @Test func theSameETagOnAFileOfAnotherSizeStartsOver() throws {
        let (harness, server, data) = try world()
        let other = try server.serve("liar.bin", size: size + 1000, seed: 5)
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "drop_after=\(dropAt)&drop_times=1&fail_status=403&fail_from=2"))\"\n"
                         + "id = \"x\"\ndest = \"f.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { harness.state(of: "x") == "failed" })
        let etag = harness.events("progressed", task: "x").compactMap { $0.data["etag"] as? String }.first ?? "none"
        let date = harness.events("progressed", task: "x").compactMap { $0.data["last_modified"] as? String }.first ?? "none"
        func header(_ name: String, _ value: String) -> String { "header=\(name):" + value.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! }
        let liar = server.url("liar.bin", "ignore_if_range=1&\(header("ETag", etag))&\(header("Last-Modified", date))")
        #expect(try harness.run(["retarget", "x", liar]).status == 0)
        #expect(eventually(within: 30) { harness.state(of: "x") == "finished" })
        #expect(downloaded(harness) == other && downloaded(harness) != data)
        let reason = harness.events("retrying", task: "x").last?.data["reason"] as? String
        #expect(reason == "the file at the new URL has \(size + 1000) bytes, not the \(size) of the file the bytes held are part of", "\(reason ?? "")")
        #expect(server.requests.filter { $0.path.hasPrefix("/liar.bin") }.map(\.range) == ["bytes=\(dropAt)-", nil])
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// A hostile new server: the validators the bytes came with, forged, on another file of the
    /// same size, If-Range ignored, and a Content-Range that hides the size (`/*`). Nothing but
    /// the retarget's check tells: the rest of that file joined to the bytes held would be published.
    @Test func aForgedAnswerThatHidesItsSizeStartsOver() throws {
        let (harness, server, data) = try world()
        let other = try server.serve("forged.bin", size: size, seed: 11)
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "drop_after=\(dropAt)&drop_times=1&fail_status=403&fail_from=2"))\"\n"
                         + "id = \"x\"\ndest = \"f.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { harness.state(of: "x") == "failed" })
        let progress = harness.events("progressed", task: "x")
        let etag = progress.compactMap { $0.data["etag"] as? String }.first ?? "none"
        let date = progress.compactMap { $0.data["last_modified"] as? String }.first ?? "none"
        func header(_ name: String, _ value: String) -> String { "header=\(name):" + value.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! }
        let forged = server.url("forged.bin", "ignore_if_range=1&\(header("ETag", etag))&\(header("Last-Modified", date))&"
                                + header("Content-Range", "bytes \(dropAt)-\(size - 1)/*"))
        #expect(try harness.run(["retarget", "x", forged]).status == 0)
        #expect(eventually(within: 30) { harness.state(of: "x") == "finished" })
        #expect(downloaded(harness) == other && downloaded(harness) != data)
        let reason = harness.events("retrying", task: "x").last?.data["reason"] as? String
        #expect(reason == "the new URL's answer does not say its file's size (the bytes held are of a file of \(size) bytes)", "\(reason ?? "")")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// A new server that ignores Range answers 200 with the whole file: taken from 0, said so.
    @Test func aNewServerIgnoringRangeIsTakenFromZero() throws {
        let (harness, server, data) = try world()
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "drop_after=\(dropAt)&drop_times=1&fail_status=403&fail_from=2"))\"\n"
                         + "id = \"x\"\ndest = \"f.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { harness.state(of: "x") == "failed" })
        #expect(try harness.run(["retarget", "x", server.url("fresh/f.bin", "ignore_range=1")]).status == 0)
        #expect(eventually(within: 30) { harness.state(of: "x") == "finished" })
        #expect(downloaded(harness) == data)
        let restart = harness.events("progressed", task: "x") { $0.data["restart_reason"] != nil }.last
        #expect(restart?.data["restart_reason"] as? String == "the server at the new URL ignored Range and sent the whole file")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// A running download moves at once: its attempt stops with its bytes durable, and the
    /// next one asks the new URL for the rest. Over several connections, every one moves.
    @Test(arguments: [1, 4])
    func aRunningDownloadMovesEveryConnection(connections: Int) throws {
        let (harness, server, data) = try world()
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "rate=150000&chunk=16384"))\"\nid = \"x\"\ndest = \"f.bin\"\n"
                         + "connections = \(connections)\n")
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("progressed", task: "x", within: 30) { ($0.data["bytes"] as? Int ?? 0) > 0 })
        let result = try harness.run(["retarget", "x", server.url("fresh/f.bin")])
        #expect(result.status == 0 && result.stdout.hasPrefix("task x: retargeted, keeping ")
                    && result.stdout.hasSuffix("; now at \(server.url("fresh/f.bin"))\n"), "\(result.stdout) \(result.stderr)")
        let kept = harness.events("retargeted", task: "x").first?.data["bytes"] as? Int ?? 0
        #expect(kept > 0)
        #expect(eventually(within: 60) { harness.state(of: "x") == "finished" })
        #expect(downloaded(harness) == data)
        let retargetSeq = harness.events("retargeted", task: "x").first?.seq ?? 0
        let after = harness.events("started", task: "x") { $0.seq > retargetSeq }
        #expect(after.first?.data["url"] as? String == server.url("fresh/f.bin") && after.first?.data["offset"] as? Int == kept)
        // Each connection that opened after the move asked the new URL, for bytes not held.
        let fresh = server.requests.filter { $0.path.hasPrefix("/fresh/") }
        #expect(!fresh.isEmpty && fresh.allSatisfy { $0.status == 206 }, "\(fresh)")
        #expect(fresh.allSatisfy { ($0.range.flatMap { Int($0.dropFirst("bytes=".count).prefix { $0 != "-" }) } ?? -1) >= (connections == 1 ? kept : 0) })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        try expectVerifyClean(harness)
    }

    /// (3) kill -9 right after the retarget is applied: the next agent goes on at the new URL.
    @Test func theMoveSurvivesKill9() throws {
        let (harness, server, data) = try world()
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "rate=300000&chunk=16384"))\"\nid = \"x\"\ndest = \"f.bin\"\n")
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("progressed", task: "x", within: 30) { ($0.data["bytes"] as? Int ?? 0) > 0 })
        let result = try harness.run(["retarget", "x", server.url("fresh/f.bin")])
        #expect(result.status == 0, "\(result.stderr)")
        agent.signal(SIGKILL)
        _ = agent.wait(seconds: 10)
        let kept = harness.events("retargeted", task: "x").first?.data["bytes"] as? Int ?? -1
        #expect(kept > 0)
        #expect(try harness.tasksByID()["x"]?["current_url"] as? String == server.url("fresh/f.bin"))
        try harness.runUntilIdle()
        #expect(downloaded(harness) == data)
        let retargetSeq = harness.events("retargeted", task: "x").first?.seq ?? 0
        let started = harness.events("started", task: "x") { $0.seq > retargetSeq }
        #expect(!started.isEmpty && started.allSatisfy { $0.data["url"] as? String == server.url("fresh/f.bin") })
        #expect(server.requests.last?.path == "/fresh/f.bin")
        try expectVerifyClean(harness)
    }

    /// (4) A paused task stays paused at its new URL; a finished one is "nothing to do".
    @Test func aPausedTaskStaysPausedAndAFinishedOneIsNothingToDo() throws {
        let (harness, server, data) = try world()
        try harness.drop("p.job", "url = \"\(server.url("f.bin", "rate=300000&chunk=16384"))\"\nid = \"p\"\ndest = \"f.bin\"\n")
        try server.serve("small.bin", size: 1000)
        try harness.drop("done.job", "url = \"\(server.url("small.bin"))\"\nid = \"done\"\n")
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("progressed", task: "p", within: 30) { ($0.data["bytes"] as? Int ?? 0) > 0 })
        #expect(try harness.run(["pause", "p"]).status == 0)
        let moved = try harness.run(["retarget", "p", server.url("fresh/f.bin")])
        #expect(moved.status == 0 && moved.stdout.hasSuffix("; stays paused; now at \(server.url("fresh/f.bin"))\n"), "\(moved.stdout) \(moved.stderr)")
        let paused = try harness.tasksByID()["p"]
        #expect(paused?["state"] as? String == "paused" && paused?["current_url"] as? String == server.url("fresh/f.bin"))
        // Again to where it already is: nothing to do.
        let same = try harness.run(["retarget", "p", server.url("fresh/f.bin")])
        #expect(same.status == 1 && same.stderr.contains("nothing to do"), "\(same.stderr)")

        #expect(eventually(within: 30) { harness.state(of: "done") == "finished" })
        let late = try harness.run(["retarget", "done", server.url("fresh/f.bin")])
        #expect(late.status == 1 && late.stdout.isEmpty)
        #expect(late.stderr == "syncagent: task done: nothing to do: task already finished\n", "\(late.stderr)")

        #expect(try harness.run(["resume", "p"]).status == 0)
        #expect(eventually(within: 30) { harness.state(of: "p") == "finished" })
        #expect(downloaded(harness) == data)
        #expect(server.requests.last?.path == "/fresh/f.bin")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// (6) A bad URL is refused as a job's `url` is, naming the key, credentials redacted: by
    /// the command before anything is written, and by the agent for a job file.
    @Test func aBadURLIsRefusedNamingTheKey() throws {
        let (harness, server, _) = try world()
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "fail_status=403"))\"\nid = \"x\"\n")
        let bad = try harness.run(["retarget", "x", "ftp://bob:hunter2@h/f"])
        #expect(bad.status == 1 && bad.stderr == "syncagent: key \"url\" must be an http or https URL, not ftp: \"ftp://<redacted>@h/f\"\n",
                "\(bad.stderr)")
        #expect(harness.jobFiles() == ["x.job"], "nothing written")
        try harness.drop("r.job", "action = \"retarget\"\ntask = \"x\"\nurl = \"http://bob:hunter2@h/a b\"\n")
        try harness.runUntilIdle(expecting: 4)
        let error = try String(contentsOfFile: harness.inbox + "/rejected/r.job.error", encoding: .utf8)
        #expect(error == "r.job: key \"url\" must not contain spaces or control characters: \"http://<redacted>@h/a b\"\n", "\(error)")
        #expect(!error.contains("hunter2"))
        #expect(try !harness.run(["events"]).stdout.contains("hunter2"))
    }

    /// A new URL with credentials (userinfo, a token in the query): they reach the server, and
    /// nothing the agent or a command prints: not the outcome, the events, status, replay, or the agent's log.
    @Test func theNewURLsCredentialsNeverShow() throws {
        let (harness, server, data) = try world()
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "drop_after=\(dropAt)&drop_times=1&fail_status=403&fail_from=2"))\"\n"
                         + "id = \"x\"\ndest = \"f.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { harness.state(of: "x") == "failed" })
        let secret = "http://bob:hunter2@\(server.host):\(server.port)/fresh/f.bin?token=s3cr3tT0k3n&n=1"
        let result = try harness.run(["retarget", "x", secret])
        #expect(result.status == 0 && result.stdout.hasSuffix("now at http://<redacted>@\(server.host):\(server.port)/fresh/f.bin?token=<redacted>&n=1\n"),
                "\(result.stdout)")
        #expect(eventually(within: 30) { harness.state(of: "x") == "finished" })
        #expect(downloaded(harness) == data)
        #expect(server.requests.contains { $0.path == "/fresh/f.bin?token=s3cr3tT0k3n&n=1" }, "the server got the URL as given")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        var shown = result.stdout + result.stderr + agent.stdout + agent.stderr
        for command in [["events"], ["events", "--json"], ["status", "--task", "x"], ["status", "--json"], ["replay"], ["replay", "--json"]] {
            let output = try harness.run(command)
            shown += output.stdout + output.stderr
        }
        #expect(!shown.contains("hunter2") && !shown.contains("s3cr3tT0k3n"))
        #expect(shown.contains("http://<redacted>@"))
    }

    /// A flood of retargets of one running task, back and forth between two URLs of the same
    /// file: each is applied in order, the task ends once, the file is whole. (At 600 KB/s the
    /// download outlasts the flood's intake on a loaded machine: a retarget taken after the task
    /// finished is refused, as it should be, and is not what this test is about.)
    @Test func aFloodOfRetargetsEndsWithOneWholeFile() throws {
        let (harness, server, data) = try world()
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "rate=600000"))\"\nid = \"x\"\ndest = \"f.bin\"\n")
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("started", task: "x", within: 30))
        for n in 0..<60 {
            let url = n % 2 == 0 ? server.url("fresh/f.bin", "n=\(n)&rate=600000") : server.url("f.bin", "n=\(n)&rate=600000")
            try harness.drop(String(format: "r%02d.job", n), "action = \"retarget\"\ntask = \"x\"\nurl = \"\(url)\"\n")
        }
        #expect(eventually(within: 90) { harness.state(of: "x") == "finished" })
        #expect(downloaded(harness) == data)
        #expect(harness.events("controlled") { $0.data["action"] as? String == "retarget" }.count == 60)
        #expect(harness.events("finished", task: "x").count == 1)
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        try expectVerifyClean(harness)
    }

    /// Retargets racing their tasks' ends: each lands while its task is queued, running,
    /// completing or finished. Whatever it met, each task finishes once with the whole file,
    /// and each retarget says what it did.
    @Test func retargetsRacingTheirTasksEndsNeverSpoilAFile() throws {
        let harness = try AgentHarness(config: "max_active = 8\n")
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("f.bin", size: 600_000)
        try FileManager.default.createDirectory(atPath: server.root + "/fresh", withIntermediateDirectories: true)
        guard link(server.root + "/f.bin", server.root + "/fresh/f.bin") == 0 else { throw TestFailure("cannot link") }
        let agent = try harness.startAgent()
        #expect(harness.pastStartUp(agent))
        let ids = (0..<24).map { String(format: "t%02d", $0) }
        for (n, id) in ids.enumerated() {
            try harness.drop("\(id).job", "url = \"\(server.url("f.bin", "n=\(n)"))\"\nid = \"\(id)\"\ndest = \"\(id).bin\"\n")
            // Later ones wait for more of their task first: created, started, or some bytes.
            let stage = ["created", "started", "progressed"][n % 3]
            _ = harness.waitForEvent(stage, task: id, within: 10)
            try harness.drop("\(id)-retarget.job", "action = \"retarget\"\ntask = \"\(id)\"\nurl = \"\(server.url("fresh/f.bin", "n=\(n)"))\"\n")
        }
        #expect(eventually(within: 60) { ids.allSatisfy { harness.state(of: $0) == "finished" } })
        for id in ids {
            #expect(FileManager.default.contents(atPath: "\(harness.downloads)/\(id).bin") == data, "\(id)")
            #expect(harness.events("finished", task: id).count == 1, "\(id)")
            let outcome = harness.events("controlled", task: id).first?.data["outcome"] as? String ?? ""
            #expect(outcome.hasPrefix("\(id): retargeted") || outcome.hasPrefix("\(id): nothing to do: "), "\(outcome)")
        }
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        try expectVerifyClean(harness)
    }

    /// A new URL whose redirects do not end: the task fails saying so, and a retarget mends it.
    @Test func endlessRedirectsAtTheNewURLFailAndCanBeRetargetedAgain() throws {
        let (harness, server, data) = try world(config: "max_redirects = 3\n")
        try harness.drop("x.job", "url = \"\(server.url("f.bin", "drop_after=\(dropAt)&drop_times=1&fail_status=403&fail_from=2"))\"\n"
                         + "id = \"x\"\ndest = \"f.bin\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { harness.state(of: "x") == "failed" })
        // Hops without end, as far as the agent is concerned: more than max_redirects of them.
        var chain = server.url("fresh/f.bin")
        for hop in 0..<5 { chain = server.url("hop\(hop)", "redirect_to=" + chain.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!) }
        #expect(try harness.run(["retarget", "x", chain]).status == 0)
        #expect(eventually(within: 30) { harness.state(of: "x") == "failed" && harness.hasEvent("retargeted", task: "x") })
        let error = try harness.tasksByID()["x"]?["error"] as? String ?? ""
        #expect(error.lowercased().contains("redirect"), "\(error)")
        #expect(try harness.run(["retarget", "x", server.url("fresh/f.bin")]).status == 0)
        #expect(eventually(within: 30) { harness.state(of: "x") == "finished" })
        #expect(downloaded(harness) == data)
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    static let mediaFolder = TempDirectory()
    static let media: HLSMedia? = try? HLSMedia.make(in: mediaFolder.path)

    /// (5) A VOD whose later segments' links expired (404): three segments taken, the rest
    /// lost. Retargeted to its playlist at another path, the taken segments are not fetched
    /// again, the others come from the new playlist's URLs, and the video plays whole.
    @Test func aVideoGoesOnFromItsPlaylistAtANewPathKeepingTheSegmentsTaken() throws {
        let media = try #require(Self.media, "ffmpeg could not make the test media")
        let harness = try AgentHarness(config: "max_active = 1\n")
        let server = try FaultServer(in: harness.directory)
        try FileManager.default.copyItem(atPath: media.path("clear"), toPath: server.root + "/new")
        try FileManager.default.createDirectory(atPath: server.root + "/old", withIntermediateDirectories: true)
        let segments = try media.segments(of: "clear/index.m3u8")
        #expect(segments.count == 10)
        var playlist = try String(contentsOfFile: media.path("clear/index.m3u8"), encoding: .utf8)
        for (index, segment) in segments.enumerated() {
            if index < 3 {
                try FileManager.default.copyItem(atPath: media.path("clear/\(segment)"), toPath: server.root + "/old/\(segment)")
            } else {
                // Expired: what the old links answer now.
                playlist = playlist.replacingOccurrences(of: "\n\(segment)\n", with: "\n../gone/\(segment)\n")
            }
        }
        try playlist.write(toFile: server.root + "/old/index.m3u8", atomically: true, encoding: .utf8)
        try harness.drop("v.job", "id = \"v\"\nkind = \"hls\"\nurl = \"\(server.url("old/index.m3u8"))\"\ndest = \"videos/talk\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 60) { harness.state(of: "v") == "failed" })
        // The segments taken before the first lost one failed the video (those after it were never asked).
        let taken = Set(try harness.statusTasks(["--all"]).filter { ($0["parent"] as? String) == "v" && ($0["state"] as? String) == "finished" }
            .compactMap { ($0["dest"] as? String).map { ($0 as NSString).lastPathComponent } })
        #expect(taken.count >= 2, "\(taken)")
        let takenNames = segments.enumerated().filter { taken.contains("seg\($0.offset).ts") }.map(\.element)
        #expect(takenNames.count == taken.count, "\(taken)")

        let result = try harness.run(["retarget", "v", server.url("new/index.m3u8")])
        #expect(result.status == 0 && result.stdout.contains("runs again"), "\(result.stdout) \(result.stderr)")
        #expect(eventually(within: 90) { harness.state(of: "v") == "finished" }, "\(harness.state(of: "v") ?? "-")")
        // The taken segments were not fetched again; every other one came from the new playlist.
        let fresh = server.requests.filter { $0.path.hasPrefix("/new/") }.map(\.path)
        #expect(fresh.filter { $0.hasSuffix(".m3u8") } == ["/new/index.m3u8"])
        #expect(fresh.filter { $0.hasSuffix(".ts") }.sorted() == segments.filter { !takenNames.contains($0) }.map { "/new/\($0)" }, "\(fresh)")
        let folder = harness.downloads + "/videos/talk"
        for (index, segment) in segments.enumerated() {
            #expect(FileManager.default.contents(atPath: "\(folder)/\(index).ts") == FileManager.default.contents(atPath: media.path("clear/\(segment)")),
                    "segment \(index)")
        }
        let duration = try #require(HLSMedia.duration(of: folder + "/index.m3u8"))
        #expect(abs(duration - 20) <= 0.5, "\(duration) s")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        try expectVerifyClean(harness)
    }

    /// A playlist at the new URL that is another video (other segment names): refused, saying why,
    /// and the segments taken stay.
    @Test func aVideoRetargetedToAnotherVideoFailsSayingWhy() throws {
        let media = try #require(Self.media, "ffmpeg could not make the test media")
        let harness = try AgentHarness(config: "max_active = 1\n")
        let server = try FaultServer(in: harness.directory)
        try FileManager.default.copyItem(atPath: media.path("clear"), toPath: server.root + "/old")
        try FileManager.default.copyItem(atPath: media.path("lo"), toPath: server.root + "/other")
        let playlist = try String(contentsOfFile: media.path("clear/index.m3u8"), encoding: .utf8)
        let segments = try media.segments(of: "clear/index.m3u8")
        try playlist.replacingOccurrences(of: "\n\(segments[9])\n", with: "\n../gone/\(segments[9])\n")
            .write(toFile: server.root + "/old/index.m3u8", atomically: true, encoding: .utf8)
        try harness.drop("v.job", "id = \"v\"\nkind = \"hls\"\nurl = \"\(server.url("old/index.m3u8"))\"\ndest = \"videos/talk\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 60) { harness.state(of: "v") == "failed" })
        let other = try media.segments(of: "lo/index.m3u8")
        #expect(try harness.run(["retarget", "v", server.url("other/index.m3u8")]).status == 0)
        #expect(eventually(within: 30) { harness.state(of: "v") == "failed" && harness.hasEvent("retargeted", task: "v") })
        let error = try harness.tasksByID()["v"]?["error"] as? String ?? ""
        if other.first != segments.first {
            #expect(error.contains("is another video"), "\(error)")
        } else {
            #expect(error.contains("does not list segment") || error.contains("is another video"), "\(error)")
        }
        #expect(!server.requests.contains { $0.path.hasPrefix("/other/") && $0.path.hasSuffix(".ts") }, "no segment of another video")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// A resumable upload is refused, saying why; a segment of a video likewise.
    @Test func aResumableUploadIsRefused() throws {
        let harness = try AgentHarness()
        let body = harness.directory.file("body.bin")
        try Data(count: 1000).write(to: URL(fileURLWithPath: body))
        try harness.drop("u.job", "url = \"http://127.0.0.1:9/tus/\"\nid = \"u\"\nkind = \"upload\"\nprotocol = \"tus\"\nbody_file = \"\(body)\"\n"
                         + "not_before = 2200-01-01T00:00:00Z\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 10) { harness.state(of: "u") == "queued" })
        let refused = try harness.run(["retarget", "u", "http://127.0.0.1:9/other/"])
        #expect(refused.status == 1)
        #expect(refused.stderr.hasPrefix("syncagent: task u: cannot retarget: a resumable upload (protocol = \"tus\") keeps what it sent"),
                "\(refused.stderr)")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }
}

import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// aria2's JSON-RPC on the real binary (issue 40): clients nobody here
/// wrote, aria2c itself as the oracle, kill -9 between addUri and its
/// end, and a web page's attacks.
@Suite("aria2 JSON-RPC")
struct RPCTests {
    // MARK: - Real clients, and aria2 as the oracle

    /// aria2p's library adds, lists, pauses, resumes and removes, and hears
    /// the notifications; its CLI does the same from the command line.
    @Test func aria2psLibraryAndCLIDriveTheAgent() throws {
        let rpc = try RPCAgent()
        let server = try FaultServer(in: rpc.harness.directory)
        let data = try server.serve("f.bin", size: 1_000_000)
        try rpc.start()
        let seen = try RPCClient.run(["aria2p", "\(rpc.port)", rpc.secret, server.url("f.bin"), "f.bin"], in: rpc.harness.directory)
            as? [String: Any] ?? [:]
        let library = seen["library"] as? [String: Any] ?? [:]
        #expect(library["status"] as? String == "complete")
        #expect(library["total"] as? Int == 1_000_000 && library["completed"] as? Int == 1_000_000)
        #expect(library["path"] as? String == rpc.harness.downloads + "/f.bin")
        #expect(FileManager.default.contents(atPath: rpc.harness.downloads + "/f.bin") == data)
        // The slow one (1 MB at 20 kB/s) is paused, resumed and removed while it runs.
        #expect(seen["slow status after pause"] as? String == "paused")
        #expect(["active", "waiting"].contains(seen["slow status after resume"] as? String ?? ""))
        let events = (seen["events"] as? [[String]] ?? []).map { $0.joined(separator: " ") }
        #expect(events == ["start first", "complete first", "start slow", "pause slow", "start slow", "stop slow"], "\(events)")
        for command in ["cli add", "cli show", "cli pause", "cli resume", "cli remove"] {
            #expect((seen[command] as? [String: Any])?["code"] as? Int == 0, "\(command): \(seen[command] ?? "")")
        }
        let gid = seen["cli gid"] as? String ?? ""
        #expect(gid.count == 16)
        let shown = text((seen["cli show"] as? [String: Any])?["out"])
        #expect(shown.contains(gid))
        #expect(seen["cli status after pause"] as? String == "paused")
        #expect(["active", "waiting"].contains(seen["cli status after resume"] as? String ?? ""))
        let afterRemove = text(seen["cli status after remove"])
        #expect(afterRemove.hasPrefix("gone"))
    }

    /// The differences from aria2c 1.36 the oracle comparison may find, each
    /// named in docs/rpc.md (what differs). A new difference
    /// fails the test; so does one fixed and still listed.
    static let knownDifferences: Set<String> = [
        // aria2 lists the features it was built with; syncagent the ones it has.
        "aria2.getVersion.result.enabledFeatures: aria2 9 elements, syncagent 3",
        // aria2's ~100 options (BitTorrent's, FTP's, file allocation …); syncagent's are the ones it honours.
        "aria2.getGlobalOption.result: options only aria2 has",
        "aria2.getOption.result: options only aria2 has",
        // Not supported, said so.
        #"addTorrent.error error: aria2 [1, "Bencode decoding failed"], syncagent [1, "BitTorrent is not supported: syncagent transfers over HTTP and HTTPS only."]"#,
        #"changePosition.error error: aria2 [1, "GID#<small> not found in the waiting queue."], syncagent [1, "Changing a download's place in the queue is not supported; set its priority when adding it."]"#,
    ]

    /// The same script of calls against aria2c and against the agent: each
    /// answer's HTTP status and shape, the values that say a download's
    /// state, every error's code and message, and the notifications of each
    /// download, compared field by field.
    @Test func theAnswersAndNotificationsHaveAria2csOwnShapes() throws {
        let rpc = try RPCAgent()
        let directory = rpc.harness.directory
        let server = try FaultServer(in: directory)
        try server.serve("small.bin", size: 100_000)
        try server.serve("slow.bin", size: 3_000_000)
        let aria2c = try Aria2c(secret: rpc.secret, in: directory)
        try rpc.start()
        let files = "http://127.0.0.1:\(server.port)"
        let theirs = try RPCClient.run(["script", aria2c.url, rpc.secret, files, aria2c.directory], in: directory)
        let ours = try RPCClient.run(["script", rpc.url, rpc.secret, files, rpc.harness.downloads], in: directory)
        try JSONSerialization.data(withJSONObject: theirs).write(to: URL(fileURLWithPath: directory.file("aria2c.json")))
        try JSONSerialization.data(withJSONObject: ours).write(to: URL(fileURLWithPath: directory.file("syncagent.json")))
        let found = Set(try RPCClient.run(["compare", directory.file("aria2c.json"), directory.file("syncagent.json")], in: directory)
            as? [String] ?? ["no comparison"])
        #expect(found.subtracting(Self.knownDifferences).isEmpty, "differences not named in docs/rpc.md: \(found.subtracting(Self.knownDifferences).sorted())")
        #expect(Self.knownDifferences.subtracting(found).isEmpty, "named differences no longer found: \(Self.knownDifferences.subtracting(found).sorted())")
        #expect(FileManager.default.contents(atPath: rpc.harness.downloads + "/small.bin") == FileManager.default.contents(atPath: server.root + "/small.bin"))
    }

    /// What the edge-case comparison may find, each named in the README.
    static let knownEdgeDifferences: Set<String> = [
        // aria2 says only that it could not take the option; syncagent says what it takes.
        #"addUri pause yes.error error: aria2 [1, "We encountered a problem while processing the option '--pause'."], syncagent [1, "option pause: must be \"true\" or \"false\", not \"yes\""]"#,
        // aria2 turns a refused gid into "No URI to download."; syncagent names the option.
        #"addUri gid zero.error error: aria2 [1, "No URI to download."], syncagent [1, "option gid: 0000000000000000 is not a GID a download may have"]"#,
        // A key named twice: syncagent refuses a request naming params or jsonrpc twice and answers with the last id;
        // aria2 reads the params as absent (Unauthorized), takes either jsonrpc, and answers a null id.
        #"params named twice.error error: aria2 [1, "Unauthorized"], syncagent [-32600, "Invalid Request."]"#,
        #"jsonrpc named twice: HTTP status: aria2 200, syncagent 400"#,
        #"jsonrpc named twice.result: only aria2"#,
        #"jsonrpc named twice.error: only syncagent"#,
        #"id named twice.id: aria2 "NoneType", syncagent "int""#,
        #"id named twice.id = aria2 null, syncagent 2"#,
        // A multicall struct naming methodName twice: syncagent runs the last, aria2 says "Missing methodName.".
        #"methodName named twice in a multicall.result[]: aria2 {"code": "int", "message": "str"}, syncagent [{"enabledFeatures": ["str"], "version": "str"}]"#,
        // A download's options are its job: a changing changeOption is refused (changeUri retargets, as aria2 answers it).
        #"changeOption max-download-limit: HTTP status: aria2 200, syncagent 400"#,
        #"changeOption max-download-limit.result: only aria2"#,
        #"changeOption max-download-limit.error: only syncagent"#,
        // No BitTorrent nor Metalink: getPeers is refused, addMetalink says so rather than that it could not parse.
        #"aria2.getPeers: HTTP status: aria2 200, syncagent 400"#,
        #"aria2.getPeers.result: only aria2"#,
        #"aria2.getPeers.error: only syncagent"#,
        #"aria2.addMetalink.error error: aria2 [1, "Could not parse Metalink XML document."], syncagent [1, "Metalink is not supported: syncagent transfers over HTTP and HTTPS only."]"#,
        // A paused download removed: aria2 keeps no result of it, syncagent lists it stopped, "removed".
        #"tellStatus after forceRemove: HTTP status: aria2 400, syncagent 200"#,
        #"tellStatus after forceRemove.result: only syncagent"#,
        #"tellStatus after forceRemove.error: only aria2"#,
    ]

    /// Calls at the edges of what aria2 reads — a GID prefix two downloads
    /// share, a negative count, keys that are not strings, a key named twice,
    /// a multicall of what is not a struct — answered as aria2c answers them.
    @Test func theEdgesAreAnsweredAsAria2cAnswersThem() throws {
        let rpc = try RPCAgent()
        let directory = rpc.harness.directory
        let aria2c = try Aria2c(secret: rpc.secret, in: directory)
        try rpc.start()
        let theirs = try RPCClient.run(["edges", aria2c.url, rpc.secret], in: directory)
        let ours = try RPCClient.run(["edges", rpc.url, rpc.secret], in: directory)
        try JSONSerialization.data(withJSONObject: theirs, options: .sortedKeys).write(to: URL(fileURLWithPath: directory.file("aria2c-edges.json")))
        try JSONSerialization.data(withJSONObject: ours, options: .sortedKeys).write(to: URL(fileURLWithPath: directory.file("syncagent-edges.json")))
        let found = Set(try RPCClient.run(["compare", directory.file("aria2c-edges.json"), directory.file("syncagent-edges.json")], in: directory)
            as? [String] ?? ["no comparison"])
        #expect(found.subtracting(Self.knownEdgeDifferences).isEmpty, "not named in the README: \(found.subtracting(Self.knownEdgeDifferences).sorted())")
        #expect(Self.knownEdgeDifferences.subtracting(found).isEmpty, "no longer found: \(Self.knownEdgeDifferences.subtracting(found).sorted())")
    }

    // MARK: - Durable before answered

    /// An addUri answered is a job the log holds: killed before the download
    /// ends, the agent starts again, the GID still answers, the file lands
    /// once, and each connected client hears of its completion once.
    @Test func anAddUriAnsweredSurvivesKill9() throws {
        let rpc = try RPCAgent()
        let server = try FaultServer(in: rpc.harness.directory)
        let data = try server.serve("f.bin", size: 600_000)
        try rpc.start()
        // Slow enough (10 s) that both listeners, started after the restart, connect before it ends.
        let gid = try rpc.result("aria2.addUri", [server.url("f.bin", "rate=60000")], ["out": "f.bin"]) as? String ?? ""
        #expect(gid.count == 16)
        rpc.kill9()
        #expect(!FileManager.default.fileExists(atPath: rpc.harness.downloads + "/f.bin"))
        try rpc.start()
        // Two clients listen from the restart on.
        let listening = (0..<2).map { _ in
            Listener(rpc: rpc, gid: gid)
        }
        #expect(rpc.wait(for: gid, ["complete"]))
        let status = try rpc.result("aria2.tellStatus", gid, ["gid", "status", "completedLength", "totalLength"]) as? [String: String]
        #expect(status == ["gid": gid, "status": "complete", "completedLength": "600000", "totalLength": "600000"])
        #expect(FileManager.default.contents(atPath: rpc.harness.downloads + "/f.bin") == data)
        let names = try FileManager.default.contentsOfDirectory(atPath: rpc.harness.downloads)
        #expect(names == ["f.bin"], "\(names)")
        for listener in listening {
            let heard = listener.notifications()
            #expect(heard.filter { $0 == "aria2.onDownloadComplete" }.count == 1, "\(heard)")
        }
        // The log says it was taken once, from the RPC.
        #expect(try rpc.harness.events().filter { $0.type == "created" }.count == 1)
    }

    /// The agent dies after recording an addUri and before committing it:
    /// the client was told nothing (no GID for a download no log holds),
    /// and after the restart there is no such download.
    @Test func anAddUriIsAnsweredOnlyOnceCommitted() throws {
        let rpc = try RPCAgent()
        rpc.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = "rpc-recorded"
        let agent = try rpc.start()
        let answers = try rpc.call([["aria2.addUri", ["http://127.0.0.1:9/f.bin"]]])
        #expect(answers.isEmpty, "answered before the commit: \(answers)")
        #expect(agent.wait(seconds: 10) == 137)
        rpc.harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        try rpc.start()
        #expect((try rpc.result("aria2.tellWaiting", 0, 10) as? [Any])?.isEmpty == true)
        #expect(try rpc.harness.events().allSatisfy { $0.type != "created" })
    }

    /// Two downloads never share a GID: an addUri whose `gid` is another
    /// download's, or a job file whose `id` spells another task's GID, is
    /// refused, and the first download is still the one its GID reaches.
    @Test func aGIDIsNeverShared() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let victim = try rpc.result("aria2.addUri", ["http://127.0.0.1:9/victim.bin"], ["out": "victim.bin", "pause": "true"]) as? String ?? ""
        #expect(victim.count == 16)
        let intruder = try rpc.call([["aria2.addUri", ["http://127.0.0.1:9/intruder.bin"], ["out": "intruder.bin", "gid": victim]]])
        let refusal = (intruder.first?["error"] as? [String: Any])?["message"] as? String ?? ""
        #expect(refusal == "GID \(victim) is already used by another download", "\(intruder)")
        try rpc.harness.drop("intruder.job", "id = \"\(victim)\"\nurl = \"http://127.0.0.1:9/job.bin\"\n")
        let errorFile = rpc.harness.inbox + "/rejected/intruder.job.error"
        #expect(eventually(within: 20) { FileManager.default.fileExists(atPath: errorFile) })
        let said = (try? String(contentsOfFile: errorFile, encoding: .utf8)) ?? ""
        #expect(said.contains("would have the aria2 RPC GID \(victim), which task"), "\(said)")
        let listed = try rpc.result("aria2.tellWaiting", 0, 10, ["gid", "files"]) as? [[String: Any]] ?? []
        #expect(listed.count == 1, "\(listed)")
        let path = ((listed.first?["files"] as? [[String: Any]])?.first?["path"] as? String) ?? ""
        #expect(path.hasSuffix("/victim.bin"))
        #expect(try rpc.harness.events().filter { $0.type == "created" }.count == 1)
    }

    /// A client with the secret may send a file as a data or upload job's
    /// body only from beneath download_dir: never the agent's own files
    /// (the log holds every download's headers), nor the kernel's, nor the
    /// user's others; a link is judged by where it leads, and so is the file
    /// an attempt opens, whatever was swapped in since the job was taken.
    @Test func aBodyFileComesFromBeneathDownloadDirOnly() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let log = rpc.harness.stateDir + "/events.sqlite"
        let link = rpc.harness.downloads + "/link.bin"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: log)
        let elsewhere = rpc.harness.directory.file("mine.json")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: elsewhere))
        func add(_ body: String, paused: Bool = false) throws -> [String: Any] {
            let options: [String: Any] = ["syncagent": ["kind": "data", "method": "POST", "body_file": body, "retries": 0], "pause": paused ? "true" : "false"]
            return try rpc.call([["aria2.addUri", ["http://127.0.0.1:9/in"], options]]).first ?? [:]
        }
        func refusal(_ answer: [String: Any]) -> String { (answer["error"] as? [String: Any])?["message"] as? String ?? "" }
        #expect(refusal(try add(log)).contains("names \(log), inside the agent's own folder"))
        #expect(refusal(try add("/proc/self/environ")).contains("names /proc/self/environ, inside /proc, the kernel's"))
        #expect(refusal(try add(elsewhere)).contains("names \(elsewhere), outside download_dir"))
        #expect(refusal(try add(link)).contains("names \(link) (which leads to \(log)), inside the agent's own folder"))

        let body = rpc.harness.downloads + "/body.json"
        try Data("{}".utf8).write(to: URL(fileURLWithPath: body))
        let gid = try add(body, paused: true)["result"] as? String ?? ""
        #expect(gid.count == 16)
        try FileManager.default.removeItem(atPath: body)
        try FileManager.default.createSymbolicLink(atPath: body, withDestinationPath: log)
        #expect(try rpc.result("aria2.unpause", gid) as? String == gid)
        #expect(rpc.wait(for: gid, ["error"]))
        let status = try rpc.result("aria2.tellStatus", gid, ["errorMessage"]) as? [String: String] ?? [:]
        #expect(status["errorMessage"]?.contains("body_file names \(body) (now \(log)), inside the agent's own folder") == true, "\(status)")
        #expect(try rpc.harness.events().filter { $0.type == "created" }.count == 1)
    }

    // MARK: - Attacks

    /// A page with no token or a wrong one adds nothing; the refusal is
    /// logged without the token; a client with the token goes on.
    @Test func aPageWithoutTheTokenIsRefused() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let answers = try RPCClient.run(["unauthorized", "127.0.0.1", "\(rpc.port)", rpc.secret], in: rpc.harness.directory)
            as? [String: Any] ?? [:]
        for name in ["no token", "wrong token", "token not first"] {
            let answer = answers[name] as? [Any] ?? []
            #expect(answer.first as? Int == 400, "\(name)")
            #expect(((answer.last as? [String: Any])?["error"] as? [String: Any])?["message"] as? String == "Unauthorized", "\(name)")
        }
        #expect(((answers["websocket wrong token"] as? [String: Any])?["error"] as? [String: Any])?["message"] as? String == "Unauthorized")
        // CORS as aria2 answers it for web UIs: the token is the gate.
        let preflight = text((answers["preflight"] as? [String: Any])?["headers"])
        #expect(preflight.contains("Access-Control-Allow-Origin: *"))
        #expect(try rpc.harness.events().allSatisfy { $0.type != "created" })
        let stderr = rpc.process?.stderr ?? ""
        #expect(stderr.contains("RPC call refused"))
        #expect(!stderr.contains("guess-"))
        #expect(try rpc.result("aria2.tellActive") as? [Any] != nil)
    }

    /// A page floods wrong tokens, over HTTP and a WebSocket: its guesses
    /// wait their turn, and every call with the secret meanwhile is answered.
    @Test func wrongTokensNeverCostTheSecretsHolderACall() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let seen = try RPCClient.run(["badtokens", rpc.url, rpc.secret], in: rpc.harness.directory) as? [String: Any] ?? [:]
        #expect(seen["answered"] as? Int == 20, "\(seen)")
        #expect(rpc.process?.stderr.contains("RPC call refused") == true)
    }

    /// A page holds more connections than the server keeps, each with a
    /// wrong-token POST waiting its turn (the bucket of guesses spent), and
    /// opens another whenever one is closed: a client with the secret that
    /// opens a connection for each call (curl, aria2p) is answered every time.
    @Test func waitingGuessesNeverLockTheSecretsHolderOut() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let seen = try RPCClient.run(["guessslots", "127.0.0.1", "\(rpc.port)", rpc.secret, "80"], in: rpc.harness.directory)
            as? [String: Any] ?? [:]
        #expect(seen["guesses waiting"] as? Int ?? 0 >= 64, "\(seen)")
        #expect(seen["answered"] as? Int == 20, "\(seen)")
    }

    /// A page's batch of 450 guesses waits 35 s for its turn: calls that need
    /// no secret (aria2p's `list_methods()` sends none), and one with it, are
    /// answered meanwhile, not behind the guesses; and the waiting batch's
    /// connection is not idle: it gets its answer, not a close at 30 s.
    @Test func callsThatNeedNoSecretDoNotWaitBehindGuesses() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let seen = try RPCClient.run(["guessqueue", "127.0.0.1", "\(rpc.port)", rpc.secret, "450"], in: rpc.harness.directory)
            as? [String: Any] ?? [:]
        for name in ["listMethods", "listNotifications", "listMethods with the secret"] {
            let call = seen[name] as? [String: Bool] ?? [:]
            #expect(call["answered"] == true && call["before the guesses"] == true, "\(name): \(seen)")
        }
        #expect(seen["guesses answered"] as? Int == 450, "\(seen)")
    }

    /// A page opens 64 WebSockets without the secret and holds them: it
    /// keeps at most 16 of them, a client with the secret is answered, and
    /// one that made a call with it stays connected.
    @Test func socketsWithoutTheSecretDoNotFillTheConnections() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let seen = try RPCClient.run(["wsslots", rpc.url, rpc.secret], in: rpc.harness.directory) as? [String: Any] ?? [:]
        #expect(seen["opened"] as? Int == 64, "\(seen)")
        #expect(seen["kept"] as? Int == 16, "\(seen)")
        #expect(seen["http status"] as? Int == 200, "\(seen)")
        #expect(seen["trusted answered"] as? Bool == true, "\(seen)")
    }

    /// DNS rebinding: a page whose name now points at 127.0.0.1 sends its
    /// name as `Host`. Refused over HTTP and as a WebSocket upgrade.
    @Test func aRebindingHostIsRefused() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let answers = try RPCClient.run(["rebinding", "127.0.0.1", "\(rpc.port)", rpc.secret], in: rpc.harness.directory)
            as? [String: Any] ?? [:]
        for (name, answer) in answers where name != "http localhost" {
            #expect((answer as? [String: Any])?["status"] as? String == "HTTP/1.1 403 Forbidden", "\(name)")
        }
        #expect((answers["http localhost"] as? [String: Any])?["status"] as? String == "HTTP/1.1 200 OK")
    }

    /// 10,000 calls in a fraction of a second: past the burst they are told
    /// to wait, and a download running meanwhile finishes.
    @Test func tenThousandCallsInASecondAreBounded() throws {
        let rpc = try RPCAgent()
        let server = try FaultServer(in: rpc.harness.directory)
        let data = try server.serve("f.bin", size: 300_000)
        try rpc.start()
        let gid = try rpc.result("aria2.addUri", [server.url("f.bin", "rate=400000")], ["out": "f.bin"]) as? String ?? ""
        let flood = try RPCClient.run(["flood", rpc.url, rpc.secret, "10000"], in: rpc.harness.directory) as? [String: Any] ?? [:]
        let ok = flood["ok"] as? Int ?? 0, refused = flood["refused"] as? Int ?? 0
        #expect(ok + refused == 10_000, "\(flood)")
        #expect(flood["other"] as? Int == 0, "\(flood)")
        #expect(refused > 0 && ok >= 1000, "\(flood)")
        #expect(rpc.wait(for: gid, ["complete"]))
        #expect(FileManager.default.contents(atPath: rpc.harness.downloads + "/f.bin") == data)
        #expect(rpc.process?.isRunning == true)
    }

    /// `aria2.changeUri` is `syncagent retarget`: a download whose link expired goes on from the
    /// one URI added, keeping its bytes; a second URI, or a finished download, is refused.
    @Test func changeUriRetargetsADownload() throws {
        let rpc = try RPCAgent()
        let server = try FaultServer(in: rpc.harness.directory)
        let data = try server.serve("f.bin", size: 2_000_000)
        try FileManager.default.createDirectory(atPath: server.root + "/fresh", withIntermediateDirectories: true)
        #expect(link(server.root + "/f.bin", server.root + "/fresh/f.bin") == 0)
        try rpc.start()
        let expiring = server.url("f.bin", "drop_after=500000&drop_times=1&fail_status=403&fail_from=2")
        let gid = try rpc.result("aria2.addUri", [expiring], ["out": "f.bin"]) as? String ?? ""
        #expect(rpc.wait(for: gid, ["error"], within: 30))
        let two = try rpc.call([["aria2.changeUri", gid, 1, [], [server.url("fresh/f.bin"), server.url("f.bin")]]]).first
        #expect((two?["error"] as? [String: Any])?["message"] as? String == "A download has one URL: give one URI to add, not 2")
        let answer = try rpc.result("aria2.changeUri", gid, 1, [expiring], [server.url("fresh/f.bin")]) as? [Int]
        #expect(answer == [1, 1])
        #expect(rpc.wait(for: gid, ["complete"], within: 30))
        #expect(FileManager.default.contents(atPath: rpc.harness.downloads + "/f.bin") == data)
        #expect(server.requests.filter { $0.path.hasPrefix("/fresh/") }.map(\.range) == ["bytes=500000-"])
        // The job's URL stays the download's identity, as `status` keeps it: `getUris` lists it.
        let uris = try rpc.result("aria2.getUris", gid) as? [[String: Any]]
        #expect(uris?.first?["uri"] as? String == expiring, "\(uris ?? [])")
        let late = try rpc.call([["aria2.changeUri", gid, 1, [], [server.url("f.bin")]]]).first
        #expect((late?["error"] as? [String: Any])?["message"] as? String
                    == "GID#\(gid) has ended: there is nothing to fetch from another URL", "\(late ?? [:])")
    }

    /// 100 MB: announced, it is refused before a byte is read; streamed, after
    /// 2 MiB; as a WebSocket message, the connection is closed. The agent
    /// holds no more memory for it.
    @Test func aHundredMegabyteRequestIsRefused() throws {
        let rpc = try RPCAgent()
        let agent = try rpc.start()
        let before = residentKiB(agent.pid)
        let answers = try RPCClient.run(["huge", "127.0.0.1", "\(rpc.port)", rpc.secret], in: rpc.harness.directory) as? [String: Any] ?? [:]
        #expect((answers["announced"] as? [String: Any])?["status"] as? String == "HTTP/1.1 413 Payload Too Large")
        #expect((answers["streamed"] as? [String: Any])?["status"] as? String == "HTTP/1.1 413 Payload Too Large")
        #expect(((answers["streamed"] as? [String: Any])?["sent before refused"] as? Int ?? 0) < 100 << 20)
        #expect((answers["websocket"] as? [String: Any])?["closed"] != nil, "\(answers["websocket"] ?? "")")
        #expect(residentKiB(agent.pid) < before + 32 * 1024, "RSS \(before) KiB before, \(residentKiB(agent.pid)) KiB after")
        #expect(try rpc.result("aria2.getGlobalStat") as? [String: Any] != nil)
    }

    /// A client that sends pings and never reads the pongs (no token
    /// needed): the server stops reading it once its answers back up, so
    /// what the agent holds for it stays bounded, and others are answered.
    @Test func aClientThatDoesNotReadIsNotBufferedFor() throws {
        let rpc = try RPCAgent()
        let agent = try rpc.start()
        #expect(try rpc.result("aria2.getVersion") as? [String: Any] != nil)
        let before = residentKiB(agent.pid)
        let flood = try RPCClient.run(["pingflood", "127.0.0.1", "\(rpc.port)", "150000"], in: rpc.harness.directory) as? [String: Any] ?? [:]
        #expect(flood["upgrade"] as? String == "HTTP/1.1 101 Switching Protocols", "\(flood)")
        let after = residentKiB(agent.pid)
        #expect(after < before + 24 * 1024, "RSS \(before) KiB before \(flood["sent"] ?? 0) pings, \(after) KiB after")
        #expect(try rpc.result("aria2.getVersion") as? [String: Any] != nil)
    }

    /// One multicall of 960 full `tellWaiting(0, 1000)` over 21 waiting
    /// downloads (within the burst of calls a second) would keep the
    /// agent's loop describing 20,160 downloads, and one of 1,000
    /// `getOption`s of a job with 50 KB of headers would write 50 MB: a
    /// request's calls that read downloads answer about 1 MiB in all, and
    /// the calls past that are refused, each saying why.
    @Test func aHugeMulticallIsCutAtItsBudget() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let token = "token:\(rpc.secret)"
        _ = try multicall(rpc, (0..<20).map { ["methodName": "aria2.addUri", "params": [token, ["http://127.0.0.1:9/f\($0).bin"], ["pause": "true"]]] })
        let headers = (0..<450).map { "X-Header-\($0): " + String(repeating: "v", count: 100) }
        let big = try rpc.result("aria2.addUri", ["http://127.0.0.1:9/big.bin"], ["pause": "true", "header": headers]) as? String ?? ""
        let budget = 1 << 20, oneList = 64 << 10
        // Each list of 21 downloads is about 13 KB, each getOption of the big one about 50 KB: both
        // cross the budget well before their last call, and all the calls together stay within
        // the rate's burst of 1,000, whatever the time between them.
        for (name, call, count) in [("tellWaiting", ["methodName": "aria2.tellWaiting", "params": [token, 0, 1000]] as [String: Any], 900),
                                    ("getOption", ["methodName": "aria2.getOption", "params": [token, big]], 60)] {
            let answer = try multicall(rpc, Array(repeating: call, count: count))
            let answers = answer["result"] as? [Any] ?? []
            #expect(answers.count == count, "\(name): \(answer["error"] ?? "")")
            let answered = answers.filter { $0 is [Any] }
            let refused = answers.compactMap { ($0 as? [String: Any])?["message"] as? String }
            #expect(!answered.isEmpty && answered.count + refused.count == count, "\(name)")
            #expect(!refused.isEmpty && refused.allSatisfy { $0.contains("MiB already") }, "\(name): \(refused.first ?? "")")
            let size = try JSONSerialization.data(withJSONObject: answered).count
            #expect(size >= budget - oneList && size <= budget + oneList, "\(name): \(size) bytes answered")
        }
    }

    /// The polls of the two web UIs named in docs/rpc.md, each in its own
    /// shape, over 1 active, 1,050 waiting and 1,050 stopped downloads: every
    /// list answered whole (webui-aria2 asks for every key of each download).
    @Test func webUIsPollsOfTwoThousandDownloadsAreAnswered() throws {
        let rpc = try RPCAgent()
        let server = try FaultServer(in: rpc.harness.directory)
        _ = try server.serve("slow.bin", size: 10_000_000)
        try rpc.start()
        let token = "token:\(rpc.secret)"
        let active = try rpc.result("aria2.addUri", [server.url("slow.bin", "rate=20000")], ["out": "slow.bin"]) as? String ?? ""
        #expect(rpc.wait(for: active, ["active"]))
        var gids: [String] = []
        for batch in 0..<7 {
            let added = try multicall(rpc, (0..<300).map {
                ["methodName": "aria2.addUri", "params": [token, ["http://127.0.0.1:9/b\(batch)-\($0).bin"], ["pause": "true"]]]
            })
            gids += (added["result"] as? [Any] ?? []).compactMap { ($0 as? [Any])?.first as? String }
        }
        #expect(gids.count == 2100)
        for batch in stride(from: 0, to: 1050, by: 350) {
            _ = try multicall(rpc, gids[batch..<batch + 350].map { ["methodName": "aria2.remove", "params": [token, $0]] })
        }
        #expect(eventually(within: 30) {
            let stat = (try? rpc.result("aria2.getGlobalStat")) as? [String: Any] ?? [:]
            return stat["numStopped"] as? String == "1050" && stat["numWaiting"] as? String == "1050"
        })
        let webui = try multicall(rpc, [["methodName": "aria2.getGlobalStat", "params": [token]],
                                        ["methodName": "aria2.tellActive", "params": [token]],
                                        ["methodName": "aria2.tellWaiting", "params": [token, 0, 1000]],
                                        ["methodName": "aria2.tellStopped", "params": [token, 0, 1000]]])
        let webuiLists = (webui["result"] as? [Any] ?? []).dropFirst().map { (($0 as? [Any])?.first as? [Any])?.count ?? -1 }
        #expect(webuiLists == [1, 1000, 1000], "\(webui["result"].map { "\($0)".prefix(300) } ?? "")")
        let keys = ["gid", "totalLength", "completedLength", "uploadSpeed", "downloadSpeed", "connections", "numSeeders", "seeder",
                    "status", "errorCode", "verifiedLength", "verifyIntegrityPending", "files", "bittorrent", "infoHash"]
        let ariaNg = try multicall(rpc, [["methodName": "aria2.tellActive", "params": [token, keys]],
                                         ["methodName": "aria2.tellWaiting", "params": [token, 0, 1000, keys]],
                                         ["methodName": "aria2.tellStopped", "params": [token, -1, 1000, keys]]])
        let ariaNgLists = (ariaNg["result"] as? [Any] ?? []).map { (($0 as? [Any])?.first as? [Any])?.count ?? -1 }
        #expect(ariaNgLists == [1, 1000, 1000], "\(ariaNg["result"].map { "\($0)".prefix(300) } ?? "")")
    }

    /// One `system.multicall`, sent again after a pause while the agent's
    /// rate of calls (500 a second past a burst of 1,000) refuses it, as a
    /// client adding thousands of downloads must.
    func multicall(_ rpc: RPCAgent, _ calls: [[String: Any]]) throws -> [String: Any] {
        let body = try JSONSerialization.data(withJSONObject: ["jsonrpc": "2.0", "id": 1, "method": "system.multicall", "params": [calls]])
        for _ in 0..<20 {
            let sent = try RPCClient.run(["request", rpc.url, String(decoding: body, as: UTF8.self)], in: rpc.harness.directory)
            let answer = (sent as? [String: Any])?["answer"] as? [String: Any] ?? [:]
            let refusal = (answer["error"] as? [String: Any])?["message"] as? String ?? ""
            guard refusal.hasPrefix("Too many requests") else { return answer }
            Thread.sleep(forTimeInterval: 1)
        }
        throw TestFailure("the agent refused a multicall of \(calls.count) calls 20 times for its rate")
    }

    /// Bodies no client sends: each answered as aria2 answers a bad request,
    /// nothing recorded, the agent unharmed.
    @Test func malformedRequestsAreAnsweredAndChangeNothing() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let answers = try RPCClient.run(["malformed", "127.0.0.1", "\(rpc.port)", rpc.secret], in: rpc.harness.directory)
            as? [String: Any] ?? [:]
        func code(_ name: String) -> Int? { ((answers[name] as? [String: Any])?["error"] as? [String: Any])?["code"] as? Int }
        for name in ["not JSON", "empty", "NUL bytes", "invalid UTF-8", "a lone surrogate", "nested 100000 deep", "number too big"] {
            #expect(code(name) == -32700, "\(name): \(answers[name] ?? "")")
        }
        #expect(code("a string") == -32600)
        #expect(code("params an object") == -32602)
        for name in ["gid an object", "10,000 calls in one batch", "addUri of a file URL", "addUri out of download_dir", "addUri header with a line break",
                     "addUri with 100,000 headers", "addUri with a 1.5 MB header"] {
            #expect(code(name) == 1, "\(name): \(answers[name] ?? "")")
        }
        for name in ["addUri with 100,000 headers", "addUri with a 1.5 MB header"] {
            let said = (((answers[name] as? [String: Any])?["error"] as? [String: Any])?["message"] as? String) ?? ""
            #expect(said.contains("over the 64 KiB a job may have"), "\(name): \(said)")
        }
        #expect((answers["offset huge"] as? [String: Any])?["status"] as? Int == 200)
        #expect(try rpc.harness.events().allSatisfy { $0.type != "created" })
        #expect(try rpc.result("aria2.getVersion") as? [String: Any] != nil)
    }

    /// WebSocket frames no client sends: each closes its own connection (a
    /// malformed JSON text is answered and the connection kept), and the
    /// agent answers the next client. A message sent in fragments is one
    /// message, answered; a reserved bit no extension was agreed for closes.
    @Test func malformedWebSocketFramesCloseOnlyTheirConnection() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let answers = try RPCClient.run(["frames", "127.0.0.1", "\(rpc.port)"], in: rpc.harness.directory) as? [String: [String: Any]] ?? [:]
        #expect(answers.count == 11)
        for (name, answer) in answers {
            #expect(answer["upgrade"] as? String == "HTTP/1.1 101 Switching Protocols", "\(name)")
            let answered = name == "malformed JSON text" || name == "invalid UTF-8 text" || name == "fragmented text"
            #expect(answer["closed by server"] as? Bool == !answered, "\(name): \(answer)")
            let said = text(answer["answer"])
            if answered { #expect(said.contains(name == "fragmented text" ? "aria2.addUri" : "Parse error"), "\(name): \(said)") }
        }
        #expect(try rpc.result("aria2.getVersion") as? [String: Any] != nil)
        #expect(rpc.process?.isRunning == true)
    }

    /// 200 connections held open: 64 are kept, the rest closed; once they go, a client is answered.
    @Test func connectionsAreBounded() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let held = try RPCClient.run(["connections", "127.0.0.1", "\(rpc.port)", "200"], in: rpc.harness.directory) as? [String: Int] ?? [:]
        #expect(held["opened"] == 200 && held["kept"] == 64, "\(held)")
        #expect(eventually(within: 10) { (try? rpc.result("aria2.getVersion")) as? [String: Any] != nil })
    }

    /// Slowloris: every connection sends its request's head a line a
    /// second and never ends it, so the idle close never comes. A request
    /// has a deadline from its first byte: each is answered `408 Request
    /// Timeout` and closed, and a client is answered again.
    @Test func aRequestSentSlowlyDoesNotHoldItsConnection() throws {
        let rpc = try RPCAgent()
        try rpc.start()
        let held = try RPCClient.run(["slowloris", "127.0.0.1", "\(rpc.port)", "\(64)"], in: rpc.harness.directory) as? [String: Int] ?? [:]
        #expect(held["opened"] == 64 && held["closed by server"] == 64 && held["answered 408"] == 64, "\(held)")
        #expect(eventually(within: 10) { (try? rpc.result("aria2.getVersion")) as? [String: Any] != nil })
    }

    // MARK: - Settings

    /// No rpc_secret: the agent makes one (0600) in its state dir, says
    /// where, and reads the same at the next start; it is the token.
    @Test func aSecretIsMadeOnceInTheStateDir() throws {
        let rpc = try RPCAgent(secret: nil)
        try rpc.start()
        let path = rpc.harness.stateDir + "/rpc-secret"
        let secret = (try String(contentsOfFile: path, encoding: .utf8)).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(secret.count == 64)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600)
        let said = text(rpc.process?.stderr)
        #expect(said.contains(path))
        #expect(!said.contains(secret))
        #expect(try rpc.call([["aria2.getVersion"]], secret: secret).first?["result"] != nil)
        rpc.kill9()
        try rpc.start()
        #expect(try rpc.call([["aria2.getVersion"]], secret: secret).first?["result"] != nil)
    }

    /// Without `rpc = true` nothing listens.
    @Test func theRPCIsOffUnlessAskedFor() throws {
        let port = freePort()
        let harness = try AgentHarness(config: "rpc_listen = \"127.0.0.1:\(port)\"\n")
        let agent = try harness.startAgent()
        #expect(harness.pastStartUp(agent))
        #expect(!canConnect(port: port))
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// The syncagent option reaches every job key; changeGlobalOption is
    /// recorded, as a reload of the config is.
    @Test func jobKeysAndGlobalOptionsGoThroughTheLog() throws {
        let rpc = try RPCAgent()
        let server = try FaultServer(in: rpc.harness.directory)
        let data = try server.serve("f.bin", size: 50_000)
        try rpc.start()
        let gid = try rpc.result("aria2.addUri", [server.url("f.bin")],
                                 ["syncagent": ["sha256": sha256Hex(data), "batch": "rpc-batch", "priority": 3], "dir": "sub"]) as? String ?? ""
        #expect(rpc.wait(for: gid, ["complete"]))
        #expect(FileManager.default.contents(atPath: rpc.harness.downloads + "/sub/f.bin") == data)
        #expect(try rpc.result("aria2.changeGlobalOption", ["max-concurrent-downloads": "2"]) as? String == "OK")
        let global = try rpc.result("aria2.getGlobalOption") as? [String: Any]
        #expect(global?["max-concurrent-downloads"] as? String == "2")
        let events = try rpc.harness.events()
        let created = events.first { $0.type == "created" }?.data ?? [:]
        #expect(created["batch"] as? String == "rpc-batch" && created["priority"] as? Int == 3 && created["sha256"] as? String == sha256Hex(data))
        #expect(events.contains { $0.type == "config_reloaded" && ($0.data["applied"] as? [String]) == ["max_active"] })
        let bad = try rpc.call([["aria2.changeGlobalOption", ["log": "/tmp/x"]]]).first?["error"] as? [String: Any]
        let refusal = text(bad?["message"])
        #expect(refusal.contains("cannot be changed"))
    }

    /// An `.m3u8` URL with the syncagent option's `kind = "hls"` is a video:
    /// one download (its segments are its own business), published whole.
    @Test func anHLSPlaylistIsOneDownloadThroughTheSyncagentOption() throws {
        let rpc = try RPCAgent()
        let server = try FaultServer(in: rpc.harness.directory)
        try FileManager.default.createDirectory(atPath: server.root + "/talk", withIntermediateDirectories: true)
        let segments = [try server.serve("talk/seg0.ts", size: 40_000, seed: 1), try server.serve("talk/seg1.ts", size: 30_000, seed: 2)]
        try "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-PLAYLIST-TYPE:VOD\n#EXTINF:2.0,\nseg0.ts\n#EXTINF:2.0,\nseg1.ts\n#EXT-X-ENDLIST\n"
            .write(toFile: server.root + "/talk/index.m3u8", atomically: true, encoding: .utf8)
        try rpc.start()
        let gid = try rpc.result("aria2.addUri", [server.url("talk/index.m3u8")], ["syncagent": ["kind": "hls"]]) as? String ?? ""
        #expect(rpc.wait(for: gid, ["complete"]))
        for (index, segment) in segments.enumerated() {
            #expect(FileManager.default.contents(atPath: rpc.harness.downloads + "/talk/\(index).ts") == segment)
        }
        let stopped = try rpc.result("aria2.tellStopped", 0, 10, ["gid", "status"]) as? [[String: String]]
        #expect(stopped == [["gid": gid, "status": "complete"]])
    }

    // MARK: - Helpers

    /// A WebSocket client listening for one download's notifications from now on.
    final class Listener: @unchecked Sendable {
        private let child: ChildProcess

        init(rpc: RPCAgent, gid: String) {
            let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            child = try! ChildProcess(here.deletingLastPathComponent().path + "/.venv/bin/python",
                                      [here.path + "/TestSupport/rpc_client.py", "listen", rpc.url, gid],
                                      environment: ["HOME": rpc.harness.directory.path], outputIn: rpc.harness.directory.path)
            _ = eventually(within: 20) { child.stderr.contains("connected") }
        }

        /// The notification methods heard, once it heard of the end.
        func notifications() -> [String] {
            _ = child.wait(seconds: 60)
            let pairs = (try? JSONSerialization.jsonObject(with: Data(child.stdout.utf8))) as? [[String]] ?? []
            return pairs.map { $0[0] }
        }
    }

    /// A JSON value as text, "" when it is none.
    func text(_ value: Any?) -> String { value as? String ?? "" }

    func residentKiB(_ pid: Int32) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
}

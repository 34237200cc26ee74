import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Resumable uploads (issue 11, SPEC §11) against real servers: aiohttp-tus,
/// a third-party tus server, and the project's fault server speaking tus
/// and the IETF draft with drops, 503s, stalls, expiry and lies.
@Suite("Resumable uploads: tus and the IETF draft", .serialized)
struct ResumableUploadTests {
    /// A file of `size` random bytes in the harness's folder.
    func bodyFile(_ harness: AgentHarness, size: Int, seed: UInt64 = 5) throws -> (path: String, data: Data) {
        var generator = SplitMix64(seed: seed &+ UInt64(size))
        var data = Data(count: size)
        data.withUnsafeMutableBytes { buffer in
            let words = buffer.bindMemory(to: UInt64.self)
            for index in words.indices { words[index] = generator.next() }
            for index in (words.count * 8)..<size { buffer[index] = UInt8(truncatingIfNeeded: generator.next()) }
        }
        let path = harness.directory.file("body-\(size).bin")
        try data.write(to: URL(fileURLWithPath: path))
        return (path, data)
    }

    func job(_ url: String, body: String, id: String = "u", protocol name: String = "tus", extra: String = "") -> String {
        "url = \"\(url)\"\nkind = \"upload\"\nid = \"\(id)\"\nbody_file = \"\(body)\"\nprotocol = \"\(name)\"\n\(extra)\n"
    }

    /// The server's complete upload of `size` bytes (a partial one of a parallel upload excluded).
    /// A final concatenation is answered before it is assembled: its line may come a moment later.
    func completed(_ server: FaultServer, size: Int) -> [String: Any]? {
        let find = { server.received.last { $0["size"] as? Int == size && $0["partial"] == nil } }
        _ = eventually(within: 20) { find() != nil }
        return find()
    }

    /// A server written inline in Python, for an answer the fault server has no knob for; listening on `port` once returned.
    func scriptedServer(_ script: String, port: Int, name: String, in harness: AgentHarness,
                        sourceLocation: SourceLocation = #_sourceLocation) throws -> ChildProcess {
        let server = try ChildProcess("/usr/bin/python3", ["-c", script], environment: [:], outputIn: harness.directory.path, name: name)
        #expect(eventually(within: 10) { canConnect(port: port) }, sourceLocation: sourceLocation)
        return server
    }

    // MARK: - A real tus server

    /// The test: a 200 MiB upload killed with SIGKILL three times
    /// mid-way ends byte-identical on a real tus server, with at most one
    /// chunk sent again per kill.
    @Test func aRealTusServerGetsTheFileWholeAfterThreeKills() throws {
        let harness = try AgentHarness()
        let tus = try TusServer(in: harness.directory)
        let size = 200 << 20, chunk = 8 << 20
        let (path, data) = try bodyFile(harness, size: size)
        // 40 MB/s: about 5 s in all, long enough to kill three times.
        try harness.drop("u.job", job(tus.url, body: path, extra: "chunk_size = \"8M\"\nmax_speed = \"40M\""))
        var kills = 0
        for _ in 0..<3 {
            let agent = try harness.startAgent()
            let before = try harness.events().filter { $0.type == "progressed" }.count
            // Killed once this run has had a chunk confirmed, in the middle of the next one.
            let confirmed = eventually(within: 30) { ((try? harness.events()) ?? []).filter { $0.type == "progressed" }.count > before }
            // (An instant, not an event: 0.1 s into the next chunk, which nothing logs.)
            usleep(100_000)
            agent.signal(SIGKILL)
            _ = agent.wait(seconds: 10)
            guard confirmed else { break }
            kills += 1
            let plan = try harness.run(["replay"]).stdout
            #expect(plan.contains("plan: ask http://127.0.0.1:\(tus.port)/uploads/") && plan.contains("how far the upload got"), "\(plan)")
        }
        #expect(kills == 3)
        try harness.runUntilIdle()
        #expect(FileManager.default.contents(atPath: tus.uploadDir + "/" + (path as NSString).lastPathComponent) == data)
        let patches = tus.requests.filter { $0.method == "PATCH" }
        let sent = patches.map(\.bodyBytes).reduce(0, +)
        #expect(sent <= size + kills * chunk, "sent \(sent) for \(size) over \(kills) kills: \(patches)")
        // One upload, created once, its URL logged before its first byte.
        #expect(tus.requests.filter { $0.method == "POST" }.count == 1)
        let events = try harness.events()
        let created = try #require(events.firstIndex { $0.type == "upload_created" })
        #expect(events.firstIndex { $0.type == "progressed" }.map { $0 > created } == true)
        #expect(events.filter { $0.type == "resumed" }.count == kills)
        #expect(try harness.run(["replay", "--verify"]).status == 0)
    }

    // MARK: - tus, from the fault server

    @Test func aDroppedChunkIsResumedFromTheServersOffset() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 6 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/", "drop_after=1500000&drop_times=2"), body: path, extra: "chunk_size = \"2M\""))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        // The server offers checksums, so a chunk cut short is dropped whole: each drop costs one
        // chunk at most, and curl never sends a chunk again by itself.
        let patches = server.requests.filter { $0.method == "PATCH" }
        #expect(patches.map(\.bytesSent).reduce(0, +) <= size + 2 * (2 << 20), "\(patches)")
        #expect(patches.filter { $0.status == 0 }.count == 2, "\(patches)")
        #expect(server.requests.filter { $0.method == "HEAD" }.count == 2)
        // A connection that died mid-chunk is followed by a HEAD in the same attempt: no retry spent.
        let events = try harness.events()
        #expect(events.filter { $0.type == "retrying" }.isEmpty)
        #expect(try harness.run(["status", "--task", "u"]).stdout.contains("protocol:    tus, chunks of 2"))
    }

    @Test func withoutChecksumsTheBytesBeforeADropAreKept() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 4 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/", "drop_after=1500000&extensions=creation,termination"), body: path,
                                      extra: "chunk_size = \"2M\""))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        // Not one byte twice: the HEAD after the drop says 1,500,000 and the next chunk starts there.
        #expect(server.requests.filter { $0.method == "PATCH" }.map(\.bytesSent).reduce(0, +) == size)
        let progress = try harness.events().filter { $0.type == "progressed" }.compactMap { $0.data["bytes"] as? Int }
        #expect(progress.first == 1_500_000, "\(progress)")
    }

    @Test func anExpiredUploadIsCreatedAgainAndSaysWhy() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 3 << 20
        let (path, data) = try bodyFile(harness, size: size)
        // After two chunks the server forgets the upload: 404 from then on.
        try harness.drop("u.job", job(server.url("tus/", "expire_after=2&only_upload=1"), body: path, extra: "chunk_size = \"1M\""))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        let events = try harness.events()
        let creations = events.filter { $0.type == "upload_created" }
        #expect(creations.count == 2)
        #expect((creations.last?.data["reason"] as? String)?.contains("no longer knows the upload (404") == true, "\(creations)")
        #expect(try harness.run(["status", "--task", "u"]).stdout.contains("restarted:   the server no longer knows the upload"))
    }

    /// A server that loses every upload after two chunks: bounded, never the
    /// file from byte 0 forever.
    @Test func aServerThatKeepsLosingUploadsIsGivenUpOn() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let (path, _) = try bodyFile(harness, size: 5 << 20)
        try harness.drop("u.job", job(server.url("tus/", "expire_after=2"), body: path, extra: "chunk_size = \"1M\"\nretries = 1"))
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        let task = try harness.tasksByID()["u"]
        #expect((task?["error"] as? String)?.contains("uploads lost in one attempt") == true, "\(task ?? [:])")
        // Two attempts of at most four uploads each.
        #expect(server.requests.filter { $0.method == "POST" }.count <= 8)
    }

    /// Progress is logged as a download's is, at most about once per interval,
    /// however small the chunks.
    @Test func smallChunksDoNotFloodTheLog() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 1 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/", "extensions=creation"), body: path, extra: "chunk_size = \"1K\""))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        #expect(server.requests.filter { $0.method == "PATCH" }.count == 1024)
        let progress = try harness.events().filter { $0.type == "progressed" }
        #expect(progress.count <= 10 && progress.last?.data["bytes"] as? Int == size, "\(progress.count) progress events")
    }

    /// A server that answers with informational responses and never a final
    /// one (a flood of 104s) ends the attempt instead of holding it forever.
    @Test func anEndlessStreamOfInformationalAnswersEndsTheAttempt() throws {
        let harness = try AgentHarness()
        let port = freePort()
        let script = """
        import socket, time
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", \(port)))
        listener.listen(4)
        for _ in range(4):
            connection, _ = listener.accept()
            connection.recv(65536)
            try:
                for _ in range(3000):
                    connection.sendall(b"HTTP/1.1 104 Upload Resumption Supported\\r\\nLocation: /f/1\\r\\n\\r\\n")
                    time.sleep(0.005)
            except OSError:
                pass
            connection.close()
        """
        let server = try scriptedServer(script, port: port, name: "flood", in: harness)
        defer { server.signal(SIGKILL) }
        let (path, _) = try bodyFile(harness, size: 1000)
        try harness.drop("u.job", job("http://127.0.0.1:\(port)/up/", body: path, protocol: "ietf", extra: "retries = 0"))
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 4)
        let task = try harness.tasksByID()["u"]
        #expect((task?["error"] as? String)?.contains("informational answers and no final one") == true, "\(task ?? [:])")
    }

    @Test func aDamagedChunkIsSentAgain() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 3 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/", "corrupt_times=2"), body: path, extra: "chunk_size = \"1M\""))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        let statuses = server.requests.filter { $0.method == "PATCH" }.map(\.status)
        #expect(statuses == [460, 460, 204, 204, 204], "\(statuses)")
        // A mismatch is answered by sending the chunk again, not by a retry of the task.
        #expect(try harness.events().filter { $0.type == "retrying" || $0.type == "failed" }.isEmpty)
    }

    @Test func aServerThatLiesAboutItsOffsetGetsANewUpload() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 2 << 20
        let (path, data) = try bodyFile(harness, size: size)
        // A drop, then a HEAD claiming more than the file holds: never believed, never a crash.
        try harness.drop("u.job", job(server.url("tus/", "drop_after=300000&offset_lies=1&only_upload=1"), body: path))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        let reasons = try harness.events().filter { $0.type == "upload_created" }.compactMap { $0.data["reason"] as? String }
        #expect(reasons.contains { $0.contains("claims") }, "\(reasons)")
    }

    /// A seventh adversary: after a failed chunk, the retry's HEAD claimed 3,000,000 bytes of
    /// which the server held none, and the upload was `finished`. A claim past what was sent
    /// to it (kept across attempts) is refused as before within one attempt: a new upload.
    @Test(arguments: ["tus", "ietf"])
    func aClaimPastWhatWasSentIsNeverBelievedOnARetry(_ name: String) throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 4 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("\(name)/", "fail_status=500&fail_times=1&head_offset=3000000&only_upload=1"),
                                      body: path, protocol: name, extra: "chunk_size = \"1M\""))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        let reasons = try harness.events().filter { $0.type == "upload_created" }.compactMap { $0.data["reason"] as? String }
        #expect(reasons.contains { $0.contains("claims 3000000 bytes") }, "\(reasons)")
    }

    /// After a kill -9 the log bounds the claim: its offset (every chunk is logged), a chunk
    /// confirmed but not committed, and one in flight. (An eighth adversary: a fixed 4 MiB chunk
    /// cut at 3 MB, then a claim of 15,000,000, was believed when the allowance was 72 MiB.)
    @Test(arguments: [("", 1000, 80 << 20, 80_000_000), ("chunk_size = \"4M\"", 3_000_000, 16 << 20, 15_000_000)])
    func aClaimPastWhatTheLogAllowsIsNeverBelievedAfterAKill(_ chunk: String, _ stallAfter: Int, _ size: Int, _ claim: Int) throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/", "stall_after=\(stallAfter)&stall=60&head_offset=\(claim)&only_upload=1"),
                                      body: path, extra: chunk))
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { server.requests.contains { $0.method == "PATCH" && $0.status == 0 } }, "\(server.requests)")
        agent.signal(SIGKILL)
        _ = agent.wait(seconds: 10)
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        let reasons = try harness.events().filter { $0.type == "upload_created" }.compactMap { $0.data["reason"] as? String }
        #expect(reasons.contains { $0.contains("claims \(claim) bytes") }, "\(reasons)")
    }

    @Test func cancelAsksTheServerToDeleteTheUpload() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let (path, _) = try bodyFile(harness, size: 4 << 20)
        try harness.drop("u.job", job(server.url("tus/", "stall_after=1000&stall=20"), body: path))
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("upload_created", within: 20))
        #expect(try harness.run(["cancel", "u"]).status == 0)
        #expect(eventually(within: 10) { server.requests.contains { $0.method == "DELETE" && $0.status == 204 } }, "\(server.requests)")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        #expect(try harness.tasksByID()["u"]?["state"] as? String == "cancelled")
    }

    @Test func aStalledChunkIsCutAndResumed() throws {
        let harness = try AgentHarness(config: "idle_timeout = 2")
        let server = try FaultServer(in: harness.directory)
        let size = 2 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/", "stall_after=500000&stall=30&only_upload=1"), body: path))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        let retry = try harness.events().first { $0.type == "retrying" }
        #expect((retry?.data["reason"] as? String)?.contains("idle_timeout") == true)
    }

    /// A file modified between two chunks is never sent as a mix: a whole-file
    /// upload starts a new upload of the file as it is now, a part fails.
    @Test func aFileModifiedMidwayIsNeverUploadedAsAMix() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 3 << 20
        let (path, _) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/", "stall_after=1000&stall=3&only_upload=1"), body: path,
                                      extra: "chunk_size = \"1M\""))
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(eventually(within: 20) { server.requests.contains { $0.method == "PATCH" } })
        // While the first chunk stalls: new contents, same size.
        let (_, replacement) = try bodyFile(harness, size: size, seed: 99)
        try replacement.write(to: URL(fileURLWithPath: path))
        #expect(agent.wait(seconds: 60) == 0)
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(replacement))
        let creations = try harness.events().filter { $0.type == "upload_created" }
        #expect(creations.count == 2 && (creations.last?.data["reason"] as? String)?.contains("was modified") == true, "\(creations)")
    }

    /// A file that grows during the upload: the server never gets the first
    /// bytes of the new file under the old length.
    @Test func aFileThatGrowsMidwayIsUploadedAsItIsNow() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let (path, _) = try bodyFile(harness, size: 2 << 20)
        // The first PATCH stalls ten seconds: time to grow the file however loaded the machine.
        try harness.drop("u.job", job(server.url("tus/", "stall_after=1000&stall=10&only_upload=1"), body: path,
                                      extra: "chunk_size = \"1M\""))
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(eventually(within: 20) { server.requests.contains { $0.method == "PATCH" } })
        let grown = Data((0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try grown.write(to: URL(fileURLWithPath: path))
        #expect(agent.wait(seconds: 60) == 0)
        #expect(completed(server, size: 3 << 20)?["sha256"] as? String == sha256Hex(grown))
        #expect(!server.received.contains { $0["size"] as? Int == 2 << 20 && $0["partial"] == nil })
    }

    // MARK: - Parallel parts (tus concatenation)

    @Test func partsGoSideBySideAndAFailingOneIsRetriedAlone() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 8 << 20 + 12_345
        let (path, data) = try bodyFile(harness, size: size)
        // The second part's first two chunks are answered 503.
        try harness.drop("u.job", job(server.url("tus/", "fail_status=503&fail_times=2&only_upload=2"), body: path,
                                      extra: "parallel = 4\nchunk_size = \"1M\""))
        try harness.runUntilIdle()
        let final = try #require(completed(server, size: size))
        #expect(final["sha256"] as? String == sha256Hex(data))
        #expect((final["concat"] as? [String])?.count == 4)
        #expect((final["metadata"] as? [String: String])?["filename"] == (path as NSString).lastPathComponent)
        let tasks = try harness.tasksByID()
        #expect(tasks["u"]?["state"] as? String == "finished")
        for part in 1...4 { #expect(tasks["u.part\(part)"]?["state"] as? String == "finished") }
        let events = try harness.events()
        // The 503s go to one part (whichever was created second); only it retries.
        let retried = events.filter { $0.type == "retrying" }.map(\.task)
        #expect(retried.count == 2 && Set(retried).count == 1 && retried.first??.hasPrefix("u.part") == true, "\(retried)")
        // Bytes the server confirmed are never sent again: each part sends its bytes once,
        // the failing one twice more for what the 503s refused.
        let bodies = server.requests.filter { $0.method == "PATCH" }.map(\.bytesSent).reduce(0, +)
        #expect(bodies <= size + 2 * (1 << 20), "\(bodies)")
        let status = try harness.run(["status", "--task", "u"]).stdout
        #expect(status.contains("parts:       4 of 4 done") && status.contains("4 parts at once"), "\(status)")
        #expect(try harness.run(["replay", "--verify"]).status == 0)
    }

    /// Killed once the final upload exists and before `finished`: the restart
    /// asks that upload (HEAD) and finishes; it never concatenates twice.
    @Test func aCrashAfterConcatenatingNeverConcatenatesTwice() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 1 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/"), body: path, extra: "parallel = 2"))
        // The first upload_created to crash at is the parts'; the parent's is the last.
        var crashes = 0
        while crashes < 4, try harness.tasksByID()["u"]?["state"] as? String != "finished" {
            harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = "upload-created"
            let agent = try harness.startAgent(exitWhenIdle: true)
            _ = agent.wait(seconds: 30)
            crashes += 1
        }
        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        try harness.runUntilIdle()
        #expect(try harness.tasksByID()["u"]?["state"] as? String == "finished")
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        let finals = server.received.filter { $0["concat"] != nil }
        #expect(finals.count == 1, "\(finals)")
        #expect(server.requests.contains { $0.method == "HEAD" })
    }

    /// Cancelled while the agent was down, after the final upload was made:
    /// that upload is deleted too, not only the parts.
    @Test func cancelAfterConcatenatingDeletesTheFinalUpload() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let (path, _) = try bodyFile(harness, size: 1 << 20)
        try harness.drop("u.job", job(server.url("tus/"), body: path, extra: "parallel = 2"))
        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = "upload-created"
        // Each start dies at its first new upload: two parts, then the final one.
        for _ in 0..<3 { _ = try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) }
        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        let final = try harness.events().last { $0.task == "u" && $0.type == "upload_created" }?.data["url"] as? String
        let finalPath = try #require(final.map { URL(string: $0)!.path })
        try harness.drop("c.job", "action = \"cancel\"\ntask = \"u\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        #expect(try harness.tasksByID()["u"]?["state"] as? String == "cancelled")
        #expect(server.requests.contains { $0.method == "DELETE" && $0.path == finalPath }, "\(server.requests)")
    }

    /// A server that says it holds bytes it was never sent is not believed:
    /// the upload is never reported finished.
    @Test func aServerClaimingBytesItNeverGotIsNotBelieved() throws {
        let harness = try AgentHarness()
        let port = freePort()
        let size = 3 << 20
        let script = """
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        SIZE = \(size)
        class Liar(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *args): pass
            def reply(self, status, headers):
                self.send_response(status)
                for name, value in headers + [("Tus-Resumable", "1.0.0"), ("Content-Length", "0")]:
                    self.send_header(name, value)
                self.end_headers()
            def do_OPTIONS(self): self.reply(204, [("Tus-Version", "1.0.0"), ("Tus-Extension", "creation")])
            def do_POST(self): self.reply(201, [("Location", "/f/1")])
            def do_HEAD(self): self.reply(200, [("Upload-Offset", str(SIZE)), ("Upload-Length", str(SIZE))])
            def do_PATCH(self):
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.reply(204, [("Upload-Offset", str(SIZE))])
        ThreadingHTTPServer(("127.0.0.1", \(port)), Liar).serve_forever()
        """
        let server = try scriptedServer(script, port: port, name: "liar", in: harness)
        defer { server.signal(SIGKILL) }
        let (path, _) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job("http://127.0.0.1:\(port)/up/", body: path, extra: "retries = 0"))
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 4)
        let task = try harness.tasksByID()["u"]
        #expect(task?["state"] as? String == "failed")
        #expect((task?["error"] as? String)?.contains("offset did not follow the bytes sent") == true, "\(task ?? [:])")
        let events = try harness.events()
        #expect(!events.contains { $0.task == "u" && $0.type == "finished" })
        // Its HEAD's claim was refused: a new upload, and why.
        let reasons = events.filter { $0.type == "upload_created" }.compactMap { $0.data["reason"] as? String }
        #expect(reasons.contains { $0.contains("at most 1048576 were sent to it") }, "\(reasons)")
    }

    @Test func withoutConcatenationTheFileGoesInOneUploadAndSaysWhy() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 3 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/", "extensions=creation,termination"), body: path, extra: "parallel = 4"))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        #expect(server.requests.filter { $0.method == "POST" }.count == 1)
        #expect(try harness.run(["status", "--task", "u"]).stdout.contains("does not offer tus concatenation"))
    }

    @Test func aPartThatFailsForGoodFailsTheUploadAndResumeFinishesIt() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 2 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("tus/", "fail_status=503&fail_times=3&only_upload=1"), body: path,
                                      extra: "parallel = 2\nretries = 1"))
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        let failed = try harness.tasksByID()
        #expect(failed["u"]?["state"] as? String == "failed")
        #expect(try harness.run(["resume", "u"]).status == 0)
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        #expect(try harness.tasksByID()["u"]?["state"] as? String == "finished")
    }

    /// The agent's peak resident memory (VmHWM) over a parallel upload of a
    /// sparse file of `size` bytes, read before it stops.
    func peakMemoryKiB(uploading size: Int) throws -> Int {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let path = harness.directory.file("sparse.bin")
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        #expect(truncate(path, off_t(size)) == 0)
        // No checksums: the file is read once, as it is sent.
        try harness.drop("u.job", job(server.url("tus/", "extensions=creation,concatenation"), body: path, extra: "parallel = 4"))
        let agent = try harness.startAgent()
        #expect(eventually(within: 240) { harness.state(of: "u") == "finished" })
        let status = (try? String(contentsOfFile: "/proc/\(agent.pid)/status", encoding: .utf8)) ?? ""
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        #expect(completed(server, size: size) != nil)
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
        return Int(line?.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// The memory test: bodies stream from disk, so a 2 GiB parallel
    /// upload peaks within a few MiB of a 20 MiB one.
    @Test func memoryStaysFlatWhateverTheFileSize() throws {
        let small = try peakMemoryKiB(uploading: 20 << 20)
        let large = try peakMemoryKiB(uploading: 2 << 30)
        #expect(small > 0 && large > 0)
        #expect(large - small <= 8 << 10, "peak RSS \(large) KiB for 2 GiB against \(small) KiB for 20 MiB")
    }

    // MARK: - The IETF draft

    @Test func anIETFUploadDroppedMidwayResumesWithHEAD() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 5 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("ietf/", "drop_after=700000"), body: path, protocol: "ietf",
                                      extra: "chunk_size = \"2M\""))
        try harness.runUntilIdle()
        let done = try #require(completed(server, size: size))
        #expect(done["sha256"] as? String == sha256Hex(data))
        #expect(done["content_disposition"] as? String == "inline; filename=\"\((path as NSString).lastPathComponent)\"")
        let requests = server.requests
        // Careful creation (no body), then appends; the drop is followed by a HEAD.
        #expect(requests.first { $0.method == "POST" }?.bytesSent == 0)
        #expect(requests.contains { $0.method == "HEAD" })
        #expect(requests.filter { $0.method == "PATCH" }.map(\.bytesSent).reduce(0, +) == size)
    }

    /// Every byte arrived but the last append's answer was lost: the upload
    /// is completed with an empty append (`Upload-Complete: ?1`), never sent again.
    @Test func anIETFUploadWithAllItsBytesIsCompletedByAnEmptyAppend() throws {
        let harness = try AgentHarness()
        let port = freePort()
        let size = 1 << 20
        let appends = harness.directory.file("appends.log")
        // An IETF server whose answer to the append that brought the last byte is lost (the
        // connection closes before it): HEAD then says every byte is there, the upload not complete.
        let script = """
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        SIZE, state = \(size), {"stored": 0, "complete": False}
        class Server(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *args): pass
            def reply(self, status, headers):
                self.send_response(status)
                for name, value in headers + [("Content-Length", "0")]:
                    self.send_header(name, value)
                self.end_headers()
            def do_POST(self): self.reply(201, [("Location", "/f/1"), ("Upload-Complete", "?0")])
            def do_HEAD(self):
                self.reply(204, [("Upload-Offset", str(state["stored"])), ("Upload-Length", str(SIZE)),
                                 ("Upload-Complete", "?1" if state["complete"] else "?0")])
            def do_PATCH(self):
                length = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(length)
                with open("\(appends)", "a") as log: log.write(f"{length} {self.headers.get('Upload-Complete')}\\n")
                if length > 0:
                    state["stored"] += length
                    self.close_connection = True
                    return
                state["complete"] = True
                self.reply(200, [("Upload-Complete", "?1")])
        ThreadingHTTPServer(("127.0.0.1", \(port)), Server).serve_forever()
        """
        let server = try scriptedServer(script, port: port, name: "lost-answer", in: harness)
        defer { server.signal(SIGKILL) }
        let (path, _) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job("http://127.0.0.1:\(port)/up/", body: path, protocol: "ietf", extra: "retries = 0"))
        try harness.runUntilIdle()
        let lines = (try? String(contentsOfFile: appends, encoding: .utf8)) ?? ""
        #expect(lines == "\(size) ?1\n0 ?1\n", "\(lines)")
        #expect(try harness.tasksByID()["u"]?["state"] as? String == "finished")
    }

    @Test func anIETFServersAppendLimitIsKept() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let size = 3 << 20
        let (path, data) = try bodyFile(harness, size: size)
        try harness.drop("u.job", job(server.url("ietf/", "max_append_size=300000&no_104=1"), body: path, protocol: "ietf"))
        try harness.runUntilIdle()
        #expect(completed(server, size: size)?["sha256"] as? String == sha256Hex(data))
        let patches = server.requests.filter { $0.method == "PATCH" }
        #expect(!patches.isEmpty && patches.allSatisfy { $0.bytesSent <= 300_000 && $0.status < 300 }, "\(patches)")
        // And the smallest append: no chunk under it but the last (the 1 MiB probe would be refused with 413).
        let other = try AgentHarness()
        let bigger = try FaultServer(in: other.directory)
        let (otherPath, otherData) = try bodyFile(other, size: size)
        try other.drop("u.job", job(bigger.url("ietf/", "min_append_size=2000000"), body: otherPath, protocol: "ietf"))
        try other.runUntilIdle()
        #expect(completed(bigger, size: size)?["sha256"] as? String == sha256Hex(otherData))
        let appended = bigger.requests.filter { $0.method == "PATCH" }.map(\.bytesSent)
        #expect(appended.dropLast().allSatisfy { $0 >= 2_000_000 }, "\(appended)")
    }

    @Test func anIETFUploadTooLargeForTheServerFailsWithTheReason() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let (path, _) = try bodyFile(harness, size: 1 << 20)
        try harness.drop("u.job", job(server.url("ietf/", "max_size=1000"), body: path, protocol: "ietf"))
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 4)
        let task = try harness.tasksByID()["u"]
        #expect((task?["error"] as? String)?.contains("larger than the server accepts (413)") == true, "\(task ?? [:])")
        #expect(!server.requests.contains { $0.method == "PATCH" })
    }

    @Test func theSubmitFlagsMakeAResumableJob() throws {
        let harness = try AgentHarness()
        let (path, _) = try bodyFile(harness, size: 10)
        let result = try harness.run(["submit", "http://127.0.0.1:9/files/", "--kind", "upload", "--body-file", path,
                                      "--protocol", "tus", "--chunk-size", "4M", "--parallel", "3", "--id", "s1"])
        #expect(result.status == 0, "\(result.stderr)")
        let text = try String(contentsOfFile: harness.inbox + "/" + (harness.jobFiles().first ?? ""), encoding: .utf8)
        #expect(text.contains("protocol = \"tus\"") && text.contains("chunk_size = \"4M\"") && text.contains("parallel = 3"), "\(text)")
    }
}

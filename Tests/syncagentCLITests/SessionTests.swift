import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 4: every kind of transfer an NSURLSession makes — uploads, data
/// tasks — with cookies, timeouts and per-attempt metrics, against the
/// project's fault server and nginx.
@Suite("Uploads, data tasks, cookies and metrics", .serialized)
struct SessionTests {
    /// A file of `size` bytes written a MiB at a time (a 200 MiB file never sits in memory).
    func makeFile(_ path: String, size: Int, seed: UInt8 = 1) throws -> String {
        try Data().write(to: URL(fileURLWithPath: path))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        var block = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) })
        var left = size
        while left > 0 {
            let chunk = block.prefix(min(left, block.count))
            handle.write(chunk)
            left -= chunk.count
            block[0] &+= 1  // no two MiB alike
        }
        try handle.close()
        return sha256Hex(ofFile: path)
    }

    /// Peak resident memory of a running process, from /proc (kB).
    func peakRSSkB(_ pid: pid_t) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        let line = text.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }
        return line.flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") }
    }

    func finished(_ events: [AgentHarness.LoggedEvent], _ task: String) -> [String: Any]? {
        events.last { $0.task == task && $0.type == "finished" }?.data
    }

    @Test func uploadStreamsFromDiskAndMemoryDoesNotGrowWithSize() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let small = harness.directory.file("small.bin")
        let big = harness.directory.file("big.bin")
        let smallSHA = try makeFile(small, size: 20 << 20, seed: 1)
        let bigSHA = try makeFile(big, size: 200 << 20, seed: 2)

        let agent = try harness.startAgent()
        try harness.drop("small.job", "url = \"\(server.url("up/small.bin"))\"\nkind = \"upload\"\nid = \"small\"\nbody_file = \"\(small)\"\n")
        #expect(harness.waitForEvent("finished", task: "small", within: 60))
        let afterSmall = try #require(peakRSSkB(agent.pid))
        try harness.drop("big.job", "url = \"\(server.url("up/big.bin"))\"\nkind = \"upload\"\nid = \"big\"\nbody_file = \"\(big)\"\n")
        #expect(harness.waitForEvent("finished", task: "big", within: 120))
        let afterBig = try #require(peakRSSkB(agent.pid))
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)

        print("upload peak RSS: \(afterSmall) kB after 20 MiB, \(afterBig) kB after 200 MiB")
        // Streamed: ten times the bytes, (nearly) the same peak.
        #expect(afterBig - afterSmall < 8 * 1024, "peak grew by \(afterBig - afterSmall) kB")

        let received = server.received
        #expect(received.count == 2)
        #expect(received.map { $0["method"] as? String } == ["PUT", "PUT"])
        #expect(received.map { $0["size"] as? Int } == [20 << 20, 200 << 20])
        #expect(received.map { $0["sha256"] as? String } == [smallSHA, bigSHA])

        let events = try harness.events()
        let done = try #require(finished(events, "big"))
        #expect(done["bytes"] as? Int == 200 << 20)
        #expect(done["status"] as? Int == 201)
        #expect(done["dest"] == nil)
        // didSendBodyData: upload progress climbs to the whole size.
        let sent = events.filter { $0.task == "big" && $0.type == "progressed" }.compactMap { $0.data["bytes"] as? Int }
        #expect(sent.count >= 2)
        #expect(sent == sent.sorted())
        #expect(sent.last == 200 << 20)
        #expect(events.first { $0.task == "big" && $0.type == "progressed" }?.data["total"] as? Int == 200 << 20)
    }

    @Test func multipartUploadIsParsedByTheServer() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let photo = harness.directory.file("holiday.jpg")
        let sha = try makeFile(photo, size: 3 << 20 + 123)
        try harness.drop("form.job", """
            url = "\(server.url("form"))"
            kind = "upload"
            id = "form"
            body_file = "\(photo)"
            form_field = "file"
            [form]
            title = "holiday"
            album = "summer 2026"
            """)
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "\(agent.stderr.suffix(2000))")

        let request = try #require(server.received.first)
        #expect(request["method"] as? String == "POST")
        #expect((request["content_type"] as? String)?.hasPrefix("multipart/form-data; boundary=") == true)
        let parts = try #require(request["parts"] as? [[String: Any]])
        #expect(parts.count == 3)
        let byName = Dictionary(uniqueKeysWithValues: parts.map { ($0["name"] as? String ?? "", $0) })
        #expect(byName["title"]?["value"] as? String == "holiday")
        #expect(byName["album"]?["value"] as? String == "summer 2026")
        #expect(byName["file"]?["filename"] as? String == "holiday.jpg")
        #expect(byName["file"]?["size"] as? Int == 3 << 20 + 123)
        #expect(byName["file"]?["sha256"] as? String == sha)
        #expect(finished(try harness.events(), "form")?["status"] as? Int == 200)
    }

    @Test func submitWritesUploadJobs() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let photo = harness.directory.file("cat.png")
        let sha = try makeFile(photo, size: 70_000)
        let submitted = try harness.run(["submit", server.url("photos"), "--kind", "upload", "--body-file", photo,
                                         "--form-field", "picture", "--form", "caption=a cat", "--header", "X-Api-Key: k3y"])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "\(agent.stderr.suffix(2000))")
        let parts = server.received.first?["parts"] as? [[String: Any]] ?? []
        #expect(parts.map { $0["name"] as? String } == ["caption", "picture"])
        #expect(parts.first?["value"] as? String == "a cat")
        #expect(parts.last?["sha256"] as? String == sha)
    }

    @Test func uploadCutOffMidwayStartsOverCleanly() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let file = harness.directory.file("report.pdf")
        let sha = try makeFile(file, size: 4 << 20)
        try harness.drop("up.job", """
            url = "\(server.url("up/report.pdf", "drop_after=1048576&drop_times=1"))"
            kind = "upload"
            id = "up"
            body_file = "\(file)"
            """)
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "\(agent.stderr.suffix(2000))")
        let events = try harness.events()
        let retry = try #require(events.first { $0.task == "up" && $0.type == "retrying" })
        #expect(retry.data["bytes"] as? Int == 0)
        #expect(events.filter { $0.task == "up" && $0.type == "started" }.map { $0.data["offset"] as? Int } == [0, 0])
        // The server got the whole file once, from its first byte.
        #expect(server.received.map { $0["size"] as? Int } == [4 << 20])
        #expect(server.received.first?["sha256"] as? String == sha)
    }

    @Test func dataTaskSavesTheResponseAndRecordsStatusAndHeaders() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let body = harness.directory.file("query.json")
        try Data(#"{"q": "syncagent"}"#.utf8).write(to: URL(fileURLWithPath: body))
        try harness.drop("api.job", """
            url = "\(server.url("api/search"))"
            kind = "data"
            id = "api"
            method = "patch"
            body_file = "\(body)"
            dest = "answers/search.json"
            [headers]
            Content-Type = "application/json"
            Authorization = "Bearer hunter2"
            """)
        try harness.drop("ping.job", "url = \"\(server.url("api/ping"))\"\nkind = \"data\"\nid = \"ping\"\nmethod = \"DELETE\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "\(agent.stderr.suffix(2000))")

        let saved = try #require(FileManager.default.contents(atPath: "\(harness.downloads)/answers/search.json"))
        let answer = try #require(try JSONSerialization.jsonObject(with: saved) as? [String: Any])
        #expect(answer["method"] as? String == "PATCH")
        #expect(answer["size"] as? Int == 18)
        #expect(answer["content_type"] as? String == "application/json")

        let events = try harness.events()
        let done = try #require(finished(events, "api"))
        #expect(done["status"] as? Int == 200)
        #expect(done["bytes"] as? Int == saved.count)
        let headers = (done["response_headers"] as? [[String: String]]) ?? []
        #expect(headers.contains { $0["name"] == "X-Received-Bytes" && $0["value"] == "18" })
        // No dest: the answer is recorded, not kept.
        let ping = try #require(finished(events, "ping"))
        #expect(ping["status"] as? Int == 200)
        #expect(ping["dest"] == nil)
        #expect(server.received.map { $0["method"] as? String }.sorted { ($0 ?? "") < ($1 ?? "") } == ["DELETE", "PATCH"])

        let detail = try harness.run(["status", "--task", "api"])
        #expect(detail.stdout.contains("method:      PATCH"))
        #expect(detail.stdout.contains("status:      200"))
        #expect(detail.stdout.contains("X-Received-Bytes: 18"))
        #expect(!detail.stdout.contains("hunter2"))
        #expect(detail.stdout.contains("Authorization: <redacted>"))
    }

    @Test func errorStatusFailsWithWordsAndItsBodyNeverLandsInDest() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try harness.drop("gone.job", "url = \"\(server.url("nothing-here.json"))\"\nkind = \"data\"\nid = \"gone\"\ndest = \"gone.json\"\n")
        try harness.drop("denied.job", """
            url = "\(server.url("api/upload", "fail_status=403"))"
            kind = "data"
            id = "denied"
            method = "POST"
            dest = "denied.json"
            """)
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        let tasks = try harness.statusTasks()
        let gone = try #require(tasks.first { $0["id"] as? String == "gone" })
        #expect(gone["error"] as? String == "server answered 404 Not Found for \(server.url("nothing-here.json"))")
        let denied = try #require(tasks.first { $0["id"] as? String == "denied" })
        #expect(denied["error"] as? String == "server answered 403 Forbidden for \(server.url("api/upload", "fail_status=403"))")
        #expect(denied["error_code"] as? String == "http_403")
        #expect(server.requests.count == 2, "4xx are not retried")
        let left = try FileManager.default.contentsOfDirectory(atPath: harness.downloads)
        #expect(left.isEmpty, "\(left)")
    }

    @Test func uploadRefusedByTheServerFailsWithItsStatus() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let file = harness.directory.file("big.iso")
        _ = try makeFile(file, size: 3 << 20)
        let url = server.url("up/big.iso", "fail_status=413")
        try harness.drop("up.job", "url = \"\(url)\"\nkind = \"upload\"\nid = \"up\"\nbody_file = \"\(file)\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        let task = try #require(try harness.statusTasks().first)
        #expect(task["error"] as? String == "server answered 413 Content Too Large for \(url)")
        #expect(task["error_code"] as? String == "http_413")
        #expect(task["attempts"] as? Int == 1)
        let failed = try #require(try harness.events().first { $0.type == "failed" })
        #expect((failed.data["metrics"] as? [String: Any])?["status"] as? Int == 413)
    }

    @Test func persistentCookiesSurviveARestart() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("private.bin", size: 100_000)
        try harness.drop("login.job", "url = \"\(server.url("login", "set_cookie=session"))\"\nkind = \"data\"\nid = \"login\"\nmethod = \"POST\"\n")
        var agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "\(agent.stderr.suffix(2000))")

        let jar = harness.stateDir + "/cookies.txt"
        let jarText = try String(contentsOfFile: jar, encoding: .utf8)
        #expect(jarText.contains("session\ts3cr3t-session"))
        var info = stat()
        #expect(stat(jar, &info) == 0 && info.st_mode & 0o777 == 0o600)

        // A new agent process: the cookie comes from the jar on disk.
        try harness.drop("private.job", "url = \"\(server.url("private.bin", "require_cookie=session"))\"\nid = \"private\"\n")
        agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "\(agent.stderr.suffix(2000))")
        #expect(FileManager.default.contents(atPath: "\(harness.downloads)/private.bin")?.count == 100_000)
        #expect(server.requests.map(\.status) == [200, 200])

        // Cookie values are never printed.
        for arguments in [["events"], ["events", "--json"], ["status", "--task", "login"], ["status", "--json"], ["replay"]] {
            let output = try harness.run(arguments).stdout
            #expect(!output.contains("s3cr3t"), "\(arguments)")
        }
        #expect(try harness.run(["events"]).stdout.contains("Set-Cookie") == true)
    }

    @Test func ephemeralCookiesLiveInMemoryOnly() throws {
        let harness = try AgentHarness(config: "cookies = \"ephemeral\"\nmax_active = 1\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("private.bin", size: 1000)
        try harness.drop("a.job", "url = \"\(server.url("login", "set_cookie=token"))\"\nkind = \"data\"\nmethod = \"POST\"\nid = \"a\"\npriority = 1\n")
        try harness.drop("b.job", "url = \"\(server.url("private.bin", "require_cookie=token"))\"\nid = \"b\"\n")
        var agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "\(agent.stderr.suffix(2000))")
        #expect(!FileManager.default.fileExists(atPath: harness.stateDir + "/cookies.txt"))

        // The next process starts without it.
        try harness.drop("c.job", "url = \"\(server.url("private.bin", "require_cookie=token"))\"\nid = \"c\"\ndest = \"c.bin\"\nretries = 0\n")
        agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 4)
        #expect(try harness.statusTasks().first { $0["id"] as? String == "c" }?["error_code"] as? String == "http_401")
    }

    @Test func metricsAreRecordedForEveryAttempt() throws {
        let harness = try AgentHarness(config: "max_active = 1\n")
        let server = try FaultServer(in: harness.directory)
        let nginx = try Nginx(in: harness.directory)
        try server.serve("f.bin", size: 3 << 20)
        try nginx.serve("a.bin", size: 100_000)
        try nginx.serve("b.bin", size: 100_000)
        try harness.drop("f.job", "url = \"\(server.url("f.bin", "drop_after=1048576&drop_times=1"))\"\nid = \"f\"\npriority = 2\n")
        try harness.drop("a.job", "url = \"\(nginx.url("a.bin"))\"\nid = \"a\"\npriority = 1\n")
        try harness.drop("b.job", "url = \"\(nginx.url("b.bin"))\"\nid = \"b\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "\(agent.stderr.suffix(2000))")

        let events = try harness.events()
        for id in ["f", "a", "b"] {
            let own = events.filter { $0.task == id }
            let starts = own.filter { $0.type == "started" }
            let endings = own.filter { ["retrying", "finished", "failed", "paused", "cancelled"].contains($0.type) }
            #expect(starts.count == endings.count, "\(id)")
            for ending in endings {
                let metrics = try #require(ending.data["metrics"] as? [String: Any], "\(id) \(ending.type)")
                #expect(metrics["remote_address"] as? String == "127.0.0.1")
                #expect((metrics["total_us"] as? Int ?? 0) > 0)
                #expect((metrics["total_us"] as? Int ?? 0) >= (metrics["ttfb_us"] as? Int ?? 0))
                #expect((metrics["bytes_received"] as? Int ?? 0) > 0)
                #expect(metrics["http_version"] as? String == "1.1")
            }
        }
        let fEnds = events.filter { $0.task == "f" && ["retrying", "finished"].contains($0.type) }.compactMap { $0.data["metrics"] as? [String: Any] }
        #expect(fEnds.map { $0["status"] as? Int } == [200, 206])
        #expect(fEnds.map { $0["bytes_received"] as? Int } == [1 << 20, 2 << 20])
        #expect(fEnds.first?["remote_port"] as? Int == server.port)
        // One connection to nginx, kept alive for the second file.
        let nginxReuse = ["a", "b"].compactMap { id in (finished(events, id)?["metrics"] as? [String: Any])?["reused"] as? Bool }
        #expect(nginxReuse == [false, true])

        let detail = try harness.run(["status", "--task", "f"]).stdout
        #expect(detail.contains("#1 from byte 0, retrying: HTTP/1.1 200 127.0.0.1:\(server.port) new connection"))
        #expect(detail.contains("#2 from byte \(1 << 20), finished: HTTP/1.1 206 127.0.0.1:\(server.port)"))
        let json = try harness.run(["status", "--task", "f", "--json"]).stdout
        let task = try #require((try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])?["tasks"] as? [[String: Any]])
        let history = try #require(task.first?["attempt_history"] as? [[String: Any]])
        #expect(history.map { $0["ended_by"] as? String } == ["retrying", "finished"])
        #expect(history.allSatisfy { ($0["metrics"] as? [String: Any])?["dns_us"] != nil })
    }

    /// total_timeout ends a task across attempts: when the time is up, or
    /// as soon as the next retry would start after it (the reason then names
    /// the last attempt's failure), never later.
    @Test func totalTimeoutEndsATaskAcrossAttempts() throws {
        let harness = try AgentHarness(config: "total_timeout = 6\nidle_timeout = 1\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("slow.bin", size: 4 << 20)
        // 256 KiB/s for 4 MiB would take 16 s; a stall on the first request ends its attempt.
        try harness.drop("slow.job", "url = \"\(server.url("slow.bin", "rate=262144&stall_after=100000&stall=8"))\"\nid = \"slow\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 40) == 4)
        let events = try harness.events().filter { $0.task == "slow" }
        let failed = try #require(events.first { $0.type == "failed" })
        #expect(failed.data["code"] as? String == "total_timeout")
        let reason = failed.data["reason"] as? String ?? ""
        #expect(reason.hasPrefix("did not finish within total_timeout (6 s) of its first start"), "\(reason)")
        let firstStart = try #require(events.first { $0.type == "started" })
        #expect(failed.atMs - firstStart.atMs <= 9000, "ended \(failed.atMs - firstStart.atMs) ms after its first start")
        // Either a second attempt ran into the deadline, or the retry that would have passed it was not made.
        #expect(events.filter { $0.type == "started" }.count >= 2 || reason.contains("; last attempt: "), "\(reason)")
    }

    @Test func totalTimeoutCountsAcrossARestart() throws {
        let harness = try AgentHarness(config: "total_timeout = 2\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("slow.bin", size: 4 << 20)
        try harness.drop("slow.job", "url = \"\(server.url("slow.bin", "rate=262144"))\"\nid = \"slow\"\n")
        var agent = try harness.startAgent()
        #expect(harness.waitForEvent("started", within: 20))
        agent.signal(SIGKILL)
        agent.wait(seconds: 10)
        // Time passing is the point: total_timeout (2 s) runs out while no agent runs.
        usleep(2_500_000)
        // The deadline ran out while no agent ran: the next one fails the task without a request.
        agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 4)
        let failed = try #require(try harness.events().first { $0.type == "failed" })
        #expect(failed.data["code"] as? String == "total_timeout")
        #expect(server.requests.count <= 1)
        #expect(try harness.events().filter { $0.type == "started" }.count == 1)
    }

    @Test func everyOverwriteModeDoesWhatItSays() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("new.txt", size: 5000)
        try FileManager.default.createDirectory(atPath: harness.downloads, withIntermediateDirectories: true)
        let old = Data("old contents\n".utf8)
        for mode in ["rename", "replace", "skip", "fail"] {
            try old.write(to: URL(fileURLWithPath: "\(harness.downloads)/\(mode).txt"))
            try harness.drop("\(mode).job", "url = \"\(nginx.url("new.txt"))\"\nid = \"\(mode)\"\ndest = \"\(mode).txt\"\noverwrite = \"\(mode)\"\n")
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        let file = { (name: String) in FileManager.default.contents(atPath: "\(harness.downloads)/\(name)") }
        #expect(file("rename.txt") == old)
        #expect(file("rename.1.txt") == data)
        #expect(file("replace.txt") == data)
        #expect(file("skip.txt") == old)
        #expect(file("fail.txt") == old)
        let tasks = Dictionary(uniqueKeysWithValues: try harness.statusTasks().map { ($0["id"] as? String ?? "", $0) })
        #expect(tasks["rename"]?["dest"] as? String == "\(harness.downloads)/rename.1.txt")
        #expect(tasks["skip"]?["state"] as? String == "finished")
        #expect(tasks["fail"]?["state"] as? String == "failed")
        #expect(tasks["fail"]?["error"] as? String == "\(harness.downloads)/fail.txt already exists (overwrite = \"fail\")")
        // skip and fail never touch the network.
        #expect(nginx.requests.count == 2)
    }

    @Test func anUploadWhoseFileShrinksFailsInsteadOfHanging() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let body = harness.directory.file("body.bin")
        try Data(count: 8 << 20).write(to: URL(fileURLWithPath: body))
        try harness.drop("u.job", "id = \"u\"\nkind = \"upload\"\nurl = \"\(server.url("up"))\"\nbody_file = \"\(body)\"\nmax_speed = \"1M\"\n"
                         + "retries = 0\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(harness.waitForEvent("progressed", task: "u", within: 20))
        #expect(truncate(body, 1 << 20) == 0)
        #expect(agent.wait(seconds: 30) == 4, "must not wait for idle_timeout")
        let task = try #require(try harness.tasksByID()["u"])
        #expect(task["error_code"] as? String == "body_changed")
        #expect(task["state"] as? String == "failed", "the short body is never called finished")
    }

    /// A body file overwritten in place mid-send reached the server as a
    /// mix of both versions, and the upload was called finished.
    @Test func anUploadWhoseFileIsOverwrittenWhileSentIsSentAgainWhole() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let body = harness.directory.file("body.bin")
        try Data(repeating: 0x41, count: 4 << 20).write(to: URL(fileURLWithPath: body))
        try harness.drop("u.job", "id = \"u\"\nkind = \"upload\"\nurl = \"\(server.url("up"))\"\nbody_file = \"\(body)\"\nmax_speed = \"1M\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(harness.waitForEvent("progressed", task: "u", within: 20))
        // In place, same size: only the file's times say it changed.
        let newer = Data(repeating: 0x5A, count: 4 << 20)
        let handle = try #require(FileHandle(forWritingAtPath: body))
        try handle.write(contentsOf: newer)
        try handle.close()
        #expect(agent.wait(seconds: 60) == 0, "\(agent.stderr.suffix(1500))")
        #expect(try harness.tasksByID()["u"]?["state"] as? String == "finished")
        // What the server kept last is the file as it is now, whole.
        #expect(server.received.last?["sha256"] as? String == sha256Hex(newer))
        #expect(try harness.events().contains { ($0.data["reason"] as? String)?.contains("was modified while it was being sent") == true })
    }

    /// A server's 200 before it read the body ended the upload as finished,
    /// with the bytes sent so far as its size.
    @Test func anUploadAnsweredBeforeItsBodyWasSentIsNotFinished() throws {
        let harness = try AgentHarness(config: "retries = 1\n")
        let server = try FaultServer(in: harness.directory)
        let body = harness.directory.file("body.bin")
        try Data(count: 8 << 20).write(to: URL(fileURLWithPath: body))
        try harness.drop("u.job", "id = \"u\"\nkind = \"upload\"\nurl = \"\(server.url("up", "answer_after=65536"))\"\nbody_file = \"\(body)\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
        let task = try #require(try harness.tasksByID()["u"])
        #expect(task["state"] as? String == "failed")
        // Whether curl reads the early answer or first finds the socket closed under
        // its send is the kernel's race; either way the body was not all sent.
        let error = task["error"] as? String ?? ""
        #expect(error.contains("the rest was never sent") || error.contains("Send failure"), "\(error)")
    }
}

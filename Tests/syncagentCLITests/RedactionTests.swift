import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Credentials go only to the host they were given for, and no command,
/// log line or `.error` file prints a secret or a raw control character.
@Suite("Secrets and control characters: kept out of output and off other hosts", .serialized)
struct RedactionTests {
    @Test func secretsInURLsNeverReachOutput() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("s.bin", size: 4000)
        let secretURL = "http://alice:hunter2@127.0.0.1:\(server.port)/s.bin?access_token=TOKEN1&X-Amz-Signature=SIG2&page=1"
        let missingURL = "http://127.0.0.1:\(server.port)/missing.bin?sig=SIG3"
        try harness.drop("s.job", "id = \"s\"\nurl = \"\(secretURL)\"\n")
        try harness.drop("m.job", "id = \"m\"\nurl = \"\(missingURL)\"\n")
        try harness.drop("ftp.job", "url = \"ftp://bob:PASS4@127.0.0.1/x\"\n")
        // A credential in a URL carried percent-encoded inside another (issue 42: printed until a redirect made it current).
        let nestedURL = "http://127.0.0.1:\(server.port)/s.bin?next=https%3A%2F%2Fx%2F%3Fapi_key%3DNESTED5&then=https%3A%2F%2Fy%2F%3Fu%3Dhttps%253A%252F%252Fz%252F%253Ftoken%253DDEEPER6"
        try harness.drop("n.job", "id = \"n\"\nurl = \"\(nestedURL)\"\ndest = \"n.bin\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 4)
        var outputs = [agent.stderr, agent.stdout]
        for command in [["status"], ["status", "--json"], ["status", "--task", "s"], ["status", "--task", "m"], ["status", "--task", "n"],
                        ["replay"], ["replay", "--json"], ["events"], ["events", "--json"]] {
            let result = try harness.run(command)
            #expect(result.status == 0)
            outputs += [result.stdout, result.stderr]
        }
        for file in try FileManager.default.contentsOfDirectory(atPath: harness.inbox + "/rejected") where file.hasSuffix(".error") {
            outputs.append(try String(contentsOfFile: harness.inbox + "/rejected/" + file, encoding: .utf8))
        }
        let all = outputs.joined(separator: "\n")
        for secret in ["hunter2", "TOKEN1", "SIG2", "SIG3", "PASS4", "NESTED5", "DEEPER6"] {
            #expect(!all.contains(secret), "\(secret) leaked")
        }
        #expect(all.contains("access_token=<redacted>") && all.contains("?next=<redacted>&then=<redacted>"))
        // The agent's own log names the job's URL, redacted.
        #expect(agent.stderr.contains("?next=<redacted>&then=<redacted>"), "\(agent.stderr)")
        #expect(try harness.tasksByID()["s"]?["state"] as? String == "finished")
        #expect(try harness.tasksByID()["n"]?["state"] as? String == "finished")
    }

    /// curl's error buffer quotes a proxy it cannot read, credentials and all ("Unsupported proxy
    /// syntax in 'user:…@127.0.0.1:99999'"): its words are used only when they hold no userinfo.
    @Test func curlsOwnWordsNeverCarryAProxysCredentials() throws {
        let harness = try AgentHarness(config: "retries = 0\nproxy = \"user:s3cret@127.0.0.1:99999\"\n")
        try harness.drop("p.job", "id = \"p\"\nurl = \"http://127.0.0.1:1/p.bin\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 4)
        let error = try #require(try harness.tasksByID()["p"]?["error"] as? String)
        #expect(!error.contains("s3cret") && !agent.stderr.contains("s3cret"), "\(error)")
        #expect(!(try harness.run(["events"]).stdout.contains("s3cret")))
    }

    @Test func credentialsNeverFollowARedirectToAnotherHost() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("c.bin", size: 5000)
        // The same server under another name: 127.0.0.1 → localhost.
        let elsewhere = "http://localhost:\(server.port)/c.bin?forbid_header=X-Api-Key"
        let hop = server.url("hop.bin", "redirect_to=" + elsewhere.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
        try harness.drop("c.job", "id = \"c\"\nurl = \"\(hop)\"\n[headers]\nX-Api-Key = \"KEY-1234\"\nPrivate-Token = \"PT\"\n")
        // A 302 with a body ("failure 302 on purpose") is followed too when the agent follows
        // redirects itself (it carries a credential): its Location is read for every kind.
        let withBody = server.url("body.bin", "fail_status=302&redirect_to=" + elsewhere.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
        try harness.drop("d.job", "id = \"d\"\nurl = \"\(withBody)\"\n[headers]\nX-Api-Key = \"KEY-1234\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "\(agent.stderr.suffix(1500))")
        #expect(contents(harness.downloads + "/hop.bin") == data)
        #expect(contents(harness.downloads + "/body.bin") == data)
        let task = try #require(try harness.tasksByID()["c"])
        #expect(task["redirects"] as? Int == 1)
        #expect((task["current_url"] as? String)?.hasPrefix("http://localhost:") == true)
    }

    /// curl takes a POST's credential headers (all but Authorization and
    /// Cookie) through any redirect. The agent follows a 307 itself, body
    /// and all, without them; a 302 (which would make the POST a GET) is
    /// the data task's answer, not followed.
    @Test func credentialsOfARequestWithABodyNeverFollowARedirectToAnotherHost() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let body = harness.directory.file("body.json")
        try Data(#"{"q": "cats"}"#.utf8).write(to: URL(fileURLWithPath: body))
        let elsewhere = "http://localhost:\(server.port)/api/search?forbid_header=X-Api-Key"
        let encoded = elsewhere.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        for (id, status) in [("kept", 307), ("changed", 302)] {
            let hop = server.url("api/hop-\(id)", "fail_status=\(status)&fail_times=1&redirect_to=\(encoded)")
            try harness.drop("\(id).job", """
                id = "\(id)"
                kind = "data"
                method = "POST"
                url = "\(hop)"
                body_file = "\(body)"
                [headers]
                X-Api-Key = "KEY-1234"
                Content-Type = "application/json"
                """)
        }
        // An upload (PUT) too: a 307 is followed, body and all.
        let upload = server.url("api/hop-up", "fail_status=307&fail_times=1&redirect_to=" + encoded)
        try harness.drop("up.job", "id = \"up\"\nkind = \"upload\"\nurl = \"\(upload)\"\nbody_file = \"\(body)\"\n"
                         + "[headers]\nX-Api-Key = \"KEY-1234\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0, "\(agent.stderr.suffix(1500))")
        let tasks = try harness.tasksByID()
        #expect(tasks["up"]?["state"] as? String == "finished", "\(tasks["up"]?["error"] ?? "")")
        #expect(tasks["up"]?["redirects"] as? Int == 1)
        #expect(tasks["kept"]?["status"] as? Int == 200)
        #expect(tasks["kept"]?["redirects"] as? Int == 1)
        #expect(tasks["changed"]?["status"] as? Int == 302)
        #expect(tasks["changed"]?["redirects"] as? Int == 0)
        // Only the 307's second request reached the other host, with the whole body and no key.
        let received = server.received.filter { ($0["path"] as? String) == "/api/search" }
        #expect(received.count == 2)
        #expect(Set(received.compactMap { $0["method"] as? String }) == ["POST", "PUT"])
        #expect(received.allSatisfy { $0["size"] as? Int == 13 })
    }

    @Test func headerValuesCannotInjectHeaders() throws {
        let harness = try AgentHarness()
        try harness.drop("inject.job", "url = \"http://127.0.0.1:1/x\"\n[headers]\nX-A = \"a\\r\\nX-Injected: 1\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        let error = try String(contentsOfFile: harness.inbox + "/rejected/inject.job.error", encoding: .utf8)
        #expect(error == "inject.job: key \"headers.X-A\" must not contain CR, LF or NUL\n")
        let submit = try harness.run(["submit", "http://127.0.0.1:1/x", "--header", "X-A: a\rX-Injected: 1"])
        #expect(submit.status != 0)
        #expect(submit.stderr.contains("headers.X-A"))
    }

    @Test func namesWithControlCharactersNeverReachTheTerminal() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("evil.bin", size: 100)
        try harness.drop("nl.job", "url = \"\(nginx.url("x.bin"))\"\ndest = \"a\\nFAKE download finished\"\n")
        // The name from the URL carries an escape and a line break, percent-encoded.
        try harness.drop("esc.job", "id = \"esc\"\nurl = \"\(nginx.url("evil%1B%5B31m%0Aevil.bin"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
        let error = try String(contentsOfFile: harness.inbox + "/rejected/nl.job.error", encoding: .utf8)
        #expect(error.contains("must not contain control characters"))
        #expect(error.filter { $0 == "\n" }.count == 1)
        let status = try harness.run(["status"]).stdout + (try harness.run(["status", "--task", "esc"]).stdout)
        #expect(!status.unicodeScalars.contains { $0.value == 0x1B })
        #expect(try harness.statusTasks().first { $0["id"] as? String == "esc" }?["dest"] as? String
                == "\(harness.downloads)/evil_[31m_evil.bin")
    }

    /// A header value or job file name with a bidirectional override, DEL
    /// or a C1 control never goes out raw from `events`, `status --task`'s
    /// events, the JSON of `status` and `replay`, nor a rejected job's
    /// `.error` file (ESC there would set the terminal's title on `cat`).
    /// Printed, each is escaped; the JSON still reads back as the same
    /// string. (A batch's name may hold none of them: see below.)
    @Test func controlCharactersInALogsStringsAreEscapedWhereverTheyArePrinted() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("c.bin", size: 100)
        let note = "ba\u{202E}X\u{7F}\u{9B}"
        try harness.drop("c.job", "id = \"c\"\nurl = \"\(nginx.url("c.bin"))\"\n[headers]\nX-Note = \"ba\\u202EX\\u007F\\u009B\"\n")
        try harness.drop("bad\u{1B}]0;T\u{07}.job", "colour = \"red\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        let dangerous: Set<UInt32> = [0x1B, 0x07, 0x7F, 0x9B, 0x202E]
        for command in [["events"], ["events", "--json"], ["status", "--task", "c"], ["status", "--json"], ["replay", "--json"],
                        ["status", "--all"]] {
            let result = try harness.run(command)
            let output = result.stdout
            #expect(result.status == 0 && output.contains("c"), "\(command)")
            #expect(!output.unicodeScalars.contains { dangerous.contains($0.value) }, "\(command)")
        }
        // Shown escaped; in the log's JSON, the very string.
        #expect(try harness.statusTasks().first { $0["id"] as? String == "c" }?["headers"] as? [String] == ["X-Note: ba\\u{202E}X\\x7F\\x9B"])
        let created = try harness.events().first { $0.type == "created" && $0.task == "c" }
        #expect((created?.data["headers"] as? [[String: Any]])?.first?["value"] as? String == note)
        let rejected = try FileManager.default.contentsOfDirectory(atPath: harness.inbox + "/rejected").filter { $0.hasSuffix(".error") }
        #expect(rejected.count == 1)
        let error = try String(contentsOfFile: harness.inbox + "/rejected/" + rejected[0], encoding: .utf8)
        #expect(!error.unicodeScalars.contains { dangerous.contains($0.value) } && error.contains("bad\\x1B]0;T\\x07.job"))
    }

    /// A batch's name is handed to hooks (`SYNCAGENT_BATCH`) and shown in
    /// notifications: a line break in it forged a `SYNCAGENT_FAILED=0` line
    /// in a hook's `env`, NUL cut it short. Such a job is rejected, its
    /// `.error` naming the file and the key; `submit --batch` refuses it too.
    @Test func aBatchNameCannotForgeLinesForHooksOrNotices() throws {
        let records = TempDirectory()
        let record = records.file("env.txt")
        let harness = try AgentHarness(config: "on_batch_end = [\"/bin/sh\", \"-c\", \"env >> '\(record)'\"]\n")
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("f.bin", size: 100)
        try harness.drop("forged.job", "url = \"\(nginx.url("f.bin"))\"\nbatch = \"x\\nSYNCAGENT_FAILED=0\"\nretries = 0\n")
        try harness.drop("cut.job", "url = \"\(nginx.url("f.bin"))\"\ndest = \"cut.bin\"\nbatch = \"x\\u0000y\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        let seen = (try? String(contentsOfFile: record, encoding: .utf8)) ?? ""
        #expect(!seen.contains("SYNCAGENT_FAILED=0"), "a forged line: \(seen)")
        for (name, shown) in [("forged.job", "x\\x0ASYNCAGENT_FAILED=0"), ("cut.job", "x\\x00y")] {
            let error = try? String(contentsOfFile: harness.inbox + "/rejected/\(name).error", encoding: .utf8)
            #expect(error == "\(name): key \"batch\" must not contain control characters (a line break, NUL, an escape …): \"\(shown)\"\n")
        }
        #expect(try harness.statusTasks().isEmpty)
        let submit = try harness.run(["submit", nginx.url("f.bin"), "--batch", "x\nSYNCAGENT_FAILED=0"])
        #expect(submit.status != 0 && submit.stderr.contains("key \"batch\" must not contain control characters"), "\(submit.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: harness.inbox).filter { $0.hasSuffix(".job") }.isEmpty)
    }
}

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
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 4)
        var outputs = [agent.stderr, agent.stdout]
        for command in [["status"], ["status", "--json"], ["status", "--task", "s"], ["status", "--task", "m"],
                        ["replay"], ["replay", "--json"], ["events"], ["events", "--json"]] {
            let result = try harness.run(command)
            #expect(result.status == 0)
            outputs += [result.stdout, result.stderr]
        }
        for file in try FileManager.default.contentsOfDirectory(atPath: harness.inbox + "/rejected") where file.hasSuffix(".error") {
            outputs.append(try String(contentsOfFile: harness.inbox + "/rejected/" + file, encoding: .utf8))
        }
        let all = outputs.joined(separator: "\n")
        for secret in ["hunter2", "TOKEN1", "SIG2", "SIG3", "PASS4"] {
            #expect(!all.contains(secret), "\(secret) leaked")
        }
        #expect(all.contains("access_token=<redacted>"))
        #expect(try harness.tasksByID()["s"]?["state"] as? String == "finished")
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
}

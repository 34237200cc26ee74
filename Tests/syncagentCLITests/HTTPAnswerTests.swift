import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Answers a server should not give (absurd lengths and ranges, a
/// Retry-After in any form, a header too long for curl) end or delay the
/// task with a reason, and what they sent is never published.
@Suite("What a server answers: lengths, ranges, Retry-After, headers", .serialized)
struct HTTPAnswerTests {
    @Test func absurdNumbersFromAServerNeverCrashTheAgent() throws {
        let harness = try AgentHarness(config: "retries = 1\ntotal_timeout = 600\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("f.bin", size: 100_000)
        let hostile = [
            "retry": "fail_status=503&retry_after=99999999999999999",
            "length": "content_length=9223372036854775807&drop_after=5000",
            "range": "partial_from=0&header=Content-Range:bytes%200-9223372036854775806/9223372036854775807",
            "junk": "fail_status=503&retry_after=soon%2C%20maybe",
            // Two lengths: curl framed the body by the second and published half the file.
            "twolengths": "extra_length=50000",
        ]
        for (id, faults) in hostile.sorted(by: { $0.key < $1.key }) {
            try harness.drop("\(id).job", "id = \"\(id)\"\nurl = \"\(server.url("f.bin", faults))\"\ndest = \"\(id).bin\"\n")
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4, "\(agent.stderr.suffix(2000))")
        let tasks = try harness.tasksByID()
        for id in hostile.keys {
            #expect(tasks[id]?["state"] as? String == "failed", "\(id)")
            #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/\(id).bin"), "\(id)")
        }
        // A Retry-After past total_timeout fails at once, saying so.
        let retry = tasks["retry"]?["error"] as? String ?? ""
        #expect(retry.hasPrefix("server asked to wait more than ten years before trying again (Retry-After)"), "\(retry)")
        #expect(tasks["retry"]?["error_code"] as? String == "total_timeout")
        #expect((tasks["length"]?["error"] as? String)?.contains("unreadable Content-Length") == true)
        #expect((tasks["range"]?["error"] as? String)?.contains("nowhere (an unreadable Content-Range)") == true)
        #expect((tasks["twolengths"]?["error"] as? String)?.contains("two different Content-Length") == true,
                "\(tasks["twolengths"] ?? [:])")
        // The agent restarts on that log without crashing.
        let again = try harness.startAgent(exitWhenIdle: true)
        #expect(again.wait(seconds: 30) == 0)
        try expectVerifyClean(harness)
    }

    @Test func contentLengthsCurlWouldMisreadAreRefused() throws {
        let harness = try AgentHarness(config: "retries = 1\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("n.bin", size: 100_000)
        for (id, faults) in [("sci", "content_length=1e5"), ("plus", "content_length=%2B100000"),
                             ("huge", "content_length=99999999999999999999999&drop_after=10"), ("garbage", "not_http=1")] {
            try harness.drop("\(id).job", "id = \"\(id)\"\nurl = \"\(server.url("n.bin", faults))\"\ndest = \"\(id).bin\"\n")
        }
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
        let tasks = try harness.tasksByID()
        for id in ["sci", "plus", "huge"] {
            #expect(tasks[id]?["state"] as? String == "failed")
            #expect((tasks[id]?["error"] as? String)?.contains("unreadable Content-Length") == true, "\(id): \(tasks[id]?["error"] ?? "")")
            #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/\(id).bin"))
        }
        #expect((tasks["garbage"]?["error"] as? String)?.contains("is not HTTP") == true, "\(tasks["garbage"]?["error"] ?? "")")
        #expect(tasks["garbage"]?["error_code"] as? String == "retries_exhausted")
    }

    @Test func aPartialAnswerToAPlainRequestIsNeverPublished() throws {
        let harness = try AgentHarness(config: "retries = 2\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("p.bin", size: 100_000)
        try harness.drop("p.job", "id = \"p\"\nurl = \"\(server.url("p.bin", "partial_from=50000"))\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4)
        #expect(!FileManager.default.fileExists(atPath: "\(harness.downloads)/p.bin"))
        let task = try #require(try harness.tasksByID()["p"])
        #expect(task["state"] as? String == "failed")
        #expect((task["error"] as? String)?.contains("server sent bytes from 50000 when asked for 0") == true)
        try expectVerifyClean(harness)
    }

    @Test func retryAfterAsAnHTTPDateIsHonoured() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("d.bin", size: 10_000)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        let date = formatter.string(from: Date().addingTimeInterval(4))
        let escaped = date.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        try harness.drop("d.job", "id = \"d\"\nurl = \"\(server.url("d.bin", "fail_status=503&fail_times=1&retry_after=\(escaped)"))\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0)
        #expect(contents("\(harness.downloads)/d.bin") == data)
        let retry = try #require(try harness.events().first { $0.type == "retrying" })
        // Asked for about 4 s (one second of it may pass in whole-second dates); the backoff alone is under 1 s.
        #expect((retry.data["delay_ms"] as? Int ?? 0) >= 2000, "\(retry.data)")
    }

    /// A header over curl's 100 KB limit is named as such, not "Out of
    /// memory", which would send the user looking at the machine.
    @Test func aHeaderTooLongForCurlIsNamedAsSuch() throws {
        let harness = try AgentHarness(config: "retries = 0\n")
        let server = try FaultServer(in: harness.directory)
        try server.serve("h.bin", size: 100)
        try harness.drop("h.job", "id = \"h\"\nurl = \"\(server.url("h.bin", "header_bytes=200000"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 4)
        let error = try #require(try harness.tasksByID()["h"]?["error"] as? String)
        #expect(error.contains("a response header from") && error.contains("is longer than curl accepts (100 KB"), "\(error)")
    }
}

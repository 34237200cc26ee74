import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The inbox as the agent takes it: jobs renamed in, linked in, renamed
/// over one just taken, named in bytes that are not UTF-8; and rejections,
/// each recorded once with its reason in `rejected/`, whatever happens to
/// that folder.
@Suite("Intake: jobs taken from the inbox, or rejected", .serialized)
struct IntakeTests {
    @Test func aJobRenamedOverATakenJobsNameIsNotLost() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("r.bin", size: 100)
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started"))
        let watch = try InboxAccessWatch(harness.inbox)
        let rounds = 15
        for round in 0..<rounds {
            try harness.drop("same.job", "id = \"a\(round)\"\nurl = \"\(nginx.url("r.bin"))\"\ndest = \"a\(round).bin\"\n")
            // The agent is reading or moving the first job: rename the second over its name now.
            #expect(watch.waitForAccess(to: "same.job", seconds: 10))
            try harness.drop("same.job", "id = \"b\(round)\"\nurl = \"\(nginx.url("r.bin"))\"\ndest = \"b\(round).bin\"\n")
            #expect(watch.waitForAccess(to: "same.job", seconds: 10))
        }
        #expect(eventually(within: 30) { ((try? harness.statusTasks()) ?? []).filter { $0["state"] as? String == "finished" }.count == 2 * rounds })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let ids = Set(try harness.statusTasks().compactMap { $0["id"] as? String })
        #expect(ids == Set((0..<rounds).flatMap { ["a\($0)", "b\($0)"] }))
        #expect(harness.jobFiles().isEmpty)
    }

    @Test func hardLinkedJobsAreTakenWhileTheAgentRuns() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("l.bin", size: 2000)
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started"))
        let source = harness.directory.file("linked.job")
        try "url = \"\(nginx.url("l.bin"))\"\n".write(toFile: source, atomically: true, encoding: .utf8)
        #expect(link(source, harness.inbox + "/linked.job") == 0)
        #expect(eventually(within: 10) { contents(harness.downloads + "/l.bin") == data })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    @Test func jobNamesThatAreNotUTF8AreTakenOrRejected() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("latin.bin", size: 3000)
        // "café.job" in Latin-1: 0xE9 is not UTF-8.
        for (stem, text) in [([0x63, 0x61, 0x66, 0xE9] as [UInt8], "url = \"\(nginx.url("latin.bin"))\"\n"),
                             ([0x62, 0x61, 0x64, 0xFF], "colour = 1\n")] {
            let path = Array((harness.inbox + "/").utf8) + stem + Array(".job".utf8) + [0]
            let fd = path.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_WRONLY | O_CREAT, 0o644) } }
            #expect(fd >= 0)
            _ = Array(text.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0)
        #expect(contents("\(harness.downloads)/latin.bin") == data)
        #expect(FileManager.default.fileExists(atPath: harness.inbox + "/rejected/bad%FF.job.error"))
        #expect(try InboxAccessWatch.rawEntries(harness.inbox).filter { $0.hasSuffix(".job") }.isEmpty)
    }

    @Test func aRejectionIsRecordedOnceWhateverItsName() throws {
        let harness = try AgentHarness()
        let longName = String(repeating: "x", count: 242) + ".job"
        try harness.drop(longName, "colour = \"red\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "--exit-when-idle must exit")
        #expect(try harness.events().filter { $0.type == "rejected" }.count == 1)
        let rejected = try FileManager.default.contentsOfDirectory(atPath: harness.inbox + "/rejected")
        #expect(rejected.count == 2, "\(rejected)")
        #expect(rejected.contains { $0.hasSuffix(".error") && $0.utf8.count <= 255 })
        #expect(harness.jobFiles().isEmpty)
    }

    /// A date whose digits are another script's crashed the agent at intake,
    /// and again at every restart (the job waits in `.taken/`).
    @Test func aDateWithForeignDigitsIsRejectedNotACrash() throws {
        let harness = try AgentHarness()
        try harness.drop("arabic.job", "url = \"http://127.0.0.1:9/x\"\nnot_before = 1\u{662}\u{663}\u{664}-01-01\n")
        try harness.drop("time.job", "url = \"http://127.0.0.1:9/y\"\nnot_before = 2026-01-01T10:00:0\u{664}Z\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 30) == 0, "--exit-when-idle must exit")
        #expect(try harness.events().filter { $0.type == "rejected" }.count == 2)
        let error = try String(contentsOfFile: harness.inbox + "/rejected/time.job.error", encoding: .utf8)
        #expect(error.contains("is not a valid date or time"), "\(error)")
        #expect(harness.jobFiles().isEmpty)
    }

    /// A job rejected again and again under one name (a cron job with a
    /// typo) probed rejected/ from NAME.job each time: every rejection cost
    /// more than the one before. The agent goes on from the last number it
    /// gave; a number the user freed meanwhile is not probed again.
    @Test func aJobRejectedAgainAndAgainTakesTheNextNumber() throws {
        let harness = try AgentHarness()
        let agent = try harness.startAgent()
        let rejected = harness.inbox + "/rejected"
        for round in 0..<12 {
            try harness.drop("bad.job", "colour = \"red\"\n")
            let name = round == 0 ? "bad.job" : "bad.\(round).job"
            #expect(eventually(within: 10) { FileManager.default.fileExists(atPath: "\(rejected)/\(name).error") }, "\(name)")
            if round == 5 { #expect(unlink("\(rejected)/bad.3.job") == 0 && unlink("\(rejected)/bad.3.job.error") == 0) }
        }
        try harness.drop("bad.job", "colour = \"red\"\n")
        #expect(eventually(within: 10) { FileManager.default.fileExists(atPath: "\(rejected)/bad.12.job.error") })
        #expect(!FileManager.default.fileExists(atPath: "\(rejected)/bad.3.job"))
        let errors = try FileManager.default.contentsOfDirectory(atPath: rejected).filter { $0.hasSuffix(".error") }
        #expect(errors.count == 12)
        for error in errors {
            #expect(try String(contentsOfFile: "\(rejected)/\(error)", encoding: .utf8).contains("colour"), "\(error)")
        }
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    @Test func aRejectedFolderDeletedWhileRunningIsMadeAgain() throws {
        let harness = try AgentHarness()
        let agent = try harness.startAgent()
        // (Past start-up: taken away while start-up makes it, a folder of the agent's stops it.)
        #expect(harness.pastStartUp(agent))
        try FileManager.default.removeItem(atPath: harness.inbox + "/rejected")
        try harness.drop("bad.job", "colour = \"red\"\n")
        #expect(eventually { FileManager.default.fileExists(atPath: harness.inbox + "/rejected/bad.job.error") },
                "\(agent.stderr.suffix(2000))")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0, "\(agent.stderr.suffix(2000))")
        #expect(try harness.events().filter { $0.type == "rejected" }.count == 1)
        #expect(FileManager.default.fileExists(atPath: harness.inbox + "/rejected/bad.job"))
    }

    /// A job rejected while rejected/ could not be made (a file was there)
    /// stayed in .taken/, as it should; the next start moved it to rejected/
    /// without the `.error` that says why.
    @Test func aJobRejectedWhileRejectedCouldNotBeMadeGetsItsErrorLater() throws {
        let harness = try AgentHarness()
        let agent = try harness.startAgent()
        // (A file in rejected/'s way during start-up stops the agent.)
        #expect(harness.pastStartUp(agent))
        try? FileManager.default.removeItem(atPath: harness.inbox + "/rejected")
        try Data("in the way".utf8).write(to: URL(fileURLWithPath: harness.inbox + "/rejected"))
        try harness.drop("bad.job", "url = \"ftp://x/y\"\n")
        #expect(harness.waitForEvent("rejected", within: 20))
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 30) == 0)
        try FileManager.default.removeItem(atPath: harness.inbox + "/rejected")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        #expect(FileManager.default.fileExists(atPath: harness.inbox + "/rejected/bad.job"))
        let error = try String(contentsOfFile: harness.inbox + "/rejected/bad.job.error", encoding: .utf8)
        #expect(error.hasPrefix("bad.job: ") && error.contains("ftp"), "\(error)")
    }

    @Test func aSymlinkedRejectedFolderIsNeverFollowed() throws {
        let harness = try AgentHarness()
        let outside = harness.directory.file("outside")
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: harness.inbox + "/rejected", withDestinationPath: outside)
        try harness.drop("bad.job", "colour = \"red\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
        #expect(FileManager.default.fileExists(atPath: harness.inbox + "/rejected/bad.job.error"))
    }
}

/// inotify from the test's side: tells when the agent opens or moves a
/// file in the inbox, to rename another job over it at that very moment.
final class InboxAccessWatch {
    private let fd: Int32

    init(_ directory: String) throws {
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0, inotify_add_watch(fd, directory, UInt32(IN_OPEN) | UInt32(IN_MOVED_FROM)) >= 0 else {
            throw TestFailure("inotify on \(directory) failed")
        }
    }

    deinit { close(fd) }

    /// Waits until the agent opens or moves `name` out (ignoring our own renames in).
    func waitForAccess(to name: String, seconds: Double) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            var offset = 0
            while count > 0, offset + 16 <= count {
                let length = buffer.withUnsafeBytes { Int($0.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)) }
                let nameBytes = buffer[(offset + 16)..<(offset + 16 + length)].prefix { $0 != 0 }
                if String(decoding: nameBytes, as: UTF8.self) == name { return true }
                offset += 16 + length
            }
        }
        return false
    }

    /// Names in a directory as raw bytes decoded leniently (FileManager skips invalid UTF-8).
    static func rawEntries(_ directory: String) throws -> [String] {
        guard let stream = opendir(directory) else { throw TestFailure("cannot list \(directory)") }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            names.append(withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) })
        }
        return names.filter { $0 != "." && $0 != ".." }
    }
}

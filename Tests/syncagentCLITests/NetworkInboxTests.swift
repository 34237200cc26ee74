import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// An inbox on a FUSE mount (bindfs), written behind the mount's back as
/// another machine writes an NFS or sshfs inbox: inotify sees nothing, the
/// agent's scans do, and each job is still one task.
@Suite("A network inbox: jobs inotify never sees", .serialized)
struct NetworkInboxTests {
    /// A harness whose inbox is `source` seen through bindfs.
    static func harnessOnFUSE(_ config: String = "") throws -> (AgentHarness, TestMount, String)? {
        let harness = try AgentHarness(config: config)
        let source = harness.directory.file("inbox-source")
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: true)
        #expect(chmod(source, 0o700) == 0)
        guard let mount = try TestMount(bindfsOf: source, at: harness.inbox, outputIn: harness.directory.path) else { return nil }
        return (harness, mount, source)
    }

    /// Written under a temporary name and renamed in, in the source folder.
    static func dropBehind(_ source: String, _ name: String, _ text: String) throws {
        let temp = source + "/." + name + ".tmp"
        try text.write(toFile: temp, atomically: false, encoding: .utf8)
        guard rename(temp, source + "/" + name) == 0 else { throw TestFailure("cannot rename \(temp)") }
    }

    @Test func jobsWrittenBehindTheMountAreTakenOnceEach() throws {
        guard let (harness, mount, source) = try Self.harnessOnFUSE() else { return }
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("n.bin", size: 5_000)
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started"))
        #expect(eventually(within: 10) { agent.stderr.contains("also scanned on an interval") && agent.stderr.contains("FUSE") })
        // Behind the mount (no event at the inbox) and through it (an event, and a scan that may see it too).
        let count = 12
        for index in 0..<count {
            let job = "id = \"n\(index)\"\nurl = \"\(nginx.url("n.bin"))\"\ndest = \"n\(index).bin\"\n"
            if index.isMultiple(of: 2) {
                try Self.dropBehind(source, "n\(index).job", job)
            } else {
                try harness.drop("n\(index).job", job)
            }
        }
        #expect(eventually(within: 40) {
            ((try? harness.statusTasks()) ?? []).filter { $0["state"] as? String == "finished" }.count == count
        })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        for index in 0..<count { #expect(contents(harness.downloads + "/n\(index).bin") == data, "n\(index)") }
        let created = try harness.events().filter { $0.type == "created" }.compactMap(\.task)
        #expect(created.sorted() == (0..<count).map { "n\($0)" }.sorted(), "one task per job")
        #expect(harness.jobFiles().isEmpty)
        withExtendedLifetime(mount) {}
    }

    @Test func inboxPollZeroLeavesAFUSEInboxToInotify() throws {
        guard let (harness, mount, source) = try Self.harnessOnFUSE("inbox_poll = 0\n") else { return }
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("z.bin", size: 100)
        let agent = try harness.startAgent()
        #expect(harness.waitForEvent("agent_started"))
        try Self.dropBehind(source, "behind.job", "id = \"behind\"\nurl = \"\(nginx.url("z.bin"))\"\n")
        // A job through the mount is seen at once; the one behind it is not (no scan), until the next start.
        try harness.drop("through.job", "id = \"through\"\nurl = \"\(nginx.url("z.bin"))\"\ndest = \"through.bin\"\n")
        #expect(harness.waitForEvent("finished", task: "through"))
        #expect(try harness.events().contains { $0.task == "behind" } == false)
        #expect(!agent.stderr.contains("also scanned on an interval"))
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let next = try harness.startAgent(exitWhenIdle: true)
        #expect(next.wait(seconds: 30) == 0)
        #expect(try harness.events().contains { $0.task == "behind" && $0.type == "finished" })
        withExtendedLifetime(mount) {}
    }
}

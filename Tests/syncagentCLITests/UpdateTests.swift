import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 14 §2: `overwrite = "update"` fetches only what changed (wget -N,
/// curl -z), with the validators the file was published with.
@Suite(.serialized) struct UpdateTests {
    @Test func aSecondRunAsksIfChangedAndLeavesAnUnchangedFileAlone() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let first = try nginx.serve("sync.bin", size: 200_000)
        let job = "url = \"\(nginx.url("sync.bin"))\"\ndest = \"sync.bin\"\noverwrite = \"update\"\n"
        let dest = harness.downloads + "/sync.bin"

        try harness.drop("a.job", "id = \"a\"\n" + job)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(FileManager.default.contents(atPath: dest) == first)
        let published = try FileManager.default.attributesOfItem(atPath: dest)

        // Same file on the server: one 304, no byte written, the file untouched.
        try harness.drop("b.job", "id = \"b\"\n" + job)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let requests = nginx.requests.filter { $0.uri == "/sync.bin" }
        #expect(requests.map(\.status) == [200, 304], "\(requests.map(\.status))")
        #expect(requests.last?.bytesSent == 0)
        let after = try FileManager.default.attributesOfItem(atPath: dest)
        #expect(after[.systemFileNumber] as? Int == published[.systemFileNumber] as? Int, "the same inode: never rewritten")
        #expect(after[.modificationDate] as? Date == published[.modificationDate] as? Date)
        let b = try harness.tasksByID()["b"]
        #expect(b?["state"] as? String == "finished" && b?["unchanged"] as? Bool == true)
        #expect(try harness.run(["status"]).stdout.contains(" unchanged "))
        #expect(!FileManager.default.fileExists(atPath: dest + ".part"))

        // Changed on the server (new size, so a new ETag even within the second): fetched and replaced.
        let second = try nginx.serve("sync.bin", size: 150_000, seed: 9)
        try harness.drop("c.job", "id = \"c\"\n" + job)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(nginx.requests.filter { $0.uri == "/sync.bin" }.last?.status == 200)
        #expect(FileManager.default.contents(atPath: dest) == second)
        #expect(try harness.tasksByID()["c"]?["unchanged"] as? Bool == false)

        // Changed here (a byte appended): the validators no longer describe it, so no condition is sent.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: dest))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data([0x42]))
        try handle.close()
        try harness.drop("d.job", "id = \"d\"\n" + job)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(nginx.requests.filter { $0.uri == "/sync.bin" }.last?.status == 200)
        #expect(FileManager.default.contents(atPath: dest) == second)

        // A file this agent never published is fetched whole and replaced.
        try "someone else's".write(toFile: harness.downloads + "/foreign.bin", atomically: true, encoding: .utf8)
        try harness.drop("e.job", "id = \"e\"\nurl = \"\(nginx.url("sync.bin"))\"\ndest = \"foreign.bin\"\noverwrite = \"update\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        #expect(FileManager.default.contents(atPath: harness.downloads + "/foreign.bin") == second)
        #expect(try harness.run(["replay", "--verify"]).status == 0)
    }

    /// A cron job drops the same jobs every hour: the notification says what changed.
    @Test func aBatchOfUpdatesIsSummedUpAsUpdatedAndUnchanged() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        for name in ["x", "y", "z"] { try nginx.serve("\(name).bin", size: 5000) }
        func dropAll(_ round: Int) throws {
            for name in ["x", "y", "z"] {
                try harness.drop("\(name)\(round).job", """
                    url = "\(nginx.url("\(name).bin"))"
                    dest = "mirror/\(name).bin"
                    overwrite = "update"
                    batch = "hourly"
                    """)
            }
        }
        try dropAll(1)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        try nginx.serve("z.bin", size: 6000, seed: 3)
        try dropAll(2)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let notices = try harness.events().filter { $0.type == "notified" }.compactMap { $0.data["summary"] as? String }
        #expect(notices == ["hourly: 3 transfers finished", "hourly: 1 updated, 2 unchanged"], "\(notices)")
        #expect(try harness.run(["status"]).stdout.contains("6 finished (2 unchanged)"))

        // submit --update writes the same job; update is for downloads only.
        let submitted = try harness.run(["submit", "--update", nginx.url("x.bin"), "--dest", "mirror/x.bin"])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let id = submitted.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try harness.tasksByID()[id]?["unchanged"] as? Bool == true)
        let data = try harness.run(["submit", "--kind", "data", "--update", nginx.url("x.bin"), "--dest", "d.bin"])
        #expect(data.status != 0 && data.stderr.contains("key \"overwrite\" \"update\" (fetch only if changed) applies to downloads"))
    }
}

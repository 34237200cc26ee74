import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `DEST.part` is the agent's while its task writes it: a file of anyone
/// else's there is never truncated, published or removed, and one changed
/// under the agent is noticed before anything is published.
@Suite("Partial files: only the agent's own are written, published or removed", .serialized)
struct PartialFileTests {
    /// A FIFO put where the agent's own files were: opening it used to wait
    /// for a writer (or reader) for ever, with the loop and stop signals.
    @Test func aFIFOInPlaceOfAnAgentsFileFailsTheTaskNotTheAgent() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("f.bin", size: 2 << 20)
        try server.serve("u.bin", size: 10)
        let body = harness.directory.file("body.bin")
        try Data(count: 4 << 20).write(to: URL(fileURLWithPath: body))
        try harness.drop("f.job", "id = \"f\"\nurl = \"\(server.url("f.bin", "rate=200000"))\"\n")
        try harness.drop("u.job", "id = \"u\"\nkind = \"upload\"\nurl = \"\(server.url("up"))\"\nbody_file = \"\(body)\"\n"
                         + "max_speed = \"200K\"\n")
        let first = try harness.startAgent()
        #expect(eventually(within: 20) {
            let progressed = Set(((try? harness.events()) ?? []).filter { $0.type == "progressed" }.compactMap(\.task))
            return progressed.isSuperset(of: ["f", "u"])
        })
        first.signal(SIGKILL)
        _ = first.wait(seconds: 10)
        for path in [harness.downloads + "/f.bin.part", body] {
            #expect(unlink(path) == 0 && mkfifo(path, 0o644) == 0)
        }
        let second = try harness.startAgent(exitWhenIdle: true)
        let status = second.wait(seconds: 30)
        if status == nil { second.signal(SIGKILL) }
        #expect(status == 4, "the agent must neither hang nor crash: \(second.stderr.suffix(1500))")
        let tasks = try harness.tasksByID()
        #expect((tasks["f"]?["error"] as? String)?.contains("f.bin.part is not a regular file") == true, "\(tasks["f"] ?? [:])")
        #expect((tasks["u"]?["error"] as? String)?.contains("is not a regular file") == true, "\(tasks["u"] ?? [:])")
    }
}

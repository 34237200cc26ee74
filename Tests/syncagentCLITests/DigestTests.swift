import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 42 point 2 (SPEC §6 rule 3, "checked, not trusted"): an adversary
/// zeroed 5,000 bytes inside a paused `.part` (its size unchanged), or
/// changed one byte of a finished file and put its mtime back: `replay
/// --verify` said everything matched, and a resumed task published the
/// damaged file. The digests progress records catch both.
@Suite("Digests of durable bytes", .serialized)
struct DigestTests {
    /// Overwrites `count` bytes at `offset` of `path` with zeros, in place (the size stays).
    func zero(_ path: String, at offset: Int, count: Int) throws {
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset))
        try handle.write(contentsOf: Data(count: count))
    }

    /// `bytes A-B` spans named in `text`.
    func spans(in text: String) -> [Range<Int>] {
        text.matches(of: /bytes (\d+)-(\d+)/).compactMap { match in
            guard let start = Int(match.output.1), let end = Int(match.output.2), start < end else { return nil }
            return start..<end
        }
    }

    func progressed(_ harness: AgentHarness, _ id: String) throws -> [AgentHarness.LoggedEvent] {
        try harness.events().filter { $0.task == id && $0.type == "progressed" }
    }

    /// One connection: paused, its durable prefix zeroed in the middle.
    /// `replay --verify` names the task, the file and the bytes; `resume`
    /// fetches them again (the log and `status` say why) and the file
    /// published is the server's, byte for byte.
    @Test func aZeroedRangeInAPausedPartIsFoundAndFetchedAgain() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("z.bin", size: 48 << 20)
        try harness.drop("z.job", "url = \"\(nginx.url("slow/z.bin"))\"\nid = \"z\"\ndest = \"z.bin\"\n")
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        #expect(eventually(within: 30) { (try? progressed(harness, "z").last?.data["bytes"] as? Int).flatMap { $0 } ?? 0 >= 20 << 20 })
        #expect(try harness.run(["pause", "z"]).status == 0)
        #expect(eventually { harness.state(of: "z") == "paused" })
        let held = try #require(try harness.tasksByID()["z"]?["bytes"] as? Int)
        let part = "\(harness.downloads)/z.bin.part"
        let zeroedAt = 12 << 20 + 4321
        #expect(held > zeroedAt + 5000)
        try zero(part, at: zeroedAt, count: 5000)

        let verify = try harness.run(["replay", "--verify"])
        #expect(verify.status == 5, "\(verify.stdout)")
        let line = verify.stdout.split(separator: "\n").first { $0.hasPrefix("mismatch: z: ") }.map(String.init) ?? ""
        #expect(line.contains(part), "\(verify.stdout)")
        #expect(spans(in: line).contains { $0.contains(zeroedAt) }, "the damaged bytes are named: \(line)")

        #expect(try harness.run(["resume", "z"]).status == 0)
        #expect(eventually(within: 60) { harness.state(of: "z") == "finished" })
        #expect(contents("\(harness.downloads)/z.bin") == data, "the file published is the server's")
        let mismatch = try progressed(harness, "z").compactMap { $0.data["mismatch"] as? String }
        #expect(mismatch.count == 1, "\(mismatch)")
        #expect(spans(in: mismatch.first ?? "").contains { $0.contains(zeroedAt) }, "\(mismatch)")
        // Fetched again from the damage on: the bytes before it were kept.
        let resumedAt = try harness.events().last { $0.task == "z" && $0.type == "progressed" && $0.data["mismatch"] != nil }?.data["bytes"] as? Int
        #expect((resumedAt ?? 0) > 0 && (resumedAt ?? .max) <= zeroedAt, "\(resumedAt ?? -1)")
        let status = try harness.run(["status", "--task", "z"])
        #expect(status.stdout.contains("do not match the sha256 logged for them"), "\(status.stdout)")
        let finished = try harness.events().last { $0.task == "z" && $0.type == "finished" }
        #expect(finished?.data["sha256"] as? String == sha256Hex(data), "finished records the published bytes' digest")
        try expectVerifyClean(harness)
    }

    /// A finished file with one byte changed and its modification time put
    /// back: `replay --verify` finds it by its digest and says where.
    @Test func aChangedByteInAFinishedFileWithItsMtimeBackIsFound() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("f.bin", size: 24 << 20)
        try harness.drop("f.job", "url = \"\(nginx.url("f.bin"))\"\nid = \"f\"\ndest = \"f.bin\"\n")
        try harness.runUntilIdle()
        try expectVerifyClean(harness)
        let path = "\(harness.downloads)/f.bin"
        #expect(contents(path) == data)

        var info = stat()
        #expect(stat(path, &info) == 0)
        let changedAt = 17 << 20 + 99
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: UInt64(changedAt))
        try handle.write(contentsOf: Data([data[changedAt] ^ 0x01]))
        try handle.close()
        var times = [info.st_atim, info.st_mtim]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)

        let verify = try harness.run(["replay", "--verify"])
        #expect(verify.status == 5, "\(verify.stdout)")
        let line = verify.stdout.split(separator: "\n").first { $0.hasPrefix("mismatch: f: ") }.map(String.init) ?? ""
        #expect(line.contains(path) && line.contains("sha256"), "\(verify.stdout)")
        #expect(spans(in: line).contains { $0.contains(changedAt) && $0.count <= 16 << 20 }, "the changed bytes are named: \(line)")
    }

    /// Several connections: paused, stopped, one of its durable ranges
    /// (not the first) zeroed. `replay --verify` names it; the next agent's
    /// resume fetches that range again and nothing else of what was held.
    @Test func aZeroedRangeOfASegmentedDownloadIsFoundAndFetchedAgain() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("s.bin", size: 96 << 20)
        try harness.drop("s.job", "url = \"\(nginx.url("slow/s.bin"))\"\nid = \"s\"\ndest = \"s.bin\"\nconnections = 4\n")
        let agent = try harness.startAgent()
        // Each of the 4 connections has made a few MiB durable.
        func held() -> [[Int]] {
            ((try? progressed(harness, "s").last { $0.data["ranges"] != nil }?.data["ranges"]) as? [[Int]]) ?? []
        }
        #expect(eventually(within: 30) { held().count == 4 && held().allSatisfy { $0[1] - $0[0] >= 10 << 20 } })
        #expect(try harness.run(["pause", "s"]).status == 0)
        #expect(eventually { harness.state(of: "s") == "paused" })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let ranges = held()
        #expect(ranges.count == 4, "\(ranges)")
        let third = try #require(ranges.dropFirst(2).first)
        let zeroedAt = third[0] + 9 << 20 + 17
        #expect(zeroedAt + 5000 < third[1])
        let part = "\(harness.downloads)/s.bin.part"
        try zero(part, at: zeroedAt, count: 5000)

        let verify = try harness.run(["replay", "--verify"])
        #expect(verify.status == 5, "\(verify.stdout)")
        let lines = verify.stdout.split(separator: "\n").filter { $0.hasPrefix("mismatch: s: ") }.map(String.init)
        #expect(lines.count == 1 && lines[0].contains(part), "\(verify.stdout)")
        #expect(spans(in: lines.first ?? "").contains { $0.contains(zeroedAt) && third[0] <= $0.lowerBound }, "\(lines)")

        #expect(try harness.run(["resume", "s"]).status == 0)
        try harness.runUntilIdle()
        #expect(contents("\(harness.downloads)/s.bin") == data, "the file published is the server's")
        let dropped = try progressed(harness, "s").last { $0.data["mismatch"] != nil }
        let keptRanges = dropped?.data["ranges"] as? [[Int]] ?? []
        // The other ranges are kept whole; the damaged one up to its last record before the damage.
        #expect(keptRanges.count == 4, "\(keptRanges)")
        #expect(Array(keptRanges.prefix(2)) == Array(ranges.prefix(2)) && keptRanges.last == ranges.last, "\(keptRanges) of \(ranges)")
        #expect(keptRanges[2][0] == third[0] && keptRanges[2][1] <= zeroedAt, "\(keptRanges)")
        try expectVerifyClean(harness)
    }
}

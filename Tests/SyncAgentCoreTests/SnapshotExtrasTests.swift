import Foundation
import Testing
@testable import SyncAgentCore

/// Format 8: a spec and a task's details end with named extras, so a job
/// key or a task field added later adds a name, not a format.
@Suite("Snapshot extras")
struct SnapshotExtrasTests {
    /// A download named by its server, live, with its own lowest speed.
    static func namedState() -> AgentState {
        var state = AgentState()
        let spec = TaskSpec(url: "https://h.test/get", dest: "/d/get", minSpeed: 0, minSpeedTimeS: 45, nameFromServer: true)
        state.apply(Event(seq: 1, atMs: 1, task: "n", body: .created(spec)))
        state.apply(Event(seq: 2, atMs: 2, task: "n", body: .started(Started(attempt: 1, offset: 0, url: spec.url))))
        state.apply(Event(seq: 3, atMs: 3, task: "n", body: .progressed(Progressed(bytes: 0, dest: "/d/Report é.pdf"))))
        state.apply(Event(seq: 4, atMs: 4, task: "plain", body: .created(TaskSpec(url: "https://h.test/x", dest: "/d/x"))))
        return state
    }

    @Test func extrasAndServerNamesComeBack() throws {
        let state = Self.namedState()
        let restored = try Snapshot.decode(Snapshot.encode(state))
        #expect(restored == state)
        #expect(restored["n"]?.spec.minSpeed == 0 && restored["n"]?.spec.minSpeedTimeS == 45 && restored["n"]?.spec.nameFromServer == true)
        #expect(restored["n"]?.namedDest == "/d/Report é.pdf")
        #expect(restored.holder(ofDestination: "/d/Report é.pdf") == "n")
        #expect(restored.holder(ofDestination: "/d/get") == "n")
        // Written a part at a time, the same bytes.
        var streamed: [UInt8] = []
        _ = try Snapshot.write(state, partBytes: 64) { streamed += $0 }
        #expect(streamed == Snapshot.encode(state))
        // `status` passing over what it does not show reads the same task.
        let table = try Snapshot.encode(state).withUnsafeBytes {
            try Snapshot.decode($0, forTable: .init(named: ["n"], queuedListed: 0, hiddenEndedBeforeMs: nil)).state
        }
        #expect(table["n"]?.namedDest == "/d/Report é.pdf" && table["n"]?.spec.minSpeed == 0)
    }

    /// The bytes of `state`'s snapshot with `old` (of the same length) made `new`, signed again.
    static func resigned(_ state: AgentState, replacing old: String, with new: String) throws -> [UInt8] {
        var bytes = Array(Snapshot.encode(state).dropLast(8))
        let needle = Array(old.utf8)
        let at = try #require(bytes.indices.first { bytes[$0...].starts(with: needle) })
        bytes.replaceSubrange(at..<(at + needle.count), with: Array(new.utf8))
        let sum = bytes.withUnsafeBytes { Snapshot.checksum($0) }
        return bytes + (0..<8).map { UInt8(truncatingIfNeeded: sum >> (8 * $0)) }
    }

    /// A name this build does not know was written by a newer one: the
    /// snapshot is refused as of another format (its events, where they
    /// remain, are read instead), naming it, never read with the key let go.
    @Test(arguments: [("min_speed_time", "min_speed_kind"), ("named_dest", "named_zzzz")])
    func anExtraThisBuildDoesNotKnowIsANewerSyncagents(old: String, new: String) throws {
        let bytes = try Self.resigned(Self.namedState(), replacing: old, with: new)
        do {
            _ = try Snapshot.decode(bytes)
            Issue.record("a snapshot with an unknown extra was read")
        } catch let error as Snapshot.Malformed {
            #expect(error.ofAnotherFormat)
            #expect(error.description.contains("\"\(new)\"") && error.description.contains("newer"), "\(error)")
        }
    }

    /// A known extra whose value is not what its name holds is damage.
    @Test func aKnownExtraWithAWrongValueIsDamage() throws {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "t", body: .created(TaskSpec(url: "https://h.test/x", dest: "/d/x", minSpeed: 7))))
        // "min_speed", its value's length (1, zig-zag 2) and its one byte (7, zig-zag 14).
        var bytes = Array(Snapshot.encode(state).dropLast(8))
        let needle = Array("min_speed".utf8) + [2, 14]
        let at = try #require(bytes.indices.first { bytes[$0...].starts(with: needle) })
        bytes[at + needle.count - 1] = 0x80  // a varint that does not end within its value
        let sum = bytes.withUnsafeBytes { Snapshot.checksum($0) }
        bytes += (0..<8).map { UInt8(truncatingIfNeeded: sum >> (8 * $0)) }
        do {
            _ = try Snapshot.decode(bytes)
            Issue.record("a damaged extra was read")
        } catch let error as Snapshot.Malformed {
            #expect(!error.ofAnotherFormat, "\(error)")
        }
    }

    /// A snapshot of format 3 (what one before extras read as) still reads, its tasks without them.
    @Test func anOlderFormatStillReads() throws {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "plain", body: .created(TaskSpec(url: "https://h.test/x", dest: "/d/x"))))
        #expect(try Snapshot.decode(Snapshot.encode(state, format: 3)) == state)
    }
}

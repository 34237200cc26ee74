import CSQLite
import Foundation
import Testing
import TestSupport
@testable import SyncAgent
@testable import SyncAgentCore

/// The fixture logs (Tests/Fixtures/logs/README.md), written by one commit's
/// code, read by this build's: each replays to the state its rows, decoded
/// one by one, fold to; the snapshot logs start from a snapshot of the
/// format their name says; and the raw log holds every event type.
@Suite("FixtureLogReplay")
struct FixtureLogReplayTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../Fixtures/logs").standardizedFileURL.path
    static let snapshotFormats = [2, 3, 4, 5, 6, 7, 8]

    let directory = TempDirectory()

    /// A copy of a fixture's log (opening one, even to read, writes -wal and -shm beside it).
    func copy(_ fixture: String) throws -> String {
        let path = directory.file("\(fixture).sqlite")
        try FileManager.default.copyItem(atPath: Self.folder + "/\(fixture)/events.sqlite", toPath: path)
        return path
    }

    /// The log's rows, each decoded by itself.
    func decodedRows(_ store: EventStore, after seq: Int64 = 0) throws -> [(row: EventStore.Row, event: Event)] {
        var rows: [EventStore.Row] = []
        try store.forEachRow(after: seq) { rows.append($0) }
        return try rows.map { row in
            (row, Event(seq: row.seq, atMs: row.atMs, task: row.task, body: try EventCoding.body(type: row.type, data: row.data, seq: row.seq)))
        }
    }

    // MARK: Every event type

    /// Every case of `EventBody` by its `type`. `EventBody` is not
    /// `CaseIterable` (its cases carry payloads) and `EventBody.allTypes`
    /// lacks `upload_created` and `split`, so the list is kept here, and
    /// `typeName` switches over every case without a default: a case added
    /// to `EventBody` does not compile here until it is named, and then the
    /// test below fails until a fixture log holds a row of it (a new fixture,
    /// written by the code that added the case: never rewrite these).
    static let everyType = [
        "created", "started", "progressed", "paused", "resumed", "redirected", "retrying", "finished", "failed", "cancelled",
        "rejected", "agent_started", "agent_stopped", "batch_finished", "notified", "controlled", "config_reloaded", "expanded",
        "forgotten", "hook_started", "hook_ended", "compacted", "upload_created", "split", "retargeted",
    ]
    /// Types added after the all-events fixture was written, each held by
    /// the fixture the commit that added it wrote (that one is never rewritten).
    static let typesInLaterFixtures = ["retargeted": "retargeted"]

    static func typeName(_ body: EventBody) -> String {
        switch body {
        case .created: "created"
        case .started: "started"
        case .progressed: "progressed"
        case .paused: "paused"
        case .resumed: "resumed"
        case .redirected: "redirected"
        case .retrying: "retrying"
        case .finished: "finished"
        case .failed: "failed"
        case .cancelled: "cancelled"
        case .rejected: "rejected"
        case .agentStarted: "agent_started"
        case .agentStopped: "agent_stopped"
        case .batchFinished: "batch_finished"
        case .notified: "notified"
        case .controlled: "controlled"
        case .configReloaded: "config_reloaded"
        case .expanded: "expanded"
        case .forgotten: "forgotten"
        case .hookStarted: "hook_started"
        case .hookEnded: "hook_ended"
        case .compacted: "compacted"
        case .uploadCreated: "upload_created"
        case .split: "split"
        case .retargeted: "retargeted"
        }
    }

    @Test func theRawLogHoldsEveryEventType() throws {
        let rows = try decodedRows(EventStore(readingFrom: copy("all-events")))
        for (row, event) in rows {
            #expect(Self.typeName(event.body) == row.type && event.type == row.type, "row \(row.seq) of type \(row.type)")
        }
        #expect(Self.everyType.count == Set(Self.everyType).count)
        #expect(Set(EventBody.allTypes).isSubset(of: Self.everyType), "EventBody.allTypes names a type missing here")
        let missing = Set(Self.everyType).subtracting(rows.map(\.row.type)).subtracting(Self.typesInLaterFixtures.keys)
        #expect(missing.isEmpty, "no row of type \(missing.sorted()) in the all-events fixture")
        for (type, fixture) in Self.typesInLaterFixtures {
            let later = try decodedRows(EventStore(readingFrom: copy(fixture)))
            #expect(later.contains { $0.row.type == type && Self.typeName($0.event.body) == type }, "no row of type \(type) in \(fixture)")
        }
    }

    /// What the raw log's rows say, beyond their types: every pause reason,
    /// every phase at the end, failures with several codes, families of both kinds.
    @Test func theRawLogHoldsEveryPhaseAndPauseReason() throws {
        let store = try EventStore(readingFrom: copy("all-events"))
        let events = try decodedRows(store).map(\.event)
        let reasons = Set(events.compactMap { event -> PauseReason? in
            if case .paused(let paused) = event.body { return paused.reason } else { return nil }
        })
        #expect(reasons == [.user, .agentStopping, .offline, .metered])
        let state = try store.replay()
        #expect(Set(state.orderedTasks.map(\.phase)) == Set(TaskPhase.allCases))
        #expect(state.orderedTasks.contains { $0.forgotten })
        let codes = Set(state.orderedTasks.compactMap { $0.errorCode?.rawValue })
        #expect(codes.isSuperset(of: ["http_404", "curl_7", "checksum_mismatch", "retries_exhausted", "total_timeout", "segment_failed",
                                      "part_failed", "upload_refused", "dest_reserved"]), "\(codes.sorted())")
        #expect(state.orderedTasks.contains { $0.hls != nil } && state.orderedTasks.contains { $0.splitInto != nil })
    }

    // MARK: Replay

    /// No snapshot: `EventStore.replay` is the fold of the rows decoded one
    /// by one, at the end and at every point (`replay --until`).
    @Test func theRawLogReplaysAsItsRowsFoldedOneByOne() throws {
        let store = try EventStore(readingFrom: copy("all-events"))
        #expect(try store.newestSnapshotSeq() == 0 && store.prunedThrough() == 0)
        let events = try decodedRows(store).map(\.event)
        #expect(events.map(\.seq) == Array(1...Int64(events.count)), "seqs without gaps")
        var state = AgentState()
        for event in events {
            state.apply(event)
            if event.seq % 25 == 0 { #expect(try store.replay(through: event.seq) == state, "replay through \(event.seq)") }
        }
        #expect(try store.replay() == state)
        #expect(state.orphanEvents.isEmpty)
    }

    /// Each snapshot log holds one snapshot, of its format, marked pruned
    /// (events it covers were deleted: it is the only record of them),
    /// then events after it; replay is that snapshot, decoded, with the
    /// rows after it folded one by one. Formats 3 to 7 were written from
    /// the very story the raw log tells (7's progress with digests): their snapshot holds its fold.
    /// Format 8's story has jobs more (its own lowest speeds, files named
    /// by their servers): its snapshot holds them as named extras.
    @Test(arguments: snapshotFormats)
    func aSnapshotLogReplaysFromItsSnapshotAndTheRowsAfterIt(format: Int) throws {
        let path = try copy("snapshot-format-\(format)")
        let store = try EventStore(readingFrom: path)
        let snapshots = try Self.snapshots(in: path)
        #expect(snapshots.count == 1, "\(snapshots.map { ($0.seq, $0.format) })")
        guard let snapshot = snapshots.first else { return }
        #expect(snapshot.format == format && snapshot.pruned && snapshot.done)
        #expect(try store.prunedThrough() == snapshot.seq)
        // The compaction deleted rows the snapshot covers: replay cannot do without it.
        var covered = 0
        try store.forEachRow(through: snapshot.seq) { _ in covered += 1 }
        #expect(covered < snapshot.seq, "no row deleted")
        #expect(Snapshot.readableFormats.contains(Int64(format)))

        let snapshotState = try Snapshot.decode(snapshot.bytes)
        #expect(snapshotState.lastSeq == snapshot.seq)
        let tail = try decodedRows(store, after: snapshot.seq).map(\.event)
        #expect(!tail.isEmpty)
        var state = snapshotState
        for event in tail { state.apply(event) }
        #expect(try store.replay() == state)
        #expect(try store.replay(through: snapshot.seq) == snapshotState)
        #expect(state.orphanEvents.isEmpty)

        if format >= 8 {
            let tasks = snapshotState.orderedTasks
            #expect(tasks.contains { $0.spec.minSpeed == 0 } && tasks.contains { $0.spec.minSpeed == 4096 && $0.spec.minSpeedTimeS == 60 })
            let named = tasks.filter { $0.spec.nameFromServer == true }
            #expect(named.count == 4 && named.allSatisfy { $0.namedDest != nil })
            // A live one holds its server's name beside its own; an ended one holds neither.
            let live = try #require(named.first { $0.id == "named-iso" })
            #expect(snapshotState.holder(ofDestination: live.namedDest!) == "named-iso")
            #expect(snapshotState.holder(ofDestination: live.spec.dest!) == "named-iso")
            #expect(state["named-iso"]?.phase == .finished && state["named-iso"]?.dest == live.namedDest)
            #expect(named.contains { $0.namedDest == "/home/ada/Downloads/notes.1.pdf" })
        } else if format >= 7 {
            // Its story's progress records digests (the raw log's, older, has none): the fold held them.
            #expect(snapshotState.orderedTasks.contains { $0.details.box?.fields.digests?.records.isEmpty == false })
            let raw = try decodedRows(EventStore(readingFrom: copy("all-events"))).map(\.event)
            var withoutDigests = snapshotState
            for position in withoutDigests.tasks.indices { withoutDigests.tasks[position].details.modify { $0.digests = nil } }
            #expect(withoutDigests == AgentState.replay(raw), "but for digests, the snapshot is not the raw log's fold")
        } else if format >= 3 {
            let raw = try decodedRows(EventStore(readingFrom: copy("all-events"))).map(\.event)
            #expect(snapshotState == AgentState.replay(raw), "the snapshot is not the raw log's fold")
        } else {
            // Format 2 has no field of a resumable upload: its story has none.
            #expect(!snapshotState.orderedTasks.contains { $0.spec.upload != nil || $0.upload != nil })
        }
    }

    /// Today's coding writes each row's `data` back to the very bytes it
    /// read. A failure here means the log's wire form changed: old logs
    /// must still replay (the tests above), but the change is worth knowing.
    @Test(arguments: ["all-events", "retargeted", "renditions"] + snapshotFormats.map { "snapshot-format-\($0)" })
    func everyRowEncodesBackToItsBytes(fixture: String) throws {
        for (row, event) in try decodedRows(EventStore(readingFrom: copy(fixture))) {
            #expect(EventCoding.data(of: event.body) == row.data, "row \(row.seq) (\(row.type))")
        }
    }

    /// The log of retargets (issue 38): its rows folded one by one, at every
    /// seq; the tasks end where its story left them, each at the URL it moved to.
    @Test func theRetargetLogReplaysAsItsRowsFoldedOneByOne() throws {
        let store = try EventStore(readingFrom: copy("retargeted"))
        var state = AgentState()
        for event in try decodedRows(store).map(\.event) {
            state.apply(event)
            #expect(try store.replay(through: event.seq) == state, "replay through \(event.seq)")
        }
        #expect(try store.replay() == state && state.orphanEvents.isEmpty)
        #expect(state["debian"]?.phase == .finished && state["debian"]?.currentURL.contains("Expires=1710316800") == true)
        #expect(state["debian"]?.spec.url.contains("Expires=1710230400") == true, "the job's URL stays its identity")
        #expect(state["dataset"]?.phase == .running && state["dataset"]?.currentURL == "https://mirror.example.com/dataset-2024-03.tar.zst")
        #expect(state["dataset"]?.awaitsRetargetCheck == false && state["dataset"]?.restartReason?.hasPrefix("the new URL serves") == true)
        #expect(state["notes"]?.phase == .paused && state["notes"]?.bytes == 0 && state["notes"]?.restartReason?.hasPrefix("retargeted: ") == true)
    }

    /// The log of videos with separate renditions (issue 38): its rows folded one by one, at
    /// every seq; the renditions its `expanded` events hold are the fold's, a snapshot keeps them,
    /// and each video's family counts the renditions' children with the video's.
    @Test func theRenditionsLogReplaysAsItsRowsFoldedOneByOne() throws {
        let store = try EventStore(readingFrom: copy("renditions"))
        var state = AgentState()
        for event in try decodedRows(store).map(\.event) {
            state.apply(event)
            #expect(try store.replay(through: event.seq) == state, "replay through \(event.seq)")
        }
        #expect(try store.replay() == state && state.orphanEvents.isEmpty)
        #expect(try Snapshot.decode(Snapshot.encode(state)) == state)
        let concert = try #require(state["concert"])
        #expect(concert.phase == .finished && concert.spec.hls?.audio == "fr" && concert.spec.hls?.subtitles == "en")
        #expect(concert.hls?.renditions?.tracks.map(\.kind) == [.audio, .subtitles])
        #expect(concert.hls?.renditions?.tracks.first?.language == "fr-CA")
        #expect(state.families["concert"]?.total == 7 && state.families["concert"]?.finished == 7)
        #expect(state["joined"]?.errorCode == .muxFailed && state.families["joined"]?.finished == 5)
        #expect(state["german"]?.errorCode == .noRendition && state.families["german"] == nil)
        #expect(state["lecture"]?.phase == .running && state.families["lecture"]?.finished == 4)
    }

    // MARK: Reading snapshots as stored

    struct StoredSnapshot {
        var seq: Int64
        var format: Int
        var pruned: Bool
        var done: Bool
        var bytes: [UInt8]
    }

    /// The `snapshots` rows with their parts joined, read with SQLite directly (not through `EventStore`).
    static func snapshots(in path: String) throws -> [StoredSnapshot] {
        var db: OpaquePointer?
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else { throw StoreError(message: "cannot open \(path)") }
        defer { sqlite3_close_v2(db) }
        func rows(_ sql: String, _ body: (OpaquePointer) -> Void) throws {
            var statement: OpaquePointer?
            guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
                throw StoreError(message: String(cString: sqlite3_errmsg(db)))
            }
            defer { sqlite3_finalize(statement) }
            while sqlite3_step(statement) == SQLITE_ROW { body(statement) }
        }
        var snapshots: [StoredSnapshot] = []
        try rows("SELECT seq, format, pruned, done, parts, bytes FROM snapshots ORDER BY seq") { row in
            snapshots.append(StoredSnapshot(seq: sqlite3_column_int64(row, 0), format: Int(sqlite3_column_int64(row, 1)),
                                            pruned: sqlite3_column_int64(row, 2) == 1, done: sqlite3_column_int64(row, 3) == 1, bytes: []))
        }
        for index in snapshots.indices {
            try rows("SELECT data FROM snapshot_parts WHERE seq = \(snapshots[index].seq) ORDER BY part") { row in
                let count = Int(sqlite3_column_bytes(row, 0))
                if let blob = sqlite3_column_blob(row, 0) {
                    snapshots[index].bytes += UnsafeRawBufferPointer(start: blob, count: count)
                }
            }
        }
        return snapshots
    }
}

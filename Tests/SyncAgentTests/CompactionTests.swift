import Foundation
import Testing
import TestSupport
@testable import SyncAgent
@testable import SyncAgentCore

/// `compact` on real SQLite files: the fold read back (snapshot + tail) is
/// the fold of every event ever written, whatever was deleted.
@Suite("Compaction of the SQLite log")
struct CompactionTests {
    let directory = TempDirectory()
    var path: String { directory.file("events.sqlite") }

    func rawEvents(_ store: EventStore) throws -> [Event] {
        var events: [Event] = []
        try store.forEach { events.append($0) }
        return events
    }

    @Test(arguments: 1...12)
    func compactThenReplayEqualsReplay(seed: UInt64) throws {
        var (events, random) = RandomLog.make(seed: seed, count: 1_200)
        let firstPart = Int.random(in: 200...900, using: &random)
        let writer = try EventStore(writingTo: path)
        try writer.append(Array(events[..<firstPart]))

        // Ended tasks older than the event in the middle of what is written go.
        let olderThanS: Int64 = 60
        let nowMs = events[firstPart / 2].atMs + olderThanS * 1000
        // Small transactions, so a task's events span several: each task is still counted once.
        let pacing = Compactor.Pacing(rowsPerTransaction: 7, pagesPerTransaction: 16, pauseMicroseconds: 0, besideAgent: false)
        let report = try Compactor.compact(eventLog: path, olderThanS: olderThanS, nowMs: nowMs, trigger: "requested", pacing: pacing)
        let before = AgentState.replay(events[..<firstPart])
        let pruned = Compaction.prunableTasks(in: before, endedBeforeMs: nowMs - olderThanS * 1000)
        #expect(report.snapshotSeq == Int64(firstPart) && report.tasks == pruned.count)

        let reader = try EventStore(readingFrom: path)
        #expect(try reader.replay() == before)
        let kept = try rawEvents(reader)
        #expect(kept.count == firstPart - report.events)
        // What went: the pruned tasks' events, and the agent's own from before the cutoff; nothing else.
        let gone = Set(pruned)
        for event in events[..<firstPart] where !kept.contains(event) {
            if let task = event.task, before.tasks[task] != nil {
                #expect(gone.contains(task), "event \(event.seq) of task \(task) deleted")
            } else {
                #expect(event.atMs < nowMs - olderThanS * 1000)
            }
        }
        #expect(!kept.contains { $0.task.map(gone.contains) == true })

        // The agent writes on; a second compaction folds further; replay still agrees, plans too.
        try writer.append(Array(events[firstPart...]))
        _ = try Compactor.compact(eventLog: path, olderThanS: olderThanS, nowMs: events.last!.atMs, trigger: "log_size", pacing: .besideAgent)
        let whole = AgentState.replay(events)
        #expect(try reader.replay() == whole)
        #expect(try reader.replay().recoveryPlans(nowMs: events.last!.atMs) == whole.recoveryPlans(nowMs: events.last!.atMs))

        // replay --until works from the last pruning point on, and says so before it.
        let prunedThrough = try reader.prunedThrough()
        #expect(prunedThrough == Int64(events.count))
        #expect(try reader.replay(through: prunedThrough) == whole)
        #expect(throws: StoreError.self) { try reader.replay(through: prunedThrough - 1) }
    }

    /// `submit` and `pause ID` look one id up instead of folding the log:
    /// the answer must be the fold's, whether the task's events are raw,
    /// compacted into the snapshot, or never were.
    @Test(arguments: 1...8)
    func aTaskLookedUpAloneIsWhatTheWholeFoldSays(seed: UInt64) throws {
        var (events, random) = RandomLog.make(seed: seed, count: 1_200)
        let writer = try EventStore(writingTo: path)
        let firstPart = Int.random(in: 300...900, using: &random)
        try writer.append(Array(events[..<firstPart]))
        // Every task ended by then goes: some are in the snapshot only.
        let nowMs = events[firstPart - 1].atMs + 60_000
        _ = try Compactor.compact(eventLog: path, olderThanS: 60, nowMs: nowMs, trigger: "requested", pacing: .besideAgent)
        try writer.append(Array(events[firstPart...]))

        let reader = try EventStore(readingFrom: path)
        let whole = try reader.replay()
        let rawCreations = Set(try rawEvents(reader).compactMap { event -> String? in
            if case .created = event.body { return event.task } else { return nil }
        })
        var compacted = 0
        try reader.lookingUpTasks { lookup -> Void in
            for task in whole.tasks {
                #expect(try lookup.knows(task.id), "\(task.id)")
                let record = try lookup.record(of: task.id)
                if rawCreations.contains(task.id) {
                    #expect(record == .whole(phase: task.phase), "\(task.id)")
                } else {
                    #expect(record == .compacted, "\(task.id)")
                    compacted += 1
                }
            }
            for unknown in ["nope", "", "a-b-c", String(repeating: "z", count: 64)] where whole[unknown] == nil {
                #expect(try !lookup.knows(unknown), "\(unknown)")
                #expect(try lookup.record(of: unknown) == .unknown, "\(unknown)")
            }
        }
        #expect(compacted > 0, "the seed compacts some tasks")
        // A log that is not there knows no task.
        let absent = try EventStore(readingFrom: directory.file("absent.sqlite")).lookingUpTasks { lookup in
            (try lookup.knows("a"), try lookup.record(of: "a"))
        }
        #expect(absent.0 == false && absent.1 == .unknown)
    }

    /// Found in review: a compaction run again at the same seq (the first
    /// died after deleting) rewrote its snapshot as not pruned, and replays
    /// before it then folded a log with holes as if it were whole.
    @Test func aSnapshotWrittenAgainAtTheSameSeqStaysPruned() throws {
        let events = Self.finishedTasks(20)
        try EventStore(writingTo: path).append(events)
        let nowMs = events.last!.atMs + 1
        _ = try Compactor.compact(eventLog: path, olderThanS: 0, nowMs: nowMs, trigger: "requested", pacing: .alone)
        let store = try EventStore(writingTo: path)
        #expect(try store.prunedThrough() == Int64(events.count))
        try store.writeSnapshot(try store.replay(), nowMs: nowMs)
        #expect(try store.prunedThrough() == Int64(events.count))
        #expect(throws: StoreError.self) { try store.replay(through: 3) }
        // Seqs go on after the snapshot, never from 1 again.
        #expect(store.lastSeq == Int64(events.count))
    }

    /// The agent writes on while a compaction deletes: what it wrote after the
    /// snapshot stays, and a task run again since (by the user) keeps all its
    /// events: it is live, and its job may be read back from its `created`.
    @Test func eventsWrittenAfterTheSnapshotAreNeverDeleted() throws {
        var events = Self.finishedTasks(10)
        let store = try EventStore(writingTo: path)
        try store.append(events)
        let snapshot = AgentState.replay(events)
        try store.writeSnapshot(snapshot, nowMs: 0)
        let later = Event(seq: Int64(events.count + 1), atMs: events.last!.atMs + 5, task: "t3",
                          body: .resumed(Resumed(bytes: 0, reason: "run again by the user")))
        try store.append([later])
        events.append(later)
        var tasks = ["t3", "t4"]
        let step = try store.deleteEvents(tasks: &tasks, through: snapshot.lastSeq, beforeMs: 0, limit: 1_000)
        #expect(step.tasks == ["t4"] && tasks.isEmpty)
        var kept: [Event] = []
        try store.forEach(task: "t3") { kept.append($0) }
        #expect(kept == events.filter { $0.task == "t3" })
        #expect(try store.holdsCreated(of: "t3", at: kept[0].seq))
        #expect(try store.replay() == AgentState.replay(events))
        // Nothing may be deleted above a seq no snapshot covers.
        var more = ["t5"]
        #expect(throws: StoreError.self) { try store.deleteEvents(tasks: &more, through: later.seq, beforeMs: 0, limit: 10) }
    }

    /// `status --watch` folds as the log grows; a compaction between two rounds must not leave holes.
    @Test func aReaderFoldingAsTheLogGrowsCatchesUpAcrossACompaction() throws {
        let events = Self.finishedTasks(30)
        let store = try EventStore(writingTo: path)
        try store.append(Array(events[..<200]))
        var watched = AgentState()
        try store.catchUp(&watched)
        try store.append(Array(events[200...]))
        _ = try Compactor.compact(eventLog: path, olderThanS: 0, nowMs: events.last!.atMs + 1, trigger: "requested", pacing: .alone)
        try EventStore(readingFrom: path).catchUp(&watched)
        #expect(watched == AgentState.replay(events))
    }

    /// A snapshot goes in parts, each its own transaction, so no write holds
    /// the file long beside the agent; a crash between them leaves no snapshot.
    @Test func aSnapshotInPartsIsWholeOrAbsent() throws {
        let (_, store, state) = try randomLog(seed: 4, count: 2_000)
        try store.writeSnapshot(state, nowMs: 0, partBytes: 1_000)
        // Parts are cut where a field ends once 1,000 bytes are waiting, in whole words but the last.
        let whole = Snapshot.encode(state).count
        let parts = try #require(Int(try sqlValue("SELECT count(*) FROM snapshot_parts")))
        #expect(parts > 1 && parts <= whole / 1_000 + 1, "\(parts) parts of \(whole) bytes")
        #expect(try sqlValue("SELECT count(*) FROM snapshot_parts WHERE part < \(parts - 1) AND (length(data) < 1000 OR length(data) % 8 <> 0)") == "0")
        #expect(try EventStore(readingFrom: path).replay() == state)
        // A part lost (as if the row had come before it): an error while events remain is no state at all — they are read instead.
        try sql("DELETE FROM snapshot_parts WHERE part = 3")
        #expect(try EventStore(readingFrom: path).replay() == state)
        try sql("UPDATE snapshots SET pruned = 1")
        #expect { try EventStore(readingFrom: path).replay() } throws: { "\($0)".contains("part 3 is missing") }
        // Parts no row names (a crash before the row) are removed by the next snapshot.
        try sql("DELETE FROM snapshots; INSERT INTO snapshot_parts VALUES (7, 0, X'00')")
        try store.writeSnapshot(state, nowMs: 0)
        #expect(try sqlValue("SELECT count(*) FROM snapshot_parts WHERE seq = 7") == "0")
        #expect(try EventStore(readingFrom: path).replay() == state)
    }

    /// The agent's own fold, handed over, is stored as it is (every index
    /// with it) and pruned like a fold of the log; one that covers events the
    /// file does not hold is refused, and no snapshot is written of it.
    @Test func aGivenFoldIsStoredWholeAndOneAheadOfTheLogIsRefused() throws {
        let (events, _, state) = try randomLog(seed: 9, count: 1_500)
        var ahead = state
        ahead.apply(Event(seq: state.lastSeq + 1, atMs: events.last!.atMs, task: "late", body: .created(TaskSpec(url: "http://h.test/late", dest: "/d/late"))))
        #expect { try Compactor.compact(eventLog: path, olderThanS: 0, nowMs: events.last!.atMs, trigger: "intake", pacing: .alone,
                                        given: { ahead }) } throws: { "\($0)".contains("holds events up to \(state.lastSeq)") }
        #expect(try sqlValue("SELECT count(*) FROM snapshots") == "0")

        let report = try Compactor.compact(eventLog: path, olderThanS: 0, nowMs: events.last!.atMs + 1, trigger: "intake",
                                           pacing: .alone, given: { state })
        #expect(report.snapshotSeq == state.lastSeq && report.events > 0)
        #expect(try EventStore(readingFrom: path).replay() == state)
    }

    /// A stop asked while a snapshot is written cuts it short between
    /// parts: no row names it, and the next snapshot removes its parts.
    @Test func aSnapshotCutShortByAStopLeavesNoSnapshot() throws {
        let (_, store, state) = try randomLog(seed: 6, count: 1_000)
        var asked = 0
        #expect(throws: CompactionCutShort.self) {
            try store.writeSnapshot(state, nowMs: 0, partBytes: 1_000, stopRequested: { asked += 1; return asked > 3 })
        }
        #expect(try sqlValue("SELECT count(*) FROM snapshots") == "0")
        #expect(try sqlValue("SELECT count(*) FROM snapshot_parts") == "3")
        try store.writeSnapshot(state, nowMs: 0)
        #expect(try sqlValue("SELECT count(*) FROM snapshot_parts") == "1")
        #expect(try EventStore(readingFrom: path).replay() == state)
    }

    /// Found by an adversary: a snapshot killed while its parts were written
    /// left them until the next snapshot. The agent's start removes parts
    /// no row names, and only those.
    @Test func partsNoSnapshotNamesAreRemovedAndOnlyThose() throws {
        let events = try logWithSnapshot(seed: 8, count: 300, pruned: false)
        try sql("INSERT INTO snapshot_parts VALUES (7, 0, X'00'); INSERT INTO snapshot_parts VALUES (7, 1, X'01')")
        let store = try EventStore(writingTo: path)
        #expect(try store.removeUnnamedSnapshotParts() == 2)
        #expect(try store.removeUnnamedSnapshotParts() == 0)
        #expect(try sqlValue("SELECT count(*) FROM snapshot_parts WHERE seq = 7") == "0")
        #expect(try EventStore(readingFrom: path).replay() == AgentState.replay(events))
    }

    /// Found by review: the snapshot's memory is made (and its pages
    /// populated) before its parts are read, so a damaged size in its row
    /// must be refused first, not turned into gigabytes.
    @Test func aSnapshotRowClaimingGigabytesIsRefusedWithoutTakingThem() throws {
        try logWithSnapshot(seed: 5, count: 500, pruned: true)
        try sql("UPDATE snapshots SET bytes = \(4 << 30)")
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let peakBefore = usage.ru_maxrss
        #expect { try EventStore(readingFrom: path).replay() } throws: { "\($0)".contains("bytes, not 1 of 4294967296") }
        getrusage(RUSAGE_SELF.rawValue, &usage)
        #expect(usage.ru_maxrss - peakBefore < 512 << 10, "peak RSS grew by \(usage.ru_maxrss - peakBefore) KiB")
    }

    /// Found by an adversary: a reader held open during a compaction let the
    /// WAL grow to the size of what was deleted, and it stayed that size for
    /// as long as the agent ran.
    @Test func theWriteAheadLogShrinksBackOnceAReaderLetsGo() throws {
        let events = Self.finishedTasks(3_000)
        let writer = try EventStore(writingTo: path)
        try writer.append(events)
        try writer.checkpoint()
        let reader = try ChildProcess("/usr/bin/python3", ["-c", """
            import sqlite3, sys, time
            db = sqlite3.connect(sys.argv[1], isolation_level=None)
            db.execute('BEGIN'); db.execute('SELECT count(*) FROM events').fetchall()
            print('reading', flush=True)
            time.sleep(3)
            db.execute('COMMIT')
            """, path], environment: ProcessInfo.processInfo.environment, outputIn: directory.path)
        _ = eventually { reader.stdout.contains("reading") }
        _ = try Compactor.compact(eventLog: path, olderThanS: 0, nowMs: events.last!.atMs + 1, trigger: "log_size", pacing: .besideAgent)
        #expect(reader.wait(seconds: 30) == 0, "\(reader.stderr)")
        // The agent writes on: its next checkpoints catch up and the WAL is cut back.
        var seq = Int64(events.count) + 1
        for _ in 0..<3 {
            try writer.append((0..<2_000).map { _ in
                defer { seq += 1 }
                return Event(seq: seq, atMs: 9_999_999, task: nil, body: .agentStopped(AgentStopped(reason: "x")))
            })
        }
        let wal = (try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
        #expect(wal <= 5 << 20, "WAL of \(wal) bytes")
    }

    @Test func replayUntilWorksFromEverySnapshotWhereEventsRemain() throws {
        let events = RandomLog.make(seed: 5, count: 900).events
        let writer = try EventStore(writingTo: path)
        try writer.append(Array(events[..<300]))
        // Nothing old enough: a snapshot at 300, no event deleted.
        _ = try Compactor.compact(eventLog: path, olderThanS: 1_000_000, nowMs: events[299].atMs, trigger: "log_size", pacing: .alone)
        try writer.append(Array(events[300...]))
        // No event went, so nothing is marked pruned: every point of the log can still be replayed.
        #expect(try writer.prunedThrough() == 0)
        for until in [1, 150, 300, 301, 450, 900] {
            #expect(try writer.replay(through: Int64(until)) == AgentState.replay(events[..<until]))
        }
    }

    @Test func aSnapshotOfAnotherFormatIsSkippedWhileTheEventsRemainAndRefusedOnceTheyAreGone() throws {
        let events = try logWithSnapshot(seed: 9, count: 400, pruned: false)
        try sql("UPDATE snapshots SET format = 99 WHERE seq = 400")
        // The events say what the snapshot would have: read from them.
        #expect(try EventStore(readingFrom: path).replay() == AgentState.replay(events))
        try sql("UPDATE snapshots SET pruned = 1 WHERE seq = 400")
        #expect {
            try EventStore(readingFrom: path).replay()
        } throws: { error in
            "\(error)".contains("snapshot at seq 400") && "\(error)".contains("snapshot format 99")
                && "\(error)".hasSuffix("run the syncagent that wrote it")
        }
        // Damage, not another format, is said so (a fourth adversary was sent to find "the syncagent that wrote it").
        try sql("UPDATE snapshots SET format = \(Snapshot.format) WHERE seq = 400; UPDATE snapshot_parts SET data = X'7e00' WHERE seq = 400 AND part = 0")
        #expect {
            try EventStore(readingFrom: path).replay()
        } throws: { error in
            "\(error)".contains("snapshot at seq 400") && "\(error)".hasSuffix("it is damaged: only a backup of the log brings back the tasks it held")
        }
    }

    /// A snapshot of an earlier format this build still reads (a log
    /// compacted before an upgrade) is read, not refused: once its events
    /// are gone it is the only record of them. (The store asked for the
    /// current format only, so such a log could not be opened after an upgrade.)
    @Test func aSnapshotOfAnEarlierFormatThisBuildReadsIsUsed() throws {
        // No tasks: formats 2 and 3 differ only inside tasks, so the bytes are format 2's but for their first.
        let events = [
            Event(seq: 1, atMs: 10, body: .agentStarted(AgentStarted(pid: 7, version: "0"))),
            Event(seq: 2, atMs: 20, body: .rejected(Rejected(file: "a.job", error: "bad", identity: "i"))),
            Event(seq: 3, atMs: 30, body: .agentStopped(AgentStopped(reason: "idle"))),
        ]
        let writer = try EventStore(writingTo: path)
        try writer.append(events)
        let state = AgentState.replay(events)
        try writer.writeSnapshot(state, nowMs: 0, pruned: true)
        var bytes = Array(Snapshot.encode(state, format: 3).dropLast(8))
        #expect(bytes[0] == 6, "format 3, as a zig-zag varint")
        bytes[0] = 4
        let sum = bytes.withUnsafeBytes { Snapshot.checksum($0) }
        bytes += (0..<8).map { UInt8(truncatingIfNeeded: sum >> (8 * $0)) }
        #expect(try Snapshot.decode(bytes) == state)
        let hex = bytes.map { String(format: "%02x", $0) }.joined()
        try sql("UPDATE snapshot_parts SET data = X'\(hex)' WHERE seq = 3; UPDATE snapshots SET format = 2, bytes = \(bytes.count) WHERE seq = 3; DELETE FROM events")
        #expect(try EventStore(readingFrom: path).replay() == state)
    }

    /// A random log of `count` events at `path`: its events, its writer and their fold.
    func randomLog(seed: UInt64, count: Int) throws -> (events: [Event], store: EventStore, state: AgentState) {
        let events = RandomLog.make(seed: seed, count: count).events
        let store = try EventStore(writingTo: path)
        try store.append(events)
        return (events, store, AgentState.replay(events))
    }

    /// A random log at `path` and its snapshot at its last event.
    @discardableResult
    func logWithSnapshot(seed: UInt64, count: Int, pruned: Bool) throws -> [Event] {
        let log = try randomLog(seed: seed, count: count)
        try log.store.writeSnapshot(log.state, nowMs: 0, pruned: pruned)
        return log.events
    }

    /// A busy day: every task created, started, progressed 20 times, finished.
    static func finishedTasks(_ count: Int) -> [Event] {
        var events: [Event] = []
        func add(_ body: EventBody, _ task: String) {
            events.append(Event(seq: Int64(events.count + 1), atMs: 1_000_000 + Int64(events.count) * 10, task: task, body: body))
        }
        for index in 0..<count {
            let id = "t\(index)"
            add(.created(TaskSpec(url: "http://h.test/\(id)", dest: "/d/\(id)")), id)
            add(.started(Started(attempt: 1, offset: 0, url: "http://h.test/\(id)")), id)
            for step in 1...20 { add(.progressed(Progressed(bytes: Int64(step) << 20, total: 20 << 20, etag: "\"x\"")), id) }
            add(.finished(Finished(bytes: 20 << 20, dest: "/d/\(id)", sha256: String(repeating: "a", count: 64))), id)
        }
        return events
    }

    @Test func aNewLogGivesFreedPagesBackAndAnOldOneIsRewrittenOnce() throws {
        let events = Self.finishedTasks(300)
        try EventStore(writingTo: path).append(events)
        let report = try Compactor.compact(eventLog: path, olderThanS: 0, nowMs: events.last!.atMs + 1, trigger: "requested", pacing: .alone)
        #expect(report.bytesAfter < report.bytesBefore)
        #expect(try sqlValue("PRAGMA auto_vacuum") == "2")
        #expect(try sqlValue("PRAGMA freelist_count") == "0")

        // A log created before snapshots existed has no incremental vacuum: compacted alone, it is rewritten with it.
        let old = directory.file("old.sqlite")
        try sql("PRAGMA journal_mode=WAL; CREATE TABLE events (seq INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, task TEXT, type TEXT NOT NULL, data TEXT NOT NULL); CREATE INDEX events_by_task ON events(task, seq); PRAGMA user_version = 2;", file: old)
        try EventStore(writingTo: old).append(events)
        #expect(try sqlValue("PRAGMA auto_vacuum", file: old) == "0")
        let oldReport = try Compactor.compact(eventLog: old, olderThanS: 0, nowMs: events.last!.atMs + 1, trigger: "requested", pacing: .alone)
        #expect(oldReport.bytesAfter < oldReport.bytesBefore / 2)
        #expect(try sqlValue("PRAGMA auto_vacuum", file: old) == "2")
        #expect(try EventStore(readingFrom: old).replay() == AgentState.replay(events))
    }

    /// Runs SQL through Python's sqlite3 (a second, independent client of the file).
    func sql(_ statements: String, file: String? = nil) throws {
        _ = try sqlValue(statements, file: file)
    }

    func sqlValue(_ statements: String, file: String? = nil) throws -> String {
        try pythonSQLite(file ?? path, statements)
    }
}

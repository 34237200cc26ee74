import Foundation
import Testing
import TestSupport
@testable import SyncAgentCore

/// A snapshot is the fold at a seq: read back, it is the same state, and
/// folding the rest of the log onto it gives what folding the whole log does.
@Suite("Snapshots of the fold")
struct SnapshotTests {
    @Test(arguments: 1...40)
    func snapshotThenTailEqualsTheWholeFold(seed: UInt64) throws {
        var (events, random) = RandomLog.make(seed: seed, count: 400)
        let whole = AgentState.replay(events)
        let cut = Int.random(in: 0...events.count, using: &random)
        let atCut = AgentState.replay(events.prefix(cut))
        let bytes = Snapshot.encode(atCut)
        var restored = try Snapshot.decode(bytes)
        #expect(restored == atCut)
        // Written twice, the same bytes: nothing depends on a dictionary's order.
        #expect(Snapshot.encode(restored) == bytes)
        for event in events[cut...] { restored.apply(event) }
        #expect(restored == whole)
        let nowMs = events.last!.atMs
        #expect(restored.recoveryPlans(nowMs: nowMs) == whole.recoveryPlans(nowMs: nowMs))
        #expect(Notices.drainedBatches(in: restored) == Notices.drainedBatches(in: whole))
        // The id list alone, read for a lookup of one id, names the same tasks.
        #expect(try bytes.withUnsafeBytes { try Snapshot.taskIDs($0) } == Set(atCut.tasks.map(\.id)))
    }

    /// `status`'s table read from a snapshot that passes over what it would
    /// not list (old ended tasks, the queue past its first rows) shows what
    /// it shows from the whole fold: the same rows, figures and summary.
    @Test(arguments: 1...60)
    func theTableFromASnapshotPassingOverTasksIsTheWholeFoldsTable(seed: UInt64) throws {
        var (events, random) = RandomLog.make(seed: seed, count: 400)
        let whole = AgentState.replay(events)
        let cut = Int.random(in: 0...events.count, using: &random)
        let bytes = Snapshot.encode(AgentState.replay(events.prefix(cut)))
        // Old enough to hide: tasks that ended before a random instant of the log.
        let nowMs = events[Int.random(in: 0..<events.count, using: &random)].atMs + StatusView.endedShownForMs
        let queuedListed = Int.random(in: 0...6, using: &random)
        let phases: Set<TaskPhase>? = Bool.random(using: &random) ? nil
            : Set(TaskPhase.allCases.filter { _ in Bool.random(using: &random) })
        let reading = Snapshot.TableReading(named: Set(events[cut...].compactMap(\.task)), queuedListed: queuedListed,
                                            hiddenEndedBeforeMs: StatusView.hiddenEndedBeforeMs(nowMs: nowMs))
        var (read, passedOver) = try bytes.withUnsafeBytes { try Snapshot.decode($0, forTable: reading) }
        for event in events[cut...] { read.apply(event) }

        let expected = StatusView.select(whole, phases: phases, all: false, queuedListed: queuedListed, nowMs: nowMs)
        let shown = StatusView.select(read, phases: phases, all: false, queuedListed: queuedListed, passedOver: passedOver, nowMs: nowMs)
        #expect(shown.tasks == expected.tasks)
        #expect(shown.tasks.map { read.figures(of: $0) } == expected.tasks.map { whole.figures(of: $0) })
        #expect(StatusView.summary(of: shown, in: read) == StatusView.summary(of: expected, in: whole))
        #expect(StatusView.summary(of: shown, in: read, agentRunning: false) == StatusView.summary(of: expected, in: whole, agentRunning: false))
    }

    /// Guards the property above: the random logs make snapshots where the
    /// table passes over queued tasks and hidden ones, and children with them.
    @Test func theTableReadingPassesOverTasksInTheRandomLogs() throws {
        var passed = Snapshot.PassedOver()
        var tasksLeft = 0
        for seed in UInt64(1)...20 {
            let events = RandomLog.make(seed: seed, count: 400).events
            let state = AgentState.replay(events)
            let reading = Snapshot.TableReading(named: [], queuedListed: 1, hiddenEndedBeforeMs: events[200].atMs)
            let read = try Snapshot.encode(state).withUnsafeBytes { try Snapshot.decode($0, forTable: reading) }
            passed.queued += read.passedOver.queued
            for (phase, count) in read.passedOver.hidden { passed.hidden[phase, default: 0] += count }
            tasksLeft += state.tasks.count - read.state.tasks.count
            #expect(read.state.runQueue.entries.isEmpty && read.state.reservedPaths.isEmpty, "indexes the table does not show are not read")
        }
        #expect(passed.queued > 0)
        #expect(passed.hidden.count == 3, "finished, failed and cancelled: \(passed.hidden)")
        #expect(tasksLeft > passed.queued + passed.hidden.values.reduce(0, +), "forgotten tasks and children are passed over uncounted")
    }

    /// A snapshot written a part at a time, never held whole, is the bytes
    /// `encode` makes, however small the parts (the lengths in front of its
    /// records come from a first pass; the checksum is summed part by part).
    @Test(arguments: [UInt64(3), 11, 29])
    func aSnapshotWrittenInPartsIsTheSnapshotMadeWhole(seed: UInt64) throws {
        let events = RandomLog.make(seed: seed, count: 400).events
        let state = AgentState.replay(events)
        let whole = Snapshot.encode(state)
        for partBytes in [1, 8, 13, 4096, 1 << 20] {
            var parts: [[UInt8]] = []
            let written = try Snapshot.write(state, partBytes: partBytes) { parts.append(Array($0)) }
            #expect(written == whole.count && parts.joined().elementsEqual(whole), "parts of \(partBytes) bytes")
            #expect(parts.allSatisfy { !$0.isEmpty })
            if partBytes >= whole.count { #expect(parts.count == 1) }
        }
        // A part that cannot be stored stops the write with its error.
        struct Full: Error {}
        var calls = 0
        #expect(throws: Full.self) {
            try Snapshot.write(state, partBytes: 64) { _ in
                calls += 1
                throw Full()
            }
        }
        #expect(calls == 1, "no part is written after one failed")
    }

    /// A task's header must tell its task's story: one that does not (a
    /// writer and a reader at odds) is damage, never a table of other tasks.
    @Test func aTaskHeaderThatDisagreesWithItsTaskIsRefused() throws {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "x1", body: .created(TaskSpec(url: "http://h.test/x1", dest: "/d/x1"))))
        let good = Snapshot.encode(state)
        #expect(try Snapshot.decode(good) == state)
        // Format, last seq, the id list (its length, count, "x1"), the task count, the record's length: then the header.
        let at = 1 + 1 + (8 + 1 + 3) + 1 + 8
        #expect(good[at] == 0 && good[at + 1] == 2, "queued, untouched")
        for (offset, byte) in [(at, UInt8(3)), (at + 1, UInt8(0)), (at + 1, UInt8(1)), (at + 1, UInt8(8))] {
            var bad = Array(good.dropLast(8))
            bad[offset] = byte
            let sum = bad.withUnsafeBytes { Snapshot.checksum($0) }
            bad += (0..<8).map { UInt8(truncatingIfNeeded: sum >> (8 * $0)) }
            #expect(throws: Snapshot.Malformed.self, "byte \(offset) = \(byte)") { try Snapshot.decode(bad) }
        }
    }

    /// A snapshot written before format 4 has no lengths to pass over by:
    /// read for the table, it is read whole.
    @Test func aSnapshotBeforeFormat4IsReadWholeForTheTable() throws {
        let events = RandomLog.make(seed: 7, count: 300).events
        var state = AgentState.replay(events)
        let old = Snapshot.encode(state, format: 3)
        // Hook runs are followed past their start from format 6 on, digests kept from format 7 on:
        // none comes back from an older one (their logs had none either).
        state.hooksInFlight = [:]
        state.hooksMayNotHaveRun = [:]
        var withoutDigests = state
        for position in withoutDigests.tasks.indices { withoutDigests.tasks[position].details.modify { $0.digests = nil } }
        #expect(try Snapshot.decode(old) == withoutDigests)
        let reading = Snapshot.TableReading(named: [], queuedListed: 0, hiddenEndedBeforeMs: .max)
        let read = try old.withUnsafeBytes { try Snapshot.decode($0, forTable: reading) }
        #expect(read.state == withoutDigests && read.passedOver == Snapshot.PassedOver())
    }

    @Test func theRandomLogsReachEveryPartOfTheState() {
        // Guards the property above against a generator too tame to test it:
        // every part of the state is set in some of the logs it folds.
        let states = (UInt64(1)...12).flatMap { seed -> [AgentState] in
            let events = RandomLog.make(seed: seed, count: 400).events
            return [AgentState.replay(events[..<200]), AgentState.replay(events)]
        }
        func reached(_ what: String, _ test: (AgentState) -> Bool) {
            let found = states.contains(where: test)
            #expect(found, "no random log sets \(what)")
        }
        func anyTask(_ what: String, _ test: (TaskState) -> Bool) {
            reached(what) { $0.tasks.contains(where: test) }
        }
        reached("children, families") { !$0.children.isEmpty && !$0.families.isEmpty }
        reached("published, rejected, orphans") { !$0.published.isEmpty && !$0.rejected.isEmpty && !$0.orphanEvents.isEmpty }
        reached("sources, reserved paths, run queue") { !$0.takenSources.isEmpty && !$0.reservedPaths.isEmpty && !$0.runQueue.entries.isEmpty }
        reached("settled parents") { !$0.settledParents.isEmpty }
        reached("owed notices") { !$0.owedNotices.isEmpty }
        reached("ended since notice") { !$0.endedSinceNotice.isEmpty }
        reached("owed own notices") { !$0.owedOwnNotices.isEmpty }
        reached("armed hooks, owed hooks") { !$0.armedHooks.isEmpty && !$0.owedTaskHooks.isEmpty }
        reached("owed batch hooks") { !$0.owedBatchHooks.isEmpty }
        reached("hook runs with no end recorded") { !$0.hooksInFlight.isEmpty }
        reached("hook runs that may not have run") { !$0.hooksMayNotHaveRun.isEmpty }
        reached("a running agent") { $0.runningAgentPid != nil }
        anyTask("done ranges") { $0.doneRanges != nil }
        anyTask("digests") { $0.digests != nil }
        anyTask("digests of ranges") { ($0.digests?.coverage.spans.count ?? 0) > 1 }
        anyTask("an HLS playlist") { $0.hls != nil }
        anyTask("a moved URL") { $0.currentURL != $0.spec.url }
        anyTask("forgotten") { $0.forgotten }
        anyTask("a pause reason") { $0.pauseReason != nil }
        anyTask("a restart reason") { $0.restartReason != nil }
        anyTask("a skip reason") { $0.skipReason != nil }
        anyTask("unchanged") { $0.unchanged }
        anyTask("a single-connection reason") { $0.singleConnectionReason != nil }
        anyTask("a response status") { $0.responseStatus != nil }
        anyTask("an error") { $0.error != nil }
    }

    @Test func aDamagedSnapshotIsAnErrorNotAState() throws {
        let state = AgentState.replay(RandomLog.make(seed: 3, count: 300).events)
        let bytes = Snapshot.encode(state)
        // Cut anywhere, or a byte changed in its framing: an error, never a crash or a partial state.
        for length in stride(from: 0, to: bytes.count, by: max(1, bytes.count / 200)) {
            #expect(throws: (any Error).self) { try Snapshot.decode(Array(bytes.prefix(length))) }
        }
        var otherFormat = bytes
        otherFormat[0] = 0x7e
        #expect(throws: Snapshot.Malformed.self) { try Snapshot.decode(otherFormat) }
        var random = SplitMix64(seed: 11)
        // Any byte changed, a URL's included, is found: never read back as another state.
        for _ in 0..<300 {
            var flipped = bytes
            flipped[Int.random(in: 0..<flipped.count, using: &random)] ^= UInt8.random(in: 1...255, using: &random)
            #expect(throws: Snapshot.Malformed.self) { try Snapshot.decode(flipped) }
        }
    }

    /// The tasks an intake created since a snapshot are counted from the
    /// end of the task list, whatever the seq (before the first task, between
    /// two, after the last).
    @Test func tasksCreatedAfterASeqAreCountedFromTheEnd() {
        let events = RandomLog.make(seed: 2, count: 400).events
        let state = AgentState.replay(events)
        let created = state.orderedTasks.map(\.createdSeq)
        #expect(created == created.sorted() && created.count > 10)
        for seq in [0, created[0] - 1, created[0], created[5], created[5] + 1, created.last!, created.last! + 1, Int64.max] {
            #expect(Compaction.tasksCreated(in: state, after: seq) == created.filter { $0 > seq }.count, "after \(seq)")
        }
        #expect(Compaction.tasksCreated(in: AgentState(), after: 0) == 0)
    }

    @Test func prunableTasksAreEndedLongAgoAndOweNothing() {
        for seed in UInt64(1)...20 {
            let events = RandomLog.make(seed: seed, count: 500).events
            let state = AgentState.replay(events)
            let cutoff = events[events.count / 2].atMs
            let prunable = Set(Compaction.prunableTasks(in: state, endedBeforeMs: cutoff))
            for id in prunable {
                let task = state[id]!
                #expect(task.phase.isEnded && task.endedAtMs! <= cutoff)
                #expect(!state.owedOwnNotices.contains(id) && !state.owedTaskHooks.contains(id))
                // A family goes whole or stays whole.
                let root = task.parentID ?? id
                #expect(prunable.contains(root))
                for child in state.children[root] ?? [] { #expect(prunable.contains(child)) }
            }
            // And every family whose every task is old goes.
            func isOld(_ task: TaskState) -> Bool {
                task.phase.isEnded && task.endedAtMs! <= cutoff
                    && !state.owedOwnNotices.contains(task.id) && !state.owedTaskHooks.contains(task.id)
            }
            for task in state.orderedTasks where task.parentID == nil {
                let family = [task] + (state.children[task.id] ?? []).map { state[$0]! }
                #expect(prunable.contains(task.id) == family.allSatisfy(isOld), "\(task.id)")
            }
            #expect(Compaction.prunableTasks(in: state, endedBeforeMs: .min).isEmpty)
        }
    }

    /// The snapshot writes a spec field by field: a field added to TaskSpec
    /// and not to the snapshot would silently vanish at the next start.
    @Test func everyFieldOfASpecComesBack() throws {
        let spec = TaskSpec(url: "https://h.test/v.m3u8?x=1", kind: .upload, dest: "/d/v", sha256: "ab", md5: "cd", priority: -3,
                            overwrite: .update, headers: [Header(name: "X-A", value: "1"), Header(name: "Authorization", value: "Bearer z")],
                            batch: "nightly", notify: .each, retries: 7, maxSpeed: 123_456, notBeforeMs: 1_795_000_000_000,
                            source: JobSource(file: "v.job", identity: "1:2:3"), method: "POST", bodyFile: "/home/me/v.bin",
                            formField: "file", form: [FormField(name: "title", value: "Talk é")], parent: "video",
                            byteRange: HLSByteRange(length: 1_000, offset: 20), hls: HLSOptions(variant: "1280x720", output: .file, maxDurationS: 90),
                            connections: 8, allowMetered: false,
                            upload: UploadOptions(protocol: .tus, chunkSize: 8 << 20, parallel: 4, part: ByteSpan(10, 20)),
                            minSpeed: 2048, minSpeedTimeS: 30, nameFromServer: true)
        // The rare keys' box stands for the 16 fields of `Rare`.
        let common = Mirror(reflecting: spec).children.filter { $0.label != "rare" }
        let fields = common + Mirror(reflecting: spec.rare.fields).children
        #expect(common.count == 11 && fields.count == 27, "TaskSpec has a new field: write and read it in Snapshot, compare it in TaskSpec.==, then update this count")
        for field in fields {
            let text = "\(field.value)"
            #expect(text != "nil" && text != "[]", "\(field.label ?? "?") is not set in this test")
        }
        let task = TaskState(id: "v", spec: spec, seq: 1, atMs: 2)
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 2, task: "v", body: .created(spec)))
        let restored = try Snapshot.decode(Snapshot.encode(state))
        #expect(restored["v"]?.spec == spec)
        #expect(restored["v"]?.hostKey == task.hostKey)
        #expect(restored == state)
    }

    /// A snapshot lists its task ids, then its tasks: a list that does not
    /// match them (an id twice, one missing) is damage, never a state with a
    /// task lost or found under the wrong id.
    @Test func aSnapshotWhoseIdListDisagreesWithItsTasksIsRefused() throws {
        var state = AgentState()
        for (seq, id) in ["x1", "x2"].enumerated() {
            state.apply(Event(seq: Int64(seq + 1), atMs: 1, task: id, body: .created(TaskSpec(url: "http://h.test/\(id)", dest: "/d/\(id)"))))
        }
        let good = Snapshot.encode(state)
        #expect(try Snapshot.decode(good) == state)
        // The first "x1" is in the id list: make it "x2", and sign the bytes again.
        var bad = Array(good.dropLast(8))
        let at = try #require(bad.indices.first { bad[$0] == UInt8(ascii: "x") && bad[$0 + 1] == UInt8(ascii: "1") })
        bad[at + 1] = UInt8(ascii: "2")
        let sum = bad.withUnsafeBytes { Snapshot.checksum($0) }
        bad += (0..<8).map { UInt8(truncatingIfNeeded: sum >> (8 * $0)) }
        #expect(throws: Snapshot.Malformed.self) { try Snapshot.decode(bad) }
    }

    /// The reader takes a task's kind, phase, host and headers from the task
    /// before it when their bytes repeat, and a published record's path and
    /// URL from its task's: tasks that repeat them, differ by one byte of
    /// the same length, or lack them all come back as written.
    @Test func tasksInARowComeBackAsWrittenWhereTheyRepeatAndWhereNot() throws {
        var state = AgentState()
        let rows: [(host: String, kind: TransferKind, headers: [Header], end: String?)] = [
            ("h1.test", .download, [Header(name: "A", value: "1")], "finished"),
            ("h1.test", .download, [Header(name: "A", value: "1")], "finished"),
            ("h1.test", .download, [Header(name: "A", value: "2")], nil),
            ("h2.test", .data, [Header(name: "B", value: "2")], "failed"),
            ("h2.test", .data, [], "finished"),
            ("h1.test", .download, [Header(name: "A", value: "2"), Header(name: "A", value: "2")], "elsewhere"),
        ]
        var seq: Int64 = 0
        for (index, row) in rows.enumerated() {
            let id = "t\(index)"
            let dest = "/d/f\(index)"
            seq += 1
            state.apply(Event(seq: seq, atMs: seq, task: id, body: .created(
                TaskSpec(url: "http://\(row.host)/f\(index)", kind: row.kind, dest: dest, headers: row.headers))))
            guard let end = row.end else { continue }
            seq += 1
            state.apply(Event(seq: seq, atMs: seq, task: id, body: .started(Started(attempt: 1, offset: 0, url: "http://\(row.host)/f\(index)"))))
            seq += 1
            switch end {
            case "failed":
                state.apply(Event(seq: seq, atMs: seq, task: id, body: .failed(Failed(reason: "r", code: .other("c"), bytes: 0))))
            default:
                // "elsewhere": published under another name than its dest (overwrite = "rename").
                let published = end == "elsewhere" ? "/d/f\(index).1" : dest
                state.apply(Event(seq: seq, atMs: seq, task: id, body: .finished(Finished(bytes: 3, dest: published))))
            }
        }
        #expect(state.published["/d/f5.1"]?.task == "t5" && state.published["/d/f0"]?.task == "t0")
        let decoded = try Snapshot.decode(Snapshot.encode(state))
        #expect(decoded == state)
        for (index, row) in rows.enumerated() {
            let task = try #require(decoded["t\(index)"])
            #expect(task.spec.kind == row.kind && task.spec.headers == row.headers && task.hostKey == state["t\(index)"]?.hostKey)
        }
        #expect(decoded["t2"]?.phase == .queued && decoded["t3"]?.phase == .failed && decoded["t4"]?.phase == .finished)
    }

    /// A spec's rare keys share one box: copies that change one key change
    /// only their own, and specs equal key by key are equal however made.
    @Test func aSpecsRareKeysAreItsOwn() {
        var a = TaskSpec(url: "http://h.test/x", dest: "/d/x", sha256: "ab", connections: 4)
        var b = a
        b.connections = 8
        #expect(a.connections == 4 && b.connections == 8 && a != b)
        b.connections = 4
        #expect(a == b)
        a.sha256 = nil
        a.connections = nil
        #expect(a == TaskSpec(url: "http://h.test/x", dest: "/d/x"))
        #expect(b.sha256 == "ab")
    }

    /// The snapshot writes every stored field of these by name: one added
    /// to the fold's state and not to `Snapshot` would vanish at a restart.
    @Test func theStateHasTheFieldsTheSnapshotWrites() {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "t", body: .created(TaskSpec(url: "http://h.test/x", dest: "/d/x"))))
        state.apply(Event(seq: 2, atMs: 2, task: "t", body: .failed(Failed(reason: "r", code: .other("c"), bytes: 0))))
        let task = state["t"]!
        let counts = [
            // (`sourcesOfTasks` and `gidIndex` are not written: they are made again from the tasks.)
            ("AgentState", Mirror(reflecting: state).children.count, 28),
            // (`jobAllowsMetered` is not written either: it is the job's.)
            ("TaskState", Mirror(reflecting: task).children.count, 12),
            ("TaskActivity", Mirror(reflecting: task.activity.box!.fields).children.count, 12),
            ("TaskDetails", Mirror(reflecting: task.details.box!.fields).children.count, 19),
            ("HLSProgress", Mirror(reflecting: HLSProgress(playlist: "", targetDurationMs: 0, ended: false, entries: [], mediaMs: 0,
                                                            lastSequence: nil)).children.count, 7),
            ("PublishedFile", Mirror(reflecting: PublishedFile(task: "", url: "", size: 0)).children.count, 7),
            ("Family", Mirror(reflecting: Family()).children.count, 4),
        ]
        for (name, found, written) in counts {
            #expect(found == written, "\(name) has \(found) stored fields, the snapshot writes \(written): add the new one to Snapshot")
        }
    }

    /// What a resumable upload's log says of its server side comes back from a snapshot.
    @Test func anUploadsSessionComesBack() throws {
        var state = AgentState()
        let spec = TaskSpec(url: "http://h.test/files/", kind: .upload, dest: nil, bodyFile: "/b",
                            upload: UploadOptions(protocol: .tus, parallel: 2))
        state.apply(Event(seq: 1, atMs: 1, task: "u", body: .created(spec)))
        state.apply(Event(seq: 2, atMs: 2, task: "u", body: .started(Started(attempt: 1, offset: 0, url: spec.url))))
        state.apply(Event(seq: 3, atMs: 3, task: "u", body: .uploadCreated(UploadCreated(url: "http://h.test/files/9", protocol: .tus,
                                                                                        extensions: ["creation", "termination"],
                                                                                        changedNs: 1_795_000_000_123_456_789))))
        state.apply(Event(seq: 4, atMs: 4, task: "u", body: .progressed(Progressed(bytes: 1 << 20, total: 5 << 20, chunk: 1 << 20))))
        var child = spec
        child.parent = "v"
        child.upload?.part = ByteSpan(0, 100)
        state.apply(Event(seq: 5, atMs: 5, task: "v", body: .created(TaskSpec(url: spec.url, kind: .upload, dest: nil, bodyFile: "/b",
                                                                                upload: UploadOptions(protocol: .tus, parallel: 2)))))
        state.apply(Event(seq: 6, atMs: 6, task: "v", body: .started(Started(attempt: 1, offset: 0, url: spec.url))))
        state.apply(Event(seq: 7, atMs: 7, task: "v.part1", body: .created(child)))
        state.apply(Event(seq: 8, atMs: 8, task: "v", body: .split(Split(parts: ["v.part1"]))))
        #expect(state["u"]?.upload == UploadSession(url: "http://h.test/files/9", extensions: ["creation", "termination"]))
        #expect(state["u"]?.chunkSize == 1 << 20 && state["v"]?.splitInto == 1 && state["v"]?.isFannedOut == true)
        let restored = try Snapshot.decode(Snapshot.encode(state))
        #expect(restored == state)
        #expect(restored["u"]?.upload?.extensions == ["creation", "termination"])
        #expect(restored["u"]?.bodyChangedNs == 1_795_000_000_123_456_789)
    }

    @Test func durations() {
        #expect(DurationText.seconds("7d") == 604_800)
        #expect(DurationText.seconds("12h") == 43_200)
        #expect(DurationText.seconds("30m") == 1_800)
        #expect(DurationText.seconds("45s") == 45)
        #expect(DurationText.seconds("0") == 0)
        #expect(DurationText.seconds("2w") == 1_209_600)
        for bad in ["", "d", "-1d", "7 d", "1.5h", "7y", "99999999999999999999d", "٣d"] { #expect(DurationText.seconds(bad) == nil) }
    }
}

import Foundation

/// The fold's state at a seq, as bytes: what the log's `snapshots` table
/// holds so start-up, `status` and `replay` fold only the events after it
/// (SPEC §6). Every field of `AgentState` is written, indexes included, so
/// a state read back is equal to the one written — not rebuilt by rules
/// that could drift from the fold's.
///
/// The layout is private to this file: a format number first, then fields in
/// a fixed order as varints and length-prefixed UTF-8. Tasks, which are
/// most of it, are written field by field; the rare payloads that are events
/// elsewhere (a rejection, a batch, a playlist) as the JSON their event
/// carries, so one codec describes each of them.
public enum Snapshot {
    /// Raised with every change to the layout below. A snapshot of a format
    /// this build does not read is never half-read: it is refused whole.
    /// A job key or a task field added later need not raise it: a spec and
    /// a task's details end with named extras (format 8 on, `extras`).
    public static let format = 8
    /// Formats this build reads: 2 lacks the fields of resumable uploads (none of its tasks had them);
    /// before 4, no task or index carried its length, so `status` could pass over none;
    /// before 5, the taken sources listed every task's job file too, not only control jobs';
    /// before 6, hook runs were not followed past their start (none is then in flight or lost);
    /// before 7, no task held the digests of its durable bytes (its events then had none);
    /// before 8, no spec or task had named extras (none then had `min_speed`,
    /// `min_speed_time`, `name_from_server` or a name from its server).
    public static let readableFormats: ClosedRange<Int64> = 2...8

    public struct Malformed: Error, CustomStringConvertible {
        public var description: String
        /// Written in a format this build does not read (another syncagent's), rather than damaged.
        public var ofAnotherFormat = false
        public init(description: String, ofAnotherFormat: Bool = false) {
            self.description = description
            self.ofAnotherFormat = ofAnotherFormat
        }
    }

    /// - Parameter format: this build's, or 3 (without lengths or task
    ///   headers), for tests that a log compacted before an upgrade is read.
    public static func encode(_ state: AgentState, format: Int = format) -> [UInt8] {
        precondition(format == 3 || format == Self.format, "snapshot format \(format) is not written")
        var out = SnapshotWriter(writesLengths: format >= 4, mode: .inMemory)
        out.writesDigests = format >= 7
        out.writesExtras = format >= 8
        emit(state, format: format, into: &out)
        var bytes = out.bytes
        let sum = bytes.withUnsafeBytes(checksum)
        withUnsafeBytes(of: sum.littleEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }

    /// `encode`'s bytes handed to `part` a piece of about `partBytes` at a
    /// time, never held whole: a snapshot of 100,000 tasks is 37 MB, which
    /// the compaction's thread held beside the state it was made from. The
    /// state is gone over twice: once for the lengths that stand in front of
    /// records and sections, then to write. Returns the bytes written.
    public static func write(_ state: AgentState, partBytes: Int, to part: (UnsafeRawBufferPointer) throws -> Void) throws -> Int {
        var sizing = SnapshotWriter(writesLengths: true, mode: .sizing)
        emit(state, format: format, into: &sizing)
        return try withoutActuallyEscaping(part) { part in
            var out = SnapshotWriter(writesLengths: true, mode: .streaming(lengths: sizing.lengths, total: sizing.total,
                                                                          partBytes: partBytes))
            out.sink = part
            // The writer must not outlive this call with `part` in it.
            defer { out.sink = nil }
            emit(state, format: format, into: &out)
            return try out.finish()
        }
    }

    private static func emit(_ state: AgentState, format: Int, into out: inout SnapshotWriter) {
        out.int(Int64(format))
        out.int(state.lastSeq)
        // The ids in creation order, then the tasks in that order. (The list
        // repeats the tasks' ids: formats 1 and 2 kept an order apart from the tasks.)
        // What `status` passes over — a task it would not list, an index it
        // does not show — carries its length in front (`lengthPrefixed`).
        // (Read in place: an array of 100,000 ids stood at the agent's peak, twice.)
        out.lengthPrefixed { $0.strings(state.tasks.keys) }
        out.int(Int64(state.tasks.count))
        for task in state.tasks {
            out.lengthPrefixed { out in
                if out.writesLengths { out.header(of: task, in: state) }
                out.task(task)
            }
        }
        // A task's job names its own file's identity: only control jobs' are listed (format 5 on).
        out.lengthPrefixed { $0.strings((format >= 5 ? state.controlSources : state.takenSources).sorted()) }
        out.lengthPrefixed { $0.strings(state.rejectedSources.sorted()) }
        out.int(Int64(state.rejected.count))
        for rejection in state.rejected { out.string(EventCoding.data(of: .rejected(rejection))) }
        out.int(Int64(state.endedSinceNotice.count))
        for (key, ids) in state.endedSinceNotice.sorted(by: { $0.key < $1.key }) { out.optionalString(key.name); out.strings(ids) }
        out.int(Int64(state.owedNotices.count))
        for (key, batch) in state.owedNotices.sorted(by: { $0.key < $1.key }) {
            out.optionalString(key.name); out.string(EventCoding.data(of: .batchFinished(batch)))
        }
        out.lengthPrefixed { out in
            out.int(Int64(state.runQueue.entries.count))
            for entry in state.runQueue.entries {
                out.int(Int64(entry.priority)); out.int(entry.seq)
                out.string(state.tasks[entry.position].id); out.string(state.tasks[entry.position].hostKey)
                out.optionalInt(entry.notBeforeMs)
            }
        }
        out.int(Int64(state.runningCount))
        out.counts(state.runningByHost)
        out.strings(state.owedOwnNotices.sorted())
        out.int(Int64(state.activeByBatch.count))
        for (key, count) in state.activeByBatch.sorted(by: { $0.key < $1.key }) { out.optionalString(key.name); out.int(Int64(count)) }
        out.int(Int64(state.activeCount))
        out.lengthPrefixed { out in
            // In the holders' creation order: each path is its holder's own destination.
            let holders = state.reservations.positions
            out.int(Int64(holders.count))
            for position in holders { out.string(state.tasks[position].spec.dest ?? ""); out.string(state.tasks[position].id) }
        }
        out.int(Int64(state.children.count))
        for (parent, ids) in state.children.sorted(by: { $0.key < $1.key }) { out.string(parent); out.strings(ids) }
        out.int(Int64(state.families.count))
        for (parent, family) in state.families.sorted(by: { $0.key < $1.key }) {
            out.string(parent); out.int(Int64(family.total)); out.int(Int64(family.finished)); out.int(Int64(family.lost))
            out.int(family.bytes)
        }
        out.strings(state.settledParents.sorted())
        out.optionalInt(state.runningAgentPid.map(Int64.init))
        out.lengthPrefixed { out in
            out.int(Int64(state.published.count))
            for (path, file) in state.published.sorted(by: { $0.key < $1.key }) {
                out.string(path); out.string(file.task); out.string(file.url); out.optionalString(file.sha256)
                out.optionalString(file.etag); out.optionalString(file.lastModified); out.int(file.size); out.optionalInt(file.modifiedNs)
            }
        }
        out.strings(state.armedHooks.map(\.rawValue).sorted())
        out.strings(state.owedTaskHooks.sorted())
        out.int(Int64(state.owedBatchHooks.count))
        for (seq, batch) in state.owedBatchHooks.sorted(by: { $0.key < $1.key }) {
            out.int(seq); out.string(EventCoding.data(of: .batchFinished(batch)))
        }
        out.int(Int64(state.orphanEvents.count))
        for seq in state.orphanEvents { out.int(seq) }
        if format >= 6 {
            for runs in [state.hooksInFlight, state.hooksMayNotHaveRun] {
                out.int(Int64(runs.count))
                for run in runs.values.sorted(by: { $0.startedSeq < $1.startedSeq }) { out.hookRun(run) }
            }
        }
        if format >= 8 {
            out.lengthPrefixed { out in
                // In the holders' creation order: each path is the name its holder's server gave.
                let holders = state.namedReservations.positions
                out.int(Int64(holders.count))
                for position in holders { out.string(state.tasks[position].namedDest ?? ""); out.string(state.tasks[position].id) }
            }
        }
    }

    /// A 64-bit checksum over whole words: a changed byte is found before a
    /// damaged snapshot could pass for a state (a bit flip inside a URL
    /// would otherwise read back as another URL).
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var sum = Checksum(count: bytes.count)
        let whole = bytes.count / 8 * 8
        sum.add(words: UnsafeRawBufferPointer(rebasing: bytes[..<whole]))
        return sum.finish(tail: UnsafeRawBufferPointer(rebasing: bytes[whole...]))
    }

    /// `checksum` a piece at a time, for bytes never held whole.
    struct Checksum {
        private var hash: UInt64

        init(count: Int) { hash = 0xcbf2_9ce4_8422_2325 ^ UInt64(count) }

        private mutating func mix(_ word: UInt64) {
            hash = (hash ^ word) &* 0x100_0000_01b3
            hash ^= hash >> 29
        }

        /// Whole words only: a multiple of 8 bytes.
        mutating func add(words bytes: UnsafeRawBufferPointer) {
            for index in 0..<(bytes.count / 8) { mix(bytes.loadUnaligned(fromByteOffset: index * 8, as: UInt64.self)) }
        }

        /// The last bytes, fewer than 8.
        mutating func finish(tail bytes: UnsafeRawBufferPointer) -> UInt64 {
            var tail: UInt64 = 0
            for byte in bytes { tail = tail << 8 | UInt64(byte) }
            mix(tail)
            return hash
        }
    }

    /// The error for a snapshot of a format this build does not read.
    public static func unreadable(format found: Int64) -> Malformed {
        Malformed(description: "snapshot format \(found), this syncagent reads formats \(readableFormats.lowerBound)–\(format)",
                  ofAnotherFormat: true)
    }

    /// Reads the format a snapshot starts with into `input`, refusing one this build does not read.
    private static func readFormat(_ input: inout SnapshotReader) throws {
        let found = try input.int()
        guard readableFormats.contains(found) else { throw unreadable(format: found) }
        input.format = found
    }

    /// What `status`'s table leaves out, for a snapshot read for it to pass
    /// over unread (format 4 on): with 100,000 tasks queued or ended long
    /// ago, reading them all was most of a `status`. What is passed over is
    /// counted (`PassedOver`); a fold of the events after the snapshot
    /// never meets a task it lacks, since every task they name is read.
    /// (A child created after the snapshot names its parent in the same
    /// commit, as its parent expands: a parent is never passed over under it.)
    /// The rules mirror `StatusView.select`'s; the state read is only for it:
    /// its run queue and counters do not match its tasks.
    public struct TableReading: Sendable {
        /// The tasks the events after the snapshot name: read, whatever they are.
        public var named: Set<String>
        /// Of the queued tasks never started (no parent, no children), the
        /// first this many in order are read; the rest only counted.
        public var queuedListed: Int
        /// Top-level tasks that ended before this are counted as hidden,
        /// unread; nil reads them.
        public var hiddenEndedBeforeMs: Int64?

        public init(named: Set<String>, queuedListed: Int, hiddenEndedBeforeMs: Int64?) {
            self.named = named
            self.queuedListed = queuedListed
            self.hiddenEndedBeforeMs = hiddenEndedBeforeMs
        }
    }

    /// The tasks a `TableReading` passed over, counted.
    public struct PassedOver: Equatable, Sendable {
        /// Queued tasks never started, past the ones read.
        public var queued = 0
        /// Ended tasks hidden for their age, per phase.
        public var hidden: [TaskPhase: Int] = [:]
        public init() {}
    }

    /// The state `encode` wrote. Throws on a snapshot of another format or
    /// one cut short; never returns a partial state.
    public static func decode(_ stored: UnsafeRawBufferPointer) throws -> AgentState {
        try decode(stored, forTable: nil).state
    }

    /// With a `TableReading`, the state lacks the tasks it passed over and
    /// the indexes `status` does not show (the id list, the run queue,
    /// reserved paths, taken and rejected sources, published files); a
    /// snapshot before format 4 is read whole.
    public static func decode(_ stored: UnsafeRawBufferPointer,
                              forTable table: TableReading?) throws -> (state: AgentState, passedOver: PassedOver) {
        guard stored.count >= 8 else { throw Malformed(description: "snapshot damaged: \(stored.count) bytes") }
        let bytes = UnsafeRawBufferPointer(rebasing: stored[..<(stored.count - 8)])
        let sum = stored[(stored.count - 8)...].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        var input = SnapshotReader(bytes)
        try readFormat(&input)
        guard checksum(bytes) == sum else { throw Malformed(description: "snapshot damaged: its checksum does not match") }
        let lengthPrefixed = input.format >= 4
        let table = lengthPrefixed ? table : nil
        var state = AgentState()
        var passedOver = PassedOver()
        state.lastSeq = try input.int()
        // The ids are kept as where they lie: each is checked against its task's own, never made a string.
        var order: [Range<Int>]?
        try input.section(lengthPrefixed, skip: table != nil) { input in
            order = try (0..<(try input.count())).map { _ in try input.span() }
        }
        let taskCount = try input.count()
        if let order, order.count != taskCount { throw input.malformed("task order (\(order.count) ids for \(taskCount) tasks)") }
        state.tasks.reserveCapacity(table == nil ? taskCount : 0)
        var repeats = SnapshotReader.Repeats()
        var passing: TablePass?
        if let table { passing = try TablePass(table, tasks: taskCount, at: input) }
        for position in 0..<taskCount {
            let end = lengthPrefixed ? try input.lengthPrefix() : nil
            var header: TaskHeader?
            if let end {
                let read = try input.header()
                if try passing?.passesOver(read, at: input, counting: &passedOver) == true {
                    guard input.offset <= end else { throw input.malformed("a task header within its record") }
                    input.offset = end
                    continue
                }
                header = read
            }
            let task = try input.task(&repeats)
            let taskID = task.id
            // A header that tells another story than its task would make `status` pass over the wrong tasks.
            if let header, !header.describes(task) { throw input.malformed("task \(taskID)'s header to match it") }
            // Consumed: the list takes the task without a copy (one per task was 4% of a `status`).
            guard order.map({ input.holds(taskID, at: $0[position]) }) ?? true, state.tasks.append(consume task) else {
                throw input.malformed("task \(taskID) out of order or twice")
            }
            if let end, input.offset != end { throw input.malformed("task \(taskID) to end at byte \(end)") }
        }
        try input.section(lengthPrefixed, skip: table != nil) { input in
            let listed = try input.strings()
            for position in state.tasks.indices {
                state.indexSourceOfTask(at: position)
                state.indexGIDOfTask(at: position)
            }
            // Before format 5 the list held the tasks' own as well.
            state.controlSources = Set(input.format >= 5 ? listed : listed.filter { !state.hasTaken($0) })
        }
        try input.section(lengthPrefixed, skip: table != nil) { input in state.rejectedSources = Set(try input.strings()) }
        for _ in 0..<(try input.count()) {
            guard case .rejected(let rejection) = try input.event("rejected") else { throw input.malformed("rejection") }
            state.rejected.append(rejection)
        }
        for _ in 0..<(try input.count()) { state.endedSinceNotice[BatchKey(try input.optionalString())] = try input.strings() }
        for _ in 0..<(try input.count()) {
            let key = BatchKey(try input.optionalString())
            state.owedNotices[key] = try input.batch()
        }
        try input.section(lengthPrefixed, skip: table != nil) { input in
            for _ in 0..<(try input.count()) {
                let priority = Int(try input.int()), seq = try input.int(), id = try input.string()
                // The host, written for the format: the task's own `hostKey` is used.
                _ = try input.string()
                guard let position = state.tasks.index(forKey: id) else { throw input.malformed("run queue task \(id) to be known") }
                state.runQueue.append(RunQueue.Entry(priority: priority, seq: seq, position: position, notBeforeMs: try input.optionalInt()))
            }
        }
        state.runningCount = Int(try input.int())
        state.runningByHost = try input.counts()
        state.owedOwnNotices = Set(try input.strings())
        for _ in 0..<(try input.count()) { state.activeByBatch[BatchKey(try input.optionalString())] = Int(try input.int()) }
        state.activeCount = Int(try input.int())
        try input.section(lengthPrefixed, skip: table != nil) { input in
            for _ in 0..<(try input.count()) {
                let path = try input.string(), id = try input.string()
                guard let position = state.tasks.index(forKey: id) else { throw input.malformed("reserved path holder \(id) to be known") }
                state.reservations.insert(path, position: position, in: state.tasks, keyOf: \.spec.dest)
            }
        }
        for _ in 0..<(try input.count()) { state.children[try input.string()] = try input.strings() }
        for _ in 0..<(try input.count()) {
            let parent = try input.string()
            var family = Family()
            family.total = Int(try input.int()); family.finished = Int(try input.int()); family.lost = Int(try input.int())
            family.bytes = try input.int()
            state.families[parent] = family
        }
        state.settledParents = Set(try input.strings())
        state.runningAgentPid = try input.optionalInt().map { Int32(truncatingIfNeeded: $0) }
        try input.section(lengthPrefixed, skip: table != nil) { input in
            let publishedCount = try input.count()
            state.published.reserveCapacity(publishedCount)
            for _ in 0..<publishedCount {
                // A record mostly repeats its task's dest and URL: read after the
                // task's id (which follows the path), they are the task's strings.
                let pathStart = input.offset
                try input.skipString()
                let id = try input.string()
                let afterID = input.offset
                let task = state.tasks.index(forKey: id)
                input.offset = pathStart
                let path = try input.string(sharing: task.flatMap { state.tasks[$0].dest })
                input.offset = afterID
                state.published[path] = PublishedFile(task: id, url: try input.string(sharing: task.map { state.tasks[$0].spec.url }),
                                                      sha256: try input.optionalString(), etag: try input.optionalString(),
                                                      lastModified: try input.optionalString(), size: try input.int(),
                                                      modifiedNs: try input.optionalInt())
            }
        }
        state.armedHooks = Set(try input.strings().map { name in
            guard let hook = HookKind(rawValue: name) else { throw input.malformed("hook \(name)") }
            return hook
        })
        state.owedTaskHooks = Set(try input.strings())
        for _ in 0..<(try input.count()) {
            let seq = try input.int()
            state.owedBatchHooks[seq] = try input.batch()
        }
        for _ in 0..<(try input.count()) { state.orphanEvents.append(try input.int()) }
        if input.format >= 6 {
            for _ in 0..<(try input.count()) {
                let run = try input.hookRun()
                state.hooksInFlight[run.key] = run
            }
            for _ in 0..<(try input.count()) {
                let run = try input.hookRun()
                state.hooksMayNotHaveRun[run.key] = run
            }
        }
        if input.format >= 8 {
            try input.section(lengthPrefixed, skip: table != nil) { input in
                for _ in 0..<(try input.count()) {
                    let path = try input.string(), id = try input.string()
                    guard let position = state.tasks.index(forKey: id) else { throw input.malformed("named path holder \(id) to be known") }
                    state.namedReservations.insert(path, position: position, in: state.tasks, keyOf: \.namedDest)
                }
            }
        }
        guard input.atEnd else { throw input.malformed("end of snapshot") }
        return (state, passedOver)
    }

    /// The ids of the snapshot's tasks, read from the list at its start
    /// without decoding a task: a question about one id (`submit`, `pause ID`)
    /// need not decode them all. (The checksum is not checked: a damaged
    /// snapshot is refused whole by `decode`, which the agent and `status` use.)
    public static func taskIDs(_ stored: UnsafeRawBufferPointer) throws -> Set<String> {
        var input = SnapshotReader(stored)
        try readFormat(&input)
        _ = try input.int()
        if input.format >= 4 { _ = try input.lengthPrefix() }
        let count = try input.count()
        var ids = Set<String>(minimumCapacity: count)
        for _ in 0..<count { ids.insert(try input.string()) }
        return ids
    }

    public static func decode(_ bytes: [UInt8]) throws -> AgentState {
        try bytes.withUnsafeBytes { try decode($0) }
    }
}

private struct SnapshotWriter {
    enum Mode {
        /// Every byte kept in `bytes`; a length is filled in once its part is written.
        case inMemory
        /// Bytes counted and dropped: what is kept are the lengths, in order.
        case sizing
        /// Bytes handed to `sink` as they come, each length known beforehand (from `sizing`).
        case streaming(lengths: [Int], total: Int, partBytes: Int)
    }

    var bytes: [UInt8] = []
    /// Format 4 on: records and sections carry their lengths, tasks their headers.
    let writesLengths: Bool
    /// Format 7 on: a task's details end with the digests of its durable bytes.
    var writesDigests = true
    /// Format 8 on: a spec and a task's details end with named extras.
    var writesExtras = true
    let mode: Mode
    /// Bytes no longer in `bytes`: dropped (sizing) or handed to `sink`.
    private var flushed = 0
    var total: Int { flushed + bytes.count }
    /// The length-prefixed parts' lengths, in the order they are written.
    private(set) var lengths: [Int] = []
    private var nextLength = 0
    var sink: ((UnsafeRawBufferPointer) throws -> Void)?
    private var checksum: Snapshot.Checksum?
    /// The first failure of `sink`, or of the two passes to agree: said by `finish`.
    private var failure: Error?

    init(writesLengths: Bool, mode: Mode) {
        self.writesLengths = writesLengths
        self.mode = mode
        if case .streaming(_, let total, _) = mode { checksum = Snapshot.Checksum(count: total) }
        bytes.reserveCapacity(1 << 16)
    }

    /// Called after each string (what makes a snapshot large) and each
    /// record: hands on (or drops) what is buffered once it is a part's worth.
    mutating func flushIfFull() {
        switch mode {
        case .inMemory:
            return
        case .sizing:
            if bytes.count >= 1 << 16 {
                flushed += bytes.count
                bytes.removeAll(keepingCapacity: true)
            }
        case .streaming(_, _, let partBytes):
            if bytes.count >= partBytes { flush(final: false) }
        }
    }

    /// Hands whole words to the checksum and the sink, from the buffer itself;
    /// the last call, every byte and the checksum after them.
    private mutating func flush(final: Bool) {
        let words = bytes.count / 8 * 8
        bytes.withUnsafeBytes { checksum!.add(words: UnsafeRawBufferPointer(rebasing: $0[..<words])) }
        if final {
            let sum = bytes.withUnsafeBytes { checksum!.finish(tail: UnsafeRawBufferPointer(rebasing: $0[words...])) }
            withUnsafeBytes(of: sum.littleEndian) { bytes.append(contentsOf: $0) }
        }
        let handed = final ? bytes.count : words
        guard handed > 0 else { return }
        if failure == nil, let sink {
            do { try bytes.withUnsafeBytes { try sink(UnsafeRawBufferPointer(rebasing: $0[..<handed])) } } catch { failure = error }
        }
        flushed += handed
        bytes.removeFirst(handed)
    }

    /// After the last field of a streaming write: the rest, with the checksum. Returns the bytes written.
    mutating func finish() throws -> Int {
        guard case .streaming(let lengths, let total, _) = mode else { return total }
        if failure == nil, self.total != total || nextLength != lengths.count {
            failure = Snapshot.Malformed(description: "snapshot not written: its two passes came to \(total) and \(self.total) bytes, "
                                         + "\(lengths.count) and \(nextLength) lengths")
        }
        flush(final: true)
        if let failure { throw failure }
        return total + 8
    }

    /// Zig-zag varint: small numbers of either sign take one byte.
    mutating func int(_ value: Int64) {
        Self.appendInt(value, to: &bytes)
    }

    @inline(__always)
    static func appendInt(_ value: Int64, to bytes: inout [UInt8]) {
        var zigzag = UInt64(bitPattern: (value << 1) ^ (value >> 63))
        while zigzag >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: zigzag) | 0x80)
            zigzag >>= 7
        }
        bytes.append(UInt8(zigzag))
    }

    mutating func optionalInt(_ value: Int64?) {
        if let value { bytes.append(1); int(value) } else { bytes.append(0) }
    }

    mutating func bool(_ value: Bool) { bytes.append(value ? 1 : 0) }

    mutating func hookRun(_ run: HookRun) {
        string(run.key.hook.rawValue); optionalString(run.key.task); optionalInt(run.key.batchSeq)
        optionalString(run.batch); int(run.startedSeq); optionalInt(run.endUnknownSinceMs)
    }

    /// Writes `body`'s bytes after their length (8 bytes, little-endian,
    /// filled in once known), so a reader may pass over them unread.
    mutating func lengthPrefixed(_ body: (inout SnapshotWriter) -> Void) {
        guard writesLengths else { return body(&self) }
        switch mode {
        case .inMemory:
            let mark = bytes.count
            bytes.append(contentsOf: repeatElement(0, count: 8))
            body(&self)
            let length = UInt64(bytes.count - mark - 8)
            for index in 0..<8 { bytes[mark + index] = UInt8(truncatingIfNeeded: length >> (8 * index)) }
        case .sizing:
            bytes.append(contentsOf: repeatElement(0, count: 8))
            // Its slot taken before its body's: the writing pass reads them in the order they stand.
            let slot = lengths.count
            lengths.append(0)
            let start = total
            body(&self)
            lengths[slot] = total - start
        case .streaming(let lengths, _, _):
            let length = nextLength < lengths.count ? lengths[nextLength] : -1
            nextLength += 1
            withUnsafeBytes(of: UInt64(truncatingIfNeeded: length).littleEndian) { bytes.append(contentsOf: $0) }
            let start = total
            body(&self)
            if total - start != length, failure == nil {
                failure = Snapshot.Malformed(description: "snapshot not written: a part came to \(total - start) bytes, not \(length)")
            }
        }
        flushIfFull()
    }

    /// What `status` decides on before reading a task (`TaskHeader`).
    mutating func header(of task: TaskState, in state: AgentState) {
        bytes.append(TaskHeader.code(of: task.phase))
        var flags: UInt8 = task.forgotten ? TaskHeader.forgotten : 0
        if state.children[task.id] != nil {
            flags |= TaskHeader.hasChildren
        } else if TaskHeader.isUntouched(task) {
            flags |= TaskHeader.untouched
        }
        bytes.append(flags)
        optionalInt(task.endedAtMs)
        optionalString(task.parentID)
    }

    mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            int(Int64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
        flushIfFull()
    }

    mutating func optionalString(_ value: String?) {
        if let value { bytes.append(1); string(value) } else { bytes.append(0) }
    }

    mutating func strings<Values: Collection<String>>(_ values: Values) {
        int(Int64(values.count))
        for value in values { string(value) }
    }

    mutating func counts(_ values: [String: Int]) {
        int(Int64(values.count))
        for (key, count) in values.sorted(by: { $0.key < $1.key }) { string(key); int(Int64(count)) }
    }

    /// Every field of the spec, in binary: reading JSON back for 100,000
    /// tasks would cost most of a start-up. (SnapshotTests checks that
    /// every field of a fully set spec comes back.)
    mutating func spec(_ spec: TaskSpec) {
        string(spec.url); string(spec.kind.rawValue); optionalString(spec.dest); optionalString(spec.sha256); optionalString(spec.md5)
        int(Int64(spec.priority)); string(spec.overwrite.rawValue)
        int(Int64(spec.headers.count))
        for header in spec.headers { string(header.name); string(header.value) }
        optionalString(spec.batch); string(spec.notify.rawValue); optionalInt(spec.retries.map(Int64.init))
        optionalInt(spec.maxSpeed); optionalInt(spec.notBeforeMs)
        optionalString(spec.source?.file); optionalString(spec.source?.identity)
        optionalString(spec.method); optionalString(spec.bodyFile); optionalString(spec.formField)
        int(Int64(spec.form.count))
        for field in spec.form { string(field.name); string(field.value) }
        optionalString(spec.parent)
        optionalInt(spec.byteRange?.length); optionalInt(spec.byteRange?.offset)
        optionalString(spec.hls?.variant); optionalString(spec.hls?.output.rawValue); optionalInt(spec.hls?.maxDurationS.map(Int64.init))
        optionalInt(spec.connections.map(Int64.init))
        optionalInt(spec.allowMetered.map { $0 ? 1 : 0 })
        optionalString(spec.upload?.protocol.rawValue)
        optionalInt(spec.upload?.chunkSize); optionalInt(spec.upload.map { Int64($0.parallel) })
        optionalInt(spec.upload?.part?.start); optionalInt(spec.upload?.part?.end)
        guard writesExtras else { return }
        // Job keys added since format 8, by their names in a job file.
        extras([("min_speed", spec.minSpeed.map(SnapshotExtra.int)),
                ("min_speed_time", spec.minSpeedTimeS.map { .int(Int64($0)) }),
                ("name_from_server", spec.nameFromServer == true ? .flag : nil),
                ("audio", spec.hls?.audio.map(SnapshotExtra.text)),
                ("subtitles", spec.hls?.subtitles.map(SnapshotExtra.text))])
    }

    /// The extras that are set, each as its name and its value's bytes
    /// after their length: a reader can name one it does not know, and
    /// pass over the rest of the record as it would any field.
    mutating func extras(_ fields: [(name: String, value: SnapshotExtra?)]) {
        int(Int64(fields.count(where: { $0.value != nil })))
        for case let (name, value?) in fields {
            string(name)
            let encoded = value.bytes
            int(Int64(encoded.count))
            bytes.append(contentsOf: encoded)
        }
    }

    mutating func task(_ task: TaskState) {
        string(task.id)
        spec(task.spec)
        string(task.hostKey)
        int(task.bytes); int(Int64(task.attempts)); int(Int64(task.attemptsBeforeRerun)); int(Int64(task.attemptsNotCounted))
        int(Int64(task.redirects)); int(task.createdSeq); int(task.lastSeq); int(task.createdAtMs); int(task.updatedAtMs)
        int(task.speed)
        // The URL is written only when a redirect moved it off the spec's.
        optionalString(task.movedURL)
        optionalInt(task.total); optionalInt(task.notBeforeMs); optionalInt(task.endedAtMs); optionalInt(task.firstStartedAtMs)
        string(task.phase.rawValue)
        optionalString(task.pauseReason?.rawValue)
        bool(task.owesOwnNotice); bool(task.forgotten)
        guard let details = task.details.box?.fields else { bytes.append(0); return }
        bytes.append(1)
        optionalString(details.error); optionalString(details.errorCode?.rawValue); optionalString(details.etag)
        optionalString(details.lastModified); optionalString(details.restartReason); optionalString(details.publishedPath)
        optionalInt(details.responseStatus.map(Int64.init)); optionalString(details.skipReason)
        bool(details.unchanged)
        if let ranges = details.doneRanges {
            bytes.append(1)
            int(Int64(ranges.spans.count))
            for span in ranges.spans { int(span.start); int(span.end) }
        } else {
            bytes.append(0)
        }
        optionalString(details.singleConnectionReason)
        if let hls = details.hls {
            bytes.append(1)
            string(EventCoding.data(of: .expanded(Expanded(playlist: hls.playlist, targetDurationMs: hls.targetDurationMs,
                                                           ended: hls.ended, entries: hls.entries, renditions: hls.renditions))))
            int(hls.mediaMs); optionalInt(hls.lastSequence)
        } else {
            bytes.append(0)
        }
        optionalString(details.upload?.url); optionalString(details.upload?.extensions?.joined(separator: ","))
        optionalInt(details.chunkSize); optionalInt(details.splitInto.map(Int64.init)); optionalInt(details.bodyChangedNs)
        guard writesDigests else { return }
        let records = details.digests?.records ?? []
        int(Int64(records.count))
        for record in records {
            int(record.from); int(record.to)
            bytes.append(contentsOf: record.sha256.bytes)
        }
        guard writesExtras else { return }
        // Fields of a task added since format 8, by the names of the event fields that set them.
        extras([("named_dest", details.namedDest.map(SnapshotExtra.text)),
                ("retarget_check", details.retargetCheck ? .flag : nil)])
    }
}

/// What a format-4 snapshot says of a task in front of it: enough for
/// `status` to pass over one its table would not list.
struct TaskHeader {
    static let forgotten: UInt8 = 1
    /// Queued, never started, no parent and no children: it shows nothing but its place in the queue.
    static let untouched: UInt8 = 2
    static let hasChildren: UInt8 = 4
    /// The phases by the number written for them: never reordered (`allCases` may be).
    static let phases: [TaskPhase] = [.queued, .running, .paused, .finished, .failed, .cancelled]

    static func code(of phase: TaskPhase) -> UInt8 { UInt8(phases.firstIndex(of: phase)!) }

    /// Queued and never started, no child of another, nothing fetched: (with no
    /// children of its own) it shows nothing but its place in the queue.
    static func isUntouched(_ task: TaskState) -> Bool {
        task.phase == .queued && task.parentID == nil && task.attempts == 0 && task.bytes == 0 && task.total == nil
            && task.firstStartedAtMs == nil
    }

    /// Whether this header is the one written for `task` (`hasChildren` is
    /// not checked here: the children index comes later).
    func describes(_ task: TaskState) -> Bool {
        phase == task.phase && has(Self.forgotten) == task.forgotten && OptionalInt64.representable(endedAtMs) == task.endedAtMs
            && parent == task.parentID && has(Self.untouched) == (Self.isUntouched(task) && !has(Self.hasChildren))
    }

    var phase: TaskPhase
    var flags: UInt8
    var endedAtMs: Int64?
    var parent: String?

    func has(_ flag: UInt8) -> Bool { flags & flag != 0 }
}

/// Decides, task by task, what a `TableReading` passes over.
private struct TablePass {
    let reading: Snapshot.TableReading
    /// The named tasks, and the parents of named children (a child shows on its parent's row).
    private var mustRead: Set<String>
    /// Parents passed over: their children are passed over too.
    private var passedParents: Set<String> = []
    private var queuedRead = 0

    /// `input` stands at the first task record: the records are scanned
    /// once for the parents of named tasks, when any are named.
    init(_ reading: Snapshot.TableReading, tasks: Int, at input: SnapshotReader) throws {
        self.reading = reading
        mustRead = reading.named
        guard !reading.named.isEmpty else { return }
        var scan = input
        for _ in 0..<tasks {
            let end = try scan.lengthPrefix()
            let header = try scan.header()
            if let parent = header.parent, reading.named.contains(try scan.string()) { mustRead.insert(parent) }
            scan.offset = end
        }
    }

    /// Whether to pass over the task whose record `input` stands in (after
    /// its header); counts it if the table would have.
    mutating func passesOver(_ header: TaskHeader, at input: SnapshotReader,
                             counting passed: inout Snapshot.PassedOver) throws -> Bool {
        // The id comes first in the record; made a string only when it must be compared or kept.
        func id() throws -> String {
            var peek = input
            return try peek.string()
        }
        if !mustRead.isEmpty, mustRead.contains(try id()) { return false }
        let passes: Bool
        if header.has(TaskHeader.forgotten) {
            passes = true  // never listed nor counted
        } else if let parent = header.parent {
            passes = passedParents.contains(parent)  // counted on its parent's row, or not at all
        } else if header.phase.isEnded, let before = reading.hiddenEndedBeforeMs, let ended = header.endedAtMs, ended < before {
            passed.hidden[header.phase, default: 0] += 1
            passes = true
        } else if header.has(TaskHeader.untouched), queuedRead >= reading.queuedListed {
            passed.queued += 1
            passes = true
        } else {
            if header.has(TaskHeader.untouched) { queuedRead += 1 }
            passes = false
        }
        if passes, header.has(TaskHeader.hasChildren) { passedParents.insert(try id()) }
        return passes
    }
}

private struct SnapshotReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0
    /// The snapshot's format: fields added since format 2 are read only from newer ones.
    var format = Int64(Snapshot.format)
    /// What the previous task had at these places: see `Repeat`.
    struct Repeats {
        fileprivate var kinds = Repeat<TransferKind>(), overwrites = Repeat<OverwriteMode>(), notifies = Repeat<NotifyMode>()
        fileprivate var phases = Repeat<TaskPhase>(), hosts = Repeat<String>(), headerLists = Repeat<[Header]>()
    }

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// The value last read at one place of the layout, with its bytes.
    /// Tasks in a row mostly repeat it (their kind, phase, host, headers):
    /// a repeat is known by its bytes and costs no new string, array or
    /// lookup, and its storage is shared.
    fileprivate struct Repeat<Value> {
        var bytes: [UInt8] = []
        var value: Value?

        func matching(_ raw: UnsafeRawBufferPointer) -> Value? {
            guard let value, bytes.count == raw.count else { return nil }
            return bytes.withUnsafeBytes { $0.sameBytes(as: raw) } ? value : nil
        }

        mutating func remember(_ value: Value, _ raw: UnsafeRawBufferPointer) {
            self.value = value
            bytes = Array(raw)
        }
    }

    /// Reads what `read` reads, unless its bytes repeat `last`'s: then `last`'s value.
    private mutating func reading<Value>(_ last: inout Repeat<Value>, skip: (inout Self) throws -> Void,
                                         read: (inout Self) throws -> Value) throws -> Value {
        let start = offset
        try skip(&self)
        let raw = UnsafeRawBufferPointer(rebasing: bytes[start..<offset])
        if let value = last.matching(raw) { return value }
        offset = start
        let value = try read(&self)
        last.remember(value, raw)
        return value
    }

    var atEnd: Bool { offset == bytes.count }

    func malformed(_ expected: String) -> Snapshot.Malformed {
        Snapshot.Malformed(description: "snapshot damaged at byte \(offset): expected \(expected)")
    }

    // The primitives below run some sixty times per task: they read through
    // one bounds check each and are inlined. As calls through a subscript
    // per byte they were a sixth of a snapshot read's instructions (callgrind).

    @inline(__always)
    mutating func byte() throws -> UInt8 {
        guard offset < bytes.count else { throw malformed("more bytes") }
        defer { offset += 1 }
        return bytes.load(fromByteOffset: offset, as: UInt8.self)
    }

    @inline(__always)
    mutating func int() throws -> Int64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        var index = offset
        while true {
            guard index < bytes.count else { throw malformed("more bytes") }
            let next = bytes.load(fromByteOffset: index, as: UInt8.self)
            index += 1
            guard shift < 64 else { throw malformed("a number") }
            value |= UInt64(next & 0x7f) << shift
            if next < 0x80 { break }
            shift += 7
        }
        offset = index
        return Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1)
    }

    /// A count of things to read: never negative, never more than the bytes left.
    @inline(__always)
    mutating func count() throws -> Int {
        let value = try int()
        guard value >= 0, value <= Int64(bytes.count - offset) else { throw malformed("a count") }
        return Int(value)
    }

    @inline(__always)
    mutating func flag() throws -> Bool {
        let value = try byte()
        guard value <= 1 else { throw malformed("0 or 1") }
        return value == 1
    }

    @inline(__always)
    mutating func optionalInt() throws -> Int64? { try flag() ? try int() : nil }

    mutating func string() throws -> String { try string(sharing: nil) }

    @inline(__always)
    mutating func optionalString() throws -> String? { try flag() ? try string() : nil }

    mutating func skipString() throws { _ = try span() }

    /// The end of the record or section that follows its 8-byte length (format 4 on).
    mutating func lengthPrefix() throws -> Int {
        guard bytes.count - offset >= 8 else { throw malformed("a length") }
        let length = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        offset += 8
        guard length <= UInt64(bytes.count - offset) else { throw malformed("a length within the snapshot") }
        return offset + Int(length)
    }

    /// Reads a section with `body`, or passes over it; with `lengthPrefixed`
    /// its length must be what `body` read.
    mutating func section(_ lengthPrefixed: Bool, skip: Bool, _ body: (inout SnapshotReader) throws -> Void) throws {
        guard lengthPrefixed else { return try body(&self) }
        let end = try lengthPrefix()
        if skip {
            offset = end
            return
        }
        try body(&self)
        guard offset == end else { throw malformed("a section to end at byte \(end)") }
    }

    mutating func header() throws -> TaskHeader {
        let phase = Int(try byte())
        guard phase < TaskHeader.phases.count else { throw malformed("a task's phase") }
        let flags = try byte()
        guard flags & ~(TaskHeader.forgotten | TaskHeader.untouched | TaskHeader.hasChildren) == 0 else { throw malformed("task flags") }
        return TaskHeader(phase: TaskHeader.phases[phase], flags: flags, endedAtMs: try optionalInt(), parent: try optionalString())
    }

    /// The next `count` bytes as they are.
    mutating func raw(_ count: Int) throws -> UnsafeRawBufferPointer {
        guard bytes.count - offset >= count else { throw malformed("\(count) more bytes") }
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }

    /// Where the next string lies, skipped.
    mutating func span() throws -> Range<Int> {
        let length = try count()
        defer { offset += length }
        return offset..<offset + length
    }

    /// Whether `string` has the bytes at `span`.
    func holds(_ string: String, at span: Range<Int>) -> Bool {
        string.hasUTF8(UnsafeRawBufferPointer(rebasing: bytes[span]))
    }

    /// The next string; `known` itself when it has the same bytes, so a
    /// string the snapshot repeats is held once and read without copying.
    mutating func string(sharing known: String?) throws -> String {
        let length = try count()
        defer { offset += length }
        let raw = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
        if let known, known.hasUTF8(raw) { return known }
        return String(decoding: raw, as: UTF8.self)
    }

    mutating func optionalString(sharing known: String?) throws -> String? { try flag() ? try string(sharing: known) : nil }

    mutating func strings() throws -> [String] {
        let total = try count()
        var values: [String] = []
        values.reserveCapacity(total)
        for _ in 0..<total { values.append(try string()) }
        return values
    }

    mutating func counts() throws -> [String: Int] {
        var values: [String: Int] = [:]
        for _ in 0..<(try count()) { values[try string()] = Int(try int()) }
        return values
    }

    /// A payload stored as its event's JSON, decoded in place.
    mutating func event(_ type: String) throws -> EventBody {
        let length = try count()
        defer { offset += length }
        do {
            return try EventCoding.body(type: type, data: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length]))
        } catch {
            throw malformed("a \(type) payload (\(error))")
        }
    }

    mutating func hookRun() throws -> HookRun {
        let key = HookRunKey(hook: try choice(HookKind.self), task: try optionalString(), batchSeq: try optionalInt())
        return HookRun(key: key, batch: try optionalString(), startedSeq: try int(), endUnknownSinceMs: try optionalInt())
    }

    mutating func batch() throws -> BatchFinished {
        guard case .batchFinished(let batch) = try event("batch_finished") else { throw malformed("a batch") }
        return batch
    }

    mutating func choice<E: RawRepresentable>(_: E.Type) throws -> E where E.RawValue == String {
        let raw = try string()
        guard let value = E(rawValue: raw) else { throw malformed("a \(E.self), not \(raw)") }
        return value
    }

    private mutating func choice<E: RawRepresentable>(_ last: inout Repeat<E>) throws -> E where E.RawValue == String {
        try reading(&last, skip: { try $0.skipString() }, read: { try $0.choice(E.self) })
    }

    /// Read into locals and made in one go: setting the rare keys one by one
    /// would make a new shared box for each (see `TaskSpec`).
    mutating func spec(_ repeats: inout Repeats) throws -> TaskSpec {
        let url = try string(), kind = try choice(&repeats.kinds), dest = try optionalString()
        let sha256 = try optionalString(), md5 = try optionalString()
        let priority = Int(truncatingIfNeeded: try int()), overwrite = try choice(&repeats.overwrites)
        let headers = try reading(&repeats.headerLists, skip: { input in
            for _ in 0..<(try input.count()) { try input.skipString(); try input.skipString() }
        }, read: { input in
            try (0..<(try input.count())).map { _ in Header(name: try input.string(), value: try input.string()) }
        })
        let batch = try optionalString(), notify = try choice(&repeats.notifies)
        let retries = try optionalInt().map { Int(truncatingIfNeeded: $0) }
        let maxSpeed = try optionalInt(), notBeforeMs = try optionalInt()
        let file = try optionalString(), identity = try optionalString()
        let source = file.flatMap { file in identity.map { JobSource(file: file, identity: $0) } }
        let method = try optionalString(), bodyFile = try optionalString(), formField = try optionalString()
        var form: [FormField] = []
        for _ in 0..<(try count()) { form.append(FormField(name: try string(), value: try string())) }
        let parent = try optionalString()
        let length = try optionalInt(), offset = try optionalInt()
        let byteRange = length.map { HLSByteRange(length: $0, offset: offset) }
        let variant = try optionalString(), output = try optionalString(), maxDurationS = try optionalInt()
        var hls: HLSOptions?
        if let variant, let output {
            guard let known = HLSOutput(rawValue: output) else { throw malformed("an HLS output, not \(output)") }
            hls = HLSOptions(variant: variant, output: known, maxDurationS: maxDurationS.map { Int(truncatingIfNeeded: $0) })
        }
        let connections = try optionalInt().map { Int(truncatingIfNeeded: $0) }
        let allowMetered = try optionalInt().map { $0 != 0 }
        var upload: UploadOptions?
        if format >= 3 {
            let uploadProtocol = try optionalString(), chunkSize = try optionalInt(), parallel = try optionalInt()
            let partStart = try optionalInt(), partEnd = try optionalInt()
            if let uploadProtocol {
                guard let known = UploadProtocol(rawValue: uploadProtocol) else { throw malformed("an upload protocol, not \(uploadProtocol)") }
                var options = UploadOptions(protocol: known, chunkSize: chunkSize,
                                            parallel: Int(min(max(parallel ?? 1, 1), Int64(ResumableUpload.maximumParallel))))
                if partStart != nil || partEnd != nil {
                    // As the event's reader: a damaged part is an error, never a whole-file upload.
                    guard let partStart, let partEnd, partStart >= 0, partStart <= partEnd else { throw malformed("an upload part") }
                    options.part = ByteSpan(partStart, partEnd)
                }
                upload = options
            }
        }
        var minSpeed: Int64?, minSpeedTimeS: Int?, nameFromServer: Bool?
        if format >= 8 {
            try extras(of: "job key") { name, value in
                switch name {
                case "min_speed": minSpeed = try value.int()
                case "min_speed_time": minSpeedTimeS = Int(truncatingIfNeeded: try value.int())
                case "name_from_server": nameFromServer = try value.flag()
                case "audio" where hls != nil: hls?.audio = try value.text()
                case "subtitles" where hls != nil: hls?.subtitles = try value.text()
                default: return false
                }
                return true
            }
        }
        return TaskSpec(url: url, kind: kind, dest: dest, sha256: sha256, md5: md5, priority: priority, overwrite: overwrite,
                        headers: headers, batch: batch, notify: notify, retries: retries, maxSpeed: maxSpeed,
                        notBeforeMs: notBeforeMs, source: source, method: method, bodyFile: bodyFile, formField: formField,
                        form: form, parent: parent, byteRange: byteRange, hls: hls, connections: connections,
                        allowMetered: allowMetered, upload: upload, minSpeed: minSpeed, minSpeedTimeS: minSpeedTimeS,
                        nameFromServer: nameFromServer)
    }

    /// Named extras (format 8 on): `read` takes each name it knows from
    /// its value (and says so). A name it does not know was written by a
    /// newer syncagent: the snapshot is refused as of another format, as a
    /// new format number would have it (never read with a job key let go:
    /// the task would run as its job did not ask), and a log whose events
    /// still hold its tasks is read from them instead.
    mutating func extras(of what: String, _ read: (String, inout SnapshotExtra.Reader) throws -> Bool) throws {
        var names: Set<String> = []
        for _ in 0..<(try count()) {
            let name = try string()
            guard names.insert(name).inserted else { throw malformed("\(what) \(name) once") }
            var value = SnapshotExtra.Reader(bytes: try raw(try count()), at: offset)
            guard try read(name, &value) else {
                throw Snapshot.Malformed(description: "snapshot holds \(what) \"\(Printable.escaping(name))\", which this syncagent "
                                         + "does not know: a newer syncagent wrote it", ofAnotherFormat: true)
            }
        }
    }

    mutating func task(_ repeats: inout Repeats) throws -> TaskState {
        let id = try string()
        let spec = try spec(&repeats)
        let hostKey = try reading(&repeats.hosts, skip: { try $0.skipString() }, read: { try $0.string() })
        var task = TaskState(id: id, spec: consume spec, hostKey: hostKey, seq: 0, atMs: 0)
        task.bytes = try int(); task.attempts = Int(try int()); task.attemptsBeforeRerun = Int(try int())
        task.attemptsNotCounted = Int(try int())
        task.redirects = Int(try int())
        let createdSeq = try int(), lastSeq = try int(), createdAtMs = try int(), updatedAtMs = try int()
        task.setSeqsAndTimes(createdSeq: createdSeq, lastSeq: lastSeq, createdAtMs: createdAtMs, updatedAtMs: updatedAtMs)
        task.speed = try int()
        if let moved = try optionalString() {
            let hostKey = task.hostKey
            task.currentURL = moved
            task.hostKey = hostKey
        }
        task.total = try optionalInt(); task.notBeforeMs = try optionalInt(); task.endedAtMs = try optionalInt()
        task.firstStartedAtMs = try optionalInt()
        task.phase = try choice(&repeats.phases)
        if let reason = try optionalString() {
            guard let known = PauseReason(rawValue: reason) else { throw malformed("a pause reason, not \(reason)") }
            task.pauseReason = known
        }
        task.owesOwnNotice = try flag(); task.forgotten = try flag()
        guard try flag() else { return task }
        var details = TaskDetails()
        details.error = try optionalString(); details.errorCode = try optionalString().map(FailureCode.init(rawValue:)); details.etag = try optionalString()
        details.lastModified = try optionalString(); details.restartReason = try optionalString()
        details.publishedPath = try optionalString(sharing: task.spec.dest)
        details.responseStatus = try optionalInt().map { Int(truncatingIfNeeded: $0) }
        details.skipReason = try optionalString()
        details.unchanged = try flag()
        if try flag() {
            var spans: [ByteSpan] = []
            for _ in 0..<(try count()) { spans.append(ByteSpan(try int(), try int())) }
            details.doneRanges = ByteRanges(spans)
        }
        details.singleConnectionReason = try optionalString()
        if try flag() {
            guard case .expanded(let expanded) = try event("expanded") else { throw malformed("a playlist") }
            details.hls = HLSProgress(playlist: expanded.playlist, targetDurationMs: expanded.targetDurationMs,
                                      ended: expanded.ended, entries: expanded.entries, mediaMs: try int(),
                                      lastSequence: try optionalInt(), renditions: expanded.renditions)
        }
        if format >= 3 {
            let url = try optionalString(), extensions = try optionalString()
            if let url { details.upload = UploadSession(url: url, extensions: extensions.map(UploadHeaders.list)) }
            details.chunkSize = try optionalInt(); details.splitInto = try optionalInt().map { Int(truncatingIfNeeded: $0) }
            details.bodyChangedNs = try optionalInt()
        }
        if format >= 7 {
            let count = try count()
            if count > 0 {
                var book = DigestBook()
                for _ in 0..<count {
                    let from = try int(), to = try int()
                    guard from >= 0, from <= to, let digest = SHA256Value(bytes: try raw(32)) else { throw malformed("a digest") }
                    book.record(SpanDigest(from: from, to: to, sha256: digest))
                }
                // Written thinned and in order: a record that did not come back as written was damaged.
                guard book.records.count == count else { throw malformed("digests in order") }
                details.digests = book
            }
        }
        if format >= 8 {
            try extras(of: "task field") { name, value in
                switch name {
                case "named_dest": details.namedDest = try value.text()
                case "retarget_check": details.retargetCheck = try value.flag()
                default: return false
                }
                return true
            }
        }
        task.details = OutOfLine(details)
        return task
    }
}

/// The value of a named extra (`SnapshotWriter.extras`), as bytes of its own.
enum SnapshotExtra {
    /// A zig-zag varint, as the snapshot's numbers.
    case int(Int64)
    /// True (a flag written only when set).
    case flag
    /// UTF-8.
    case text(String)

    var bytes: [UInt8] {
        switch self {
        case .int(let value):
            var out: [UInt8] = []
            SnapshotWriter.appendInt(value, to: &out)
            return out
        case .flag:
            return [1]
        case .text(let text):
            return Array(text.utf8)
        }
    }

    /// Reads one extra's value, which must fill its bytes exactly.
    struct Reader {
        let bytes: UnsafeRawBufferPointer
        /// Where the value starts in the snapshot: named in an error.
        let at: Int

        init(bytes: UnsafeRawBufferPointer, at end: Int) {
            self.bytes = bytes
            at = end - bytes.count
        }

        private func malformed(_ expected: String) -> Snapshot.Malformed {
            Snapshot.Malformed(description: "snapshot damaged at byte \(at): expected \(expected)")
        }

        func int() throws -> Int64 {
            var input = SnapshotReader(bytes)
            guard let value = try? input.int(), input.atEnd else { throw malformed("a number filling its extra") }
            return value
        }

        func flag() throws -> Bool {
            guard bytes.count == 1, bytes[0] == 1 else { throw malformed("a flag") }
            return true
        }

        func text() throws -> String {
            guard let text = String(validating: bytes, as: UTF8.self) else { throw malformed("UTF-8 text") }
            return text
        }
    }
}

import CSQLite
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

public struct StoreError: Error, CustomStringConvertible {
    public var message: String
    /// SQLite's extended result code, when SQLite said why (nil: the agent's own check).
    public var sqliteCode: Int32?

    public init(message: String, sqliteCode: Int32? = nil) {
        self.message = message
        self.sqliteCode = sqliteCode
    }

    public var description: String { message }

    /// The disk (or the quota) is full: freeing space is the cure, and nothing is damaged.
    public var isDiskFull: Bool { primaryCode == SQLITE_FULL }
    /// The file is not a log this agent can trust (damaged, or not SQLite at all).
    public var isDamaged: Bool { primaryCode == SQLITE_CORRUPT || primaryCode == SQLITE_NOTADB }
    /// The disk failed a read or a write.
    public var isIOError: Bool { primaryCode == SQLITE_IOERR }

    private var primaryCode: Int32? { sqliteCode.map { $0 & 0xFF } }
}

/// The SQLite event log (SPEC §6): WAL, mode 0600, versioned migrations,
/// batched appends in one transaction, ordered streaming reads.
public final class EventStore {
    public let path: String
    private var db: OpaquePointer?
    private var insert: OpaquePointer?
    /// Prepared on first use: a job let go from memory is read back by its seq.
    private var selectCreated: OpaquePointer?
    private var selectCreatedRow: OpaquePointer?
    /// Highest seq in the file; the writer numbers new events from here.
    public private(set) var lastSeq: Int64 = 0

    /// Named, ordered schema steps; `PRAGMA user_version` says how many ran.
    static let migrations: [(name: String, sql: String)] = [
        ("create events", """
            CREATE TABLE events (
              seq   INTEGER PRIMARY KEY,
              at_ms INTEGER NOT NULL,
              task  TEXT,
              type  TEXT NOT NULL,
              data  TEXT NOT NULL
            );
            """),
        ("index events by task", "CREATE INDEX events_by_task ON events(task, seq);"),
        // The fold at `seq` (SPEC §6). `pruned`: raw events up to `seq` may
        // have been deleted by `compact`, so a replay must start from here.
        // `done`: the compaction that wrote it finished (else the next start
        // finishes it, with the same `older_than_s`). Its bytes are in `parts` rows of `snapshot_parts`,
        // written each in its own short transaction before the `snapshots`
        // row that makes them visible.
        ("create snapshots", """
            CREATE TABLE snapshots (
              seq    INTEGER PRIMARY KEY,
              format INTEGER NOT NULL,
              at_ms  INTEGER NOT NULL,
              pruned INTEGER NOT NULL,
              done   INTEGER NOT NULL DEFAULT 0,
              older_than_s INTEGER NOT NULL DEFAULT 0,
              parts  INTEGER NOT NULL,
              bytes  INTEGER NOT NULL
            );
            CREATE TABLE snapshot_parts (
              seq  INTEGER NOT NULL,
              part INTEGER NOT NULL,
              data BLOB NOT NULL,
              PRIMARY KEY (seq, part)
            );
            """),
    ]

    /// Opens (creating if needed) for writing. Only the agent holding the
    /// state-dir lock writes.
    public init(writingTo path: String) throws {
        self.path = path
        // Created here so SQLite inherits 0600 for the file and its -wal/-shm.
        // No descriptor of an existing log is opened and closed outside
        // SQLite: closing any descriptor of a file drops every POSIX lock the
        // process holds on it, SQLite's included (a second connection in the
        // agent, or the one about to open), and an outside reader could then
        // delete the WAL from under the agent.
        if !FileSystem.exists(path) {
            Posix.close(try Posix.create(path, O_RDWR | O_EXCL, mode: 0o600, shown: "event log \(path)"))
        }
        try Posix.setMode(path, 0o600)
        try open(flags: SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
        // A new log gives freed pages back to the file system as `compact`
        // frees them (this can only be chosen before the first table).
        if try schemaVersion() == 0, try scalar("SELECT count(*) FROM sqlite_master") == 0 {
            try execute("PRAGMA auto_vacuum=INCREMENTAL")
        }
        try execute("PRAGMA journal_mode=WAL")
        // Durability comes from the WAL fsync at each commit of a batch.
        try execute("PRAGMA synchronous=FULL")
        // The log is appended and read in order: a big page cache buys nothing
        // but resident memory (the default is 2 MiB).
        try execute("PRAGMA cache_size=-256")
        // A reader held open during a compaction lets the WAL grow as large as
        // what was deleted; once it is checkpointed, it is cut back to this.
        try execute("PRAGMA journal_size_limit=\(4 << 20)")
        try migrate()
        lastSeq = try readLastSeq()
        insert = try prepare("INSERT INTO events(seq, at_ms, task, type, data) VALUES (?, ?, ?, ?, ?)")
    }

    /// Opens for reading while an agent may be writing (status, replay, events).
    /// A missing log reads as empty.
    /// - Parameter cacheKiB: the page cache, where SQLite's 2 MiB is too much
    ///   to keep: the agent's reader of waiting jobs looks up one row at a time.
    public init(readingFrom path: String, cacheKiB: Int? = nil) throws {
        self.path = path
        guard FileSystem.exists(path) else { return }
        try open(flags: SQLITE_OPEN_READONLY)
        if let cacheKiB { try execute("PRAGMA cache_size=-\(cacheKiB)") }
        let version = try schemaVersion()
        try refuseNewer(version)
        lastSeq = try readLastSeq()
    }

    /// A log written by a newer syncagent may hold what this one cannot
    /// read correctly: refused, never half-understood.
    private func refuseNewer(_ version: Int) throws {
        guard version <= Self.migrations.count else {
            throw StoreError(message: "event log \(path) has schema version \(version), newer than this syncagent "
                             + "(\(SyncAgentVersion.current), version \(Self.migrations.count)); run the syncagent that wrote it")
        }
    }

    deinit { close() }

    /// Closes the connection now rather than when the last reference goes:
    /// a stopping agent checkpoints its last commit here, then exits without
    /// freeing its state. Nothing uses the store after this.
    public func close() {
        sqlite3_finalize(insert)
        insert = nil
        sqlite3_finalize(selectCreated)
        sqlite3_finalize(selectCreatedRow)
        selectCreated = nil
        selectCreatedRow = nil
        sqlite3_close_v2(db)
        db = nil
    }

    private func open(flags: Int32) throws {
        let code = sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOMUTEX, nil)
        guard code == SQLITE_OK else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "error \(code)"
            throw StoreError(message: "cannot open event log \(path): \(message)", sqliteCode: db.map(sqlite3_extended_errcode) ?? code)
        }
        guard sqlite3_busy_timeout(db, 5000) == SQLITE_OK else { throw error("cannot set a busy timeout") }
    }

    private func error(_ what: String) -> StoreError {
        StoreError(message: "\(what) in \(path): \(String(cString: sqlite3_errmsg(db)))", sqliteCode: sqlite3_extended_errcode(db))
    }

    private func execute(_ sql: String) throws {
        guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else { throw error("\"\(sql.prefix(40))\" failed") }
    }

    private func prepare(_ sql: String) throws -> OpaquePointer? {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else { throw error("cannot prepare") }
        return statement
    }

    public func schemaVersion() throws -> Int {
        guard db != nil else { return 0 }
        return Int(try scalar("PRAGMA user_version"))
    }

    /// The first column of the one row a query returns. Every failure —
    /// a damaged file above all — is an error naming the file, never a
    /// default that would make a damaged log look empty.
    private func scalar(_ sql: String) throws -> Int64 {
        let statement = try prepare(sql)
        defer { sqlite3_finalize(statement) }
        guard sqlite3_step(statement) == SQLITE_ROW else { throw error("cannot read the event log (\(sql))") }
        return sqlite3_column_int64(statement, 0)
    }

    private func migrate() throws {
        let current = try schemaVersion()
        try refuseNewer(current)
        guard current < Self.migrations.count else { return }
        try execute("BEGIN IMMEDIATE")
        do {
            for index in current..<Self.migrations.count {
                try execute(Self.migrations[index].sql)
            }
            try execute("PRAGMA user_version = \(Self.migrations.count)")
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// The highest seq ever written: a compaction may have deleted every
    /// event up to its snapshot, and numbering must go on past it, never back.
    private func readLastSeq() throws -> Int64 {
        guard try schemaVersion() > 0 else { return 0 }
        return max(try scalar("SELECT COALESCE(MAX(seq), 0) FROM events"), try newestSnapshotSeq())
    }

    /// Group commit: every event of the batch lands in one transaction, one fsync.
    public func append(_ events: [Event]) throws {
        guard !events.isEmpty else { return }
        guard let insert else { throw StoreError(message: "event log \(path) is open read-only") }
        try transaction {
            for event in events {
                sqlite3_reset(insert)
                let task = event.task.map { sqlite3_bind_text(insert, 3, $0, -1, SQLITE_TRANSIENT) } ?? sqlite3_bind_null(insert, 3)
                let bound = [sqlite3_bind_int64(insert, 1, event.seq), sqlite3_bind_int64(insert, 2, event.atMs), task,
                             sqlite3_bind_text(insert, 4, event.type, -1, SQLITE_TRANSIENT),
                             sqlite3_bind_text(insert, 5, EventCoding.data(of: event.body), -1, SQLITE_TRANSIENT)]
                guard bound.allSatisfy({ $0 == SQLITE_OK }) else { throw error("cannot bind event \(event.seq)") }
                guard sqlite3_step(insert) == SQLITE_DONE else { throw error("cannot append event \(event.seq)") }
            }
        }
        lastSeq = max(lastSeq, events.last!.seq)
    }

    /// A raw row, for `events`: what the log holds, before decoding.
    public struct Row {
        public var seq: Int64
        public var atMs: Int64
        public var task: String?
        public var type: String
        public var data: String
    }

    /// Steps through the rows in seq order, one at a time, so memory stays
    /// flat however long the log; `body` sees each row's columns in place.
    private func step(after seq: Int64, through last: Int64, task: String?,
                      _ body: (OpaquePointer) throws -> Void) throws {
        guard db != nil, try schemaVersion() > 0 else { return }
        let filter = task == nil ? "" : " AND task = ?3"
        let statement = try prepare("SELECT seq, at_ms, task, type, data FROM events WHERE seq > ?1 AND seq <= ?2\(filter) ORDER BY seq")
        defer { sqlite3_finalize(statement) }
        sqlite3_bind_int64(statement, 1, seq)
        sqlite3_bind_int64(statement, 2, last)
        if let task { sqlite3_bind_text(statement, 3, task, -1, SQLITE_TRANSIENT) }
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW, let statement else { throw error("cannot read events") }
            try body(statement)
        }
    }

    /// The seq just before the last `count` events (of `task`, or of all):
    /// where `events -n COUNT` starts. 0 when the log holds no more than that.
    public func seq(beforeLast count: Int, task: String? = nil) throws -> Int64 {
        guard db != nil, try schemaVersion() > 0 else { return 0 }
        let filter = task == nil ? "" : " WHERE task = ?2"
        let statement = try prepare("SELECT seq FROM events\(filter) ORDER BY seq DESC LIMIT 1 OFFSET ?1")
        defer { sqlite3_finalize(statement) }
        guard sqlite3_bind_int64(statement, 1, Int64(count)) == SQLITE_OK,
              task.map({ sqlite3_bind_text(statement, 2, $0, -1, SQLITE_TRANSIENT) == SQLITE_OK }) ?? true
        else { throw error("cannot bind the last \(count) events") }
        switch sqlite3_step(statement) {
        case SQLITE_DONE: return 0
        case SQLITE_ROW: return sqlite3_column_int64(statement, 0)
        default: throw error("cannot read the last \(count) events")
        }
    }

    /// A job file the agent refused, as its `rejected` row records it.
    public struct RejectionRow {
        public var seq: Int64
        public var atMs: Int64
        public var rejection: Rejected
    }

    /// The `rejected` rows recorded at or after `sinceMs`: the newest `limit`
    /// of them, newest first, and how many there are in all. (Agent-level
    /// rows are found through the task index, as task NULL: a log of a
    /// million transfer events is not read for them.)
    public func rejections(sinceMs: Int64, limit: Int) throws -> (newest: [RejectionRow], count: Int) {
        guard db != nil, try schemaVersion() > 0 else { return ([], 0) }
        let filter = "FROM events WHERE task IS NULL AND type = 'rejected' AND at_ms >= ?1"
        let counting = try prepare("SELECT count(*) \(filter)")
        defer { sqlite3_finalize(counting) }
        guard sqlite3_bind_int64(counting, 1, sinceMs) == SQLITE_OK, sqlite3_step(counting) == SQLITE_ROW else {
            throw error("cannot count rejected jobs")
        }
        let count = Int(sqlite3_column_int64(counting, 0))
        let statement = try prepare("SELECT seq, at_ms, data \(filter) ORDER BY seq DESC LIMIT ?2")
        defer { sqlite3_finalize(statement) }
        guard sqlite3_bind_int64(statement, 1, sinceMs) == SQLITE_OK, sqlite3_bind_int64(statement, 2, Int64(max(0, limit))) == SQLITE_OK else {
            throw error("cannot bind the rejected jobs' query")
        }
        var newest: [RejectionRow] = []
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { break }
            guard code == SQLITE_ROW, let statement else { throw error("cannot read rejected jobs") }
            let seq = sqlite3_column_int64(statement, 0)
            guard case .rejected(let rejection) = try EventCoding.body(
                type: "rejected", data: Self.text(statement, 2) ?? UnsafeRawBufferPointer(start: nil, count: 0), seq: seq) else { continue }
            newest.append(RejectionRow(seq: seq, atMs: sqlite3_column_int64(statement, 1), rejection: rejection))
        }
        return (newest, count)
    }

    /// Streams raw rows (for `events`).
    public func forEachRow(after seq: Int64 = 0, through last: Int64 = .max, task: String? = nil,
                           _ body: (Row) throws -> Void) throws {
        try step(after: seq, through: last, task: task) { statement in
            try body(Row(
                seq: sqlite3_column_int64(statement, 0),
                atMs: sqlite3_column_int64(statement, 1),
                task: sqlite3_column_text(statement, 2).map { String(cString: $0) },
                type: String(cString: sqlite3_column_text(statement, 3)),
                data: String(cString: sqlite3_column_text(statement, 4))))
        }
    }

    /// The job that task `id`'s (any task's, for nil) `created` event at `seq` recorded; nil when
    /// the log holds no such event (read back for a job the agent let go, see
    /// `SpecArchive`, and asked before letting one go).
    public func createdSpec(of id: String?, at seq: Int64) throws -> TaskSpec? {
        guard db != nil else { return nil }
        if selectCreated == nil { selectCreated = try prepare("SELECT task, type, data FROM events WHERE seq = ?1") }
        guard let statement = selectCreated else { return nil }
        // Reset as soon as it is read: a statement left stepped holds a read transaction open.
        defer { sqlite3_reset(statement) }
        guard sqlite3_bind_int64(statement, 1, seq) == SQLITE_OK else { throw error("cannot bind seq \(seq)") }
        switch sqlite3_step(statement) {
        case SQLITE_DONE: return nil
        case SQLITE_ROW: break
        default: throw error("cannot read event \(seq)")
        }
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        guard let task = Self.text(statement, 0), id.map({ task.elementsEqual($0.utf8) }) ?? true,
              Self.text(statement, 1).map({ $0.elementsEqual("created".utf8) }) == true,
              case .created(let spec) = try EventCoding.body(type: Self.text(statement, 1) ?? empty,
                                                             data: Self.text(statement, 2) ?? empty, seq: seq) else { return nil }
        return spec
    }

    /// Whether task `id`'s `created` event at `seq` is still in the log.
    public func holdsCreated(of id: String, at seq: Int64) throws -> Bool {
        guard db != nil else { return false }
        if selectCreatedRow == nil { selectCreatedRow = try prepare("SELECT 1 FROM events WHERE seq = ?1 AND task = ?2 AND type = 'created'") }
        guard let statement = selectCreatedRow else { return false }
        defer { sqlite3_reset(statement) }
        guard sqlite3_bind_int64(statement, 1, seq) == SQLITE_OK, sqlite3_bind_text(statement, 2, id, -1, SQLITE_TRANSIENT) == SQLITE_OK else {
            throw error("cannot bind seq \(seq)")
        }
        switch sqlite3_step(statement) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw error("cannot read event \(seq)")
        }
    }

    /// Streams decoded events in seq order, decoding `data` and `type` where SQLite holds them.
    public func forEach(after seq: Int64 = 0, through last: Int64 = .max, task: String? = nil,
                        _ body: (Event) throws -> Void) throws {
        var recent = RecentIDs()
        try step(after: seq, through: last, task: task) { statement in
            let seq = sqlite3_column_int64(statement, 0)
            try body(Event(seq: seq, atMs: sqlite3_column_int64(statement, 1),
                           task: Self.text(statement, 2).map { recent.id(for: $0) },
                           body: try EventCoding.body(type: Self.text(statement, 3) ?? UnsafeRawBufferPointer(start: nil, count: 0),
                                                      data: Self.text(statement, 4) ?? UnsafeRawBufferPointer(start: nil, count: 0),
                                                      seq: seq)))
        }
    }

    /// A column's UTF-8 bytes in place (valid until the next step); nil for NULL.
    private static func text(_ statement: OpaquePointer, _ column: Int32) -> UnsafeRawBufferPointer? {
        // Text first, then its length: the order SQLite documents.
        guard let text = sqlite3_column_text(statement, column) else { return nil }
        return UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(statement, column)))
    }

    /// The task ids of the last few rows: a log's rows mostly name one of
    /// the few tasks running, and a repeat is known by its bytes, not made
    /// into a new string (a million rows made a million allocations).
    /// An id of up to 15 bytes (the agent's own are 6) is stored inside its
    /// String, with no allocation: made at once, it costs less than the
    /// search (callgrind: the search was 8% of `replay`).
    private struct RecentIDs {
        private var ids: [String] = []
        private var next = 0
        private static let largestInline = 15

        mutating func id(for bytes: UnsafeRawBufferPointer) -> String {
            if bytes.count <= Self.largestInline { return String(decoding: bytes, as: UTF8.self) }
            if let id = ids.first(where: { $0.hasUTF8(bytes) }) { return id }
            let id = String(decoding: bytes, as: UTF8.self)
            if ids.count < 8 { ids.append(id) } else { ids[next] = id; next = (next + 1) % ids.count }
            return id
        }
    }

    /// The fold of the log up to `last`: what `status` and `replay` show.
    /// It starts from the newest snapshot at or before `last` and folds the
    /// events after it, all inside one read transaction, so a `compact`
    /// running beside it is seen wholly or not at all.
    /// `stopWhen` is asked every few thousand events: a long fold in the
    /// background (a compaction's) must not hold up an agent that is stopping.
    public func replay(through last: Int64 = .max, stopWhen: (() -> Bool)? = nil) throws -> AgentState {
        guard db != nil, try schemaVersion() > 0 else { return AgentState() }
        return try reading { try fold(through: last, stopWhen: stopWhen) }
    }

    /// `replay` gave up because `stopWhen` said so.
    public struct ReplayStopped: Error {}

    /// `replay`'s work, inside a read transaction the caller holds.
    private func fold(through last: Int64, stopWhen: (() -> Bool)? = nil) throws -> AgentState {
        let pruned = try prunedThrough()
        guard last >= pruned else {
            throw StoreError(message: "events up to seq \(pruned) of \(path) were compacted into a snapshot; "
                             + "the log can be replayed through seq \(pruned) or later")
        }
        var state = try snapshot(atOrBefore: last, mustCover: pruned) ?? AgentState()
        var folded = 0
        try forEach(after: state.lastSeq, through: last) { event in
            state.apply(event)
            folded += 1
            if folded & 8191 == 0, let stopWhen, stopWhen() { throw ReplayStopped() }
        }
        return state
    }

    /// `replay` for `status`'s table: the newest snapshot read with a
    /// `TableReading` (what the table would not list is passed over and
    /// counted), then the events after it, as `replay` folds them.
    public func replayForTable(queuedListed: Int, hiddenEndedBeforeMs: Int64?) throws -> (state: AgentState, passedOver: Snapshot.PassedOver) {
        guard db != nil, try schemaVersion() > 0 else { return (AgentState(), Snapshot.PassedOver()) }
        return try reading {
            var passedOver = Snapshot.PassedOver()
            var state = try snapshot(atOrBefore: .max, mustCover: try prunedThrough()) { bytes, seq in
                let reading = Snapshot.TableReading(named: try tasksNamed(after: seq), queuedListed: queuedListed,
                                                    hiddenEndedBeforeMs: hiddenEndedBeforeMs)
                let read = try Snapshot.decode(bytes, forTable: reading)
                passedOver = read.passedOver
                return read.state
            } ?? AgentState()
            // No snapshot could be used (one read, then refused): every event is folded, nothing was passed over.
            if state.lastSeq == 0 { passedOver = Snapshot.PassedOver() }
            try forEach(after: state.lastSeq) { state.apply($0) }
            return (state, passedOver)
        }
    }

    /// The tasks the events after `seq` name.
    private func tasksNamed(after seq: Int64) throws -> Set<String> {
        let statement = try prepare("SELECT DISTINCT task FROM events WHERE seq > ?1 AND task IS NOT NULL")
        defer { sqlite3_finalize(statement) }
        sqlite3_bind_int64(statement, 1, seq)
        var named = Set<String>()
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { return named }
            // By its length, as the fold reads it (not up to a NUL).
            guard code == SQLITE_ROW, let statement, let text = Self.text(statement, 0) else { throw error("cannot read events") }
            named.insert(String(decoding: text, as: UTF8.self))
        }
    }

    /// Brings `state` (a fold of this log) up to date: the events after it,
    /// or, when a compaction has deleted some of them meanwhile, the newest
    /// snapshot and its tail. For readers that fold as the log grows (`status --watch`).
    public func catchUp(_ state: inout AgentState) throws {
        guard db != nil, try schemaVersion() > 0 else { return }
        state = try reading {
            if try prunedThrough() > state.lastSeq { return try fold(through: .max) }
            var next = state
            try forEach(after: state.lastSeq) { next.apply($0) }
            return next
        }
    }

    /// What the log knows of one task id, without folding the whole log.
    public enum TaskRecord: Equatable {
        /// No task has this id.
        case unknown
        /// Its events from its creation on are raw; `phase` is their fold's.
        case whole(phase: TaskPhase)
        /// It is in the log, but its creation was compacted into a snapshot: `replay` tells the rest.
        case compacted
    }

    /// Answers questions about single task ids through the `events_by_task`
    /// index and the newest snapshot's id list. `submit` and `pause ID` folded
    /// the whole log for one id: a second each with 50,000 ended tasks.
    public final class TaskLookup {
        private let store: EventStore
        private var snapshotIDs: Set<String>?

        fileprivate init(store: EventStore) { self.store = store }

        /// Whether the log names this id: a task's, or one an event names
        /// (an id no new task should take).
        public func knows(_ id: String) throws -> Bool {
            try store.hasEvents(of: id) || inSnapshot(id)
        }

        /// The task's phase from its own events when they are all raw. (A
        /// phase is changed only by the task's own events; fields that other
        /// tasks' events change, a parent's count of finished children, are
        /// not asked here.)
        public func record(of id: String) throws -> TaskRecord {
            var state = AgentState()
            var first = true, whole = false
            try store.forEach(task: id) { event in
                if first, case .created = event.body { whole = true }
                first = false
                if whole { state.apply(event) }
            }
            if whole, let task = state[id] { return .whole(phase: task.phase) }
            // Events without a creation are a compacted task's later ones, or orphans the fold ignores.
            return try inSnapshot(id) ? .compacted : .unknown
        }

        private func inSnapshot(_ id: String) throws -> Bool {
            if snapshotIDs == nil { snapshotIDs = try store.newestSnapshotTaskIDs() }
            return snapshotIDs!.contains(id)
        }
    }

    /// Runs `body` with a `TaskLookup` inside one read transaction, so a
    /// compaction moving a task from the events into a snapshot meanwhile is
    /// seen wholly or not at all. A log that is not there knows no task.
    public func lookingUpTasks<T>(_ body: (TaskLookup) throws -> T) throws -> T {
        guard db != nil, try schemaVersion() > 0 else { return try body(TaskLookup(store: self)) }
        return try reading { try body(TaskLookup(store: self)) }
    }

    private func hasEvents(of task: String) throws -> Bool {
        guard db != nil, try schemaVersion() > 0 else { return false }
        let statement = try prepare("SELECT 1 FROM events WHERE task = ?1 LIMIT 1")
        defer { sqlite3_finalize(statement) }
        sqlite3_bind_text(statement, 1, task, -1, SQLITE_TRANSIENT)
        let code = sqlite3_step(statement)
        guard code == SQLITE_ROW || code == SQLITE_DONE else { throw error("cannot read events") }
        return code == SQLITE_ROW
    }

    /// The ids of the newest readable snapshot's tasks (none without one).
    private func newestSnapshotTaskIDs() throws -> Set<String> {
        guard db != nil, try hasSnapshots else { return [] }
        let statement = try prepare("SELECT seq, format, parts, bytes FROM snapshots ORDER BY seq DESC")
        defer { sqlite3_finalize(statement) }
        while sqlite3_step(statement) == SQLITE_ROW {
            guard Snapshot.readableFormats.contains(sqlite3_column_int64(statement, 1)) else { continue }
            let bytes = try snapshotBytes(seq: sqlite3_column_int64(statement, 0), parts: sqlite3_column_int64(statement, 2),
                                          total: sqlite3_column_int64(statement, 3))
            return try bytes.withUnsafeBytes { try Snapshot.taskIDs($0) }
        }
        return []
    }

    /// Runs `body` inside one read transaction: every statement sees the same version of the file.
    private func reading<T>(_ body: () throws -> T) throws -> T {
        try transaction(writing: false, body)
    }

    private var hasSnapshots: Bool {
        get throws { try schemaVersion() >= 3 }
    }

    /// Raw events up to this seq may be gone (0: none are).
    public func prunedThrough() throws -> Int64 {
        guard try hasSnapshots else { return 0 }
        return try scalar("SELECT COALESCE(MAX(seq), 0) FROM snapshots WHERE pruned = 1")
    }

    /// The seq the newest snapshot covers (0: none).
    public func newestSnapshotSeq() throws -> Int64 {
        guard try hasSnapshots else { return 0 }
        return try scalar("SELECT COALESCE(MAX(seq), 0) FROM snapshots")
    }

    /// The newest snapshot at or before `last`, decoded. One the events
    /// still hold is skipped when it cannot be read (another format): the
    /// events say the same. One that replaced deleted events cannot be skipped.
    private func snapshot(atOrBefore last: Int64, mustCover pruned: Int64,
                          decode: (UnsafeRawBufferPointer, Int64) throws -> AgentState = { bytes, _ in try Snapshot.decode(bytes) })
        throws -> AgentState? {
        guard try hasSnapshots else { return nil }
        let statement = try prepare("SELECT seq, format, parts, bytes FROM snapshots WHERE seq <= ?1 ORDER BY seq DESC")
        defer { sqlite3_finalize(statement) }
        sqlite3_bind_int64(statement, 1, last)
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { return nil }
            guard code == SQLITE_ROW else { throw error("cannot read snapshots") }
            let seq = sqlite3_column_int64(statement, 0)
            let format = sqlite3_column_int64(statement, 1)
            do {
                guard Snapshot.readableFormats.contains(format) else { throw Snapshot.unreadable(format: format) }
                let bytes = try snapshotBytes(seq: seq, parts: sqlite3_column_int64(statement, 2), total: sqlite3_column_int64(statement, 3))
                let state = try bytes.withUnsafeBytes { try decode($0, seq) }
                guard state.lastSeq == seq else { throw Snapshot.Malformed(description: "it covers seq \(state.lastSeq), not \(seq)") }
                return state
            } catch {
                guard seq > pruned else {
                    // A format this build does not know is a newer syncagent's; a known one that fails is damage.
                    let advice = switch (error as? Snapshot.Malformed)?.ofAnotherFormat {
                    case true?: "; run the syncagent that wrote it"
                    case false?: "; it is damaged: only a backup of the log brings back the tasks it held"
                    case nil: ""  // SQLite's own error (I/O, busy) says what it is
                    }
                    throw StoreError(message: "the snapshot at seq \(seq) of \(path) cannot be read (\(error)), "
                                     + "and the events it replaced are gone" + advice)
                }
            }
        }
    }

    /// The snapshot's parts, joined; every part present, in order, adding up to `total`.
    private func snapshotBytes(seq: Int64, parts: Int64, total: Int64) throws -> SnapshotBuffer {
        guard total >= 0, total <= Int64(Int32.max) * 64 else { throw Snapshot.Malformed(description: "a size of \(total) bytes") }
        // The memory is made before a byte is read: a damaged row's size must not make
        // it (say 100 GB). The parts and their sizes are asked first, without reading them.
        let sizes = try prepare("SELECT part, length(data) FROM snapshot_parts WHERE seq = ?1 ORDER BY part")
        defer { sqlite3_finalize(sizes) }
        sqlite3_bind_int64(sizes, 1, seq)
        var (found, stored): (Int64, Int64) = (0, 0)
        while true {
            let code = sqlite3_step(sizes)
            if code == SQLITE_DONE { break }
            guard code == SQLITE_ROW else { throw error("cannot read the snapshot at seq \(seq)") }
            guard sqlite3_column_int64(sizes, 0) == found else { throw Snapshot.Malformed(description: "part \(found) is missing") }
            (found, stored) = (found + 1, stored + sqlite3_column_int64(sizes, 1))
        }
        guard found == parts, stored == total else {
            throw Snapshot.Malformed(description: "\(found) parts of \(stored) bytes, not \(parts) of \(total)")
        }
        // The same parts, read in the same transaction (every caller reads inside `reading`):
        // their numbers and sizes are settled above; only the copy's bounds are checked here.
        let statement = try prepare("SELECT data FROM snapshot_parts WHERE seq = ?1 ORDER BY part")
        defer { sqlite3_finalize(statement) }
        sqlite3_bind_int64(statement, 1, seq)
        let buffer = try SnapshotBuffer(count: Int(total))
        var filled = 0
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { break }
            guard code == SQLITE_ROW else { throw error("cannot read the snapshot at seq \(seq)") }
            let length = Int(sqlite3_column_bytes(statement, 0))
            guard length <= buffer.count - filled else { throw Snapshot.Malformed(description: "parts of more than \(total) bytes") }
            if length > 0, let data = sqlite3_column_blob(statement, 0) {
                (buffer.start + filled).copyMemory(from: data, byteCount: length)
                filled += length
            }
        }
        guard filled == buffer.count else { throw Snapshot.Malformed(description: "parts of \(filled) bytes, not \(total)") }
        return buffer
    }

    // MARK: - Compaction (SPEC §6): only ever one compaction at a time, beside the agent's appends.

    /// Stores `state` as the snapshot at its `lastSeq`. Older snapshots go,
    /// except the newest pruned one (`replay --until` starts from it).
    /// (`pruned` is for tests; a compaction marks its snapshot pruned with
    /// its first deletion, so a crash before one leaves every replay possible.)
    ///
    /// Beside a running agent no transaction here is long: the bytes go in
    /// parts of `partBytes`, each in its own transaction, and a last small one
    /// adds the row that makes them a snapshot. A crash before it leaves
    /// parts no row names, removed by the next call or the agent's next start.
    /// `stopRequested` is asked between parts: the agent stopping cuts a
    /// snapshot short (its parts, with no row, go at the next one).
    public func writeSnapshot(_ state: AgentState, nowMs: Int64, olderThanS: Int64 = 0, pruned: Bool = false,
                              partBytes: Int = 256 << 10, stopRequested: () -> Bool = { false }) throws {
        let seq = state.lastSeq
        // The fold at a seq is the fold at that seq: one already stored in this format is kept (a new compaction is starting on it).
        let stored = try scalar("SELECT count(*) FROM snapshots WHERE seq = \(seq) AND format = \(Snapshot.format)") > 0
        if stored {
            try transaction {
                try execute("UPDATE snapshots SET done = 0, older_than_s = \(olderThanS)\(pruned ? ", pruned = 1" : "") WHERE seq = \(seq)")
            }
            return
        }
        try transaction {
            try execute("DELETE FROM snapshots WHERE seq = \(seq)")
            try execute(Self.unnamedPartsDeletion)
        }
        let insert = try prepare("INSERT INTO snapshot_parts(seq, part, data) VALUES (?1, ?2, ?3)")
        defer { sqlite3_finalize(insert) }
        var parts: Int64 = 0
        // Written as it is made, a part per transaction: never the whole snapshot in memory.
        // A job read back as a placeholder (its `created` unreadable) must not be stored as the task's:
        // its parts then stay unnamed, and go at the next snapshot.
        let bytes = try SpecArchive.checkingReads { try Snapshot.write(state, partBytes: partBytes) { piece in
            if stopRequested() { throw CompactionCutShort(snapshotSeq: nil, events: 0) }
            try transaction {
                sqlite3_reset(insert)
                // Bound in place (no copy): stepped before `piece` goes. (A part is never empty.)
                let bound = [sqlite3_bind_int64(insert, 1, seq), sqlite3_bind_int64(insert, 2, parts),
                             sqlite3_bind_blob64(insert, 3, piece.baseAddress, sqlite3_uint64(piece.count), nil)]
                guard bound.allSatisfy({ $0 == SQLITE_OK }) else { throw error("cannot bind a snapshot part") }
                guard sqlite3_step(insert) == SQLITE_DONE else { throw error("cannot write the snapshot at seq \(seq)") }
            }
            parts += 1
        } }
        try transaction {
            try execute("""
                INSERT INTO snapshots(seq, format, at_ms, pruned, done, older_than_s, parts, bytes)
                  VALUES (\(seq), \(Snapshot.format), \(nowMs), \(pruned ? 1 : 0), 0, \(olderThanS), \(parts), \(bytes))
                """)
            try execute("""
                DELETE FROM snapshots WHERE seq < \(seq)
                  AND seq <> (SELECT COALESCE(MAX(seq), 0) FROM snapshots WHERE pruned = 1);
                \(Self.unnamedPartsDeletion);
                """)
        }
    }

    /// Deletes raw events at or below `through`, about `limit` rows in one
    /// transaction: those of the tasks in `tasks`, taken from the front (each
    /// task whose events are all gone is removed from it), and, when `tasks`
    /// is empty, the agent's own written before `beforeMs`. Returns the rows
    /// deleted and the tasks that had any. The snapshot at `through` must
    /// exist; it is marked pruned in the same transaction as the first
    /// deletion, so a crash before one leaves every replay possible.
    public func deleteEvents(tasks: inout [String], through: Int64, beforeMs: Int64, limit: Int) throws -> (rows: Int, tasks: [String]) {
        // Not a task with events after the snapshot: run again since, it is live (its job
        // may be read back from its `created`), and its history goes once it has ended again.
        let ofTask = try prepare("""
            DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE task = ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3)
              AND NOT EXISTS (SELECT 1 FROM events WHERE task = ?1 AND seq > ?2)
            """)
        defer { sqlite3_finalize(ofTask) }
        // The agent's own history older than the cutoff goes too, but not the compactions' reports
        // (a row each): `compact` waits for its report, which the next compaction must not take away.
        let ofAgent = try prepare("""
            DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE task IS NULL AND at_ms < ?1 AND seq <= ?2
                                             AND type != 'compacted' ORDER BY seq LIMIT ?3)
            """)
        defer { sqlite3_finalize(ofAgent) }
        return try transaction {
            guard try scalar("SELECT count(*) FROM snapshots WHERE seq = \(through)") == 1 else {
                throw StoreError(message: "no snapshot at seq \(through) in \(path): no event may be deleted")
            }
            var rows = 0
            var touched: [String] = []
            func run(_ statement: OpaquePointer?, first: (OpaquePointer?) -> Int32) throws -> Int {
                sqlite3_reset(statement)
                guard first(statement) == SQLITE_OK, sqlite3_bind_int64(statement, 2, through) == SQLITE_OK,
                      sqlite3_bind_int64(statement, 3, Int64(limit - rows)) == SQLITE_OK else { throw error("cannot bind a deletion") }
                guard sqlite3_step(statement) == SQLITE_DONE else { throw error("cannot delete compacted events") }
                return Int(sqlite3_changes(db))
            }
            while rows < limit, let task = tasks.first {
                let deleted = try run(ofTask) { sqlite3_bind_text($0, 1, task, -1, SQLITE_TRANSIENT) }
                rows += deleted
                if deleted > 0 { touched.append(task) }
                if rows < limit { tasks.removeFirst() }
            }
            if tasks.isEmpty, rows < limit {
                rows += try run(ofAgent) { sqlite3_bind_int64($0, 1, beforeMs) }
            }
            if rows > 0, try scalar("SELECT count(*) FROM snapshots WHERE seq = \(through) AND pruned = 0") > 0 {
                // From here on replays start at `through`: older snapshots are of no use.
                try execute("""
                    UPDATE snapshots SET pruned = 1 WHERE seq = \(through);
                    DELETE FROM snapshots WHERE seq < \(through);
                    DELETE FROM snapshot_parts WHERE seq < \(through);
                    """)
            }
            return (rows, touched)
        }
    }

    /// Whether `deleteEvents` would delete anything for these arguments: an
    /// agent event from before `beforeMs` (a compaction's report aside), or
    /// an event at or below `through` of one of `tasks` that has none after
    /// it. Stops at the first. Asked before a requested compaction writes its
    /// snapshot: one with nothing to drop would only add the snapshot's size
    /// to the log (and keep the pruned one before it, which time travel needs).
    public func holdsEventsToDrop(tasks: [String], through: Int64, beforeMs: Int64) throws -> Bool {
        if try scalar("""
            SELECT EXISTS (SELECT 1 FROM events WHERE task IS NULL AND at_ms < \(beforeMs) AND seq <= \(through) AND type != 'compacted')
            """) == 1 { return true }
        let ofTask = try prepare("""
            SELECT EXISTS (SELECT 1 FROM events WHERE task = ?1 AND seq <= ?2) AND NOT EXISTS (SELECT 1 FROM events WHERE task = ?1 AND seq > ?2)
            """)
        defer { sqlite3_finalize(ofTask) }
        for task in tasks {
            sqlite3_reset(ofTask)
            guard sqlite3_bind_text(ofTask, 1, task, -1, SQLITE_TRANSIENT) == SQLITE_OK,
                  sqlite3_bind_int64(ofTask, 2, through) == SQLITE_OK else { throw error("cannot bind a task to look up") }
            guard sqlite3_step(ofTask) == SQLITE_ROW else { throw error("cannot read the event log (the events of task \(task))") }
            if sqlite3_column_int64(ofTask, 0) == 1 { return true }
        }
        return false
    }

    /// Gives up to `pages` free pages back to the file system; false once none are left.
    public func releaseFreePages(_ pages: Int) throws -> Bool {
        guard try scalar("PRAGMA auto_vacuum") == 2 else { return false }
        guard try scalar("PRAGMA freelist_count") > 0 else { return false }
        return try transaction {
            try execute("PRAGMA incremental_vacuum(\(pages))")
            return try scalar("PRAGMA freelist_count") > 0
        }
    }

    /// The compaction that wrote the snapshot at `seq` has deleted and given back all it meant to.
    public func markCompactionDone(_ seq: Int64) throws {
        try transaction { try execute("UPDATE snapshots SET done = 1 WHERE seq = \(seq)") }
    }

    /// Parts no snapshot row names: a snapshot being replaced, or one whose writer was killed.
    private static let unnamedPartsDeletion = "DELETE FROM snapshot_parts WHERE seq NOT IN (SELECT seq FROM snapshots)"

    /// Removes the parts of a snapshot whose row was never written (a kill
    /// while it was written): they name no state and only take room. Only
    /// the agent at its start calls it, holding the lock: no snapshot is
    /// being written then (a writer opened beside one would take its parts).
    /// Returns how many parts went.
    @discardableResult
    public func removeUnnamedSnapshotParts() throws -> Int {
        guard try hasSnapshots else { return 0 }
        return try transaction {
            try execute(Self.unnamedPartsDeletion)
            return Int(sqlite3_changes(db))
        }
    }

    /// The cutoff of the newest snapshot's compaction when it was cut short (a crash, a stop): it has work left.
    public func unfinishedCompaction() throws -> Int64? {
        guard try hasSnapshots,
              try scalar("SELECT count(*) FROM snapshots WHERE seq = (SELECT MAX(seq) FROM snapshots) AND done = 0") > 0
        else { return nil }
        return try scalar("SELECT older_than_s FROM snapshots WHERE seq = (SELECT MAX(seq) FROM snapshots)")
    }

    /// What the log holds, in bytes: its pages, wherever they are (file or write-ahead log).
    public func databaseBytes() throws -> Int64 {
        try scalar("PRAGMA page_count") * scalar("PRAGMA page_size")
    }

    /// Whether freed pages can be given back without rewriting the file.
    public var shrinksIncrementally: Bool {
        get throws { try scalar("PRAGMA auto_vacuum") == 2 }
    }

    /// Rewrites the whole file, so it gives back every free page from now
    /// on too. Only with no agent running: it holds the file for its duration.
    public func rewriteToShrink() throws {
        try execute("PRAGMA auto_vacuum=INCREMENTAL")
        try execute("VACUUM")
    }

    /// Moves the write-ahead log into the file and empties it, so the file's
    /// size says what it holds.
    public func checkpoint() throws {
        try execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// Write transactions of this process's connections (the agent's and
    /// its compactor's) take turns here: a commit waiting for a compaction
    /// step is woken the moment it ends, rather than by SQLite's busy
    /// handler, which sleeps up to 100 ms between tries.
    private static let writeGate = NSLock()

    /// One transaction around `body`: IMMEDIATE (the write lock at once) when writing.
    private func transaction<T>(writing: Bool = true, _ body: () throws -> T) throws -> T {
        if writing { Self.writeGate.lock() }
        defer { if writing { Self.writeGate.unlock() } }
        try execute(writing ? "BEGIN IMMEDIATE" : "BEGIN")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }
}

/// SQLite's "copy this string now" destructor, which Swift cannot spell directly.
let SQLITE_TRANSIENT = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

/// A snapshot's bytes, in memory mapped with its pages made at once
/// (MAP_POPULATE): faulted in page by page, the 5 MB of a 10,000-task
/// snapshot were a fifth of `status`'s page faults, each dear in a VM.
/// (Its size is checked against the parts' before: see `snapshotBytes`.)
final class SnapshotBuffer {
    let start: UnsafeMutableRawPointer
    let count: Int
    private let mapped: Int

    init(count: Int) throws {
        self.count = count
        mapped = max(count, 1)
        do {
            start = try Posix.mapMemory(mapped, shown: "\(count) bytes for a snapshot")
        } catch {
            throw StoreError(message: "cannot map \(count) bytes for a snapshot: \(Posix.words((error as? SystemError)?.errno ?? ENOMEM))")
        }
    }

    deinit { Posix.unmapMemory(start, mapped) }

    func withUnsafeBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        try body(UnsafeRawBufferPointer(start: start, count: count))
    }
}

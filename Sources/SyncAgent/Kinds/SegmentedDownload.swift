import CCurlShims
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// A download over several connections (aria2c `-x`/`-s`; the job's
/// `connections`): ranges of one file fetched at once into one `DEST.part`
/// with positional writes. One fdatasync covers every connection's bytes,
/// and one `progressed` event then records the durable parts as `ranges`,
/// so a restart fetches only what no range holds.
///
/// The first request of a fresh download is a plain GET: when its answer
/// shows the size, a validator and `Accept-Ranges: bytes`, that connection
/// keeps the first range and others open for the rest. A connection that
/// runs out of work takes a waiting range, or half of the largest range
/// still running (`SegmentPlan`), so none idles while work remains.
final class SegmentedDownload {
    /// One connection: an `Exchange` asking for `start ..< stopAt`.
    final class Connection {
        let start: Int64
        /// Its bytes the log vouches for end here.
        var claimed: Int64
        var attempt: Exchange!
        /// Its transfer is over (its range written, or given back); its
        /// bytes wait for the next sync to be claimed.
        var isOver = false
        init(start: Int64) { self.start = start; claimed = start }
    }

    let taskID: String
    /// The partial file, which every connection writes (each through its own duplicate).
    let fd: Int32
    /// Connections it may hold at once: the job's `connections`, fewer once the server refused one.
    private(set) var limit: Int
    /// The resource's size; nil until the first answer of a fresh download.
    private(set) var total: Int64?
    /// `If-Range` for every ranged request.
    private(set) var validator: String?
    /// Parts durable before this attempt, and those of connections since claimed and gone.
    private var base: ByteRanges
    /// Ranges no connection fetches yet.
    private(set) var pending: [ByteSpan]
    private(set) var connections: [Connection] = []
    /// The sync in flight: its serial, and how far each connection had written when it began.
    private(set) var syncSerial: UInt64?
    private var syncPositions: [(Connection, Int64)] = []
    /// Validators a connection saw first: the next `progressed` carries them.
    private var validatorsToLog: (etag: String?, lastModified: String?)?
    /// The validators of the file, as its first answer gave them: logged
    /// with the first progress and with completion (`overwrite = "update"` asks with them).
    private var fileValidators: (etag: String?, lastModified: String?)?
    /// Bytes received by connections that ended (for `finished`'s metrics).
    private(set) var bytesReceived: Int64 = 0
    /// Why it stays on one connection, logged once with the next progress.
    private var fallbackToLog: String?
    /// Claims relayed while syncing are logged as one event at the end.
    private var batching = false

    /// - Parameters:
    ///   - done: what the log vouches for already; `missing`: what to fetch
    ///     (nil: a fresh download, sizes unknown until the first answer).
    init(taskID: String, fd: Int32, limit: Int, total: Int64?, validator: String?, done: ByteRanges, missing: [ByteSpan]?) {
        self.taskID = taskID
        self.fd = fd
        self.limit = limit
        self.total = total
        self.validator = validator
        base = done
        pending = missing.map { SegmentPlan.initialRanges(missing: $0, connections: limit) } ?? []
    }

    deinit { close(fd) }

    var running: [Connection] { connections.filter { !$0.isOver } }
    var runningCount: Int { connections.reduce(0) { $0 + ($1.isOver ? 0 : 1) } }
    /// Every byte of the file is written (not necessarily durable yet), once
    /// the connection that just finished was the last one.
    var isWritten: Bool { pending.isEmpty && runningCount == 0 }
    /// Room for another connection, and a range for it.
    var wantsConnection: Bool { !pending.isEmpty && runningCount < limit }

    /// What the log vouches for, as spans.
    var durableRanges: ByteRanges {
        var ranges = base
        for connection in connections { ranges.insert(ByteSpan(connection.start, connection.claimed)) }
        return ranges
    }

    var covered: Int64 { durableRanges.covered }

    func connection(of attempt: Exchange) -> Connection? {
        connections.first { $0.attempt === attempt }
    }

    func takePending() -> ByteSpan? { pending.isEmpty ? nil : pending.removeFirst() }

    func add(_ connection: Connection) { connections.append(connection) }

    /// A range no connection could be opened for waits again.
    func pendingBack(_ span: ByteSpan) { pending.insert(span, at: 0) }

    /// No connection beyond those running now (another could not be opened).
    func holdAtCurrentCount() { limit = max(1, runningCount) }

    // MARK: - Answers

    /// The plain GET of a fresh download was answered: split the file if
    /// the server can serve ranges of it, else stay on this one connection.
    func firstAnswer(_ attempt: Exchange) -> AttemptOutcome? {
        let (etag, lastModified) = attempt.responseValidators
        noteValidators(etag, lastModified)
        // Known or not, the size counts for progress while one connection fetches the file.
        total = attempt.resourceSize
        guard attempt.httpStatus == 200, let size = attempt.resourceSize else {
            fallBack("the server did not say the file's size")
            return nil
        }
        guard attempt.acceptsRanges else {
            fallBack("the server does not offer ranges (no Accept-Ranges: bytes)")
            return nil
        }
        // Without a validator, ranges fetched at different times could come from different files.
        guard let guardValidator = etag.flatMap(RecoveryPlan.strongETag) ?? lastModified else {
            fallBack("the server sent no strong ETag or Last-Modified to keep the ranges of one file together")
            return nil
        }
        let ranges = SegmentPlan.initialRanges(missing: [ByteSpan(0, size)], connections: limit)
        guard ranges.count > 1 else { return nil }
        validator = guardValidator
        attempt.stopAt = ranges[0].end
        pending = Array(ranges.dropFirst())
        return nil
    }

    /// A ranged request was answered with its range: it must be of the same file.
    func rangeAnswer(_ attempt: Exchange) -> AttemptOutcome? {
        let (etag, lastModified) = attempt.responseValidators
        noteValidators(etag, lastModified)
        // (Its validator was checked against the download's If-Range before: `RecoveryPlan.anotherFile`.)
        if let total, attempt.resourceSize != total {
            let size = attempt.resourceSize.map { "\($0) bytes" } ?? "an unknown size"
            return .rangeRefused(reason: "the file on the server changed size (\(total) bytes → \(size))")
        }
        // A server may answer with less than asked (some cap each answer): this
        // connection takes what it was given, and the rest waits for another.
        if let end = attempt.answeredRangeEnd, let stop = attempt.stopAt, end > attempt.plan.ask.offset, end < stop {
            attempt.stopAt = end
            pending.insert(ByteSpan(end, stop), at: 0)
        }
        return nil
    }

    private func noteValidators(_ etag: String?, _ lastModified: String?) {
        guard fileValidators == nil, etag != nil || lastModified != nil else { return }
        fileValidators = (etag, lastModified)
        validatorsToLog = fileValidators
    }

    /// A connection's attempt is over: its received bytes count in the task's metrics.
    func countReceived(_ attempt: Exchange) { bytesReceived += attempt.metrics.bytesReceived }

    private func fallBack(_ reason: String) {
        limit = 1
        fallbackToLog = reason
    }

    // MARK: - Work for a connection that ran out of it

    /// A connection finished its range: the next waiting range goes to a
    /// new connection, else the largest running range is halved and its
    /// second half waits for one.
    func connectionFinished(_ connection: Connection) {
        connection.isOver = true
        guard pending.isEmpty else { return }
        let running = running
        let remaining = running.map { (position: $0.attempt.written, end: $0.attempt.stopAt ?? total ?? $0.attempt.written) }
        guard let (index, at) = SegmentPlan.splitLargest(running: remaining) else { return }
        running[index].attempt.stopAt = at
        pending.append(ByteSpan(at, remaining[index].end))
    }

    /// A connection failed. What it did not write waits for another. One
    /// that had made progress (a reset, a stall) is replaced at once, a few
    /// times per attempt; one that got nowhere (the server refused it) means
    /// no more connections than now run.
    /// Returns false when the task's attempt should end with the failure instead.
    func connectionFailed(_ connection: Connection) -> Bool {
        let attempt = connection.attempt!
        let progressed = attempt.written > attempt.plan.ask.offset
        if progressed, replacements < Self.replacementsPerAttempt {
            replacements += 1
        } else if runningCount <= 1 {
            return false
        } else {
            limit = max(1, runningCount - 1)
        }
        connection.isOver = true
        if let end = attempt.stopAt, attempt.written < end { pending.insert(ByteSpan(attempt.written, end), at: 0) }
        return true
    }

    /// Connections replaced after a failure that had made progress, this attempt.
    private var replacements = 0
    private static let replacementsPerAttempt = 8

    // MARK: - Durability

    /// Starts a sync of the shared file for every connection under
    /// `serial`; false when one is in flight (its claim will release the
    /// connections that asked).
    func beginSync(serial: UInt64) -> Bool {
        guard syncSerial == nil else { return false }
        syncSerial = serial
        syncPositions = connections.map { ($0, $0.attempt.written) }
        return true
    }

    /// The sync failed: nothing it covered may be claimed, ever (a second
    /// fdatasync of the file would report success for the pages it lost).
    func syncFailed() {
        syncSerial = nil
        syncPositions = []
        poisoned = true
    }

    /// A sync of this file failed: `flushAll` refuses.
    private var poisoned = false

    /// The sync returned: each connection claims what it had written when
    /// it began; one `progressed` says it all (nil: nothing new).
    func synced() -> Progressed? {
        syncSerial = nil
        let before = durableRanges
        batching = true
        for (connection, position) in syncPositions { connection.attempt.claim(upTo: position) }
        // Connections opened after the sync began ask again (their request met this one in flight).
        for connection in connections where !syncPositions.contains(where: { $0.0 === connection }) {
            connection.attempt.claim(upTo: connection.attempt.durable)
        }
        batching = false
        syncPositions = []
        // Connections that are over and fully claimed live on in `base`.
        for connection in connections where connection.isOver && connection.claimed >= connection.attempt.written {
            base.insert(ByteSpan(connection.start, connection.claimed))
        }
        connections.removeAll { $0.isOver && $0.claimed >= $0.attempt.written }
        return durableRanges == before && validatorsToLog == nil && fallbackToLog == nil ? nil : progress()
    }

    /// A connection's attempt claimed bytes (its own `progressed`): kept,
    /// and returned as the whole download's progress unless a sync batches them.
    func claimed(_ connection: Connection, _ progress: Progressed) -> Progressed? {
        connection.claimed = max(connection.claimed, progress.bytes)
        noteValidators(progress.etag, progress.lastModified)
        return batching ? nil : self.progress()
    }

    /// The durable parts now, as the log records them.
    func progress() -> Progressed {
        let ranges = durableRanges
        var progress = Progressed(bytes: ranges.covered, total: total, ranges: ranges.isPrefix ? nil : ranges.spans)
        if let validators = validatorsToLog {
            progress.etag = validators.etag
            progress.lastModified = validators.lastModified
            validatorsToLog = nil
        }
        if let reason = fallbackToLog {
            progress.fallback = reason
            fallbackToLog = nil
        }
        return progress
    }

    /// Every connection stopped: fdatasync the file once, then claim what
    /// each wrote. Returns the progress to log (nil: nothing new), or the errno.
    func flushAll() -> Result<Progressed?, SystemError> {
        guard !poisoned else { return .failure(SystemError(operation: "fdatasync after a failed one", errno: EIO)) }
        while fdatasync(fd) != 0 {
            if errno != EINTR { return .failure(SystemError(operation: "fdatasync", errno: errno)) }
        }
        syncPositions = connections.map { ($0, $0.attempt.written) }
        return .success(synced())
    }

    /// The file is complete and durable: all `bytes` of it.
    func completeProgress(bytes: Int64) -> Progressed {
        var progress = Progressed(bytes: bytes, total: total ?? bytes, fallback: fallbackToLog)
        if let validators = fileValidators {
            progress.etag = validators.etag
            progress.lastModified = validators.lastModified
        }
        return progress
    }

    /// Forgets its connections (their attempts end with them).
    func dropConnections() {
        for connection in connections { base.insert(ByteSpan(connection.start, connection.claimed)) }
        connections.removeAll()
    }
}

// MARK: - The agent's side

extension Agent {
    /// How many connections `task` would use: its `connections`, else the
    /// config's; 1 for anything but a top-level download, and for a task
    /// whose log says why its server's ranges cannot be used.
    func connectionsWanted(for task: TaskState) -> Int {
        guard task.spec.kind == .download, task.spec.parent == nil, task.spec.byteRange == nil,
              task.singleConnectionReason == nil else { return 1 }
        return task.spec.connections ?? config.connections
    }

    /// Starts `task` over several connections; false when it takes the
    /// one-connection path (`connections = 1` and no ranges in the log).
    func startSegmented(_ task: TaskState) -> Bool {
        let wanted = connectionsWanted(for: task)
        guard wanted > 1 || task.doneRanges != nil, let part = task.partPath else { return false }
        // Fresh unless the partial file still holds what the log vouches for.
        var done = ByteRanges(), missing: [ByteSpan]?, validator: String?
        let plan = RecoveryPlan.plan(for: task, nowMs: FileSystem.nowMs)
        switch plan {
        case .resumeRanges(let gaps, let ifRange):
            if let held = heldRanges(of: task, plan: plan) { (done, missing, validator) = (held, gaps, ifRange) }
        case .resume(let at, let ifRange):
            // Bytes from 0 of a file whose size is unknown, or no longer there: one connection takes them.
            guard let total = task.total, at < total, partHolds(part, upTo: at) else { return false }
            (done, missing, validator) = (ByteRanges([ByteSpan(0, at)]), [ByteSpan(at, total)], ifRange)
        default:
            break
        }
        let descriptor: Int32
        do {
            if partLocks[task.id] == nil { partLocks[task.id] = try root.lockPartial(part) }
            descriptor = try root.openPartial(part, truncatingTo: done.spans.last?.end ?? 0)
        } catch {
            refuseStart(task, error)
            return true
        }
        let download = SegmentedDownload(taskID: task.id, fd: descriptor, limit: wanted, total: missing == nil ? nil : task.total,
                                         validator: validator, done: done, missing: missing)
        segmented[task.id] = download
        log.record(.started(Started(attempt: task.nextAttempt, offset: done.covered, url: task.currentURL)), task: task.id)
        if missing == nil {
            // A fresh download: a plain GET first, ranged once its answer shows the file can be split.
            let ifChanged = validatorsForUpdate(task)
            guard openConnection(download, for: task, span: nil, ifChanged: ifChanged) else { return true }
        }
        openConnections(download)
        return true
    }

    /// A segmented download's ranges, when the restart plan resumes them and
    /// the partial file still holds them (else it starts over).
    func heldRanges(of task: TaskState, plan: RecoveryPlan) -> ByteRanges? {
        guard case .resumeRanges = plan, let ranges = task.doneRanges, let part = task.partPath,
              partHolds(part, upTo: ranges.spans.last?.end ?? 0) else { return nil }
        return ranges
    }

    private func partHolds(_ part: String, upTo end: Int64) -> Bool { (root.size(part) ?? 0) >= end }

    /// Opens connections for waiting ranges, within the download's limit and `max_per_host`.
    func openConnections(_ download: SegmentedDownload) {
        guard let task = log.state[download.taskID], task.phase == .running else { return }
        while download.wantsConnection, connectionRoom(for: task, download) > 0, let span = download.takePending() {
            guard openConnection(download, for: task, span: span, ifChanged: nil) else { return }
        }
    }

    /// Opens any connections segmented downloads wait for (after curl ran:
    /// a handle cannot be added from inside curl's callbacks).
    func openWaitingConnections() {
        for download in segmented.values where download.wantsConnection { openConnections(download) }
    }

    /// Connections beyond one that segmented downloads hold, by host: the
    /// scheduler counts them against `max_per_host`.
    var extraConnectionsByHost: [String: Int] {
        var extra: [String: Int] = [:]
        for download in segmented.values {
            guard let host = log.state[download.taskID]?.hostKey else { continue }
            extra[host, default: 0] += max(0, download.runningCount - 1)
        }
        return extra
    }

    /// Connections `download` may add: its task holds one slot of its host already.
    private func connectionRoom(for task: TaskState, _ download: SegmentedDownload) -> Int {
        let others = (log.state.runningByHost[task.hostKey] ?? 1) - 1 + (extraConnectionsByHost[task.hostKey] ?? 0)
            - max(0, download.runningCount - 1)
        return config.maxPerHost - others - download.runningCount
    }

    /// One connection for `span` (nil: the whole file, unranged). False if it cannot be made.
    private func openConnection(_ download: SegmentedDownload, for task: TaskState, span: ByteSpan?,
                                ifChanged: PublishedValidators?) -> Bool {
        let connection = SegmentedDownload.Connection(start: span?.start ?? 0)
        let attempt: Exchange
        do {
            let part = task.partPath ?? ""
            let file = PartialFile(path: part, descriptor: try Posix.duplicate(download.fd, shown: part))
            attempt = try makeExchange(task, offset: span?.start ?? 0, rangeEnd: span?.end, ifRange: download.validator,
                                       ifChanged: ifChanged, sink: .partialFile(file))
            let id = task.id
            attempt.onProgress = { [unowned self, weak download, weak connection] progress in
                guard let download, let connection, let combined = download.claimed(connection, progress) else { return }
                self.log.record(.progressed(combined), task: id)
            }
            attempt.onRedirected = { [unowned self] hop in self.log.record(.redirected(hop), task: id) }
            attempt.onSyncWanted = { [unowned self, weak download] _, _ in
                if let download { self.syncSegments(download) }
            }
        } catch {
            if let span { download.pendingBack(span) }
            if download.runningCount == 0 {
                // Nothing runs to carry the task on: it stops like any attempt that cannot start.
                segmented[task.id] = nil
                refuseStart(task, error)
            } else {
                logger.warning("cannot open another connection", metadata: ["task.id": "\(task.id)", "error": "\(error)"])
                download.holdAtCurrentCount()
            }
            return false
        }
        attempt.onAccepted = { [weak download] attempt in
            guard let download else { return nil }
            return attempt.plan.ask.rangeEnd == nil ? download.firstAnswer(attempt) : download.rangeAnswer(attempt)
        }
        connection.attempt = attempt
        download.add(connection)
        attempts[attempt.easy] = attempt
        multi.add(attempt.easy)
        shareOverallSpeed()
        return true
    }

    /// One fdatasync for all connections, off the loop (DataSyncer).
    private func syncSegments(_ download: SegmentedDownload) {
        let serial = Exchange.makeSerial()
        guard download.beginSync(serial: serial) else { return }
        syncer.sync(download.fd, .init(taskID: download.taskID, attempt: serial, offset: 0, complete: false))
    }

    /// A progress sync of a segmented download returned.
    func segmentsSynced(_ download: SegmentedDownload, error: Int32?) {
        if let error {
            download.syncFailed()
            // The task stops with the disk's error, keeping only what earlier syncs claimed.
            guard let attempt = (download.running.first ?? download.connections.first)?.attempt else { return }
            finish(attempt, attempt.syncFailed(errno: error))
            return
        }
        if let progress = download.synced() { log.record(.progressed(progress), task: download.taskID) }
    }

    /// One connection's attempt ended. Returns the task's outcome when the
    /// task's attempt ends with it; nil while the download goes on.
    func connectionEnded(_ download: SegmentedDownload, _ attempt: Exchange, _ outcome: AttemptOutcome) -> AttemptOutcome? {
        guard let connection = download.connection(of: attempt) else { return outcome }
        download.countReceived(attempt)
        if attempt.sawSetCookie { saveCookies() }
        if attempts.removeValue(forKey: attempt.easy) != nil {
            multi.remove(attempt.easy)
            shareOverallSpeed()
        }
        switch outcome {
        // (Also a connection that failed after its last byte, a server holding it open after a range
        // with no length until idle_timeout: its range is done. Not one that got more than its range.)
        case .complete, .transient(_, _, false) where attempt.stopAt.map({ attempt.written >= $0 }) == true:
            download.connectionFinished(connection)
            if download.isWritten { return .complete(bytes: download.total ?? attempt.written) }
            openConnections(download)
            return nil
        case .transient(let reason, _, false) where attempt.plan.ask.rangeEnd != nil || download.runningCount > 1:
            guard download.connectionFailed(connection) else { return outcome }
            logger.notice("a connection failed; the download goes on", metadata: [
                "task.id": "\(download.taskID)", "reason": "\(reason)", "connections": "\(download.limit)"])
            openConnections(download)
            return nil
        case .transient(let reason, _, true) where attempt.plan.ask.rangeEnd != nil:
            // A range answered from the wrong byte, from nowhere, or with 416: this server's
            // ranges cannot be trusted; one connection from 0, from now on.
            log.record(.progressed(Progressed(bytes: 0, fallback: reason)), task: download.taskID)
            return .fallBack(reason: reason + "; one connection from now on")
        case .rangeRefused(let reason):
            // Ranges of this server cannot be trusted to make one file (it ignores them, or its
            // validators change between requests): one connection from 0, from now on.
            log.record(.progressed(Progressed(bytes: 0, fallback: reason)), task: download.taskID)
            return .fallBack(reason: reason + "; one connection from now on")
        default:
            return outcome
        }
    }

    /// Stops every connection of a segmented download; with `flushing`,
    /// what they wrote is made durable and claimed first. Returns what the
    /// log then vouches for.
    func stopSegmented(_ download: SegmentedDownload, flushing: Bool) -> Int64 {
        segmented[download.taskID] = nil
        for connection in download.connections where attempts.removeValue(forKey: connection.attempt.easy) != nil {
            multi.remove(connection.attempt.easy)
            download.countReceived(connection.attempt)
            if connection.attempt.sawSetCookie { saveCookies() }
        }
        if flushing {
            switch download.flushAll() {
            case .success(let progress?): log.record(.progressed(progress), task: download.taskID)
            case .success(nil): break
            case .failure(let error):
                logger.error("cannot flush a partial file", metadata: ["task.id": "\(download.taskID)", "error": "\(error)"])
            }
        }
        let bytes = download.covered
        download.dropConnections()
        shareOverallSpeed()
        return bytes
    }
}

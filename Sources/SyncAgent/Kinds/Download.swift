import Foundation
import SyncAgentCore

/// A download: over one connection (`TransferRunner`), or over several
/// (aria2c `-x`/`-s`; the job's `connections`): ranges of one file fetched
/// at once into one `DEST.part` with positional writes. One fdatasync
/// covers every connection's bytes, and one `progressed` event then records
/// the durable parts as `ranges`, so a restart fetches only what no range holds.
///
/// The first request of a fresh download is a plain GET: when its answer
/// shows the size, a validator and `Accept-Ranges: bytes`, that connection
/// keeps a first piece and ranged requests fetch the rest (`SegmentedDownload`).
final class DownloadRunner: TransferRunner {
    /// The attempt's connections, when it runs over several.
    private var segmented: SegmentedDownload?
    /// The download whose complete body is being made durable.
    private var completedDownload: SegmentedDownload?
    /// The partial file's name was made durable with a sync of this attempt.
    private var namesDurable = false

    override var isBusy: Bool { super.isBusy || segmented != nil }
    override var extraConnections: Int { max(0, (segmented?.runningCount ?? 0) - 1) }

    override func startAttempt(_ task: TaskState, recordingStart: Bool) {
        completedDownload = nil
        if startSegmented(task, recordingStart: recordingStart) { return }
        super.startAttempt(task, recordingStart: recordingStart)
    }

    /// How many connections `task` would use: its `connections`, else the
    /// config's; 1 for a child (a segment, a key), a byte range, and a task
    /// whose log says why its server's ranges cannot be used.
    private func connectionsWanted(for task: TaskState) -> Int {
        guard task.spec.parent == nil, task.spec.byteRange == nil, task.singleConnectionReason == nil else { return 1 }
        return task.spec.connections ?? context.config.connections
    }

    /// Starts `task` over several connections; false when it takes the
    /// one-connection path (`connections = 1` and no ranges in the log).
    private func startSegmented(_ task: TaskState, recordingStart: Bool) -> Bool {
        let wanted = connectionsWanted(for: task)
        guard wanted > 1 || task.doneRanges != nil, let part = task.partPath else { return false }
        // Fresh unless the partial file still holds what the log vouches for.
        var done = ByteRanges(), missing: [ByteSpan]?, validator: String?
        let plan = RecoveryPlan.plan(for: task, nowMs: Posix.nowMs)
        switch plan {
        case .resumeRanges(let gaps, let ifRange):
            if let held = Self.heldRanges(of: task, plan: plan, root: context.root) { (done, missing, validator) = (held, gaps, ifRange) }
        case .resume(let at, let ifRange):
            // Bytes from 0 of a file whose size is unknown, or no longer there: one connection takes them.
            guard let total = task.total, at < total, (context.root.size(part) ?? 0) >= at else { return false }
            (done, missing, validator) = (ByteRanges([ByteSpan(0, at)]), [ByteSpan(at, total)], ifRange)
        default:
            break
        }
        let descriptor: Int32
        do {
            try lockPartialFile(part)
            descriptor = try context.root.openPartial(part, truncatingTo: done.spans.last?.end ?? 0)
        } catch {
            context.refuseStart(task, error)
            releaseLockIfIdle()
            return true
        }
        namesDurable = false
        // What the log vouches for was checked (`checked`): its chains go on; nothing else does.
        if done.covered == 0 { digester.reset() }
        let download = SegmentedDownload(taskID: taskID, fd: descriptor, limit: wanted, total: missing == nil ? nil : task.total,
                                         validator: validator, done: done, missing: missing)
        segmented = download
        if recordingStart {
            context.record(.started(Started(attempt: task.nextAttempt, offset: done.covered, url: task.currentURL)), task: taskID)
        }
        if missing == nil {
            // A fresh download: a plain GET first, ranged once its answer shows the file can be split.
            guard openConnection(download, for: task, span: nil, ifChanged: validatorsForUpdate(task)) else { return true }
        }
        openConnections(download)
        return true
    }

    /// A segmented download keeps its ranges: the file is cut after the last one.
    override class func recover(_ task: TaskState, in context: RunnerContext) -> Int64 {
        let plan = RecoveryPlan.plan(for: task, nowMs: Posix.nowMs)
        guard let ranges = heldRanges(of: task, plan: plan, root: context.root) else { return super.recover(task, in: context) }
        if let part = task.partPath { context.truncate(part, of: task.id, to: ranges.spans.last?.end ?? 0) }
        return ranges.covered
    }

    /// A segmented download's ranges, when the restart plan resumes them and
    /// the partial file still holds them (else it starts over).
    static func heldRanges(of task: TaskState, plan: RecoveryPlan, root: DownloadRoot) -> ByteRanges? {
        guard case .resumeRanges = plan, let ranges = task.doneRanges, let part = task.partPath,
              (root.size(part) ?? 0) >= ranges.spans.last?.end ?? 0 else { return nil }
        return ranges
    }

    /// Opens any connections the download waits for (after curl ran: a
    /// handle cannot be added from inside curl's callbacks).
    override func wake(nowMs: Int64) {
        if let segmented, segmented.wantsConnection { openConnections(segmented) }
    }

    /// Opens connections for waiting ranges, within the download's limit and `max_per_host`.
    private func openConnections(_ download: SegmentedDownload) {
        guard let task = context.state[taskID], task.phase == .running else { return }
        while download.wantsConnection, connectionRoom(for: task, download) > 0, let span = download.takePending() {
            guard openConnection(download, for: task, span: span, ifChanged: nil) else { return }
        }
    }

    /// Connections `download` may add: its task holds one slot of its host already.
    private func connectionRoom(for task: TaskState, _ download: SegmentedDownload) -> Int {
        let extra = context.runners.extraConnectionsByHost[task.hostKey] ?? 0
        let others = (context.state.runningByHost[task.hostKey] ?? 1) - 1 + extra - max(0, download.runningCount - 1)
        return context.config.maxPerHost - others - download.runningCount
    }

    /// One connection for `span` (nil: the whole file, unranged). False if it cannot be made.
    private func openConnection(_ download: SegmentedDownload, for task: TaskState, span: ByteSpan?,
                                ifChanged: PublishedValidators?) -> Bool {
        let connection = SegmentedDownload.Connection(start: span?.start ?? 0)
        do {
            let part = task.partPath ?? ""
            let file = PartialFile(path: part, descriptor: try Posix.duplicate(download.fd, shown: part))
            file.chain = digester.chain(startingAt: span?.start ?? 0)
            let exchange = try context.makeExchange(task, offset: span?.start ?? 0, rangeEnd: span?.end, ifRange: download.validator,
                                                    ifChanged: ifChanged, sink: .partialFile(file))
            let id = taskID
            exchange.onProgress = { [unowned self, weak download, weak connection] progress in
                guard let download, let connection, let combined = download.claimed(connection, progress) else { return }
                context.record(.progressed(combined), task: id)
            }
            exchange.onRedirected = { [unowned self] hop in context.record(.redirected(hop), task: id) }
            exchange.onSyncWanted = { [unowned self, weak download] _, _ in
                if let download { syncSegments(download) }
            }
            exchange.onAccepted = { [weak download] exchange in
                guard let download else { return nil }
                return exchange.plan.ask.rangeEnd == nil ? download.firstAnswer(exchange) : download.rangeAnswer(exchange)
            }
            exchange.onEnded = { [unowned self] exchange, outcome in connectionEnded(exchange, outcome) }
            // Its first answer names the file, before another connection opens to write a range.
            if task.awaitsServerName {
                exchange.onServerName = { [unowned self] disposition, url in context.nameFromServer(id, contentDisposition: disposition, url: url) }
            }
            connection.exchange = exchange
            try context.exchanges.add(exchange)
        } catch {
            if let span { download.pendingBack(span) }
            if download.runningCount == 0 {
                // Nothing runs to carry the task on: it stops like any attempt that cannot start.
                segmented = nil
                releaseLockIfIdle()
                context.refuseStart(task, error)
            } else {
                context.logger.warning("cannot open another connection", metadata: ["task.id": "\(taskID)", "error": "\(error)"])
                download.holdAtCurrentCount()
            }
            return false
        }
        download.add(connection)
        return true
    }

    /// One fdatasync for all connections, off the loop (DataSyncer).
    private func syncSegments(_ download: SegmentedDownload) {
        let serial = Exchange.makeSerial()
        guard let part = context.state[taskID]?.partPath, let claims = download.beginSync(serial: serial) else { return }
        context.syncer.sync(download.fd, .init(taskID: taskID, attempt: serial, offset: 0, complete: false),
                            naming: namesDurable ? nil : (part, context.root), hashing: .init(claims: claims))
        namesDurable = true
    }

    override func synced(_ done: DataSyncer.Done) {
        guard !done.complete, let download = segmented, download.syncSerial == done.attempt else { return super.synced(done) }
        if let error = done.error {
            download.syncFailed()
            // The task stops with the disk's error, keeping only what earlier syncs claimed.
            guard let exchange = (download.running.first ?? download.connections.first)?.exchange else { return }
            context.exchanges.remove(exchange)
            connectionEnded(exchange, exchange.syncFailed(errno: error))
            return
        }
        if let progress = download.synced(digests: done.digests) { context.record(.progressed(progress), task: taskID) }
    }

    /// One connection's exchange ended: the download goes on without it, or
    /// the task's attempt ends with it.
    private func connectionEnded(_ exchange: Exchange, _ outcome: AttemptOutcome) {
        context.needsScheduling = true
        guard let download = segmented, let ended = attemptOutcome(download, exchange, outcome) else { return }
        // Only what the others wrote before a transient failure is flushed and claimed: after a
        // failed sync a second fdatasync of the same file reports success for pages it lost.
        let flushing = if case .transient(_, _, false) = ended { true } else { false }
        let durable = stopSegmented(download, flushing: flushing)
        guard let task = context.state[taskID] else { return }
        var metrics = exchange.metrics
        metrics.bytesReceived = download.bytesReceived
        switch ended {
        case .complete(let bytes):
            // Published once its data is durable (see DataSyncer).
            completedDownload = download
            awaitDurability(of: exchange, bytes: bytes)
        case .notModified(let etag):
            unchanged(task, etag: etag, exchange: exchange)
        case .skipped(let reason, let existing):
            context.finishSkipped(task, reason: reason, existing: existing, metrics: metrics)
        default:
            context.attemptEnded(task, ended, on: exchange, metrics: metrics, durable: durable)
        }
    }

    /// What a connection's end means for the task's attempt: nil while the download goes on.
    private func attemptOutcome(_ download: SegmentedDownload, _ exchange: Exchange, _ outcome: AttemptOutcome) -> AttemptOutcome? {
        guard let connection = download.connection(of: exchange) else { return outcome }
        download.countReceived(exchange)
        let ranged = exchange.plan.ask.rangeEnd != nil
        switch outcome {
        // (Also a connection that failed after its last byte, a server holding it open after a range
        // with no length until idle_timeout: its range is done. Not one that got more than its range.)
        case .complete:
            return rangeWritten(download, connection, exchange)
        case .transient(_, _, false) where exchange.stopAt.map({ exchange.written >= $0 }) == true:
            return rangeWritten(download, connection, exchange)
        case .transient(let reason, _, false) where exchange.crawledAt != nil:
            guard download.connectionCrawled(connection, reason: reason, nowMs: Posix.monotonicMs) else { return outcome }
            context.logger.notice("a connection crawled; its range moves to another", metadata: [
                "task.id": "\(taskID)", "reason": "\(reason)", "moves": "\(download.crawlMoves)"])
            context.record(.progressed(download.progress()), task: taskID)
            openConnections(download)
            return nil
        case .transient(let reason, _, false) where ranged || download.runningCount > 1:
            guard download.connectionFailed(connection) else { return outcome }
            context.logger.notice("a connection failed; the download goes on", metadata: [
                "task.id": "\(taskID)", "reason": "\(reason)", "connections": "\(download.limit)"])
            openConnections(download)
            return nil
        case .transient(let reason, _, true) where ranged:
            // A range answered from the wrong byte, from nowhere, or with 416: this server's
            // ranges cannot be trusted; one connection from 0, from now on.
            return fallBack(because: reason)
        case .rangeRefused(let reason):
            // Ranges of this server cannot be trusted to make one file (it ignores them, or its
            // validators change between requests): one connection from 0, from now on.
            return fallBack(because: reason)
        default:
            return outcome
        }
    }

    /// A connection's range is written: the download is complete, or the connection's work goes on elsewhere.
    private func rangeWritten(_ download: SegmentedDownload, _ connection: SegmentedDownload.Connection,
                              _ exchange: Exchange) -> AttemptOutcome? {
        if let behind = download.connectionFinished(connection, nowMs: Posix.monotonicMs) {
            // Taken over: another connection fetches the rest of its range; its bytes are claimed with the next sync.
            context.exchanges.remove(behind.exchange)
            download.countReceived(behind.exchange)
            context.record(.progressed(download.progress()), task: taskID)
        }
        if download.isWritten { return .complete(bytes: download.total ?? exchange.written) }
        openConnections(download)
        return nil
    }

    private func fallBack(because reason: String) -> AttemptOutcome {
        context.record(.progressed(Progressed(bytes: 0, fallback: reason)), task: taskID)
        return .fallBack(reason: reason + "; one connection from now on")
    }

    /// Stops every connection of the download; with `flushing`, what they
    /// wrote is made durable and claimed first. Returns what the log then vouches for.
    private func stopSegmented(_ download: SegmentedDownload, flushing: Bool) -> Int64 {
        segmented = nil
        for connection in download.connections where context.exchanges.contains(connection.exchange) {
            context.exchanges.remove(connection.exchange)
            download.countReceived(connection.exchange)
        }
        if flushing {
            switch download.flushAll() {
            case .success(let progress?): context.record(.progressed(progress), task: taskID)
            case .success(nil): break
            case .failure(let error):
                context.logger.error("cannot flush a partial file", metadata: ["task.id": "\(taskID)", "error": "\(error)"])
            }
        }
        let bytes = download.covered
        download.dropConnections()
        releaseLockIfIdle()
        return bytes
    }

    override func piecesOfCompletedBody() -> Pieces? {
        completedDownload.map { Pieces(received: $0.bytesReceived, covered: $0.covered) }
    }

    override func claimComplete(_ exchange: Exchange, bytes: Int64, digests: [SpanDigest]) {
        guard let download = completedDownload else { return super.claimComplete(exchange, bytes: bytes, digests: digests) }
        completedDownload = nil
        context.record(.progressed(download.completeProgress(bytes: bytes, digests: digests)), task: taskID)
    }

    /// A file put together by several connections: its SHA-256 is the chain
    /// from 0 carried on to its end (past the first range, a second reading
    /// of what the other connections wrote).
    override func completionHashing(of exchange: Exchange, bytes: Int64) -> DataSyncer.Hashing {
        guard completedDownload != nil else { return super.completionHashing(of: exchange, bytes: bytes) }
        return DataSyncer.Hashing(claims: [], file: (digester.fileChain, bytes))
    }

    override func stop(flushing: Bool) -> Stopped? {
        guard let download = segmented else { return super.stop(flushing: flushing) }
        return (stopSegmented(download, flushing: flushing), nil)
    }

    override func cancel(_ task: TaskState) -> Stopped {
        guard let download = segmented else { return super.cancel(task) }
        return (stopSegmented(download, flushing: false), nil)
    }
}

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
/// keeps a first piece of the file and ranged requests fetch the rest. A connection that
/// runs out of work takes a waiting range, or half of the largest range
/// still running (`SegmentPlan`), so none idles while work remains.
final class SegmentedDownload {
    /// One connection: an `Exchange` asking for `start ..< stopAt`.
    final class Connection {
        let start: Int64
        /// Its bytes the log vouches for end here.
        var claimed: Int64
        var exchange: Exchange!
        /// The chain its bytes extend (see `DigestChain`).
        var chain: DigestChain? { exchange.partialFile?.chain }
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
    /// Digests of claims not yet logged: the next `progressed` carries them.
    private var digestsToLog: [SpanDigest] = []

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
        maximumCrawlMoves = max(2, limit)
        pending = missing.map { SegmentPlan.initialRanges(missing: $0, connections: limit) } ?? []
    }

    deinit { Posix.close(fd) }

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

    func connection(of exchange: Exchange) -> Connection? {
        connections.first { $0.exchange === exchange }
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
    func firstAnswer(_ exchange: Exchange) -> AttemptOutcome? {
        let (etag, lastModified) = exchange.responseValidators
        noteValidators(etag, lastModified)
        // Known or not, the size counts for progress while one connection fetches the file.
        total = exchange.resourceSize
        guard exchange.httpStatus == 200, let size = exchange.resourceSize else {
            fallBack("the server did not say the file's size")
            return nil
        }
        guard exchange.acceptsRanges else {
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
        // This answer runs on to the file's end: cut at its range's end, its last bytes come
        // at the server's pace, not the range's (nginx's limit_rate sends bursts a pause apart,
        // and the one holding that end came a pause after the other ranges had ended). It keeps
        // a first piece; a ranged request, opened once it is over, fetches the rest of its range.
        let first = SegmentPlan.firstPiece(of: ranges[0])
        exchange.stopAt = first.end
        pending = Array(ranges.dropFirst())
        if first.end < ranges[0].end { pending.append(ByteSpan(first.end, ranges[0].end)) }
        return nil
    }

    /// A ranged request was answered with its range: it must be of the same file.
    func rangeAnswer(_ exchange: Exchange) -> AttemptOutcome? {
        let (etag, lastModified) = exchange.responseValidators
        noteValidators(etag, lastModified)
        // (Its validator was checked against the download's If-Range before: `RecoveryPlan.anotherFile`.)
        if let total, exchange.resourceSize != total {
            let size = exchange.resourceSize.map { "\($0) bytes" } ?? "an unknown size"
            return .rangeRefused(reason: "the file on the server changed size (\(total) bytes → \(size))")
        }
        // A server may answer with less than asked (some cap each answer): this
        // connection takes what it was given, and the rest waits for another.
        if let end = exchange.answeredRangeEnd, let stop = exchange.stopAt, end > exchange.plan.ask.offset, end < stop {
            exchange.stopAt = end
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
    func countReceived(_ exchange: Exchange) { bytesReceived += exchange.metrics.bytesReceived }

    private func fallBack(_ reason: String) {
        limit = 1
        fallbackToLog = reason
    }

    // MARK: - Work for a connection that ran out of it

    /// A connection finished its range: the next waiting range goes to a
    /// new connection, else a running range is relieved (`SegmentPlan.relieve`):
    /// the one expected to finish last is split where both connections would
    /// finish together, and one far behind is taken over whole. Returns the
    /// connection taken over: it is to stop now (what it wrote is kept).
    func connectionFinished(_ connection: Connection, nowMs: Int64) -> Connection? {
        connection.isOver = true
        guard pending.isEmpty else { return nil }
        let running = running
        let ranges = running.map { running in
            SegmentPlan.Running(position: running.exchange.written, end: running.exchange.stopAt ?? total ?? running.exchange.written,
                                bytesPerS: running.exchange.recentBytesPerS(nowMs: nowMs))
        }
        switch SegmentPlan.relieve(running: ranges, idleBytesPerS: connection.exchange.recentBytesPerS(nowMs: nowMs)) {
        case .split(let index, let at)?:
            running[index].exchange.stopAt = at
            pending.append(ByteSpan(at, ranges[index].end))
            return nil
        case .takeOver(let index)?:
            let behind = running[index]
            behind.exchange.stopAt = behind.exchange.written
            behind.isOver = true
            pending.append(ByteSpan(ranges[index].position, ranges[index].end))
            let speed = ranges[index].bytesPerS.map { ByteCount.format($0) + "/s" } ?? "no speed yet"
            let others = connection.exchange.recentBytesPerS(nowMs: nowMs).map { ByteCount.format($0) + "/s" } ?? "?"
            movedToLog = "bytes \(ranges[index].position)-\(ranges[index].end) moved to another connection: "
                + "its own was far behind (\(speed), where another got \(others))"
            return behind
        case nil:
            return nil
        }
    }

    /// A connection fell below `min_speed` (`crawledAt`): its range's rest
    /// moves to a fresh connection, unless every other connection crawls
    /// too or ranges were moved `maximumCrawlMoves` times this attempt (a
    /// server slow on every connection). Returns false when the attempt
    /// should end with the low-speed failure instead.
    func connectionCrawled(_ connection: Connection, reason: String, nowMs: Int64) -> Bool {
        let exchange = connection.exchange!
        guard validator != nil, let end = exchange.stopAt, let bar = exchange.lowSpeedBar else { return false }
        let others = running.filter { $0 !== connection }.map { $0.exchange.recentBytesPerS(nowMs: nowMs) }
        guard SegmentPlan.crawl(others: others, threshold: bar, moves: crawlMoves, maximumMoves: maximumCrawlMoves) == .move else {
            return false
        }
        crawlMoves += 1
        connection.isOver = true
        if exchange.written < end {
            pending.insert(ByteSpan(exchange.written, end), at: 0)
            movedToLog = "bytes \(exchange.written)-\(end) moved to another connection: \(reason)"
        }
        return true
    }

    /// Ranges moved for crawling this attempt, and the most it may move.
    private(set) var crawlMoves = 0
    let maximumCrawlMoves: Int
    /// Why a range moved, logged with the next progress.
    private var movedToLog: String?

    /// A connection failed. What it did not write waits for another. One
    /// that had made progress (a reset, a stall) is replaced at once, a few
    /// times per attempt; one that got nowhere (the server refused it) means
    /// no more connections than now run.
    /// Returns false when the task's attempt should end with the failure instead.
    func connectionFailed(_ connection: Connection) -> Bool {
        let exchange = connection.exchange!
        let progressed = exchange.written > exchange.plan.ask.offset
        if progressed, replacements < Self.replacementsPerAttempt {
            replacements += 1
        } else if runningCount <= 1 {
            return false
        } else {
            limit = max(1, runningCount - 1)
        }
        connection.isOver = true
        if let end = exchange.stopAt, exchange.written < end { pending.insert(ByteSpan(exchange.written, end), at: 0) }
        return true
    }

    /// Connections replaced after a failure that had made progress, this attempt.
    private var replacements = 0
    private static let replacementsPerAttempt = 8

    // MARK: - Durability

    /// Starts a sync of the shared file for every connection under
    /// `serial`: what each connection's chain is to be hashed up to once it
    /// returns. Nil when one is in flight (its claim will release the
    /// connections that asked).
    func beginSync(serial: UInt64) -> [(chain: DigestChain, to: Int64)]? {
        guard syncSerial == nil else { return nil }
        syncSerial = serial
        syncPositions = connections.map { ($0, $0.exchange.written) }
        return syncPositions.compactMap { connection, position in connection.chain.map { ($0, position) } }
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
    /// it began; one `progressed` says it all, with the digests hashed for it (nil: nothing new).
    func synced(digests: [SpanDigest]) -> Progressed? {
        syncSerial = nil
        digestsToLog += digests
        let before = durableRanges
        batching = true
        // (A connection whose chain a stop's flush took further has claimed past this position already.)
        for (connection, position) in syncPositions { connection.exchange.claim(upTo: position, digests: []) }
        // Connections opened after the sync began ask again (their request met this one in flight).
        for connection in connections where !syncPositions.contains(where: { $0.0 === connection }) {
            connection.exchange.claim(upTo: connection.exchange.durable, digests: [])
        }
        batching = false
        syncPositions = []
        // Connections that are over and fully claimed live on in `base`.
        for connection in connections where connection.isOver && connection.claimed >= connection.exchange.written {
            base.insert(ByteSpan(connection.start, connection.claimed))
        }
        connections.removeAll { $0.isOver && $0.claimed >= $0.exchange.written }
        return durableRanges == before && validatorsToLog == nil && fallbackToLog == nil && movedToLog == nil && digestsToLog.isEmpty
            ? nil : progress()
    }

    /// A connection's attempt claimed bytes (its own `progressed`): kept,
    /// and returned as the whole download's progress unless a sync batches them.
    func claimed(_ connection: Connection, _ progress: Progressed) -> Progressed? {
        connection.claimed = max(connection.claimed, progress.bytes)
        noteValidators(progress.etag, progress.lastModified)
        digestsToLog += progress.digests ?? []
        return batching ? nil : self.progress()
    }

    /// The durable parts now, as the log records them.
    func progress() -> Progressed {
        let ranges = durableRanges
        var progress = Progressed(bytes: ranges.covered, total: total, ranges: ranges.isPrefix ? nil : ranges.spans,
                                  digests: digestsToLog.isEmpty ? nil : digestsToLog)
        digestsToLog = []
        if let validators = validatorsToLog {
            progress.etag = validators.etag
            progress.lastModified = validators.lastModified
            validatorsToLog = nil
        }
        if let reason = fallbackToLog {
            progress.fallback = reason
            fallbackToLog = nil
        }
        progress.moved = movedToLog
        movedToLog = nil
        return progress
    }

    /// Every connection stopped: fdatasync the file once, then claim what
    /// each wrote, with its digests (hashed here, on the loop: at most a
    /// progress interval per connection). Returns the progress to log
    /// (nil: nothing new), or the errno.
    func flushAll() -> Result<Progressed?, SystemError> {
        guard !poisoned else { return .failure(SystemError(operation: "fdatasync after a failed one", errno: EIO)) }
        let shown = "the partial file of task \(taskID)"
        var digests: [SpanDigest] = []
        var positions: [(Connection, Int64)] = []
        do {
            try Posix.dataSync(fd, shown: shown)
            for connection in connections {
                guard let chain = connection.chain else { continue }
                // A chain that cannot vouch for its bytes (a sync overtook it) claims no more than it did.
                if let records = try chain.extend(fd, to: connection.exchange.written, shown: shown) {
                    digests += records
                    positions.append((connection, connection.exchange.written))
                }
            }
        } catch {
            return .failure(error as? SystemError ?? SystemError(operation: "fdatasync", errno: EIO))
        }
        syncPositions = positions
        return .success(synced(digests: digests))
    }

    /// The file is complete and durable: all `bytes` of it, the chain from 0 vouching for them.
    func completeProgress(bytes: Int64, digests: [SpanDigest]) -> Progressed {
        var progress = Progressed(bytes: bytes, total: total ?? bytes, fallback: fallbackToLog,
                                  digests: (digestsToLog + digests).isEmpty ? nil : digestsToLog + digests)
        digestsToLog = []
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

import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// A task whose attempt is one exchange: a download over one connection, a
/// data task, the upload of a whole file. Its body streams into `DEST.part`
/// (or is counted and dropped), is made durable off the loop once complete,
/// checked, recorded finished, and renamed after the commit (`Publisher`).
class TransferRunner: TaskRunner {
    let taskID: String
    unowned let context: RunnerContext
    /// The attempt's exchange, while it runs.
    private(set) var exchange: Exchange?
    /// A complete body being made durable: the exchange that wrote it and how many bytes.
    private var completing: (exchange: Exchange, bytes: Int64)?
    /// The attempt whose new partial file a worker is making (see `PartialPreparer`).
    private var preparingAttempt: Int?
    /// An update whose 304 could not be believed: the next attempt asks for the whole file.
    private var fetchWhole = false
    /// The partial file of this attempt has a durable name (its directory
    /// was synced with its first sync): only then may its bytes be claimed.
    private var partNamed = false
    /// The lock on the partial file (`DownloadRoot.lockPartial`), held while the task may write it:
    /// a second process writing the same file is refused, never mixed in.
    private var partLock: Int32 = -1
    /// The digests of the partial file's durable bytes, as they are hashed (SPEC §6 rule 3).
    let digester = PartDigester()
    /// The attempt whose durable bytes a worker is checking against their digests before it goes on.
    private var checkingAttempt: Int?

    required init(taskID: String, context: RunnerContext) {
        self.taskID = taskID
        self.context = context
    }

    deinit { Posix.close(partLock) }

    var isBusy: Bool { exchange != nil || completing != nil || preparingAttempt != nil || checkingAttempt != nil }
    var isCompleting: Bool { completing != nil }
    // (Each requirement is implemented here, not left to the protocol's defaults: a download's
    // runner overrides them, and only a class's own implementations dispatch to a subclass.)
    var extraConnections: Int { 0 }
    var nextWakeMs: Int64? { nil }
    func wake(nowMs: Int64) {}
    func cancel(_ task: TaskState) -> Stopped { stop(flushing: true) ?? (task.bytes, nil) }

    // MARK: - Starting

    func start(_ task: TaskState) {
        if checksDurableBytes(task) { return }
        startAttempt(task, recordingStart: true)
    }

    /// Starts the attempt's request (`started` recorded first unless it already was).
    func startAttempt(_ task: TaskState, recordingStart: Bool) {
        let (offset, ifRange) = task.bytes > 0 ? context.resumePoint(for: task) : (0, nil)
        let ifChanged = offset == 0 ? validatorsForUpdate(task) : nil
        if offset == 0, ifChanged == nil, task.spec.behaviour.body == .partialFile, partLock < 0, let part = task.partPath {
            // A new file: made by a worker, the request sent once it is (`prepared`).
            let attempt = recordingStart ? task.nextAttempt : task.attempts
            if recordingStart { context.record(.started(Started(attempt: attempt, offset: 0, url: task.currentURL)), task: taskID) }
            preparingAttempt = attempt
            context.preparer.prepare(part, mode: partialMode(of: task), for: taskID, attempt: attempt, root: context.root)
            return
        }
        beginAttempt(task, offset: offset, ifRange: ifRange, ifChanged: ifChanged, recordingStart: recordingStart)
    }

    // MARK: - Checking durable bytes (SPEC §6 rule 3)

    /// Whether `task` continues from durable bytes its digests must vouch
    /// for first: then `started` is recorded and a worker reads the partial
    /// file against them (`checked` goes on). Every resume does, its own
    /// retries too: a file may be written to between any two attempts.
    private func checksDurableBytes(_ task: TaskState) -> Bool {
        guard task.bytes > 0, task.spec.behaviour.body == .partialFile, task.spec.isResumable, let part = task.partPath,
              context.root.exists(part) else { return false }
        switch RecoveryPlan.plan(for: task, nowMs: Posix.nowMs) {
        case .resume, .resumeRanges: break
        default: return false
        }
        let attempt = task.nextAttempt
        context.record(.started(Started(attempt: attempt, offset: task.bytes, url: task.currentURL)), task: taskID)
        do { try lockPartialFile(part) } catch {
            context.refuseStart(task, error)
            return true
        }
        checkingAttempt = attempt
        let checks = (task.digests ?? DigestBook()).checks(of: task.durableRanges)
        context.preparer.check(part, checks, for: taskID, attempt: attempt, root: context.root)
        return true
    }

    /// The check of the durable bytes is done: what still matches is kept
    /// (the log says what was dropped, and why), then the attempt goes on.
    func checked(_ report: Result<DigestCheckReport, SystemError>, attempt: Int) {
        guard attempt == checkingAttempt else { return }
        checkingAttempt = nil
        defer { releaseLockIfIdle() }
        guard let task = context.state[taskID], task.phase == .running, task.attempts == attempt, !context.stopping,
              let part = task.partPath else { return }
        let durable = task.durableRanges
        switch report {
        case .failure(let error):
            digester.reset()
            context.record(.progressed(Progressed(bytes: 0, mismatch: "cannot read \(part) to check it (\(error)): "
                                                  + "its \(durable.covered) bytes are fetched again")), task: taskID)
        case .success(let report):
            // Only a download that fetches ranges (its size known, no byte range of another file) keeps a gap.
            let keepsGaps = task.total != nil && task.spec.parent == nil && task.spec.byteRange == nil
            let kept = DigestBook.kept(of: durable, after: report.results, keepingGaps: keepsGaps)
            digester.adopt(report.chains.filter { kept.contains(ByteSpan($0.anchor, $0.position)) })
            let adopted = report.adopted.filter { kept.contains($0.span) }
            if kept != durable {
                let words = DigestBook.mismatchWords(file: part, damaged: report.damaged, kept: kept, durable: durable)
                context.record(.progressed(Progressed(bytes: kept.covered, ranges: kept.isPrefix ? nil : kept.spans,
                                                      digests: adopted.isEmpty ? nil : adopted, mismatch: words)), task: taskID)
                context.logger.warning("durable bytes do not match their digests", metadata: ["task.id": "\(taskID)", "reason": "\(words)"])
            } else if !adopted.isEmpty {
                context.record(.progressed(Progressed(bytes: durable.covered, ranges: durable.isPrefix ? nil : durable.spans,
                                                      digests: adopted)), task: taskID)
            }
        }
        guard let task = context.state[taskID] else { return }
        startAttempt(task, recordingStart: false)
    }

    /// The partial file a worker made: the attempt starts if its task still
    /// waits for it. A task cancelled or failed meanwhile has its file
    /// removed again (the worker may have made it after the removal), unless
    /// another task now holds that path.
    func prepared(_ prepared: PartialPreparer.Prepared) {
        if let report = prepared.checked { return checked(report, attempt: prepared.attempt) }
        guard prepared.attempt == preparingAttempt else { return }
        preparingAttempt = nil
        guard let task = context.state[taskID] else { return }
        if task.phase == .running, task.attempts == prepared.attempt, exchange == nil, !context.stopping {
            beginAttempt(task, offset: 0, ifRange: nil, ifChanged: nil, recordingStart: false)
        } else if task.phase.isEnded, task.bytes == 0, let part = task.partPath, let dest = task.spec.dest,
                  Destinations.holder(of: dest, in: context.state, except: taskID) == nil {
            context.removePartial(part, of: taskID)
        }
    }

    /// Sets up the exchange and hands it to curl (`started` recorded first unless it already was).
    private func beginAttempt(_ task: TaskState, offset: Int64, ifRange: String?, ifChanged: PublishedValidators?,
                              recordingStart: Bool) {
        let exchange: Exchange
        do {
            let sink: Exchange.Sink
            if task.spec.behaviour.body == .partialFile, let part = task.partPath {
                let mode = partialMode(of: task)
                let make: () throws -> Int32 = { [unowned self] in
                    if partLock < 0 { partLock = try context.root.lockPartial(part) }
                    return try context.root.openPartial(part, truncatingTo: offset, mode: mode)
                }
                // A conditional request makes its partial file only if a body comes (a 304 brings none).
                let file = ifChanged != nil ? PartialFile(path: part, makeOnFirstByte: make) : PartialFile(path: part, descriptor: try make())
                if offset == 0 { digester.reset() }
                file.chain = digester.chain(startingAt: offset)
                sink = .partialFile(file)
            } else {
                sink = .discard
            }
            exchange = try context.makeExchange(task, offset: offset, ifRange: ifRange, ifChanged: ifChanged, sink: sink)
        } catch {
            context.refuseStart(task, error)
            releaseLockIfIdle()
            return
        }
        if recordingStart {
            context.record(.started(Started(attempt: task.nextAttempt, offset: offset, url: task.currentURL)), task: taskID)
        }
        run(exchange)
    }

    /// Wires an exchange to this runner and hands it to curl.
    func run(_ exchange: Exchange) {
        partNamed = false
        let id = taskID, serial = exchange.serial
        exchange.onProgress = { [unowned self] progress in context.record(.progressed(progress), task: id) }
        exchange.onRedirected = { [unowned self] hop in context.record(.redirected(hop), task: id) }
        exchange.onSyncWanted = { [unowned self, unowned exchange] descriptor, offset in
            context.syncer.sync(descriptor, .init(taskID: id, attempt: serial, offset: offset, complete: false),
                                naming: naming(exchange.partialFile),
                                hashing: exchange.partialFile?.chain.map { .init(claims: [($0, offset)]) })
        }
        exchange.onEnded = { [unowned self] exchange, outcome in ended(exchange, outcome) }
        if context.state[taskID]?.awaitsServerName == true {
            exchange.onServerName = { [unowned self] disposition, url in context.nameFromServer(id, contentDisposition: disposition, url: url) }
        }
        do {
            try context.exchanges.add(exchange)
        } catch {
            guard let task = context.state[taskID] else { return }
            context.refuseStart(task, error)
            releaseLockIfIdle()
            return
        }
        self.exchange = exchange
    }

    // MARK: - Ending

    /// The attempt's exchange ended (curl is done with it).
    private func ended(_ exchange: Exchange, _ outcome: AttemptOutcome) {
        self.exchange = nil
        defer { releaseLockIfIdle() }
        context.needsScheduling = true
        guard let task = context.state[taskID] else { return }
        switch outcome {
        case .complete(let bytes) where exchange.keepsBody:
            // Published once its data is durable (see DataSyncer).
            awaitDurability(of: exchange, bytes: bytes)
        case .complete(let bytes):
            context.recordFinished(task, exchange, bytes: bytes, dest: nil)
        case .notModified(let etag):
            unchanged(task, etag: etag, exchange: exchange)
        case .skipped(let reason, let existing):
            context.finishSkipped(task, reason: reason, existing: existing, metrics: exchange.metrics)
        default:
            context.attemptEnded(task, outcome, on: exchange, metrics: exchange.metrics, durable: exchange.durable)
        }
    }

    /// A complete body is made durable off the loop; `synced` goes on once it is.
    func awaitDurability(of exchange: Exchange, bytes: Int64) {
        completing = (exchange, bytes)
        context.syncer.sync(exchange.partialFile?.descriptor ?? -1,
                            .init(taskID: taskID, attempt: exchange.serial, offset: bytes, complete: true),
                            naming: naming(exchange.partialFile), hashing: completionHashing(of: exchange, bytes: bytes))
    }

    /// What a complete body's sync hashes: its exchange's chain up to its
    /// end, and the chain from 0 to the file's end (the same chain when
    /// one exchange wrote the file from its first byte): the file's SHA-256.
    func completionHashing(of exchange: Exchange, bytes: Int64) -> DataSyncer.Hashing {
        let claims = exchange.partialFile?.chain.map { [($0, bytes)] } ?? []
        return DataSyncer.Hashing(claims: claims, file: (digester.fileChain, bytes))
    }

    /// The partial file's name for a sync to make durable too, the first time
    /// in this attempt (its file may have just been made).
    func naming(_ file: PartialFile?) -> (path: String, root: DownloadRoot)? {
        guard let file, !partNamed else { return nil }
        partNamed = true
        return (file.path, context.root)
    }

    /// What the DataSyncer made durable: progress is claimed by the exchange
    /// that asked (if it still runs); a complete body is verified and
    /// recorded finished. A failed sync claims nothing and stops its task.
    func synced(_ done: DataSyncer.Done) {
        guard done.complete else {
            guard let exchange, exchange.serial == done.attempt else { return }
            if let error = done.error {
                context.exchanges.remove(exchange)
                ended(exchange, exchange.syncFailed(errno: error))
            } else if done.unvouched {
                // Its chain went past this claim (a later one overtook it): that one claims.
                exchange.syncDropped()
            } else {
                exchange.claim(upTo: done.offset, digests: done.digests)
            }
            return
        }
        guard let (exchange, bytes) = completing, exchange.serial == done.attempt else { return }
        completing = nil
        defer { releaseLockIfIdle() }
        bodyDurable(exchange, bytes: bytes, error: done.error, durable: done, pieces: piecesOfCompletedBody())
    }

    /// A body put together from several connections' pieces (a download's).
    func piecesOfCompletedBody() -> Pieces? { nil }

    /// A body fetched over several connections: what they received in all, and what the log vouches for.
    struct Pieces {
        var received: Int64
        var covered: Int64
    }

    /// A complete body's sync returned: claimed, checked and published (or the task fails with the disk's error).
    func bodyDurable(_ exchange: Exchange, bytes: Int64, error: Int32?, durable done: DataSyncer.Done, pieces: Pieces? = nil) {
        guard let task = context.state[taskID] else { return }
        // Its digest is what `finished` records and what the job's sha256 is checked against: no file goes out without one.
        let error = error ?? (done.fileDigest == nil ? EIO : nil)
        if let error {
            if task.phase == .running {
                let failure = DiskFailure(operation: "flush", path: task.partPath ?? "", errno: error)
                context.fail(task, reason: failure.description, code: failure.code, metrics: exchange.metrics,
                             keeping: pieces?.covered ?? exchange.durable)
            }
            return
        }
        claimComplete(exchange, bytes: bytes, digests: done.digests)
        CrashPoint.downloadComplete.reached { try? context.log.commit() }
        // Paused or cancelled meanwhile: the body stays a partial file (a
        // resume then meets 416 and finishes), or is already gone.
        guard let task = context.state[taskID], task.phase == .running, let part = task.partPath,
              let fileDigest = done.fileDigest?.hex else { return }
        context.needsScheduling = true
        switch Publisher.prepare(task, bytes: bytes, sha256: fileDigest, in: context.state, root: context.root) {
        case .ready(let path, let modifiedNs):
            context.recordFinished(task, exchange, bytes: bytes, dest: path, sha256: fileDigest, modifiedNs: modifiedNs,
                                   received: pieces?.received)
            context.publishing.rename(.init(task: taskID, part: part, dest: path, replacing: task.spec.overwrite.replacesFiles))
        case .skipped(let reason):
            context.removePartial(part, of: taskID)
            context.record(.finished(Finished(bytes: context.root.size(task.finalDest!) ?? 0, dest: task.finalDest,
                                              metrics: exchange.metrics, skipped: reason)), task: taskID)
        case .failed(let reason, .checksumMismatch) where pieces != nil || exchange.plan.ask.offset > 0:
            // SPEC §7: a bad checksum is final only after a full re-download. This body was put
            // together from pieces (a resume, or several connections): fetched again whole, on one.
            context.startOverWhole(task, because: reason + " in a file put together from pieces", metrics: exchange.metrics,
                                   oneConnection: pieces != nil)
        case .failed(let reason, let code):
            // A file swapped in under the agent is not its to remove.
            context.fail(task, reason: reason, code: code, metrics: exchange.metrics, removingPartial: code != .partChanged)
        }
    }

    /// The complete body is durable: the log is told (a download over
    /// several connections says it in one `progressed` of its own).
    func claimComplete(_ exchange: Exchange, bytes: Int64, digests: [SpanDigest]) {
        exchange.claimSynced(digests: digests)
    }

    /// A 304 to "only if changed": the file on disk is the server's still.
    /// Believed only if it confirms what we have (RFC 9111 §4.3.4: a 304
    /// naming another ETag is about another representation) and the file
    /// answers for the job's checksum; otherwise the whole file is fetched.
    func unchanged(_ task: TaskState, etag: String?, exchange: Exchange) {
        let metrics = exchange.metrics
        if let doubt = doubtAbout304(task, etag: etag, sent: exchange.plan.ifChanged?.etag) {
            fetchWhole = true
            context.startOverWhole(task, because: doubt, metrics: metrics)
            return
        }
        if let part = task.partPath { context.removePartial(part, of: taskID) }
        let dest = task.spec.dest
        let onDisk = dest.flatMap(context.root.sizeAndModified)
        context.record(.finished(Finished(bytes: onDisk?.size ?? 0, dest: dest, metrics: metrics, modifiedNs: onDisk?.modifiedNs,
                                          unchanged: true)), task: taskID)
        context.sayAfterCommit(.info, "task unchanged", ["task.id": "\(taskID)", "dest": "\(dest ?? "-")"])
    }

    /// Why a 304 cannot be taken as "unchanged", if it cannot.
    private func doubtAbout304(_ task: TaskState, etag: String?, sent: String?) -> String? {
        if let etag, let sent, etag != sent, etag.trimmingPrefix("W/") != sent.trimmingPrefix("W/") {
            return "the server answered 304 Not Modified with ETag \(etag), not the \(sent) asked about"
        }
        guard let dest = task.spec.dest else { return nil }
        // The sha256 a file was checked against when published says it without reading it
        // again (a 1,000-file hourly sync must not hash 1,000 files on the loop): its job's,
        // not the digest every publication records (that says what was published, not that
        // anyone asked for those bytes).
        let publisher = context.state.published[dest].flatMap { context.state[$0.task] }
        if let expected = task.spec.sha256, publisher?.spec.sha256 != expected || context.state.published[dest]?.sha256 != expected {
            return "the server answered 304 Not Modified, but \(dest) was not published with the job's sha256"
        }
        // md5 is not recorded at publication (rare in jobs): checked by reading the file.
        guard let expected = task.spec.md5 else { return nil }
        guard let digests = try? Publisher.hash(dest, md5: true, root: context.root) else {
            return "the server answered 304 Not Modified, but \(dest) cannot be read to check it"
        }
        return digests.md5 == expected ? nil : "the server answered 304 Not Modified, but \(dest) does not match the job's md5"
    }

    /// `overwrite = "update"`: the validators to ask with, if this agent
    /// published the file at `dest` and it is still that file (same size and
    /// modification time). Otherwise the whole file is fetched again.
    func validatorsForUpdate(_ task: TaskState) -> PublishedValidators? {
        guard task.spec.overwrite == .update, !fetchWhole, let dest = task.spec.dest,
              let published = context.state.published[dest], let onDisk = context.root.sizeAndModified(dest) else { return nil }
        return published.validators(for: task.spec.url, size: onDisk.size, modifiedNs: onDisk.modifiedNs)
            .map { PublishedValidators(etag: $0.etag, lastModified: $0.lastModified) }
    }

    // MARK: - Stopping

    func stop(flushing: Bool) -> Stopped? {
        if checkingAttempt != nil, let task = context.state[taskID] {
            // Its bytes stay as the log has them; the check's answer is let go.
            checkingAttempt = nil
            releaseLockIfIdle()
            return (task.bytes, nil)
        }
        guard let exchange else { return nil }
        context.exchanges.remove(exchange)
        self.exchange = nil
        defer { releaseLockIfIdle() }
        if flushing { exchange.flush() }
        return (exchange.plan.ask.resumes ? exchange.durable : 0, exchange.metrics)
    }

    // MARK: - After a restart

    class func recover(_ task: TaskState, in context: RunnerContext) -> Int64 {
        let offset = context.resumePoint(for: task).offset
        // Never trust bytes beyond what the log vouches for (no-op if absent).
        if task.spec.behaviour.body == .partialFile, let part = task.partPath { context.truncate(part, of: task.id, to: offset) }
        return offset
    }

    /// A crash between committing `finished` and the rename leaves the body at its partial path: renamed now.
    class func tidyAfterRestart(_ task: TaskState, in context: RunnerContext) {
        guard task.phase == .finished, let part = task.partPath, let dest = task.dest else { return }
        guard context.root.exists(part) else { return context.sayUnreachable(task, file: part) }
        if isUnpublishedBody(of: task, part: part, dest: dest, in: context) {
            context.publishing.completeRename(of: task, from: part, to: dest)
        } else {
            context.logger.info("leaving a partial file that is not the body this task finished with",
                                metadata: ["task.id": "\(task.id)", "part": "\(part)"])
        }
    }

    /// Whether `part` is the body `task` finished with and never renamed (a
    /// crash between the commit and the rename), rather than another live
    /// task's download of the same path (`replace`, `update`), a later
    /// publication's, or a file of the user's: no live task holds the
    /// path, this task published it last, and the file has the size and
    /// modification time `finished` recorded.
    private class func isUnpublishedBody(of task: TaskState, part: String, dest: String, in context: RunnerContext) -> Bool {
        guard Destinations.holder(of: dest, in: context.state, except: task.id) == nil,
              let record = context.state.published[dest], record.size == task.bytes,
              let onDisk = context.root.sizeAndModified(part), onDisk.size == task.bytes else { return false }
        return record.modifiedNs.map { $0 == onDisk.modifiedNs } ?? true
    }

    // MARK: - The partial file

    /// An HLS key is a secret on disk too: readable by its owner only.
    func partialMode(of task: TaskState) -> mode_t {
        task.spec.parent != nil && task.spec.dest?.hasSuffix(".key") == true ? 0o600 : 0o644
    }

    /// The lock on the partial file, taken if it is not held yet.
    func lockPartialFile(_ part: String) throws {
        if partLock < 0 { partLock = try context.root.lockPartial(part) }
    }

    /// A task with nothing in flight holds no lock: another attempt takes it again.
    func releaseLockIfIdle() {
        guard !isBusy, partLock >= 0 else { return }
        Posix.close(partLock)
        partLock = -1
    }
}

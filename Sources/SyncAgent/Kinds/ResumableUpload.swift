import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// A resumable upload being carried out (SPEC §11): which request of its
/// protocol is out, and what this run learned from the server. One attempt
/// of the task is a series of requests; an interruption ends the attempt,
/// and the next one asks the server how far it got.
final class UploadRun {
    enum Step: Equatable {
        /// tus `OPTIONS`: the server's version, extensions and size limit.
        case discover
        /// A new upload resource (tus `POST`, IETF `POST` with `Upload-Complete: ?0`).
        case create
        /// `HEAD` on the upload URL: how far the server got.
        case offset
        /// `PATCH`: `length` bytes from `from`.
        case append(from: Int64, length: Int64)
        /// tus `concatenation`: the final upload made of the parts' uploads.
        case concatenate
    }

    let taskID: String
    let uploadProtocol: UploadProtocol
    /// Bytes this upload sends: the part's, or the whole file's.
    let size: Int64
    /// Where those bytes start in `body_file`.
    let fileOffset: Int64
    var step: Step
    /// The attempt carrying the current request.
    var serial: UInt64 = 0
    /// tus: what OPTIONS (or the log) said the server offers. With `checksum`,
    /// chunks are capped: each is read and hashed on the loop before it goes.
    var extensions: [String]? {
        didSet { capChecksummedChunks() }
    }
    var sizer: ChunkSizer
    var stepStartedMs: Int64 = 0
    /// Answers in a row that moved nothing (checksum mismatches, confused offsets): a bound on re-sending.
    var fruitlessAnswers = 0
    static let fruitlessAnswersAllowed = 3
    /// The furthest the server may truthfully say it got: 0 for an upload
    /// this run created; for one made before, what an earlier attempt of this
    /// process sent it, or after a restart what the log allows
    /// (`ResumableUpload.believableEnd`); then the end of every chunk sent.
    /// A claim past it is of bytes it never received.
    var believableEnd: Int64 = 0
    /// Whether `believableEnd` came from the log (a restart), not from what this process sent.
    var boundFromLog = false
    /// Why the upload is being created again, if it is: said in its `upload_created`.
    var lostUpload: String?
    /// `body_file` as this run found it: checked before every chunk and after the last.
    var body = BodyIdentity(size: 0, modifiedNs: 0, changedNs: 0)
    /// The offset last recorded in the log, and when (monotonic ms): small chunks' progress is throttled.
    var loggedOffset: Int64 = 0
    var loggedAtMs: Int64 = 0
    /// New uploads this run made for a lost one: bounded, whatever progress came between.
    var recreations = 0
    static let recreationsAllowed = 3
    /// A chunk's checksum is read and computed on the loop before it is sent: kept short (about 25 ms).
    static let largestChecksummedChunk: Int64 = 16 << 20

    init(taskID: String, protocol: UploadProtocol, size: Int64, fileOffset: Int64, step: Step, extensions: [String]?,
         chunkSize: Int64?) {
        self.taskID = taskID
        uploadProtocol = `protocol`
        self.size = size
        self.fileOffset = fileOffset
        self.step = step
        self.extensions = extensions
        sizer = ChunkSizer(fixed: chunkSize)
        capChecksummedChunks()
    }

    func offers(_ extensionName: String) -> Bool { extensions?.contains(extensionName) == true }

    private func capChecksummedChunks() {
        if offers("checksum") { sizer.serverMaximum = Self.largestChecksummedChunk }
    }
}

/// What says a `body_file` is still the file an upload began with: its size,
/// modification and change times.
struct BodyIdentity: Equatable {
    var size: Int64
    var modifiedNs: Int64
    var changedNs: Int64

    init(size: Int64, modifiedNs: Int64, changedNs: Int64) {
        self.size = size; self.modifiedNs = modifiedNs; self.changedNs = changedNs
    }

    /// The regular file at `path` as it is now.
    init(_ path: String) throws {
        let info = try Posix.status(of: path)
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw SystemError(operation: "\(path) is not a regular file", errno: EINVAL) }
        self.init(info)
    }

    /// The open file behind `descriptor` as it is now (whatever its path names meanwhile).
    init(descriptor: Int32, shown path: String) throws {
        self.init(try Posix.status(of: descriptor, shown: path))
    }

    private init(_ info: stat) {
        size = Int64(info.st_size)
        modifiedNs = info.st_mtim.nanoseconds
        changedNs = info.st_ctim.nanoseconds
    }
}

/// How far one process sent a task's upload, at the upload URL it sent to.
struct UploadReach {
    var url: String
    var end: Int64
}


/// A resumable upload (SPEC §11), tus or IETF: one attempt of the task is a
/// series of requests of its protocol (discovery, creation, `HEAD`, `PATCH`
/// chunks, concatenation), one out at a time; an interruption ends the
/// attempt, and the next one asks the server how far it got. A split upload
/// (tus `concatenation`) is a parent whose parts are tasks of their own;
/// once they all finish, the parent makes the final upload of them.
final class ResumableUploadRunner: TaskRunner {
    let taskID: String
    private unowned let context: RunnerContext
    /// The attempt being carried out: which request of the protocol is out.
    private var run: UploadRun?
    /// The request out.
    private var exchange: Exchange?
    /// How far this process sent the upload, kept across its attempts: a
    /// server's later claim past it is of bytes it never received (see `UploadRun.believableEnd`).
    private var reach: UploadReach?

    init(taskID: String, context: RunnerContext) {
        self.taskID = taskID
        self.context = context
    }

    var isBusy: Bool { exchange != nil }

    func stop(flushing: Bool) -> Stopped? {
        guard run != nil || exchange != nil else { return nil }
        let metrics = exchange?.metrics
        if let exchange { context.exchanges.remove(exchange) }
        (run, exchange) = (nil, nil)
        // A resumable upload keeps what its server confirmed.
        return (context.state[taskID]?.bytes ?? 0, metrics)
    }

    func cancel(_ task: TaskState) -> Stopped {
        let metrics = exchange?.metrics
        if let exchange { context.exchanges.remove(exchange) }
        (run, exchange) = (nil, nil)
        terminate(task)
        return (task.bytes, metrics)
    }

    /// Every part finished: the final upload is made of them. A part lost
    /// (failed or cancelled) fails the upload, its other parts waiting, paused, for `resume`.
    func childrenSettled(_ parent: TaskState) throws {
        guard let family = context.state.families[parent.id] else { return }
        if family.lost > 0 {
            let lost = (context.state.children[parent.id] ?? []).compactMap { context.state[$0] }
                .first { $0.phase == .failed || $0.phase == .cancelled }
            let why = lost.map { "\($0.id) \($0.phase.rawValue)" + ($0.error.map { ": \($0)" } ?? "") } ?? "a part was lost"
            context.runners.pauseActiveChildren(of: parent)
            context.fail(parent, reason: "part \(why)", code: .partFailed, keeping: parent.bytes)
            return
        }
        guard run == nil, exchange == nil else { return }
        beginAttempt(parent)
    }

    /// The server is the judge of what it holds: a restart resumes at what it last confirmed (and asks it again).
    static func recover(_ task: TaskState, in context: RunnerContext) -> Int64 { task.bytes }

    /// Run again after a failure: the upload's bytes are on its server, whose `HEAD` says what it still holds.
    static func bytesKeptForRunAgain(_ task: TaskState, in context: RunnerContext) -> Int64 { task.bytes }

    /// Refused: what a resumable upload has sent lives at the upload URL its server made, which
    /// no other address knows; moving the creation URL would orphan it, or mix two uploads.
    static func retargetRefusal(_ task: TaskState, in state: AgentState) -> String? {
        let what = task.parentID != nil ? "a part of upload \(task.parentID!)" : "a resumable upload (protocol = \"\(task.spec.upload?.protocol.rawValue ?? "tus")\")"
        return "\(what) keeps what it sent at the upload URL its server made; cancel it and submit it again to the new URL"
    }

    func start(_ task: TaskState) {
        guard !task.isFannedOut else {
            // A split upload taken from the queue (a restart, a resume): its parts do the work,
            // and it makes the final upload once they have all finished (`childrenSettled`).
            context.record(.started(Started(attempt: task.attempts, offset: 0, url: task.currentURL)), task: taskID)
            context.needsScheduling = true
            return
        }
        beginAttempt(task)
    }

    /// Starts (or resumes) a tus or IETF upload: discovery and creation if
    /// the log holds no upload URL yet, else `HEAD` to learn the server's offset;
    /// for a split upload, the final upload of its parts.
    private func beginAttempt(_ task: TaskState) {
        guard let options = task.spec.upload, let path = task.spec.bodyFile else { return }
        let body: BodyIdentity
        do { body = try BodyIdentity(path) } catch {
            context.fail(task, reason: "cannot read body_file: \(error)", code: .bodyUnreadable, keeping: task.bytes)
            return
        }
        let span = options.part ?? ByteSpan(0, body.size)
        // Its parts (or the upload so far) are of the file as it was: a changed one would make a mix.
        // A part that has not begun is held to the file its parent split.
        let recorded = task.bodyChangedNs ?? task.parentID.flatMap { context.state[$0]?.bodyChangedNs }
        let changed = UploadBody.changeWords(path: path, recordedNs: recorded, nowNs: body.changedNs)
            ?? (span.end > body.size ? "body_file \(path) has \(body.size) bytes, fewer than the upload needs (\(span.end))" : nil)
        if let changed, task.isFannedOut || options.part != nil {
            context.fail(task, reason: changed, code: .bodyChanged)
            return
        }
        let step: UploadRun.Step
        if task.isFannedOut {
            // A final upload made before a crash is asked about, never made twice.
            step = task.upload == nil ? .concatenate : .offset
        } else if task.upload != nil, changed == nil {
            step = .offset
        } else {
            // Only tus has options to discover; its creation depends on them.
            step = options.protocol == .tus ? .discover : .create
        }
        let run = UploadRun(taskID: task.id, protocol: options.protocol, size: span.length, fileOffset: span.start, step: step,
                            extensions: task.upload?.extensions, chunkSize: options.chunkSize)
        run.body = body
        (run.loggedOffset, run.loggedAtMs) = (task.bytes, Posix.monotonicMs)
        if let session = task.upload {
            // Before, a run started with no bound and took the server's first claim as one:
            // a retry or a restart then finished an upload the server never received.
            run.believableEnd = reach.flatMap { $0.url == session.url ? $0.end : nil }
                ?? ResumableUpload.believableEnd(logged: task.bytes, chunkSize: options.chunkSize, lastChunk: task.chunkSize,
                                                 unlogged: context.settings.progressIntervalBytes, size: span.length)
            run.boundFromLog = reach?.url != session.url
        }
        // A whole-file upload of a file changed since: a new upload of the file as it is now.
        if task.upload != nil, let changed { run.lostUpload = changed }
        self.run = run
        // (A parent's concatenation is an attempt too: its retries count.)
        context.record(.started(Started(attempt: task.nextAttempt, offset: task.bytes, url: task.currentURL)), task: task.id)
        send(run)
    }

    /// The request of the run's current step, handed to curl. The task is
    /// read afresh: the step before may have logged its upload URL.
    private func send(_ run: UploadRun) {
        guard let task = context.state[run.taskID] else {
            self.run = nil
            return
        }
        guard let request = request(for: run, task: task) else {
            // Never a run without a request out: it would wait for nothing.
            if self.run === run { uploadEnded(task, .localFailure(reason: "no request to send (\(run.step))", code: .localError)) }
            return
        }
        do {
            let exchange = try context.makeExchange(task, protocolRequest: request, sink: .discard)
            let id = taskID
            exchange.onProgress = { [unowned self] progress in context.record(.progressed(progress), task: id) }
            exchange.onRedirected = { [unowned self] hop in context.record(.redirected(hop), task: id) }
            exchange.onEnded = { [unowned self] exchange, outcome in stepEnded(exchange, outcome) }
            run.serial = exchange.serial
            run.stepStartedMs = Posix.monotonicMs
            try context.exchanges.add(exchange)
            self.exchange = exchange
        } catch {
            self.run = nil
            context.refuseStart(task, error)
        }
    }

    /// A request of the run came back: the upload goes on with its next
    /// request, or the attempt ends (the shared rules say what comes of it).
    private func stepEnded(_ exchange: Exchange, _ outcome: AttemptOutcome) {
        self.exchange = nil
        context.needsScheduling = true
        guard let run, run.serial == exchange.serial, let ended = stepEnded(run, exchange, outcome) else { return }
        self.run = nil
        // Held across attempts, not past the upload's end.
        if case .complete = ended { reach = nil }
        guard let task = context.state[taskID] else { return }
        if case .complete(let bytes) = ended {
            context.recordFinished(task, exchange, bytes: bytes, dest: nil)
            return
        }
        // What the server confirmed, as the log says it.
        context.attemptEnded(task, ended, on: exchange, metrics: exchange.metrics, durable: task.bytes)
    }

    /// The header every request of the protocol carries: its version.
    private static func versionHeaders(_ uploadProtocol: UploadProtocol) -> [Header] {
        switch uploadProtocol {
        case .tus: [Header(name: "Tus-Resumable", value: "1.0.0")]
        case .ietf: [Header(name: "Upload-Draft-Interop-Version", value: "\(ResumableUpload.ietfInteropVersion)")]
        case .plain: []
        }
    }

    private func request(for run: UploadRun, task: TaskState) -> ProtocolRequest? {
        var headers = Self.versionHeaders(run.uploadProtocol)
        let name = ((task.spec.bodyFile ?? "") as NSString).lastPathComponent
        switch run.step {
        case .discover:
            return ProtocolRequest(url: task.spec.url, method: "OPTIONS", headers: headers, body: nil)
        case .create:
            if run.uploadProtocol == .ietf {
                // Careful creation (an empty body): the URL is known, and logged, before any byte of the file goes.
                // An empty file is complete as created: no append will follow to say so.
                headers += [Header(name: "Upload-Complete", value: run.size == 0 ? "?1" : "?0"),
                            Header(name: "Upload-Length", value: "\(run.size)"),
                            Header(name: "Content-Type", value: "application/octet-stream")]
                if let disposition = Self.inlineDisposition(name) { headers.append(Header(name: "Content-Disposition", value: disposition)) }
            } else {
                // Not the form type curl gives an empty POST.
                headers.append(Header(name: "Content-Type", value: ""))
                headers.append(Header(name: "Upload-Length", value: "\(run.size)"))
                if task.spec.upload?.part != nil {
                    headers.append(Header(name: "Upload-Concat", value: "partial"))
                } else {
                    headers.append(Header(name: "Upload-Metadata", value: UploadHeaders.metadata([("filename", name)])))
                }
            }
            return ProtocolRequest(url: task.spec.url, method: "POST", headers: headers, body: nil)
        case .offset:
            guard let session = task.upload else { return nil }
            return ProtocolRequest(url: session.url, method: "HEAD", headers: headers, body: nil)
        case .append(let from, let length):
            guard let session = task.upload else { return nil }
            headers.append(Header(name: "Upload-Offset", value: "\(from)"))
            // No `Expect: 100-continue`: a round trip per chunk for nothing.
            headers.append(Header(name: "Expect", value: ""))
            let slice = ByteSpan(run.fileOffset + from, run.fileOffset + from + length)
            believe(run, upTo: from + length, at: session.url)
            if run.uploadProtocol == .ietf {
                headers.append(Header(name: "Content-Type", value: "application/partial-upload"))
                headers.append(Header(name: "Upload-Complete", value: from + length == run.size ? "?1" : "?0"))
            } else {
                headers.append(Header(name: "Content-Type", value: "application/offset+octet-stream"))
                if run.offers("checksum"), let path = task.spec.bodyFile {
                    do {
                        let digest = try RequestBody(path: path, slice: slice, rules: context.bodyFileCheck(of: task)).sha1()
                        headers.append(Header(name: "Upload-Checksum", value: "sha1 " + Data(digest).base64EncodedString()))
                    } catch {
                        uploadEnded(task, .localFailure(reason: "cannot read body_file \(path): \(error)", code: .bodyUnreadable))
                        return nil
                    }
                }
            }
            return ProtocolRequest(url: session.url, method: "PATCH", headers: headers, body: slice)
        case .concatenate:
            let children = context.state.children[task.id] ?? []
            let parts = children.compactMap { context.state[$0]?.upload?.url }
            // Every part, in order, or no final upload at all: a shorter one would be finished as the file.
            guard parts.count == children.count, parts.count == task.splitInto else {
                uploadEnded(task, .permanent(reason: "a part of the upload has no upload URL to concatenate", code: .uploadRefused))
                return nil
            }
            headers.append(Header(name: "Upload-Concat", value: "final;" + parts.joined(separator: " ")))
            headers.append(Header(name: "Content-Type", value: ""))
            headers.append(Header(name: "Upload-Metadata", value: UploadHeaders.metadata([("filename", name)])))
            return ProtocolRequest(url: task.spec.url, method: "POST", headers: headers, body: nil)
        }
    }

    /// A request of a run came back. Returns nil while the upload goes on
    /// (the next request is out), else how the attempt ended.
    private func stepEnded(_ run: UploadRun, _ attempt: Exchange, _ outcome: AttemptOutcome) -> AttemptOutcome? {
        guard let task = context.state[run.taskID] else { return outcome }
        let status = attempt.httpStatus
        if case .append(let from, _) = run.step, attempt.needsRewind {
            // curl found the connection dead and would send the chunk again whole: the server is asked instead.
            return fruitless(run, task, "the connection closed while sending bytes from \(from)") { run.step = .offset }
        }
        switch outcome {
        case .complete:
            break
        case .permanent where (400..<500).contains(status):
            // 404, 409, 410, 460 … mean something in these protocols: read below.
            break
        case .permanent where run.step == .discover && status >= 400:
            // A server that does not answer OPTIONS may still create uploads: try, assuming only creation.
            break
        default:
            return outcome
        }
        let headers = attempt.responseHeaders
        switch run.step {
        case .discover:
            return discovered(run, task, status: status, headers: headers)
        case .create, .concatenate:
            let answer = UploadAnswers.creation(status: status, headers: headers, informational: attempt.informationalHeaders,
                                                requestURL: attempt.currentURL)
            if let failure = answer.failure { return failure }
            switch answer {
            case .created(let url):
                if let refusal = heed(limits: headers + attempt.informationalHeaders, run) { return refusal }
                // Durable before the first byte goes: a crash from here on resumes at this URL.
                context.record(.uploadCreated(UploadCreated(url: url, protocol: run.uploadProtocol, extensions: run.extensions,
                                                        reason: run.lostUpload, changedNs: run.body.changedNs)), task: task.id)
                run.lostUpload = nil
                run.believableEnd = 0
                reach = UploadReach(url: url, end: 0)
                do { try context.commit() } catch { return .localFailure(reason: "cannot write the event log: \(error)", code: .logError) }
                CrashPoint.uploadCreated.reached()
                context.logger.info("upload created", metadata: ["task.id": "\(task.id)", "url": "\(Redaction.url(url))"])
                if run.step == .concatenate { return .complete(bytes: task.total ?? run.size) }
                return next(run, task, at: 0)
            default:
                return outcome
            }
        case .offset where task.isFannedOut:
            // The final upload made before a crash: it exists, so the file is there; gone, it is made again.
            if UploadAnswers.goneReason(status) != nil {
                run.step = .concatenate
                context.record(.progressed(Progressed(bytes: task.bytes, total: task.total)), task: task.id)
                send(run)
                return nil
            }
            guard (200..<300).contains(status) else { return outcome }
            return .complete(bytes: task.total ?? run.size)
        case .offset:
            let answer = UploadAnswers.offset(status: status, headers: headers, size: run.size)
            if let failure = answer.failure { return failure }
            switch answer {
            case .holds(let offset):
                if let refusal = heed(limits: headers, run) { return refusal }
                // A server whose smallest append (IETF min-append-size) is larger than our chunks.
                if run.boundFromLog, let minimum = run.sizer.serverMinimum {
                    run.believableEnd = max(run.believableEnd, ResumableUpload.believableEnd(logged: task.bytes, chunkSize: minimum,
                                                                                             size: run.size))
                }
                if offset > run.believableEnd {
                    return createAgain(run, task, because: "the server claims \(offset) bytes of the upload; "
                                       + "at most \(run.believableEnd) were sent to it")
                }
                // IETF: every byte there but the upload not complete (the last append's answer was lost):
                // an empty append with Upload-Complete: ?1 completes it.
                if run.uploadProtocol == .ietf, offset == run.size,
                   UploadAnswers.value("upload-complete", in: headers).flatMap(UploadHeaders.boolean) == false {
                    run.step = .append(from: offset, length: 0)
                    send(run)
                    return nil
                }
                if offset != task.bytes {
                    let reason = offset < task.bytes ? "the server holds \(offset) bytes, fewer than the \(task.bytes) it confirmed" : nil
                    context.record(.progressed(Progressed(bytes: offset, total: run.size, restartReason: reason)), task: task.id)
                }
                return next(run, task, at: offset)
            case .gone(let reason):
                return createAgain(run, task, because: reason)
            default:
                return outcome
            }
        case .append(let from, let length):
            let answer = UploadAnswers.append(status: status, headers: headers, from: from, length: length, size: run.size)
            if let failure = answer.failure { return failure }
            switch answer {
            case .holds(let offset) where length == 0 && offset == run.size:
                // The empty append that completed an IETF upload.
                return bodyChanged(run, task) ?? .complete(bytes: run.size)
            case .holds(let offset) where offset > from:
                run.fruitlessAnswers = 0
                run.sizer.measured(bytes: offset - from, elapsedMs: Posix.monotonicMs - run.stepStartedMs)
                // Every chunk of a usual size: it is itself the throttle (about 3 s when auto-sized), and a
                // log that skips none bounds what a server may claim after a kill (`ResumableUpload.believableEnd`).
                // Smaller ones (a job's own tiny chunk_size) are throttled like a download's progress.
                let now = Posix.monotonicMs
                if length >= ResumableUpload.smallestChunk || offset == run.size
                    || offset - run.loggedOffset >= context.settings.progressIntervalBytes || now - run.loggedAtMs >= context.settings.progressIntervalMs {
                    context.record(.progressed(Progressed(bytes: offset, total: run.size, chunk: length)), task: task.id)
                    (run.loggedOffset, run.loggedAtMs) = (offset, now)
                }
                // The last chunk too: a file written while it went out is not the file the server now holds.
                if offset == run.size { return bodyChanged(run, task) ?? .complete(bytes: run.size) }
                return next(run, task, at: offset)
            case .holds, .offsetMismatch:
                // The server's offset is not where we are: ask it.
                return fruitless(run, task, "the server's offset did not follow the bytes sent from \(from)") {
                    run.step = .offset
                }
            case .checksumMismatch:
                return fruitless(run, task, "bytes \(from)–\(from + length) arrived damaged (460 Checksum Mismatch)") {
                    run.step = .append(from: from, length: length)
                }
            case .gone(let reason):
                return createAgain(run, task, because: reason)
            case .created, .refused, .tryLater:
                // (A creation's answer to an append is no answer; the other two returned above.)
                return outcome
            }
        }
    }

    /// tus `OPTIONS` answered: the server must speak 1.0.0; a part of a parallel upload, or a
    /// whole one, is created next — or the file is split into partial uploads.
    private func discovered(_ run: UploadRun, _ task: TaskState, status: Int, headers: [Header]) -> AttemptOutcome? {
        if (200..<300).contains(status) {
            if let versions = UploadAnswers.value("tus-version", in: headers).map(UploadHeaders.list), !versions.contains("1.0.0") {
                return .permanent(reason: "the server speaks tus \(versions.joined(separator: ", ")), not 1.0.0", code: .uploadRefused)
            }
            run.extensions = UploadAnswers.value("tus-extension", in: headers).map(UploadHeaders.list) ?? []
            if let maximum = UploadAnswers.value("tus-max-size", in: headers).flatMap(UploadHeaders.integer), maximum < run.size {
                return Self.tooLarge(for: maximum, run)
            }
        } else {
            run.extensions = []
            context.logger.notice("the tus server did not answer OPTIONS; assuming creation only",
                          metadata: ["task.id": "\(task.id)", "status": "\(status)"])
        }
        guard let options = task.spec.upload, options.part == nil, options.parallel > 1 else {
            run.step = .create
            send(run)
            return nil
        }
        let parts = ResumableUpload.parts(size: run.size, parallel: options.parallel)
        guard run.offers("concatenation"), parts.count > 1 else {
            let why = parts.count > 1 ? "the server does not offer tus concatenation: the file goes in one upload"
                : "the file is too small to split"
            context.record(.progressed(Progressed(bytes: task.bytes, total: run.size, fallback: why)), task: task.id)
            run.step = .create
            send(run)
            return nil
        }
        split(task, into: parts)
        return nil
    }

    /// The file becomes `parts.count` partial uploads, each a child task;
    /// the parent waits for them, then concatenates (see `settleParents`).
    private func split(_ task: TaskState, into parts: [ByteSpan]) {
        guard let options = task.spec.upload else { return }
        var ids: [String] = []
        for (index, span) in parts.enumerated() {
            var id = "\(task.id).part\(index + 1)"
            var suffix = 2
            while context.state[id] != nil || ids.contains(id) { id = "\(task.id).part\(index + 1)-\(suffix)"; suffix += 1 }
            ids.append(id)
            var spec = task.spec
            spec.parent = task.id
            spec.source = nil
            spec.notify = .none
            spec.upload = UploadOptions(protocol: .tus, chunkSize: options.chunkSize, parallel: 1, part: span)
            // The job's max_speed is the upload's, shared by its parts.
            spec.maxSpeed = task.spec.maxSpeed.map { max(1, $0 / Int64(parts.count)) }
            context.record(.created(spec), task: id)
        }
        context.record(.progressed(Progressed(bytes: 0, total: parts.last?.end)), task: task.id)
        context.record(.split(Split(parts: ids, changedNs: self.run?.body.changedNs)), task: task.id)
        self.run = nil
        context.logger.info("upload split into parts", metadata: ["task.id": "\(task.id)", "parts": "\(ids.count)"])
        context.needsScheduling = true
    }

    /// `inline; filename="v.mp4"` when the name can be quoted as it is (the draft recommends sending it).
    static func inlineDisposition(_ name: String) -> String? {
        guard !name.isEmpty, name.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7F && $0 != "\"" && $0 != "\\" }) else {
            return nil
        }
        return "inline; filename=\"\(name)\""
    }

    /// The next chunk from `offset`, or the end of the upload.
    private func next(_ run: UploadRun, _ task: TaskState, at offset: Int64) -> AttemptOutcome? {
        guard offset < run.size else { return .complete(bytes: run.size) }
        // Before every chunk: the file must still be the one the server holds the start of.
        if let outcome = bodyChanged(run, task) { return outcome }
        let length = run.sizer.next(remaining: run.size - offset)
        run.step = .append(from: offset, length: length)
        send(run)
        return nil
    }

    /// How the attempt ends if `body_file` is no longer what the run began
    /// with: a part fails (its siblings hold the old file); a whole-file
    /// upload is tried again, and its next start makes a new upload of the file as it is.
    private func bodyChanged(_ run: UploadRun, _ task: TaskState) -> AttemptOutcome? {
        guard let path = task.spec.bodyFile else { return nil }
        let now: BodyIdentity
        do { now = try BodyIdentity(path) } catch {
            return .localFailure(reason: "cannot read body_file: \(error)", code: .bodyUnreadable)
        }
        guard now != run.body else { return nil }
        let words = "body_file \(path) was modified while it was being sent"
        if task.spec.upload?.part != nil { return .permanent(reason: words, code: .bodyChanged) }
        return .transient(reason: words, retryAfterMs: nil, restartFromZero: false)
    }

    /// IETF `Upload-Limit`: an upload over `max-size` cannot succeed; chunks keep within `max-append-size`.
    private func heed(limits headers: [Header], _ run: UploadRun) -> AttemptOutcome? {
        guard let limits = UploadAnswers.value("upload-limit", in: headers).map(UploadHeaders.limits) else { return nil }
        if let maximum = limits["max-size"], maximum < run.size {
            return Self.tooLarge(for: maximum, run)
        }
        if let maximum = limits["max-append-size"] { run.sizer.serverMaximum = maximum }
        if let minimum = limits["min-append-size"], minimum > 0 { run.sizer.serverMinimum = minimum }
        return nil
    }

    /// A server's size limit (`Tus-Max-Size`, `Upload-Limit: max-size`) under the upload's size.
    private static func tooLarge(for maximum: Int64, _ run: UploadRun) -> AttemptOutcome {
        .permanent(reason: "the server takes uploads of at most \(maximum) bytes; this one has \(run.size)", code: .tooLarge)
    }

    /// An answer that moved nothing: the step is tried again a few times, then the attempt ends (and is retried).
    private func fruitless(_ run: UploadRun, _ task: TaskState, _ reason: String, retry: () -> Void) -> AttemptOutcome? {
        run.fruitlessAnswers += 1
        guard run.fruitlessAnswers <= UploadRun.fruitlessAnswersAllowed else {
            return .transient(reason: "\(reason), \(run.fruitlessAnswers) times in a row", retryAfterMs: nil, restartFromZero: false)
        }
        context.logger.notice("upload step again", metadata: ["task.id": "\(task.id)", "reason": "\(reason)"])
        retry()
        send(run)
        return nil
    }

    /// The server lost the upload: a new one, from byte 0, with the reason in the log.
    private func createAgain(_ run: UploadRun, _ task: TaskState, because reason: String) -> AttemptOutcome? {
        // Bounded whatever progress came between: a server that loses uploads faster than they go
        // would otherwise be sent the file from byte 0 forever, spending no retry.
        run.recreations += 1
        guard run.recreations <= UploadRun.recreationsAllowed else {
            return .transient(reason: "\(reason) (\(run.recreations) uploads lost in one attempt)", retryAfterMs: nil,
                              restartFromZero: false)
        }
        context.logger.notice("upload lost on the server; creating it again", metadata: ["task.id": "\(task.id)", "reason": "\(reason)"])
        context.record(.progressed(Progressed(bytes: 0, total: run.size, restartReason: reason)), task: task.id)
        (run.loggedOffset, run.loggedAtMs) = (0, Posix.monotonicMs)
        run.lostUpload = reason
        run.step = run.uploadProtocol == .tus && run.extensions == nil ? .discover : .create
        send(run)
        return nil
    }

    /// Bytes up to `end` went out to `url`: a claim up to there may be true, in this attempt and later ones.
    private func believe(_ run: UploadRun, upTo end: Int64, at url: String) {
        run.believableEnd = max(run.believableEnd, end)
        reach = UploadReach(url: url, end: run.believableEnd)
    }

    /// Ends a run from outside an answer (a body that cannot be read): the attempt ends with `outcome`.
    private func uploadEnded(_ task: TaskState, _ outcome: AttemptOutcome) {
        self.run = nil
        switch outcome {
        case .localFailure(let reason, let code), .permanent(let reason, let code):
            context.fail(task, reason: reason, code: code, keeping: task.bytes)
        default:
            break
        }
        context.needsScheduling = true
    }

    /// `cancel` of an upload the server holds: tus `DELETE` (when it offers
    /// `termination`), IETF `DELETE`. Sent once, its answer only logged: the
    /// task is cancelled whatever the server says.
    private func terminate(_ task: TaskState) {
        // A split upload's finished parts are not cancelled one by one: their uploads go with it.
        if task.isFannedOut, task.spec.upload != nil {
            for child in (context.state.children[task.id] ?? []).compactMap({ context.state[$0] }) where child.phase == .finished {
                terminate(child)
            }
        }
        guard let options = task.spec.upload, options.protocol != .plain, let session = task.upload else { return }
        if options.protocol == .tus {
            // A split upload's final upload was made without asking OPTIONS again: its parts' server said.
            let offered = session.extensions
                ?? (context.state.children[task.id] ?? []).lazy.compactMap { self.context.state[$0]?.upload?.extensions }.first
            guard offered?.contains("termination") == true else { return }
        }
        do {
            let request = ProtocolRequest(url: session.url, method: "DELETE", headers: Self.versionHeaders(options.protocol), body: nil)
            let deletion = try context.makeExchange(task, protocolRequest: request, sink: .discard)
            let logger = context.logger
            deletion.onEnded = { deletion, outcome in
                // In words: the outcome's own description is Swift's (`complete(bytes: 0)`).
                logger.info("upload deleted on the server", metadata: [
                    "task.id": "\(deletion.taskID)", "status": "\(deletion.httpStatus)", "result": "\(outcome.failureReason ?? "answered")"])
            }
            try context.exchanges.add(deletion, detached: true)
        } catch {
            context.logger.warning("cannot ask the server to delete the upload", metadata: ["task.id": "\(task.id)", "error": "\(error)"])
        }
    }
}

extension UploadAnswer {
    /// A refusal or a "try later", as the attempt's outcome; nil for an answer the upload goes on from.
    var failure: AttemptOutcome? {
        switch self {
        case .refused(let reason, let code): .permanent(reason: reason, code: code)
        case .tryLater(let reason): .transient(reason: reason, retryAfterMs: nil, restartFromZero: false)
        default: nil
        }
    }
}

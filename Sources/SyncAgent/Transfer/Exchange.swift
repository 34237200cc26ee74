import CCurlShims
import Foundation
import Synchronization
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP exchange: a curl easy handle that sends a `RequestPlan` (its
/// body streamed from a file, if it has one) and takes the answer into a
/// sink — the partial file, memory, or nowhere. It reads the response head,
/// asks `ResponseRules` whether the body may be written, keeps the stall
/// clock, and turns curl's result into an `AttemptOutcome`. It knows
/// nothing of the kind of task it serves: its runner decides what to ask
/// and what the outcome means.
///
/// Received bytes in a partial file are made durable (fdatasync, off the
/// loop) before they are claimed (SPEC §6 rule 2); an upload reports the
/// bytes it has sent.
final class Exchange {
    /// Where the response body goes.
    enum Sink {
        /// Into a partial file, by positional writes from the plan's offset.
        case partialFile(PartialFile)
        /// Kept in memory, at most `limit` bytes: a larger body ends the
        /// exchange with what `overflow` says of the URL that sent it.
        case memory(limit: Int, overflow: (_ url: String) -> AttemptOutcome)
        /// Counted, not kept; at most `limit` bytes when the plan is a protocol step.
        case discard
    }

    /// The task it serves: its speed share and its log lines are the task's.
    let taskID: String
    let plan: RequestPlan
    let easy: UnsafeMutableRawPointer
    /// Distinguishes exchanges, so a late sync of an earlier one is never claimed.
    let serial: UInt64
    /// Wall-clock ms at which `total_timeout` runs out for its task.
    let deadlineMs: Int64

    // Called on the loop thread, from inside curl's callbacks or the loop's own checks.
    /// The answer was accepted, before its first byte is written: an outcome stops the exchange.
    var onAccepted: ((Exchange) -> AttemptOutcome?)?
    /// Set by a runner whose file its server names (`name_from_server`): called once, when an
    /// answer is accepted (before a byte of it is written, or at the end of an empty one), with
    /// its `Content-Disposition` (the bytes sent; nil: none) and the URL that answered. An
    /// outcome stops the exchange.
    var onServerName: ((_ contentDisposition: [UInt8]?, _ url: String) -> AttemptOutcome?)?
    /// Bytes became durable (or the partial file went back to 0): the log should say so.
    var onProgress: (Progressed) -> Void = { _ in }
    /// curl followed a redirect.
    var onRedirected: (Redirected) -> Void = { _ in }
    /// Written bytes are due to be made durable: (descriptor, offset to claim once it is).
    var onSyncWanted: (_ descriptor: Int32, _ offset: Int64) -> Void = { _, _ in }
    /// The exchange is over (curl finished it, or a clock ran out) and out of curl's hands.
    var onEnded: (Exchange, AttemptOutcome) -> Void = { _, _ in }

    private let sink: Sink
    private let settings: TransferSettings
    private let speedCapOfJob: Int64?
    /// The config's `max_speed`: followed on SIGHUP.
    var speedCapOfConfig: Int64?
    /// curl's own words for a failure (CURLOPT_ERRORBUFFER): "Rejected 200000 bytes header (max is
    /// 102400)!" where its error code alone reads "Out of memory". Freed after the handle.
    private let curlWords = CurlErrorBuffer()
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var mime: OpaquePointer?
    private let body: RequestBody?

    /// Where the request went last (after the redirects curl followed).
    private(set) var currentURL: String
    /// Where this exchange stops writing (exclusive): a range's end, moved
    /// closer when another connection takes over the rest of it.
    var stopAt: Int64?
    /// Bytes received so far, counted from the plan's offset (in the partial
    /// file's terms when there is one).
    private(set) var written: Int64
    /// Bytes the log vouches for.
    private(set) var durable: Int64
    /// A memory sink's body.
    private(set) var memoryBody: [UInt8] = []

    // What the current response said.
    private var status = 0
    private var etag: String?
    private var lastModified: String?
    private var contentRange = SentValue<HTTPNumbers.ContentRange>.absent
    private var contentLength = SentValue<Int64>.absent
    private var conflictingLengths = false
    private var retryAfterMs: Int64?
    private var location: String?
    /// Only when a runner asks for it (`onServerName`).
    private var contentDisposition: [UInt8]?
    /// The response said `Accept-Ranges: bytes`.
    private(set) var acceptsRanges = false
    /// The final response's headers (the first 100), when the plan keeps them.
    private(set) var responseHeaders: [Header] = []
    /// The headers of informational (1xx) answers before the final one: an
    /// IETF upload's `104 Upload Resumption Supported` carries its URL.
    private(set) var informationalHeaders: [Header] = []
    private var informationalCount = 0
    private static let keptResponseHeaders = 100
    /// A protocol step's answer is a few headers and a short body: more is refused.
    static let protocolAnswerLimit = 1 << 20
    /// A response set a cookie: the persistent jar needs rewriting.
    private(set) var sawSetCookie = false

    /// What the verdict accepted: the size the body completes, and a 206's end.
    private var total: Int64?
    private var answerEnd: Int64?
    private var bodyStarted = false
    /// Set when we stopped curl on purpose; says why.
    private var stopReason: AttemptOutcome?
    /// Where this exchange's first write to the partial file went.
    private var firstWriteAt: Int64?
    private var validatorsLogged = false
    private var syncPending = false
    private var lastFlushMs = Posix.monotonicMs
    /// The last upload progress reported.
    private var reportedSent: Int64 = 0
    /// When the exchange began (monotonic ms): a network change since then may be why it failed.
    let startedMs = Posix.monotonicMs
    /// When the server last sent anything (headers or body): the stall detector's clock.
    private(set) var lastActivityMs = Posix.monotonicMs
    /// `min_speed` over `min_speed_time` (nil: off).
    private var lowSpeed: LowSpeedWatch?
    /// The speed `min_speed` judged too low, once it ended the exchange for it.
    private(set) var crawledAt: Int64?
    /// Its recent speed into the partial file (a segmented download weighs its ranges by it).
    private var meter = SpeedMeter()
    /// Where the request body has got to (an upload's bytes moved).
    private var sentPosition: Int64 = 0
    /// The cap curl holds it to now: its share of `max_overall_speed`, else its own.
    private var speedCapNow: Int64?
    /// It failed on the way to or from the server (no connection, no name, a
    /// reset, a stall) rather than with an answer: what a missing network
    /// looks like. A refused connection is a server's answer.
    private(set) var failedOnTheWire = false
    /// It failed before a connection was tried: no address for its host (or proxy's) name.
    private(set) var nameUnresolved = false

    private static let lastSerial = Atomic<UInt64>(0)
    /// A new serial: exchanges and the syncs of segmented downloads draw from one counter.
    static func makeSerial() -> UInt64 {
        lastSerial.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// - Parameters:
    ///   - speedCap: the job's `max_speed` (the config's is in `settings`).
    init(for taskID: String, plan: RequestPlan, sink: Sink, settings: TransferSettings, speedCap: Int64?, deadlineMs: Int64,
         cookies: CookieJar?, bodyRules: BodyFileCheck) throws {
        self.taskID = taskID
        self.plan = plan
        self.sink = sink
        self.settings = settings
        self.deadlineMs = deadlineMs
        speedCapOfJob = speedCap
        speedCapOfConfig = settings.maxSpeed
        speedCapNow = speedCap ?? settings.maxSpeed
        lowSpeed = settings.minSpeed.map { LowSpeedWatch(minBytesPerS: $0, windowS: settings.minSpeedTimeS, startMs: Posix.monotonicMs) }
        serial = Self.makeSerial()
        currentURL = plan.url
        written = plan.ask.offset
        durable = plan.ask.offset
        stopAt = plan.ask.rangeEnd
        total = plan.ask.knownTotal
        switch plan.body {
        case .file(let path, let slice, let rewindable):
            let file = try RequestBody(path: path, slice: slice, rules: bodyRules)
            file.rewindable = rewindable
            body = file
        case .form(let path, _, _):
            body = try RequestBody(path: path, rules: bodyRules)
        case .none, .empty:
            body = nil
        }
        guard let handle = sa_curl_easy_init() else {
            throw SetupError(what: "curl_easy_init failed (out of memory)")
        }
        // From here deinit cleans up the handle.
        easy = handle
        try configure()
        try cookies?.use(in: easy)
    }

    deinit {
        sa_curl_easy_cleanup(easy)
        sa_curl_mime_free(mime)
        sa_curl_slist_free_all(headerList)
    }

    /// Why an exchange could not be set up.
    struct SetupError: Error, CustomStringConvertible {
        var what: String
        var description: String { what }
    }

    // MARK: - The request

    private func configure() throws {
        try set("URL", sa_easy_setopt_string(easy, CURLOPT_URL, currentURL))
        try set("NOSIGNAL", sa_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1))
        try set("ERRORBUFFER", sa_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, curlWords.words))
        try set("FOLLOWLOCATION", sa_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, plan.redirects == .byCurl ? 1 : 0))
        try set("MAXREDIRS", sa_easy_setopt_long(easy, CURLOPT_MAXREDIRS, settings.maxRedirects))
        // SPEC §7: HTTP and HTTPS only, for the job URL and every redirect.
        // A curl that cannot enforce this must not run the transfer at all.
        try set("PROTOCOLS_STR", sa_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"))
        try set("REDIR_PROTOCOLS_STR", sa_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https"))
        try set("CONNECTTIMEOUT", sa_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT, settings.connectTimeout))
        try set("USERAGENT", sa_easy_setopt_string(easy, CURLOPT_USERAGENT, settings.userAgent))
        if let proxy = settings.proxy { try set("PROXY", sa_easy_setopt_string(easy, CURLOPT_PROXY, proxy)) }
        // Unset, curl reads the environment's no_proxy, for the config's proxy too (as curl's own tool does).
        if let noProxy = settings.noProxy { try set("NOPROXY", sa_easy_setopt_string(easy, CURLOPT_NOPROXY, noProxy)) }
        if let caFile = settings.caFile { try set("CAINFO", sa_easy_setopt_string(easy, CURLOPT_CAINFO, caFile)) }
        if let speed = ownSpeedCap {
            try set("MAX_RECV_SPEED_LARGE", sa_easy_setopt_off(easy, CURLOPT_MAX_RECV_SPEED_LARGE, curl_off_t(speed)))
            try set("MAX_SEND_SPEED_LARGE", sa_easy_setopt_off(easy, CURLOPT_MAX_SEND_SPEED_LARGE, curl_off_t(speed)))
        }
        // Large reads keep syscalls and callbacks few on fast links. A rate limit needs small
        // ones: curl reads up to 100 buffers per perform call before it checks the rate, so a big
        // buffer overshoots it. The buffer cannot change once the transfer runs: sized for the
        // smallest cap it may get (a share of max_overall_speed shrinks as others start).
        var bufferSize = 512 * 1024
        let overallShare = settings.maxOverallSpeed.map { $0 / Int64(max(1, settings.maxActive)) }
        if let speed = [ownSpeedCap, overallShare].compactMap({ $0 }).min() {
            bufferSize = Int(min(max(speed / 800, 1024), Int64(bufferSize)))
        }
        // Only performance hints: a curl that caps the sizes keeps its own.
        let buffer = sa_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, bufferSize)
        let uploadBuffer = sa_easy_setopt_long(easy, CURLOPT_UPLOAD_BUFFERSIZE, max(bufferSize, 16 * 1024))
        _ = (buffer, uploadBuffer)
        if let range = plan.range { try set("RANGE", sa_easy_setopt_string(easy, CURLOPT_RANGE, range)) }
        try configureMethodAndBody()
        for header in plan.headers {
            guard let appended = sa_curl_slist_append(headerList, "\(header.name): \(header.value)") else {
                throw SetupError(what: "out of memory for the request headers")
            }
            headerList = appended
        }
        if headerList != nil {
            try set("HTTPHEADER", sa_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList)))
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        try set("WRITEFUNCTION", sa_easy_set_write_callback(easy, { data, size, count, context in
            let exchange = Unmanaged<Exchange>.fromOpaque(context!).takeUnretainedValue()
            return exchange.receiveBody(UnsafeRawPointer(data!), size * count)
        }, context))
        try set("HEADERFUNCTION", sa_easy_set_header_callback(easy, { data, size, count, context in
            let exchange = Unmanaged<Exchange>.fromOpaque(context!).takeUnretainedValue()
            // Anything but the count makes curl stop the transfer.
            return exchange.receiveHeader(UnsafeRawBufferPointer(start: data, count: size * count)) ? size * count : 0
        }, context))
    }

    /// Method and body: a file sent as the whole body (PUT, or another
    /// method with a body), or as one part of a multipart form.
    private func configureMethodAndBody() throws {
        let method = plan.method
        body?.onRead = { [unowned self] position in self.sent(upTo: position) }
        switch plan.body {
        case .form(_, let field, let fields):
            guard let body, let form = sa_curl_mime_init(easy) else { throw SetupError(what: "out of memory for the form") }
            mime = form
            for extra in fields {
                let part = sa_curl_mime_addpart(form)
                try set("MIME name", sa_curl_mime_name(part, extra.name))
                try set("MIME data", sa_curl_mime_data(part, extra.value, -1))  // -1: CURL_ZERO_TERMINATED
            }
            guard let filePart = sa_curl_mime_addpart(form) else { throw SetupError(what: "out of memory for the form") }
            try body.attach(to: filePart, field: field)
            try set("MIMEPOST", sa_easy_setopt_pointer(easy, CURLOPT_MIMEPOST, UnsafeMutableRawPointer(form)))
        case .file:
            guard let body else { return }
            try body.attach(to: easy)
            if method == "PUT" {
                try set("UPLOAD", sa_easy_setopt_long(easy, CURLOPT_UPLOAD, 1))
                try set("INFILESIZE_LARGE", sa_easy_setopt_off(easy, CURLOPT_INFILESIZE_LARGE, curl_off_t(body.size)))
                return
            }
            try set("POST", sa_easy_setopt_long(easy, CURLOPT_POST, 1))
            try set("POSTFIELDSIZE_LARGE", sa_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.size)))
        case .empty:
            // An empty body, said so: a creation request sends `Content-Length: 0`.
            try set("POSTFIELDSIZE_LARGE", sa_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, 0))
            try set("COPYPOSTFIELDS", sa_easy_setopt_string(easy, CURLOPT_COPYPOSTFIELDS, ""))
        case .none:
            if method == "HEAD" { try set("NOBODY", sa_easy_setopt_long(easy, CURLOPT_NOBODY, 1)) }
        }
        let curlChoosesMethod = method == (plan.body == .none ? "GET" : "POST") || (method == "HEAD" && plan.body == .none)
            || (method == "PUT" && plan.body.isFile)
        if !curlChoosesMethod { try set("CUSTOMREQUEST", sa_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)) }
    }

    private func set(_ option: String, _ code: CURLcode) throws {
        guard code == CURLE_OK else {
            throw SetupError(what: "curl refused option CURLOPT_\(option): \(String(cString: sa_curl_easy_strerror(code)))")
        }
    }

    // MARK: - Speed

    /// Its own cap: the job's `max_speed`, else the config's.
    var ownSpeedCap: Int64? { speedCapOfJob ?? speedCapOfConfig }

    /// The cap curl holds it to from now on (its share of
    /// `max_overall_speed`; nil: its own cap, or none). curl reads the
    /// limit afresh as it measures, so a running transfer follows.
    func limitSpeed(to cap: Int64?) -> Bool {
        speedCapNow = cap ?? ownSpeedCap
        let value = curl_off_t(cap ?? 0)
        return sa_easy_setopt_off(easy, CURLOPT_MAX_RECV_SPEED_LARGE, value) == CURLE_OK
            && sa_easy_setopt_off(easy, CURLOPT_MAX_SEND_SPEED_LARGE, value) == CURLE_OK
    }

    // MARK: - Callbacks (run inside curl_multi_perform, on the loop thread)

    /// The request body advanced: an upload's progress (`didSendBodyData`).
    /// Not durable and not needed to be: an upload always starts over.
    private func sent(upTo position: Int64) {
        let now = Posix.monotonicMs
        lastActivityMs = now
        sentPosition = position
        guard plan.countsSent, let size = body?.size else { return }
        if position == size || position - reportedSent >= settings.progressIntervalBytes
            || now - lastFlushMs >= settings.progressIntervalMs {
            guard position != reportedSent else { return }
            reportedSent = position
            lastFlushMs = now
            onProgress(Progressed(bytes: position, total: size))
        }
    }

    /// Returns false to stop the transfer (`stopReason` says why).
    private func receiveHeader(_ line: UnsafeRawBufferPointer) -> Bool {
        lastActivityMs = Posix.monotonicMs
        let header = HeaderLine(line)
        if let code = header.statusCode {
            return newResponse(code)
        }
        if header.value(ifNamed: "set-cookie") != nil { sawSetCookie = true }
        if plan.keepsResponseHeaders, responseHeaders.count < Self.keptResponseHeaders, let pair = header.pair {
            responseHeaders.append(pair)
        }
        // Only these become Strings; every other header is skipped in place.
        // Validators are echoed back in If-Range: keep only what fits a header.
        if let value = header.value(ifNamed: "etag") {
            etag = Self.usableValidator(value)
        } else if let value = header.value(ifNamed: "last-modified") {
            lastModified = Self.usableValidator(value)
        } else if let value = header.value(ifNamed: "retry-after") {
            if case .delayMs(let delay) = HTTPNumbers.retryAfter(value, nowMs: Posix.nowMs) { retryAfterMs = delay }
        } else if let value = header.value(ifNamed: "content-range") {
            contentRange = HTTPNumbers.contentRange(value).map { .value($0) } ?? .unreadable
        } else if let value = header.value(ifNamed: "content-length") {
            let length: SentValue<Int64> = HTTPNumbers.contentLength(value).map { .value($0) } ?? .unreadable
            // Two different lengths: curl keeps the last, and would publish half a file as whole.
            if contentLength != .absent, contentLength != length { conflictingLengths = true }
            contentLength = length
        } else if let value = header.value(ifNamed: "accept-ranges") {
            acceptsRanges = value.lowercased().split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == "bytes" }
        } else if plan.ask.hopStatuses.contains(status), location == nil, let value = header.value(ifNamed: "location") {
            location = value.trimmingCharacters(in: .whitespaces)
        } else if onServerName != nil, contentDisposition == nil, let value = header.rawValue(ifNamed: "content-disposition") {
            // The first, as for any parameter sent twice.
            contentDisposition = value
        }
        return true
    }

    /// A status line: a new response begins (after an informational one, or a redirect curl follows).
    private func newResponse(_ code: Int) -> Bool {
        let previousStatus = status
        status = code
        if (101..<200).contains(previousStatus) {
            informationalHeaders += responseHeaders.prefix(max(0, Self.keptResponseHeaders - informationalHeaders.count))
        }
        if (101..<200).contains(code), plan.isProtocolStep {
            // A server may send a 104 per stretch of progress, not an endless stream of them with no final answer.
            informationalCount += 1
            if informationalCount > 16 + Int((body?.position ?? 0) >> 16) {
                stopReason = .retry("the server sent \(informationalCount) informational answers and no final one "
                                    + "(\(Redaction.url(currentURL)))")
                return false
            }
        }
        if (300..<400).contains(previousStatus) {
            var effective: UnsafePointer<CChar>?
            let known = sa_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &effective) == CURLE_OK
            let to = known ? effective.map { String(cString: $0) } ?? currentURL : currentURL
            onRedirected(Redirected(from: currentURL, to: to, status: previousStatus))
            currentURL = to
        }
        etag = nil
        lastModified = nil
        acceptsRanges = false
        contentRange = .absent
        contentLength = .absent
        conflictingLengths = false
        retryAfterMs = nil
        location = nil
        // A redirect's (or a 1xx's) Content-Disposition names nothing: only the final answer's does.
        contentDisposition = nil
        responseHeaders.removeAll()
        return true
    }

    /// A validator we can send back: printable, one line, not huge.
    private static func usableValidator(_ value: String) -> String? {
        guard !value.isEmpty, value.utf8.count <= 1024,
              value.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else { return nil }
        return value
    }

    /// Returns `count` to go on; anything else makes curl stop with a write error.
    private func receiveBody(_ data: UnsafeRawPointer, _ count: Int) -> Int {
        if !bodyStarted {
            bodyStarted = true
            if let refusal = acceptResponse() ?? onAccepted?(self) ?? openPartialIfDue() {
                stopReason = refusal
                return 0
            }
        }
        if let answerEnd, written + Int64(count) > answerEnd {
            // (Checked before `stopAt`: a connection would take the first bytes and stop, content.)
            stopReason = .retryFromZero("server sent more than the bytes its Content-Range names, up to \(answerEnd) "
                                        + "(\(Redaction.url(currentURL)))")
            return 0
        }
        switch sink {
        case .partialFile(let file):
            return write(data, count, to: file)
        case .memory(let limit, let overflow):
            guard memoryBody.count + count <= limit else {
                stopReason = overflow(currentURL)
                return 0
            }
            memoryBody += UnsafeRawBufferPointer(start: data, count: count)
        case .discard:
            if plan.isProtocolStep, written + Int64(count) > Int64(Self.protocolAnswerLimit) {
                stopReason = .retry("the server's answer to \(plan.method) is over \(Self.protocolAnswerLimit >> 20) MiB "
                                    + "(\(Redaction.url(currentURL)))")
                return 0
            }
        }
        written += Int64(count)
        lastActivityMs = Posix.monotonicMs
        return count
    }

    private func write(_ data: UnsafeRawPointer, _ count: Int, to file: PartialFile) -> Int {
        if let stopAt, written + Int64(count) >= stopAt {
            // This range ends here (another connection took the rest of it).
            let wanted = Int(max(0, stopAt - written))
            guard writeToPartial(file, data, wanted) else { return 0 }
            written += Int64(wanted)
            stopReason = .complete(bytes: written)
            return wanted == count ? count : 0
        }
        if let total, written + Int64(count) > total, plan.ask.resumes {
            guard plan.ask.slice != nil else {
                stopReason = .retryFromZero("server sent more than the \(total) bytes it announced (\(Redaction.url(currentURL)))")
                return 0
            }
            // A slice answered with more than asked (the rest of the file): take the slice, leave the rest.
            guard writeToPartial(file, data, Int(total - written)) else { return 0 }
            written = total
            stopReason = .complete(bytes: total)
            return 0
        }
        guard writeToPartial(file, data, count) else { return 0 }
        written += Int64(count)
        let now = Posix.monotonicMs
        lastActivityMs = now
        meter.record(nowMs: now, bytes: written)
        if !syncPending, written - durable >= settings.progressIntervalBytes || now - lastFlushMs >= settings.progressIntervalMs {
            // Durable in the background; claimed when the sync returns (`claim(upTo:)`).
            syncPending = true
            lastFlushMs = now
            onSyncWanted(file.descriptor, written)
        }
        return count
    }

    /// Writes all `count` bytes at `written` (the connections of a segmented
    /// download share one file); false, with the disk's reason as the stop reason, if it refused.
    private func writeToPartial(_ file: PartialFile, _ data: UnsafeRawPointer, _ count: Int) -> Bool {
        if let from = firstWriteAt, written > from {
            // Cut short under us (`truncate` by someone else), the file would get a hole of zeros where
            // vouched bytes were, and be published so: asked before every write after the first.
            if let size = try? Posix.status(of: file.descriptor, shown: file.path).st_size, Int64(size) < written {
                stopReason = .retryFromZero("\(file.path) was cut short under the agent: it has \(size) bytes, where \(written) "
                                            + "were written")
                return false
            }
        } else if firstWriteAt == nil {
            firstWriteAt = written
        }
        do {
            try Posix.writeAll(file.descriptor, UnsafeRawBufferPointer(start: data, count: count), at: written, shown: file.path)
            return true
        } catch {
            stopReason = localFailure("write", file.path, (error as? SystemError)?.errno ?? EIO)
            return false
        }
    }

    // MARK: - The verdict

    /// The response as the rules see it.
    private var head: ResponseHead {
        ResponseHead(status: status, url: currentURL, etag: etag, lastModified: lastModified, contentRange: contentRange,
                     contentLength: contentLength, conflictingLengths: conflictingLengths, retryAfterMs: retryAfterMs,
                     redirectTarget: plan.ask.hopStatuses.contains(status) ? redirectTarget() : nil)
    }

    /// Where a 3xx the agent follows points. curl works out no redirect URL for an upload
    /// (CURLOPT_UPLOAD), nor before the transfer is done (a 3xx with a body is looked at on
    /// its first byte): its Location, resolved here.
    private func redirectTarget() -> String? {
        var target: UnsafePointer<CChar>?
        if sa_easy_getinfo_string(easy, CURLINFO_REDIRECT_URL, &target) == CURLE_OK, let target { return String(cString: target) }
        guard let location else { return nil }
        return URL(string: location, relativeTo: URL(string: currentURL))?.absoluteString
    }

    /// Decides, on the first body byte (or at the end of an empty one),
    /// whether this response may be written (`ResponseRules.judge`).
    private func acceptResponse() -> AttemptOutcome? {
        switch ResponseRules.judge(head, asked: plan.ask) {
        case .end(let outcome):
            return outcome
        case .accept(let acceptance):
            if let reason = acceptance.restartReason, let failure = restart(reason: reason) { return failure }
            total = acceptance.total
            answerEnd = acceptance.answerEnd
            guard let naming = onServerName else { return nil }
            onServerName = nil
            return naming(contentDisposition, currentURL)
        }
    }

    /// The body goes from byte 0: the partial file is cut back, and the log told why.
    private func restart(reason: String) -> AttemptOutcome? {
        if case .partialFile(let file) = sink, file.descriptor >= 0 {
            do { try Posix.truncate(file.descriptor, to: 0, shown: file.path) } catch {
                return localFailure("truncate", file.path, (error as? SystemError)?.errno ?? EIO)
            }
        }
        written = 0
        durable = 0
        validatorsLogged = true
        partialFile?.chain?.reset()
        onProgress(Progressed(bytes: 0, total: nil, etag: etag, lastModified: lastModified, restartReason: reason))
        return nil
    }

    /// The partial file made now that a body comes (nil: made, or not to be made).
    private func openPartialIfDue() -> AttemptOutcome? {
        guard case .partialFile(let file) = sink, file.descriptor < 0 else { return nil }
        do {
            try file.open()
            return nil
        } catch let busy as DownloadRoot.Busy {
            return .permanent(reason: "cannot write: \(busy)", code: .destBusy)
        } catch {
            return localFailure("open", file.path, (error as? SystemError)?.errno ?? EIO)
        }
    }

    /// The disk under the partial file failed: the words name the file, the file system and the error.
    private func localFailure(_ operation: String, _ path: String, _ error: Int32) -> AttemptOutcome {
        let failure = DiskFailure(operation: operation, path: path, errno: error)
        return .localFailure(reason: failure.description, code: failure.code)
    }

    /// A request body that did not reach the server whole and as one
    /// version of the file: written to while it was sent (the server holds
    /// a mix), or answered before all of it was sent. Sent again. (A chunk
    /// of a resumable upload is checked by its protocol instead.)
    private func bodyNotSentWhole() -> AttemptOutcome? {
        guard let body, !plan.isProtocolStep else { return nil }
        if body.changedSinceOpened {
            return .retry("body_file \(body.path) was modified while it was being sent")
        }
        // (After a redirect curl followed, the answer is to another request, perhaps a GET.)
        var redirects = 0
        if body.position < body.size, sa_easy_getinfo_long(easy, CURLINFO_REDIRECT_COUNT, &redirects) == CURLE_OK, redirects == 0 {
            return .retry("the server answered \(status) after \(body.position) of the \(body.size) bytes of body_file "
                          + "\(body.path); the rest was never sent")
        }
        return nil
    }

    // MARK: - The end

    /// After curl reports the exchange done: what happened, in our terms.
    func outcome(_ result: CURLcode) -> AttemptOutcome {
        if let stopReason {
            // Bytes written before a refusal or a local error are still worth keeping.
            if case .transient(_, _, false) = stopReason, let failure = flush() { return failure }
            return stopReason
        }
        if result == CURLE_OK {
            if let ending = ResponseRules.ending(head, asked: plan.ask) { return ending }
            if let incomplete = bodyNotSentWhole() { return incomplete }
            if !bodyStarted, let refusal = acceptResponse() { return refusal }
            // An empty body is a file too: made now, empty.
            if let failure = openPartialIfDue() { return failure }
            // No fdatasync here: the agent's DataSyncer makes the complete body durable off the loop.
            if let short = ResponseRules.shortBody(written: written, end: stopAt ?? total, asked: plan.ask) {
                if let failure = flush() { return failure }
                return short
            }
            return .complete(bytes: resultBytes)
        }
        if let failure = flush() { return failure }
        if let body, body.shrank {
            return .permanent(reason: "body_file \(body.path) shrank below its \(body.size) bytes while being sent", code: .bodyChanged)
        }
        // The server answered with an error while we were still sending (an
        // upload refused early): its answer says more than the broken send.
        if status >= 400 { return ResponseRules.failure(head, asked: plan.ask) }
        return curlFailure(result)
    }

    /// curl's result code, in words and as an outcome.
    private func curlFailure(_ result: CURLcode) -> AttemptOutcome {
        // curl's own words may quote a proxy it was given, credentials and all: never any with a '@'.
        let detail = curlWords.words.pointee != 0 ? String(cString: curlWords.words) : nil
        let words = detail.flatMap { $0.contains("@") ? nil : Redaction.text($0) } ?? String(cString: sa_curl_easy_strerror(result))
        let reason = "\(words) (\(Redaction.url(currentURL)))"
        var connectErrno = 0
        let refused = sa_easy_getinfo_long(easy, CURLINFO_OS_ERRNO, &connectErrno) == CURLE_OK && connectErrno == Int(ECONNREFUSED)
        nameUnresolved = result == CURLE_COULDNT_RESOLVE_HOST || result == CURLE_COULDNT_RESOLVE_PROXY
        failedOnTheWire = !refused && (status == 0 || result == CURLE_RECV_ERROR || result == CURLE_SEND_ERROR
            || result == CURLE_OPERATION_TIMEDOUT || result == CURLE_PARTIAL_FILE)
        switch result {
        case CURLE_PROXY:
            return ProxyRules.outcome(of: proxyRefusal(), proxy: settings.proxy, url: currentURL, curlWords: words)
        case CURLE_COULDNT_RESOLVE_PROXY:
            return ProxyRules.unresolvedProxy(settings.proxy, url: currentURL, curlWords: words)
        case CURLE_UNSUPPORTED_PROTOCOL where (300..<400).contains(status):
            return .permanent(reason: "refused a redirect to a scheme other than http or https (\(Redaction.url(currentURL)))",
                              code: .curl(Int(result.rawValue)))
        case CURLE_UNSUPPORTED_PROTOCOL:
            // No redirect: what came back was not HTTP (a bad status line, HTTP/0.9, stray bytes).
            return .retry("the answer from \(Redaction.url(currentURL)) is not HTTP (\(words))")
        case CURLE_OUT_OF_MEMORY where !bodyStarted, CURLcode(rawValue: 100) where !bodyStarted:
            // curl's header buffer stops at 100 KB: before 8.6 it says only "Out of memory", from it CURLE_TOO_LARGE (100).
            return .retry("a response header from \(Redaction.url(currentURL)) is longer than curl accepts (100 KB; curl says: \(words))")
        case CURLE_URL_MALFORMAT, CURLE_TOO_MANY_REDIRECTS, CURLE_PEER_FAILED_VERIFICATION,
             CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE, CURLE_FILESIZE_EXCEEDED, CURLE_LOGIN_DENIED,
             CURLE_REMOTE_ACCESS_DENIED:
            return .permanent(reason: reason, code: .curl(Int(result.rawValue)))
        default:
            return .retry(reason)
        }
    }

    /// Why the proxy refused, as curl's `CURLINFO_PROXY_ERROR` tells it (a curl before 7.73
    /// cannot tell: the refusal is then retried as any other).
    private func proxyRefusal() -> ProxyRules.Refusal {
        var code = 0
        guard sa_easy_getinfo_long(easy, CURLINFO_PROXY_ERROR, &code) == CURLE_OK else { return .other }
        switch UInt32(truncatingIfNeeded: code) {
        case CURLPX_USER_REJECTED.rawValue, CURLPX_LONG_USER.rawValue, CURLPX_LONG_PASSWD.rawValue:
            return .credentials
        case CURLPX_NO_AUTH.rawValue:
            return .noAcceptableLogin
        case CURLPX_REPLY_NOT_ALLOWED.rawValue:
            return .notAllowed
        case CURLPX_REPLY_HOST_UNREACHABLE.rawValue, CURLPX_REPLY_NETWORK_UNREACHABLE.rawValue,
             CURLPX_REPLY_CONNECTION_REFUSED.rawValue, CURLPX_REPLY_TTL_EXPIRED.rawValue, CURLPX_RESOLVE_HOST.rawValue:
            return .serverUnreachable
        default:
            return .other
        }
    }

    /// `idle_timeout` (NSURLSession's timeoutIntervalForRequest): no byte for
    /// that long. Checked by the loop, because curl's low-speed check averages
    /// over several seconds and fires late.
    func isStalled(nowMs: Int64) -> Bool {
        nowMs - lastActivityMs >= Int64(settings.idleTimeout) * 1000
    }

    /// `min_speed`: its average speed over the last `min_speed_time` when
    /// below the bar (nil while fast enough, or not yet watched that long).
    func crawlingSpeed(nowMs: Int64) -> Int64? {
        lowSpeed?.observe(nowMs: nowMs, bytes: written - plan.ask.offset + sentPosition, cap: speedCapNow)
    }

    /// Bytes a second written lately (nil: too soon to tell).
    func recentBytesPerS(nowMs: Int64) -> Int64? { meter.bytesPerS(nowMs: nowMs, bytes: written) }

    /// The speed `min_speed` holds it to now (nil: off).
    var lowSpeedBar: Int64? { lowSpeed?.threshold(cap: speedCapNow) }

    func crawlingOutcome(speed: Int64) -> AttemptOutcome {
        crawledAt = speed
        if let failure = flush() { return failure }
        let bar = lowSpeed.map { ByteCount.format($0.threshold(cap: speedCapNow)) } ?? "?"
        return .retry("slower than \(bar)/s (min_speed) for \(settings.minSpeedTimeS) s: "
                      + "\(ByteCount.format(speed))/s from \(Redaction.url(currentURL))")
    }

    func stalledOutcome() -> AttemptOutcome {
        failedOnTheWire = true
        if let failure = flush() { return failure }
        return .retry("no data for \(settings.idleTimeout) s (idle_timeout) from \(Redaction.url(currentURL))")
    }

    // MARK: - Durability

    /// fdatasync on the loop, then claim the bytes in the log (a pause, a
    /// stop), with their digests (hashed here: at most a progress interval's
    /// bytes). A failed sync or read claims nothing and says why.
    @discardableResult
    func flush() -> AttemptOutcome? {
        guard case .partialFile(let file) = sink, file.descriptor >= 0, isNews(upTo: written) else { return nil }
        var digests: [SpanDigest] = []
        do {
            try Posix.dataSync(file.descriptor, shown: file.path)
            if let chain = file.chain {
                guard let records = try chain.extend(file.descriptor, to: written, shown: file.path) else { return nil }
                digests = records
            }
        } catch {
            return localFailure("flush", file.path, (error as? SystemError)?.errno ?? EIO)
        }
        claim(upTo: written, digests: digests)
        return nil
    }

    /// Whether claiming up to `offset` tells the log something: bytes past
    /// the durable offset, or validators it has not seen. (An attempt that
    /// failed to connect has neither: 40,000 of them wrote 40,000 `progressed`
    /// events of 0 bytes, each after an fdatasync.)
    private func isNews(upTo offset: Int64) -> Bool {
        offset > durable || (!validatorsLogged && (etag != nil || lastModified != nil))
    }

    /// After the DataSyncer flushed the complete body: claim every byte written.
    func claimSynced(digests: [SpanDigest]) {
        claim(upTo: written, digests: digests)
    }

    /// A progress sync returned: bytes before `offset` are durable, and `digests` vouch for them.
    func claim(upTo offset: Int64, digests: [SpanDigest]) {
        syncPending = false
        guard isNews(upTo: offset), offset <= written else { return }
        durable = offset
        lastFlushMs = Posix.monotonicMs
        var progress = Progressed(bytes: durable, total: total, digests: digests.isEmpty ? nil : digests)
        if !validatorsLogged {
            progress.etag = etag
            progress.lastModified = lastModified
            validatorsLogged = true
        }
        onProgress(progress)
    }

    /// A progress sync returned with nothing to claim: the next write may ask for another.
    func syncDropped() {
        syncPending = false
    }

    /// A progress sync failed: nothing is claimed, and the exchange ends
    /// with the disk's error (its runner stops it).
    func syncFailed(errno error: Int32) -> AttemptOutcome {
        syncPending = false
        return localFailure("flush", partialFile?.path ?? "", error)
    }

    /// Bytes written a progress interval ago and not yet durable, with no
    /// write since to ask for their sync (a slow server sends in bursts):
    /// it starts now. Asked by the loop.
    func syncIfOverdue(nowMs: Int64) {
        guard !syncPending, let file = partialFile, file.descriptor >= 0, written > durable,
              nowMs - lastFlushMs >= settings.progressIntervalMs else { return }
        syncPending = true
        lastFlushMs = nowMs
        onSyncWanted(file.descriptor, written)
    }

    // MARK: - What it learned

    var partialFile: PartialFile? {
        if case .partialFile(let file) = sink { file } else { nil }
    }

    /// Whether a complete response still has to be made durable and published.
    var keepsBody: Bool { partialFile != nil }

    /// What `finished` records: bytes sent for an upload, bytes received otherwise.
    var resultBytes: Int64 { plan.countsSent ? body?.position ?? 0 : written }

    /// curl wanted to send this request's body again (the connection died) and was refused (see `RequestBody.rewindable`).
    var needsRewind: Bool { body?.refusedRewind ?? false }

    /// The validators of the response, to guard further ranges of the same file.
    var responseValidators: (etag: String?, lastModified: String?) { (etag, lastModified) }
    /// The resource's size as the accepted response told it.
    var resourceSize: Int64? { total }
    /// Where the bytes of an accepted 206 end (exclusive), as its Content-Range says.
    var answeredRangeEnd: Int64? {
        guard status == 206, case .value(let range) = contentRange, let last = range.last else { return nil }
        return last + 1
    }
    var httpStatus: Int { status }

    /// The request went to a proxy (the config's, or curl's environment):
    /// the URL's host is not where it connected.
    var goesThroughProxy: Bool { settings.proxy != nil || Self.proxyInEnvironment }
    private static let proxyInEnvironment = ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
        .contains { !(ProcessInfo.processInfo.environment[$0] ?? "").isEmpty }

    /// curl's timing and connection info for this exchange (NSURLSessionTaskMetrics).
    var metrics: AttemptMetrics {
        func micros(_ info: CURLINFO) -> Int64 {
            var value: curl_off_t = 0
            return sa_easy_getinfo_off(easy, info, &value) == CURLE_OK ? Int64(value) : 0
        }
        func number(_ info: CURLINFO) -> Int {
            var value = 0
            return sa_easy_getinfo_long(easy, info, &value) == CURLE_OK ? value : 0
        }
        var address: UnsafePointer<CChar>?
        let remote = sa_easy_getinfo_string(easy, CURLINFO_PRIMARY_IP, &address) == CURLE_OK ? address.map { String(cString: $0) } : nil
        let versions = [CURL_HTTP_VERSION_1_0: "1.0", CURL_HTTP_VERSION_1_1: "1.1",
                        CURL_HTTP_VERSION_2_0: "2", CURL_HTTP_VERSION_3: "3"]
        let status = number(CURLINFO_RESPONSE_CODE)
        return AttemptMetrics(
            dnsUs: micros(CURLINFO_NAMELOOKUP_TIME_T), connectUs: micros(CURLINFO_CONNECT_TIME_T),
            tlsUs: micros(CURLINFO_APPCONNECT_TIME_T), ttfbUs: micros(CURLINFO_STARTTRANSFER_TIME_T),
            totalUs: micros(CURLINFO_TOTAL_TIME_T),
            httpVersion: status == 0 ? nil : versions[number(CURLINFO_HTTP_VERSION)],
            status: status,
            remoteAddress: remote?.isEmpty == false ? remote : nil,
            remotePort: number(CURLINFO_PRIMARY_PORT),
            // Connections curl had to open for this exchange: none means the cache served it.
            reused: status != 0 && number(CURLINFO_NUM_CONNECTS) == 0,
            redirects: number(CURLINFO_REDIRECT_COUNT),
            bytesReceived: micros(CURLINFO_SIZE_DOWNLOAD_T),
            bytesSent: micros(CURLINFO_SIZE_UPLOAD_T))
    }
}

/// The partial file an exchange writes into: opened already, or made when
/// the first body byte comes (a conditional request answered 304 then never
/// creates a file only to remove it). It closes its descriptor.
final class PartialFile {
    let path: String
    private(set) var descriptor: Int32
    private var make: (() throws -> Int32)?
    /// The chain of digests this exchange's bytes extend (SPEC §6 rule 3).
    var chain: DigestChain?

    init(path: String, descriptor: Int32) {
        self.path = path
        self.descriptor = descriptor
    }

    init(path: String, makeOnFirstByte make: @escaping () throws -> Int32) {
        self.path = path
        descriptor = -1
        self.make = make
    }

    deinit { Posix.close(descriptor) }

    fileprivate func open() throws {
        guard descriptor < 0, let make else { return }
        self.make = nil
        descriptor = try make()
    }
}

extension RequestPlan.Body {
    var isFile: Bool {
        if case .file = self { true } else { false }
    }
}

/// The CURL_ERROR_SIZE bytes curl writes its message for a failure into.
private final class CurlErrorBuffer {
    let words: UnsafeMutablePointer<CChar>
    init() {
        words = .allocate(capacity: Int(CURL_ERROR_SIZE))
        words.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }
    deinit { words.deallocate() }
}

import CCurlShims
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// How one attempt ended, before verification and publishing.
enum AttemptOutcome: Equatable {
    /// The exchange succeeded: every byte of the response is in the partial
    /// file (not yet flushed), or, for an upload, every byte of the body sent.
    case complete(bytes: Int64)
    /// Worth another attempt; `restartFromZero` when the partial file cannot be resumed.
    case transient(reason: String, retryAfterMs: Int64?, restartFromZero: Bool)
    case permanent(reason: String, code: String)
    /// This machine failed (disk full, I/O error): the task stops, keeping
    /// the bytes the log vouches for, so `resume` continues once fixed.
    case localFailure(reason: String, code: String)
    /// A redirect this attempt does not follow itself (its request carries
    /// credentials another host must not get): the agent takes the hop.
    case redirect(to: String, status: Int)
    /// A conditional request (`overwrite = "update"`) met 304 Not Modified,
    /// with the ETag the 304 carried (nil: none).
    case notModified(etag: String?)
    /// One range of a segmented download was not answered with that range:
    /// the server ignores `Range`, or `If-Range` found another file (the
    /// reason says which). Nothing was written.
    case rangeRefused(reason: String)
    /// A segmented download's ranges cannot be trusted (the reason says
    /// why): it starts again from 0 over one connection, spending no retry.
    case fallBack(reason: String)
}

/// One request of a resumable upload's protocol, sent in place of the
/// task's own request: its URL, method and headers, and the slice of
/// `body_file` it carries (none for OPTIONS, creation, HEAD, DELETE).
struct ProtocolRequest {
    var url: String
    var method: String
    var headers: [Header]
    var body: ByteSpan?
}

/// One attempt of a task: a curl easy handle that sends the request (with
/// its body streamed from `body_file`, if any) and streams the response
/// body into `DEST.part` from `offset` — or nowhere, for tasks that keep no
/// body. Received progress is made durable (fdatasync) before it is
/// reported (SPEC §6 rule 2); an upload reports the bytes it has sent.
final class TransferAttempt {
    typealias Sink = (_ task: String, _ body: EventBody) -> Void

    let taskID: String
    /// What this kind of transfer does with a response (see `KindBehaviour`).
    let behaviour: KindBehaviour
    private let speedCapOfJob: Int64?
    /// The config's `max_speed`: followed on SIGHUP (see `Agent.reloadConfig`).
    var speedCapOfConfig: Int64?
    let easy: UnsafeMutableRawPointer
    /// curl's own words for a failure (CURLOPT_ERRORBUFFER): "Rejected 200000 bytes header (max is
    /// 102400)!" where its error code alone reads "Out of memory".
    /// (Freed after the handle: properties go after `deinit` has cleaned it up.)
    private let curlWords = CurlErrorBuffer()
    let partPath: String?
    let requestedOffset: Int64
    /// The partial file, or -1 when the response body is not kept (or not yet made: see `makePartial`).
    private var fd: Int32
    /// Makes (locks and opens) the partial file when the first body byte
    /// comes: a conditional request (`overwrite = "update"`) answered 304
    /// then never creates a file only to remove it.
    private var makePartial: (() throws -> Int32)?
    private let body: RequestBody?
    private var mime: OpaquePointer?
    private let sink: Sink
    private let settings: TransferSettings
    private var headerList: UnsafeMutablePointer<curl_slist>?
    /// Wall-clock ms at which `total_timeout` runs out for this task.
    let deadlineMs: Int64
    /// A response set a cookie: the persistent jar needs rewriting.
    private(set) var sawSetCookie = false
    /// Upload and data tasks: the final response's headers (the first 100).
    private(set) var responseHeaders: [Header] = []
    /// A redirect's `Location`, when the agent follows redirects itself (see `redirectToFollow`).
    private var location: String?
    /// An HLS playlist's body, kept in memory (at most `playlistLimit` bytes).
    private(set) var playlistBody: [UInt8] = []
    static let playlistLimit = 16 << 20
    /// Not an attempt of its own, so it records no events: a live playlist read
    /// again, or the `DELETE` of a cancelled upload.
    let isRefresh: Bool
    /// One request of a resumable upload's protocol (see `ProtocolRequest`), if it is one.
    let protocolRequest: ProtocolRequest?
    /// The headers of an informational (1xx) answer before the final one: an
    /// IETF upload's `104 Upload Resumption Supported` carries its URL.
    private(set) var informationalHeaders: [Header] = []
    /// Informational answers so far: a server may send a 104 per stretch of
    /// progress, not an endless stream of them with no final answer.
    private var informationalCount = 0
    /// A protocol request's answer is a few headers and a short body: more is refused.
    static let protocolAnswerLimit = 1 << 20
    /// curl wanted to send this request's body again (the connection died) and was refused (see `RequestBody.rewindable`).
    var needsRewind: Bool { body?.refusedRewind ?? false }
    /// This attempt's byte range of the resource (an HLS `#EXT-X-BYTERANGE`).
    private let byteRange: HLSByteRange?
    /// One connection of a segmented download: asks for `requestedOffset
    /// ..< rangeEnd` and never restarts the shared file itself.
    let rangeEnd: Int64?
    /// Where this connection stops writing (exclusive): its range's end,
    /// moved closer when another connection takes over the rest of it.
    var stopAt: Int64?
    /// Called once the response is accepted, before its first byte is
    /// written: a refusal stops the attempt.
    var onAccepted: ((TransferAttempt) -> AttemptOutcome?)?
    /// The response said `Accept-Ranges: bytes`.
    private(set) var acceptsRanges = false
    private static let keptResponseHeaders = 100

    /// Bytes in the partial file.
    private(set) var written: Int64
    /// Bytes the log vouches for (for a connection of a segmented download,
    /// the end of what it claimed of its own range).
    private(set) var durable: Int64
    private var lastFlushMs = FileSystem.monotonicMs
    /// When the attempt began (monotonic ms): a network change since then may be why it failed.
    let startedMs = FileSystem.monotonicMs
    /// When the server last sent anything (headers or body): the stall detector's clock.
    private(set) var lastActivityMs = FileSystem.monotonicMs

    // What the current response said.
    private var status = 0
    private var etag: String?
    private var lastModified: String?
    /// `Content-Range` as sent: nil if absent; `.some(nil)` if unreadable.
    private var contentRange: HTTPNumbers.ContentRange??
    /// `Content-Length` as sent, parsed by us (curl reads "1e5" as 1): nil
    /// if absent; `.some(nil)` if unreadable.
    private var contentLength: Int64??
    /// `Content-Length` came twice, with different values.
    private var conflictingLengths = false
    /// Redirects are followed by the agent, not curl (see `.redirect`).
    private let followsRedirectsItself: Bool
    /// The 3xx answers the agent follows itself, when it does.
    private let hopStatuses: Set<Int>
    /// Credentials go only to this URL's host.
    private let origin: String
    private var retryAfterMs: Int64?
    private var total: Int64?
    /// A `206`'s last byte + 1 (in `written`'s terms), from its Content-Range: a body that goes
    /// past it is not the range it names, whether or not it said its length.
    private var answerEnd: Int64?
    private var previousValidator: String?
    /// The `If-Range` this request went out with: a `206` must be of the file it names.
    private var sentIfRange: String?
    /// Where the request went last (after redirects): a playlist's URIs resolve against it.
    private(set) var currentURL: String
    private var bodyStarted = false
    /// The last upload progress logged.
    private var reportedSent: Int64 = 0
    private var validatorsLogged = false
    /// Set when we stopped curl on purpose; says why.
    private var stopReason: AttemptOutcome?
    /// The attempt failed on the way to or from the server (no connection,
    /// no name, a reset, a stall) rather than with an answer: what a missing
    /// network looks like. A refused connection is a server's answer.
    private(set) var failedOnTheWire = false
    /// It failed before a connection was tried: no address for its host
    /// (or proxy's) name, so curl names none it went for.
    private(set) var nameUnresolved = false
    /// The request went to a proxy (the config's, or curl's environment):
    /// the URL's host is not where it connected.
    var goesThroughProxy: Bool { settings.proxy != nil || Self.proxyInEnvironment }
    private static let proxyInEnvironment = ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"]
        .contains { !(ProcessInfo.processInfo.environment[$0] ?? "").isEmpty }

    /// Hands a progress sync to the agent's DataSyncer: (attempt, descriptor, offset to claim when durable).
    typealias SyncRequest = (_ attempt: TransferAttempt, _ descriptor: Int32, _ offset: Int64) -> Void

    /// Distinguishes attempts of one task, so a late sync of an earlier one is never claimed.
    let serial: UInt64
    private static var nextSerial: UInt64 = 0
    /// A new serial: attempts and the syncs of segmented downloads draw from one counter.
    static func makeSerial() -> UInt64 {
        nextSerial += 1
        return nextSerial
    }
    let ifChanged: (etag: String?, lastModified: String?)?
    private let requestSync: SyncRequest
    /// A progress sync is in flight: do not queue another.
    private var syncPending = false

    /// - Parameters:
    ///   - partFile: the partial file, open for writing at `offset` (the
    ///     attempt closes it), or -1 when the response body is not kept.
    ///   - ifRange: the validator guarding a resume from `offset` (the agent's decision).
    ///   - origin: the URL whose host may receive the job's credentials (a child's parent's URL); default the task's own.
    ///   - ifChanged: `overwrite = "update"`: the validators the file on disk was published with.
    init(task: TaskState, partFile: Int32, offset: Int64, ifRange: String?, deadlineMs: Int64, settings: TransferSettings,
         cookies: CookieJar?, isRefresh: Bool = false, origin: String? = nil,
         ifChanged: (etag: String?, lastModified: String?)? = nil, rangeEnd: Int64? = nil,
         makePartial: (() throws -> Int32)? = nil, protocolRequest: ProtocolRequest? = nil, sink: @escaping Sink,
         requestSync: @escaping SyncRequest) throws {
        self.origin = origin ?? task.spec.url
        self.isRefresh = isRefresh
        self.protocolRequest = protocolRequest
        // Only a request for the whole file may be answered "not modified".
        self.ifChanged = offset == 0 ? ifChanged : nil
        byteRange = task.spec.byteRange
        self.rangeEnd = rangeEnd
        stopAt = rangeEnd
        // curl drops Authorization and Cookie when a redirect changes host, but
        // not the other credential headers (X-Api-Key, Private-Token …): a
        // transfer that sends one takes each hop through the agent, which
        // sends them only to the job's own host.
        behaviour = protocolRequest == nil ? task.spec.behaviour : .protocolRequest
        speedCapOfJob = task.spec.maxSpeed
        speedCapOfConfig = settings.maxSpeed
        // A request with a body is followed only where the hop keeps its
        // method and body (307, 308); curl would send the body's credentials
        // on through any hop, and the agent cannot make the GET a 301–303 asks for.
        let sendsCredentials = (settings.headers + task.spec.headers).contains { $0.isSecret }
        followsRedirectsItself = sendsCredentials && (behaviour.canFollowRedirectsItself || protocolRequest == nil)
        hopStatuses = behaviour.canFollowRedirectsItself || task.spec.effectiveMethod == "GET" ? [301, 302, 303, 307, 308] : [307, 308]
        self.requestSync = requestSync
        serial = Self.makeSerial()
        taskID = task.id
        partPath = task.partPath
        requestedOffset = offset
        written = offset
        durable = offset
        currentURL = protocolRequest?.url ?? task.currentURL
        total = protocolRequest != nil ? nil : task.spec.byteRange?.length ?? (task.spec.isResumable ? task.total : nil)
        // A range of a segmented download is guarded by its download's validator, which the log may not hold yet.
        previousValidator = rangeEnd != nil ? ifRange : task.etag ?? task.lastModified
        self.deadlineMs = deadlineMs
        self.settings = settings
        self.sink = sink

        fd = partFile
        self.makePartial = partFile < 0 ? makePartial : nil
        do {
            if let protocolRequest {
                body = try protocolRequest.body.flatMap { slice in try task.spec.bodyFile.map { try RequestBody(path: $0, slice: slice) } }
                body?.rewindable = false
            } else {
                body = try task.spec.bodyFile.map { try RequestBody(path: $0) }
            }
        } catch {
            if partFile >= 0 { close(partFile) }
            throw error
        }
        guard let handle = sa_curl_easy_init() else {
            if fd >= 0 { close(fd) }
            throw SystemError(operation: "curl_easy_init", errno: ENOMEM)
        }
        // From here deinit closes fd and cleans up the handle.
        easy = handle
        try configure(task: task, ifRange: ifRange)
        cookies?.use(in: easy)
    }

    deinit {
        sa_curl_easy_cleanup(easy)
        sa_curl_mime_free(mime)
        sa_curl_slist_free_all(headerList)
        if fd >= 0 { close(fd) }
    }

    private func configure(task: TaskState, ifRange: String?) throws {
        try check("URL", sa_easy_setopt_string(easy, CURLOPT_URL, currentURL))
        try check("NOSIGNAL", sa_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1))
        try check("ERRORBUFFER", sa_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, curlWords.words))
        // tus and the IETF draft never redirect an upload: a 3xx to a protocol request is refused, not followed
        // (curl would take the job's credential headers, all but Authorization and Cookie, wherever it points).
        let follows = !followsRedirectsItself && protocolRequest == nil
        try check("FOLLOWLOCATION", sa_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, follows ? 1 : 0))
        try check("MAXREDIRS", sa_easy_setopt_long(easy, CURLOPT_MAXREDIRS, settings.maxRedirects))
        // SPEC §7: HTTP and HTTPS only, for the job URL and every redirect.
        // A curl that cannot enforce this must not run the transfer at all.
        try check("PROTOCOLS_STR", sa_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"))
        try check("REDIR_PROTOCOLS_STR", sa_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https"))
        try check("CONNECTTIMEOUT", sa_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT, settings.connectTimeout))
        try check("USERAGENT", sa_easy_setopt_string(easy, CURLOPT_USERAGENT, settings.userAgent))
        if let proxy = settings.proxy { try check("PROXY", sa_easy_setopt_string(easy, CURLOPT_PROXY, proxy)) }
        if let caFile = settings.caFile { try check("CAINFO", sa_easy_setopt_string(easy, CURLOPT_CAINFO, caFile)) }
        // Large reads keep syscalls and callbacks few on fast links. A rate
        // limit needs small ones: curl reads up to 100 buffers per perform
        // call before it checks the rate, so a big buffer overshoots it.
        var bufferSize = 512 * 1024
        if let speed = ownSpeedCap {
            try check("MAX_RECV_SPEED_LARGE", sa_easy_setopt_off(easy, CURLOPT_MAX_RECV_SPEED_LARGE, curl_off_t(speed)))
            try check("MAX_SEND_SPEED_LARGE", sa_easy_setopt_off(easy, CURLOPT_MAX_SEND_SPEED_LARGE, curl_off_t(speed)))
        }
        // The buffer cannot change once the transfer runs: sized for the
        // smallest cap it may get (a share of max_overall_speed shrinks as others start).
        let overallShare = settings.maxOverallSpeed.map { $0 / Int64(max(1, settings.maxActive)) }
        if let speed = [ownSpeedCap, overallShare].compactMap({ $0 }).min() {
            bufferSize = Int(min(max(speed / 800, 1024), Int64(bufferSize)))
        }
        // Only a performance hint: a curl that caps the size keeps its own.
        _ = sa_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, bufferSize)
        _ = sa_easy_setopt_long(easy, CURLOPT_UPLOAD_BUFFERSIZE, max(bufferSize, 16 * 1024))

        var headers = settings.headers
        for header in task.spec.headers {
            headers.removeAll { $0.name.lowercased() == header.name.lowercased() }
            headers.append(header)
        }
        // A protocol request's own headers (Upload-Offset …) replace the job's of the same name.
        for header in protocolRequest?.headers ?? [] {
            headers.removeAll { $0.name.lowercased() == header.name.lowercased() }
            headers.append(header)
        }
        // Credentials go to the job's own host only, never to where a redirect led.
        if currentURL != origin, URLRules.hostKey(currentURL) != URLRules.hostKey(origin) { headers.removeAll(where: \.isSecret) }
        if let byteRange, let start = byteRange.offset {
            // Only this slice of the resource, from where the partial file ends.
            try check("RANGE", sa_easy_setopt_string(easy, CURLOPT_RANGE,
                                                     "\(start + requestedOffset)-\(start + byteRange.length - 1)"))
            if requestedOffset > 0 { sentIfRange = ifRange }
        } else if let rangeEnd {
            try check("RANGE", sa_easy_setopt_string(easy, CURLOPT_RANGE, "\(requestedOffset)-\(rangeEnd - 1)"))
            sentIfRange = ifRange
        } else if requestedOffset > 0 {
            try check("RANGE", sa_easy_setopt_string(easy, CURLOPT_RANGE, "\(requestedOffset)-"))
            sentIfRange = ifRange
        }
        if let sentIfRange { headers.append(Header(name: "If-Range", value: sentIfRange)) }
        if let ifChanged {
            if let etag = ifChanged.etag { headers.append(Header(name: "If-None-Match", value: etag)) }
            if let lastModified = ifChanged.lastModified { headers.append(Header(name: "If-Modified-Since", value: lastModified)) }
        }
        headers += try configureRequest(task.spec, explicitHeaders: headers)
        for header in headers {
            // Checked at parse time; checked again here, where it reaches the wire.
            guard !header.value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
                throw SetupError(what: "header \(header.name) has a line break in its value")
            }
            guard let appended = sa_curl_slist_append(headerList, "\(header.name): \(header.value)") else {
                throw SetupError(what: "out of memory for the request headers")
            }
            headerList = appended
        }
        if headerList != nil {
            try check("HTTPHEADER", sa_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList)))
        }

        let context = Unmanaged.passUnretained(self).toOpaque()
        try check("WRITEFUNCTION", sa_easy_set_write_callback(easy, { data, size, count, context in
            let attempt = Unmanaged<TransferAttempt>.fromOpaque(context!).takeUnretainedValue()
            return attempt.receiveBody(UnsafeRawPointer(data!), size * count)
        }, context))
        try check("HEADERFUNCTION", sa_easy_set_header_callback(easy, { data, size, count, context in
            let attempt = Unmanaged<TransferAttempt>.fromOpaque(context!).takeUnretainedValue()
            // Anything but the count makes curl stop the transfer.
            return attempt.receiveHeader(UnsafeRawBufferPointer(start: data, count: size * count)) ? size * count : 0
        }, context))
    }

    /// Why an attempt could not be set up.
    struct SetupError: Error, CustomStringConvertible {
        var what: String
        var description: String { what }
    }

    private func check(_ option: String, _ code: CURLcode) throws {
        guard code == CURLE_OK else {
            throw SetupError(what: "curl refused option CURLOPT_\(option): \(String(cString: sa_curl_easy_strerror(code)))")
        }
    }

    /// Method and body: a file sent as the whole body (PUT, or another
    /// method with a body), or as one part of a multipart form. Returns
    /// headers to add.
    private func configureRequest(_ spec: TaskSpec, explicitHeaders: [Header]) throws -> [Header] {
        let method = protocolRequest?.method ?? spec.effectiveMethod
        let hasHeader = { (name: String) in explicitHeaders.contains { $0.name.lowercased() == name } }
        body?.onRead = { [unowned self] position in self.sent(upTo: position) }
        if let field = spec.formField, let body {
            guard let form = sa_curl_mime_init(easy) else { throw SetupError(what: "out of memory for the form") }
            mime = form
            for extra in spec.form {
                let part = sa_curl_mime_addpart(form)
                try check("MIME name", sa_curl_mime_name(part, extra.name))
                try check("MIME data", sa_curl_mime_data(part, extra.value, -1))  // -1: CURL_ZERO_TERMINATED
            }
            guard let filePart = sa_curl_mime_addpart(form) else { throw SetupError(what: "out of memory for the form") }
            try body.attach(to: filePart, field: field)
            try check("MIMEPOST", sa_easy_setopt_pointer(easy, CURLOPT_MIMEPOST, UnsafeMutableRawPointer(form)))
            if method != "POST" { try check("CUSTOMREQUEST", sa_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)) }
            return []
        }
        if let body {
            try body.attach(to: easy)
            if method == "PUT" {
                try check("UPLOAD", sa_easy_setopt_long(easy, CURLOPT_UPLOAD, 1))
                try check("INFILESIZE_LARGE", sa_easy_setopt_off(easy, CURLOPT_INFILESIZE_LARGE, curl_off_t(body.size)))
                return []
            }
            try check("POST", sa_easy_setopt_long(easy, CURLOPT_POST, 1))
            try check("POSTFIELDSIZE_LARGE", sa_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.size)))
            if method != "POST" { try check("CUSTOMREQUEST", sa_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)) }
            // curl would call a POST body a urlencoded form; a file is bytes.
            return hasHeader("content-type") ? [] : [Header(name: "Content-Type", value: "application/octet-stream")]
        }
        if protocolRequest != nil, method == "POST" || method == "PATCH" {
            // An empty body, said so: a creation request sends `Content-Length: 0`.
            try check("POSTFIELDSIZE_LARGE", sa_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, 0))
            try check("COPYPOSTFIELDS", sa_easy_setopt_string(easy, CURLOPT_COPYPOSTFIELDS, ""))
            if method != "POST" { try check("CUSTOMREQUEST", sa_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)) }
        } else if method == "HEAD" {
            try check("NOBODY", sa_easy_setopt_long(easy, CURLOPT_NOBODY, 1))
        } else if method != "GET" {
            try check("CUSTOMREQUEST", sa_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method))
        }
        return []
    }

    // MARK: - Callbacks (run inside curl_multi_perform, on the loop thread)

    /// The request body advanced: an upload's progress (`didSendBodyData`).
    /// Not durable and not needed to be: an upload always starts over.
    private func sent(upTo position: Int64) {
        let now = FileSystem.monotonicMs
        lastActivityMs = now
        guard behaviour.countsSent, let size = body?.size else { return }
        if position == size || position - reportedSent >= settings.progressIntervalBytes
            || now - lastFlushMs >= settings.progressIntervalMs {
            guard position != reportedSent else { return }
            reportedSent = position
            lastFlushMs = now
            sink(taskID, .progressed(Progressed(bytes: position, total: size)))
        }
    }

    /// Returns false to stop the transfer (`stopReason` says why).
    private func receiveHeader(_ line: UnsafeRawBufferPointer) -> Bool {
        lastActivityMs = FileSystem.monotonicMs
        let header = HeaderLine(line)
        if let code = header.statusCode {
            let previousStatus = status
            status = code
            if (101..<200).contains(previousStatus) {
                informationalHeaders += responseHeaders.prefix(max(0, Self.keptResponseHeaders - informationalHeaders.count))
            }
            if (101..<200).contains(code), protocolRequest != nil {
                informationalCount += 1
                let sent = body?.position ?? 0
                if informationalCount > 16 + Int(sent >> 16) {
                    stopReason = .transient(reason: "the server sent \(informationalCount) informational answers and no final one "
                                            + "(\(Redaction.url(currentURL)))", retryAfterMs: nil, restartFromZero: false)
                    return false
                }
            }
            if (300..<400).contains(previousStatus) {
                var effective: UnsafePointer<CChar>?
                sa_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &effective)
                let to = effective.map { String(cString: $0) } ?? currentURL
                sink(taskID, .redirected(Redirected(from: currentURL, to: to, status: previousStatus)))
                currentURL = to
            }
            etag = nil
            lastModified = nil
            acceptsRanges = false
            contentRange = nil
            contentLength = nil
            conflictingLengths = false
            retryAfterMs = nil
            location = nil
            responseHeaders.removeAll()
            return true
        }
        if header.value(ifNamed: "set-cookie") != nil { sawSetCookie = true }
        if behaviour.recordsResponse, responseHeaders.count < Self.keptResponseHeaders, let pair = header.pair {
            responseHeaders.append(pair)
        }
        // Only these four become Strings; every other header is skipped in place.
        // Validators are echoed back in If-Range: keep only what fits a header.
        if let value = header.value(ifNamed: "etag") {
            etag = Self.usableValidator(value)
        } else if let value = header.value(ifNamed: "last-modified") {
            lastModified = Self.usableValidator(value)
        } else if let value = header.value(ifNamed: "retry-after") {
            if case .delayMs(let delay) = HTTPNumbers.retryAfter(value, nowMs: FileSystem.nowMs) { retryAfterMs = delay }
        } else if let value = header.value(ifNamed: "content-range") {
            contentRange = .some(HTTPNumbers.contentRange(value))
        } else if let value = header.value(ifNamed: "content-length") {
            let length = HTTPNumbers.contentLength(value)
            // Two different lengths: which one frames the body is the server's secret (RFC 9112 §6.3 calls it
            // an error), and curl kept the last, publishing half a file as whole.
            if case .some(let earlier) = contentLength, earlier != length {
                conflictingLengths = true
            }
            contentLength = .some(length)
        } else if let value = header.value(ifNamed: "accept-ranges") {
            acceptsRanges = value.lowercased().split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == "bytes" }
        } else if followsRedirectsItself, hopStatuses.contains(status), location == nil, let value = header.value(ifNamed: "location") {
            location = value.trimmingCharacters(in: .whitespaces)
        }
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
            stopReason = .transient(reason: "server sent more than the bytes its Content-Range names, up to \(answerEnd) "
                                    + "(\(Redaction.url(currentURL)))", retryAfterMs: nil, restartFromZero: true)
            return 0
        }
        if let stopAt, written + Int64(count) >= stopAt, fd >= 0 {
            // This connection's range ends here (another took the rest of it).
            let wanted = Int(max(0, stopAt - written))
            guard writeToPartial(data, wanted) else { return 0 }
            written += Int64(wanted)
            stopReason = .complete(bytes: written)
            return wanted == count ? count : 0
        }
        if let total, written + Int64(count) > total, behaviour.resumes {
            guard byteRange != nil, fd >= 0 else {
                stopReason = .transient(reason: "server sent more than the \(total) bytes it announced (\(Redaction.url(currentURL)))",
                                        retryAfterMs: nil, restartFromZero: true)
                return 0
            }
            // A slice answered with more than asked (the rest of the file): take the slice, leave the rest.
            guard writeToPartial(data, Int(total - written)) else { return 0 }
            written = total
            stopReason = .complete(bytes: total)
            return 0
        }
        if fd < 0 {
            if protocolRequest != nil, written + Int64(count) > Int64(Self.protocolAnswerLimit) {
                stopReason = .transient(reason: "the server's answer to \(protocolRequest?.method ?? "a request") is over "
                                        + "\(Self.protocolAnswerLimit >> 20) MiB (\(Redaction.url(currentURL)))",
                                        retryAfterMs: nil, restartFromZero: false)
                return 0
            }
            // A response nobody keeps is counted, not stored; a playlist is kept in memory.
            if behaviour.body == .memory {
                guard playlistBody.count + count <= Self.playlistLimit else {
                    stopReason = .permanent(reason: "the playlist at \(Redaction.url(currentURL)) is over \(Self.playlistLimit >> 20) MiB",
                                            code: "bad_playlist")
                    return 0
                }
                playlistBody += UnsafeRawBufferPointer(start: data, count: count)
            }
            written += Int64(count)
            lastActivityMs = FileSystem.monotonicMs
            return count
        }
        guard writeToPartial(data, count) else { return 0 }
        written += Int64(count)
        let now = FileSystem.monotonicMs
        lastActivityMs = now
        if !syncPending, written - durable >= settings.progressIntervalBytes || now - lastFlushMs >= settings.progressIntervalMs {
            // Durable in the background; claimed when the sync returns (`claim(upTo:)`).
            syncPending = true
            lastFlushMs = now
            requestSync(self, fd, written)
        }
        return count
    }

    /// The partial file made now that a body comes (nil: made, or not to be made).
    private func openPartialIfDue() -> AttemptOutcome? {
        guard let make = makePartial else { return nil }
        makePartial = nil
        do {
            fd = try make()
            return nil
        } catch let busy as DownloadRoot.Busy {
            return .permanent(reason: "cannot write: \(busy)", code: "dest_busy")
        } catch {
            return localFailure("open", (error as? SystemError)?.errno ?? EIO)
        }
    }

    /// Where this attempt's first write to the partial file went.
    private var firstWriteAt: Int64?

    /// Writes all `count` bytes to the partial file at `written` (the
    /// connections of a segmented download share one file); false, with
    /// the disk's reason as the stop reason, if it refused.
    private func writeToPartial(_ data: UnsafeRawPointer, _ count: Int) -> Bool {
        if let from = firstWriteAt, written > from {
            // Cut short under us (`truncate` by someone else), the file would get a hole of zeros where
            // vouched bytes were, and be published so: asked before every write after the first.
            var info = stat()
            if fstat(fd, &info) == 0, Int64(info.st_size) < written {
                stopReason = .transient(reason: "\(partPath ?? "the partial file") was cut short under the agent: it has "
                                        + "\(info.st_size) bytes, where \(written) were written", retryAfterMs: nil, restartFromZero: true)
                return false
            }
        } else if firstWriteAt == nil {
            firstWriteAt = written
        }
        do {
            try FileSystem.writeAll(fd, UnsafeRawBufferPointer(start: data, count: count), at: written, to: partPath ?? "")
            return true
        } catch {
            stopReason = localFailure("write", (error as? SystemError)?.errno ?? EIO)
            return false
        }
    }

    /// The disk under the partial file failed: the words name the file,
    /// the file system it lives on, and the error.
    private func localFailure(_ operation: String, _ error: Int32) -> AttemptOutcome {
        let failure = DiskFailure(operation: operation, path: partPath ?? "", errno: error)
        return .localFailure(reason: failure.description, code: failure.code)
    }

    /// Decides, on the first body byte, whether this response may be written
    /// to the partial file. Never writes a body that does not start where
    /// the file ends (SPEC §7: on any request, not only a resume).
    private func acceptResponse() -> AttemptOutcome? {
        if let hop = redirectToFollow() { return hop }
        if !isSuccess(status) {
            return httpFailure()
        }
        let shownURL = Redaction.url(currentURL)
        if conflictingLengths {
            return .transient(reason: "server sent two different Content-Length headers for \(shownURL)", retryAfterMs: nil,
                              restartFromZero: true)
        }
        if case .some(nil) = contentLength {
            return .transient(reason: "server sent an unreadable Content-Length for \(shownURL)", retryAfterMs: nil, restartFromZero: true)
        }
        // A byte-range child counts from the start of its slice.
        let sliceStart = byteRange?.offset ?? 0
        if byteRange != nil, status != 206 {
            return .permanent(reason: "server answered \(status), not 206, to the byte range of \(shownURL)", code: "range_ignored")
        }
        if rangeEnd != nil, status != 206 {
            return .rangeRefused(reason: changedFileWords() ?? "the server answered \(status), not 206, to a range of \(shownURL)")
        }
        if status == 206 {
            guard case .some(.some(let range)) = contentRange, let first = range.first else {
                let what = contentRange == nil ? "no Content-Range" : "an unreadable Content-Range"
                return .transient(reason: "server sent bytes from nowhere (\(what)) when asked for \(requestedOffset)",
                                  retryAfterMs: nil, restartFromZero: true)
            }
            guard first == sliceStart + requestedOffset else {
                return .transient(reason: "server sent bytes from \(first) when asked for \(sliceStart + requestedOffset)",
                                  retryAfterMs: nil, restartFromZero: true)
            }
            // A body of another length than its range is not that range: its bytes may sit anywhere
            // (a segment would take the first ones and publish them shifted).
            if let last = range.last {
                if let length = contentLength ?? nil, length != last - first + 1 {
                    return .transient(reason: "server sent \(length) bytes (Content-Length) for the \(last - first + 1) bytes "
                                      + "\(first)–\(last) of its Content-Range (\(shownURL))", retryAfterMs: nil, restartFromZero: true)
                }
                answerEnd = last + 1 - sliceStart
            }
            // If-Range asks the server to send the whole file if it changed; one that sends the rest
            // of another file anyway would have it joined to the bytes we hold (SPEC §7).
            if let sentIfRange, let words = RecoveryPlan.anotherFile(ifRange: sentIfRange, etag: etag, lastModified: lastModified) {
                if rangeEnd != nil { return .rangeRefused(reason: words) }
                return .transient(reason: words, retryAfterMs: nil, restartFromZero: true)
            }
            // Nor may a resume go on in a file of another size.
            if rangeEnd == nil, byteRange == nil, requestedOffset > 0, let known = total, let size = range.complete, size != known {
                return .transient(reason: "the file on the server changed size (\(known) bytes → \(size))", retryAfterMs: nil,
                                  restartFromZero: true)
            }
        } else if requestedOffset > 0 {
            // A full body: the server ignored Range, or If-Range found a changed file.
            if let failure = restart(reason: changedFileWords() ?? "the server ignored Range and sent the whole file") { return failure }
        }
        // Our own reading of Content-Length (absent: chunked, or up to the close).
        let length = (contentLength ?? nil).map { curl_off_t($0) } ?? -1
        if let byteRange {
            total = byteRange.length
        } else if case .some(.some(let range)) = contentRange, status == 206, let complete = range.complete {
            total = complete
        } else if length >= 0 {
            // curl parsed it; we still refuse sums that cannot be real.
            let (sum, overflow) = written.addingReportingOverflow(Int64(length))
            guard !overflow, sum <= HTTPNumbers.maximumLength else {
                return .transient(reason: "server announced an impossible Content-Length (\(length) bytes) for \(shownURL)",
                                  retryAfterMs: nil, restartFromZero: true)
            }
            total = sum
        } else if status != 206 {
            total = nil
        }
        return nil
    }

    /// Why a full answer came to a ranged request, if its validator says the file changed.
    private func changedFileWords() -> String? {
        guard let validator = etag ?? lastModified, let previousValidator, validator != previousValidator else { return nil }
        return RecoveryPlan.changedFileWords(from: previousValidator, to: validator)
    }

    /// The offset goes back to 0: truncate and say why, in the log.
    private func restart(reason: String) -> AttemptOutcome? {
        guard ftruncate(fd, 0) == 0, lseek(fd, 0, SEEK_SET) == 0 else { return localFailure("truncate", errno) }
        written = 0
        durable = 0
        validatorsLogged = true
        sink(taskID, .progressed(Progressed(bytes: 0, total: nil, etag: etag, lastModified: lastModified,
                                            restartReason: reason)))
        return nil
    }

    /// A request body that did not reach the server whole and as one
    /// version of the file: written to while it was sent (the server holds
    /// a mix), or answered before all of it was sent. Sent again. (A chunk
    /// of a resumable upload is checked by its protocol instead.)
    private func bodyNotSentWhole() -> AttemptOutcome? {
        guard let body, protocolRequest == nil else { return nil }
        if body.changedSinceOpened {
            return .transient(reason: "body_file \(body.path) was modified while it was being sent", retryAfterMs: nil,
                              restartFromZero: false)
        }
        // (After a redirect curl followed, the answer is to another request, perhaps a GET.)
        var redirects = 0
        if body.position < body.size, sa_easy_getinfo_long(easy, CURLINFO_REDIRECT_COUNT, &redirects) == CURLE_OK, redirects == 0 {
            return .transient(reason: "the server answered \(status) after \(body.position) of the \(body.size) bytes of body_file "
                                  + "\(body.path); the rest was never sent", retryAfterMs: nil, restartFromZero: false)
        }
        return nil
    }

    /// With curl not following: a 3xx with a Location is a hop for the agent.
    private func redirectToFollow() -> AttemptOutcome? {
        guard followsRedirectsItself, hopStatuses.contains(status) else { return nil }
        var target: UnsafePointer<CChar>?
        sa_easy_getinfo_string(easy, CURLINFO_REDIRECT_URL, &target)
        if let target { return .redirect(to: String(cString: target), status: status) }
        // curl works out no redirect URL for an upload (CURLOPT_UPLOAD), nor before the transfer
        // is done (a 3xx with a body is looked at on its first byte): its Location, resolved here.
        guard let location, let resolved = URL(string: location, relativeTo: URL(string: currentURL))?.absoluteString else { return nil }
        return .redirect(to: resolved, status: status)
    }

    private func httpFailure() -> AttemptOutcome {
        let words = HTTPStatus.phrase(status).map { " \($0)" } ?? ""
        let reason = "server answered \(status)\(words) for \(Redaction.url(currentURL))"
        if status == 408 || status == 429 || status >= 500 {
            return .transient(reason: reason, retryAfterMs: retryAfterMs, restartFromZero: false)
        }
        if status == 416 {
            // The range starts at or past the end: if what we hold is exactly
            // the server's size, the file is complete (a restart came after
            // the last byte); verification decides the rest.
            let claimed = contentRange??.complete
            let size = claimed ?? total
            // Not complete if the server said another size before: our bytes are then the start of
            // another file, and its end says nothing of them. (Not its validators: a 416's may be its
            // error page's.) A byte-range child's `total` is its slice, not the file.
            if rangeEnd == nil, byteRange == nil, requestedOffset > 0, let claimed, let total, claimed != total {
                return .transient(reason: "server answered 416 for byte \(requestedOffset) saying its file has \(claimed) bytes, "
                                  + "where it said \(total) before: the file changed", retryAfterMs: nil, restartFromZero: true)
            }
            // (Not for one range of a segmented download: its bytes are not the file's end.)
            if requestedOffset > 0, size == requestedOffset, rangeEnd == nil { return .complete(bytes: requestedOffset) }
            let sizeWords = size.map { "its file has \($0) bytes" } ?? "it did not say its size"
            // A playlist's byte range past the end of its file: no restart or retry brings it.
            // (Its size from the answer's Content-Range: `total` is the slice's length.)
            if let byteRange, let size = contentRange??.complete, (byteRange.offset ?? 0) + requestedOffset >= size {
                return .permanent(reason: "the playlist's byte range starts at byte \((byteRange.offset ?? 0) + requestedOffset) of "
                                  + "\(Redaction.url(currentURL)), whose file has \(size) bytes", code: "http_416")
            }
            return .transient(reason: "server answered 416 for byte \(requestedOffset) and \(sizeWords)",
                              retryAfterMs: nil, restartFromZero: true)
        }
        return .permanent(reason: reason, code: "http_\(status)")
    }

    private func isSuccess(_ status: Int) -> Bool { behaviour.accepts.contains(status) }

    /// Its own cap: the job's `max_speed`, else the config's.
    var ownSpeedCap: Int64? { speedCapOfJob ?? speedCapOfConfig }

    /// The cap curl holds it to from now on (its share of
    /// `max_overall_speed`; nil: its own cap, or none). curl reads the
    /// limit afresh as it measures, so a running transfer follows.
    func limitSpeed(to cap: Int64?) -> Bool {
        let value = curl_off_t(cap ?? 0)
        return sa_easy_setopt_off(easy, CURLOPT_MAX_RECV_SPEED_LARGE, value) == CURLE_OK
            && sa_easy_setopt_off(easy, CURLOPT_MAX_SEND_SPEED_LARGE, value) == CURLE_OK
    }

    /// fdatasync, then claim the bytes in the log. A failed sync claims
    /// nothing and says why.
    @discardableResult
    func flush() -> AttemptOutcome? {
        guard fd >= 0, isNews(upTo: written) else { return nil }
        while fdatasync(fd) != 0 {
            if errno != EINTR { return localFailure("flush", errno) }
        }
        claim(upTo: written)
        return nil
    }

    /// The validators of the response, to guard further ranges of the same file.
    var responseValidators: (etag: String?, lastModified: String?) { (etag, lastModified) }
    /// The resource's size as the accepted response told it.
    var resourceSize: Int64? { total }
    /// Where the bytes of an accepted 206 end (exclusive), as its Content-Range says.
    var answeredRangeEnd: Int64? {
        guard status == 206, case .some(.some(let range)) = contentRange, let last = range.last else { return nil }
        return last + 1
    }
    var httpStatus: Int { status }

    /// The partial file, for the agent's DataSyncer.
    var partFileDescriptor: Int32 { fd }

    /// What `finished` records for an upload or data task: bytes sent for an
    /// upload, bytes received otherwise.
    var resultBytes: Int64 { behaviour.countsSent ? body?.position ?? 0 : written }

    /// Whether a complete response still has to be made durable and published.
    var keepsBody: Bool { fd >= 0 || makePartial != nil }

    /// Whether claiming up to `offset` tells the log something: bytes past
    /// the durable offset, or validators it has not seen. (An attempt that
    /// failed to connect has neither: 40,000 of them wrote 40,000 `progressed`
    /// events of 0 bytes, each after an fdatasync.)
    private func isNews(upTo offset: Int64) -> Bool {
        offset > durable || (!validatorsLogged && (etag != nil || lastModified != nil))
    }

    /// After the DataSyncer flushed this file: claim every byte written.
    func claimSynced() {
        claim(upTo: written)
    }

    /// A progress sync returned: bytes before `offset` are durable.
    func claim(upTo offset: Int64) {
        syncPending = false
        guard isNews(upTo: offset), offset <= written else { return }
        durable = offset
        lastFlushMs = FileSystem.monotonicMs
        var progress = Progressed(bytes: durable, total: total)
        if !validatorsLogged {
            progress.etag = etag
            progress.lastModified = lastModified
            validatorsLogged = true
        }
        sink(taskID, .progressed(progress))
    }

    /// A progress sync failed: nothing is claimed, and the attempt ends
    /// with the disk's error (the agent stops it).
    func syncFailed(errno error: Int32) -> AttemptOutcome {
        syncPending = false
        return localFailure("flush", error)
    }

    /// Bytes written a progress interval ago and not yet durable, with no
    /// write since to ask for their sync (a slow server sends in bursts):
    /// it starts now. Asked by the loop.
    func syncIfOverdue(nowMs: Int64) {
        guard !syncPending, fd >= 0, written > durable, nowMs - lastFlushMs >= settings.progressIntervalMs else { return }
        syncPending = true
        lastFlushMs = nowMs
        requestSync(self, fd, written)
    }

    /// `idle_timeout` (NSURLSession's timeoutIntervalForRequest): no byte for
    /// that long. Checked by the loop, because curl's low-speed check averages
    /// over several seconds and fires late.
    func isStalled(nowMs: Int64) -> Bool {
        nowMs - lastActivityMs >= Int64(settings.idleTimeout) * 1000
    }

    func stalledOutcome() -> AttemptOutcome {
        failedOnTheWire = true
        if let failure = flush() { return failure }
        return .transient(reason: "no data for \(settings.idleTimeout) s (idle_timeout) from \(Redaction.url(currentURL))",
                          retryAfterMs: nil, restartFromZero: false)
    }

    /// After curl reports the transfer done: what happened, in our terms.
    func outcome(_ result: CURLcode) -> AttemptOutcome {
        if let stopReason {
            // Bytes written before a refusal or a local error are still worth keeping.
            if case .transient(_, _, false) = stopReason, let failure = flush() { return failure }
            return stopReason
        }
        if result == CURLE_OK {
            if status == 304, ifChanged != nil { return .notModified(etag: etag) }
            if let hop = redirectToFollow() { return hop }
            if !isSuccess(status) { return httpFailure() }
            if let incomplete = bodyNotSentWhole() { return incomplete }
            if !bodyStarted, let refusal = acceptResponse() { return refusal }
            // An empty body is a file too: made now, empty.
            if let failure = openPartialIfDue() { return failure }
            // No fdatasync here: the agent's DataSyncer makes the complete body
            // durable off the loop, then calls `claimSynced`.
            if behaviour.resumes, let end = stopAt ?? total, written != end {
                if let failure = flush() { return failure }
                return .transient(reason: "connection closed at byte \(written) of \(end)",
                                  retryAfterMs: nil, restartFromZero: false)
            }
            return .complete(bytes: resultBytes)
        }
        if let failure = flush() { return failure }
        if let body, body.shrank {
            return .permanent(reason: "body_file \(body.path) shrank below its \(body.size) bytes while being sent", code: "body_changed")
        }
        // The server answered with an error while we were still sending (an
        // upload refused early): its answer says more than the broken send.
        if status >= 400 { return httpFailure() }
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
        case CURLE_UNSUPPORTED_PROTOCOL where (300..<400).contains(status):
            return .permanent(reason: "refused a redirect to a scheme other than http or https (\(Redaction.url(currentURL)))",
                              code: "curl_\(result.rawValue)")
        case CURLE_UNSUPPORTED_PROTOCOL:
            // No redirect: what came back was not HTTP (a bad status line, HTTP/0.9, stray bytes).
            return .transient(reason: "the answer from \(Redaction.url(currentURL)) is not HTTP (\(words))", retryAfterMs: nil,
                              restartFromZero: false)
        case CURLE_OUT_OF_MEMORY where !bodyStarted, CURLcode(rawValue: 100) where !bodyStarted:
            // curl's header buffer stops at 100 KB: before 8.6 it says only "Out of memory", from it CURLE_TOO_LARGE (100).
            return .transient(reason: "a response header from \(Redaction.url(currentURL)) is longer than curl accepts "
                              + "(100 KB; curl says: \(words))", retryAfterMs: nil, restartFromZero: false)
        case CURLE_URL_MALFORMAT, CURLE_TOO_MANY_REDIRECTS, CURLE_PEER_FAILED_VERIFICATION,
             CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE, CURLE_FILESIZE_EXCEEDED, CURLE_LOGIN_DENIED,
             CURLE_REMOTE_ACCESS_DENIED:
            return .permanent(reason: reason, code: "curl_\(result.rawValue)")
        default:
            return .transient(reason: reason, retryAfterMs: nil, restartFromZero: false)
        }
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

extension TransferAttempt {
    /// curl's timing and connection info for this attempt (NSURLSessionTaskMetrics).
    var metrics: AttemptMetrics {
        func micros(_ info: CURLINFO) -> Int64 {
            var value: curl_off_t = 0
            sa_easy_getinfo_off(easy, info, &value)
            return Int64(value)
        }
        func number(_ info: CURLINFO) -> Int {
            var value = 0
            sa_easy_getinfo_long(easy, info, &value)
            return value
        }
        var address: UnsafePointer<CChar>?
        sa_easy_getinfo_string(easy, CURLINFO_PRIMARY_IP, &address)
        let versions = [CURL_HTTP_VERSION_1_0: "1.0", CURL_HTTP_VERSION_1_1: "1.1",
                        CURL_HTTP_VERSION_2_0: "2", CURL_HTTP_VERSION_3: "3"]
        let status = number(CURLINFO_RESPONSE_CODE)
        let remote = address.map { String(cString: $0) }
        return AttemptMetrics(
            dnsUs: micros(CURLINFO_NAMELOOKUP_TIME_T), connectUs: micros(CURLINFO_CONNECT_TIME_T),
            tlsUs: micros(CURLINFO_APPCONNECT_TIME_T), ttfbUs: micros(CURLINFO_STARTTRANSFER_TIME_T),
            totalUs: micros(CURLINFO_TOTAL_TIME_T),
            httpVersion: status == 0 ? nil : versions[number(CURLINFO_HTTP_VERSION)],
            status: status,
            remoteAddress: remote?.isEmpty == false ? remote : nil,
            remotePort: number(CURLINFO_PRIMARY_PORT),
            // Connections curl had to open for this attempt: none means the cache served it.
            reused: status != 0 && number(CURLINFO_NUM_CONNECTS) == 0,
            redirects: number(CURLINFO_REDIRECT_COUNT),
            bytesReceived: micros(CURLINFO_SIZE_DOWNLOAD_T),
            bytesSent: micros(CURLINFO_SIZE_UPLOAD_T))
    }
}

/// Settings every attempt shares: config.toml with its defaults.
struct TransferSettings {
    var connectTimeout: Int
    var idleTimeout: Int
    var maxRedirects: Int
    var maxSpeed: Int64?
    var maxOverallSpeed: Int64?
    /// How many transfers may share `maxOverallSpeed` at most.
    var maxActive: Int
    var userAgent: String
    var proxy: String?
    var caFile: String?
    var headers: [Header]
    var progressIntervalMs: Int64
    var progressIntervalBytes: Int64
    var totalTimeout: Int

    init(config: AgentConfig) {
        connectTimeout = config.connectTimeout
        idleTimeout = config.idleTimeout
        maxRedirects = config.maxRedirects
        maxOverallSpeed = config.maxOverallSpeed
        maxActive = config.maxActive
        maxSpeed = config.maxSpeed
        userAgent = config.userAgent ?? "syncagent/\(SyncAgentVersion.current)"
        proxy = config.proxy
        caFile = config.caFile
        headers = config.headers
        progressIntervalMs = Int64(config.progressIntervalMs)
        progressIntervalBytes = config.progressIntervalBytes
        totalTimeout = config.totalTimeout
    }
}

enum HTTPStatus {
    static func phrase(_ status: Int) -> String? {
        [400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
         408: "Request Timeout", 410: "Gone", 413: "Content Too Large", 416: "Range Not Satisfiable",
         429: "Too Many Requests",
         500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
         504: "Gateway Timeout"][status]
    }
}

public enum SyncAgentVersion {
    public static let current = "0.1.0"
}

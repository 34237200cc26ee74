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
}

/// One attempt of a task: a curl easy handle that sends the request (with
/// its body streamed from `body_file`, if any) and streams the response
/// body into `DEST.part` from `offset` — or nowhere, for tasks that keep no
/// body. Received progress is made durable (fdatasync) before it is
/// reported (SPEC §6 rule 2); an upload reports the bytes it has sent.
final class TransferAttempt {
    typealias Sink = (_ task: String, _ body: EventBody) -> Void

    let taskID: String
    let kind: TransferKind
    let easy: UnsafeMutableRawPointer
    let partPath: String?
    let requestedOffset: Int64
    /// The partial file, or -1 when the response body is not kept.
    private let fd: Int32
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
    private static let keptResponseHeaders = 100

    /// Bytes in the partial file.
    private(set) var written: Int64
    /// Bytes the log vouches for.
    private(set) var durable: Int64
    private var lastFlushMs = FileSystem.monotonicMs
    /// When the server last sent anything (headers or body): the stall detector's clock.
    private(set) var lastActivityMs = FileSystem.monotonicMs

    // What the current response said.
    private var status = 0
    private var etag: String?
    private var lastModified: String?
    private var contentRangeStart: Int64?
    private var contentRangeTotal: Int64?
    private var retryAfterMs: Int64?
    private var total: Int64?
    private var previousValidator: String?
    private var currentURL: String
    private var bodyStarted = false
    /// The last upload progress logged.
    private var reportedSent: Int64 = 0
    private var validatorsLogged = false
    /// Set when we stopped curl on purpose; says why.
    private var stopReason: AttemptOutcome?

    /// Hands a progress sync to the agent's DataSyncer: (attempt, descriptor, offset to claim when durable).
    typealias SyncRequest = (_ attempt: TransferAttempt, _ descriptor: Int32, _ offset: Int64) -> Void

    /// Distinguishes attempts of one task, so a late sync of an earlier one is never claimed.
    let serial: UInt64
    private static var nextSerial: UInt64 = 0
    private let requestSync: SyncRequest
    /// A progress sync is in flight: do not queue another.
    private var syncPending = false

    /// - Parameter ifRange: the validator guarding a resume from `offset` (the agent's decision).
    init(task: TaskState, offset: Int64, ifRange: String?, deadlineMs: Int64, settings: TransferSettings,
         cookies: CookieJar?, sink: @escaping Sink, requestSync: @escaping SyncRequest) throws {
        self.requestSync = requestSync
        Self.nextSerial += 1
        serial = Self.nextSerial
        taskID = task.id
        kind = task.spec.kind
        partPath = task.partPath
        requestedOffset = offset
        written = offset
        durable = offset
        currentURL = task.currentURL
        total = task.spec.isResumable ? task.total : nil
        previousValidator = task.etag ?? task.lastModified
        self.deadlineMs = deadlineMs
        self.settings = settings
        self.sink = sink

        body = try task.spec.bodyFile.map { try RequestBody(path: $0) }
        if let part = task.partPath {
            try FileSystem.makeDirectory((part as NSString).deletingLastPathComponent, mode: 0o755)
            // O_NOFOLLOW: a symlink planted at DEST.part must not redirect our writes.
            let file = try syscall("open \(part)") { open(part, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644) }
            // Never trust bytes beyond what the log vouches for.
            guard ftruncate(file, off_t(offset)) == 0, lseek(file, off_t(offset), SEEK_SET) == off_t(offset) else {
                let error = SystemError(operation: "truncate \(part) to \(offset)", errno: errno)
                close(file)
                throw error
            }
            fd = file
        } else {
            fd = -1
        }
        guard let handle = curl_easy_init() else {
            if fd >= 0 { close(fd) }
            throw SystemError(operation: "curl_easy_init", errno: ENOMEM)
        }
        easy = handle
        configure(task: task, ifRange: ifRange)
        cookies?.use(in: easy)
    }

    deinit {
        curl_easy_cleanup(easy)
        curl_mime_free(mime)
        curl_slist_free_all(headerList)
        if fd >= 0 { close(fd) }
    }

    private func configure(task: TaskState, ifRange: String?) {
        sa_easy_setopt_string(easy, CURLOPT_URL, task.currentURL)
        sa_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        sa_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 1)
        sa_easy_setopt_long(easy, CURLOPT_MAXREDIRS, settings.maxRedirects)
        // SPEC §7: HTTP and HTTPS only, for the job URL and every redirect.
        sa_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https")
        sa_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        sa_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT, settings.connectTimeout)
        sa_easy_setopt_string(easy, CURLOPT_USERAGENT, settings.userAgent)
        if let proxy = settings.proxy { sa_easy_setopt_string(easy, CURLOPT_PROXY, proxy) }
        if let caFile = settings.caFile { sa_easy_setopt_string(easy, CURLOPT_CAINFO, caFile) }
        // Large reads keep syscalls and callbacks few on fast links. A rate
        // limit needs small ones: curl reads up to 100 buffers per perform
        // call before it checks the rate, so a big buffer overshoots it.
        var bufferSize = 512 * 1024
        if let speed = task.spec.maxSpeed ?? settings.maxSpeed {
            sa_easy_setopt_off(easy, CURLOPT_MAX_RECV_SPEED_LARGE, curl_off_t(speed))
            sa_easy_setopt_off(easy, CURLOPT_MAX_SEND_SPEED_LARGE, curl_off_t(speed))
            bufferSize = Int(min(max(speed / 800, 1024), Int64(bufferSize)))
        }
        sa_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, bufferSize)
        sa_easy_setopt_long(easy, CURLOPT_UPLOAD_BUFFERSIZE, max(bufferSize, 16 * 1024))

        var headers = settings.headers
        for header in task.spec.headers {
            headers.removeAll { $0.name.lowercased() == header.name.lowercased() }
            headers.append(header)
        }
        if requestedOffset > 0 {
            sa_easy_setopt_string(easy, CURLOPT_RANGE, "\(requestedOffset)-")
            if let ifRange { headers.append(Header(name: "If-Range", value: ifRange)) }
        }
        headers += configureRequest(task.spec, explicitHeaders: headers)
        for header in headers {
            headerList = curl_slist_append(headerList, "\(header.name): \(header.value)")
        }
        if headerList != nil { sa_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList)) }

        let context = Unmanaged.passUnretained(self).toOpaque()
        sa_easy_set_write_callback(easy, { data, size, count, context in
            let attempt = Unmanaged<TransferAttempt>.fromOpaque(context!).takeUnretainedValue()
            return attempt.receiveBody(UnsafeRawPointer(data!), size * count)
        }, context)
        sa_easy_set_header_callback(easy, { data, size, count, context in
            let attempt = Unmanaged<TransferAttempt>.fromOpaque(context!).takeUnretainedValue()
            attempt.receiveHeader(UnsafeRawBufferPointer(start: data, count: size * count))
            return size * count
        }, context)
    }

    /// Method and body: a file sent as the whole body (PUT, or another
    /// method with a body), or as one part of a multipart form. Returns
    /// headers to add.
    private func configureRequest(_ spec: TaskSpec, explicitHeaders: [Header]) -> [Header] {
        let method = spec.effectiveMethod
        let hasHeader = { (name: String) in explicitHeaders.contains { $0.name.lowercased() == name } }
        body?.onRead = { [unowned self] position in self.sent(upTo: position) }
        if let field = spec.formField, let body {
            let form = curl_mime_init(easy)
            for extra in spec.form {
                let part = curl_mime_addpart(form)
                curl_mime_name(part, extra.name)
                curl_mime_data(part, extra.value, -1)  // -1: CURL_ZERO_TERMINATED
            }
            body.attach(to: curl_mime_addpart(form)!, field: field)
            mime = form
            sa_easy_setopt_pointer(easy, CURLOPT_MIMEPOST, UnsafeMutableRawPointer(form))
            if method != "POST" { sa_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method) }
            return []
        }
        if let body {
            body.attach(to: easy)
            if method == "PUT" {
                sa_easy_setopt_long(easy, CURLOPT_UPLOAD, 1)
                sa_easy_setopt_off(easy, CURLOPT_INFILESIZE_LARGE, curl_off_t(body.size))
                return []
            }
            sa_easy_setopt_long(easy, CURLOPT_POST, 1)
            sa_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.size))
            if method != "POST" { sa_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method) }
            // curl would call a POST body a urlencoded form; a file is bytes.
            return hasHeader("content-type") ? [] : [Header(name: "Content-Type", value: "application/octet-stream")]
        }
        if method == "HEAD" {
            sa_easy_setopt_long(easy, CURLOPT_NOBODY, 1)
        } else if method != "GET" {
            sa_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)
        }
        return []
    }

    // MARK: - Callbacks (run inside curl_multi_perform, on the loop thread)

    /// The request body advanced: an upload's progress (`didSendBodyData`).
    /// Not durable and not needed to be: an upload always starts over.
    private func sent(upTo position: Int64) {
        let now = FileSystem.monotonicMs
        lastActivityMs = now
        guard kind == .upload, let size = body?.size else { return }
        if position == size || position - reportedSent >= settings.progressIntervalBytes
            || now - lastFlushMs >= settings.progressIntervalMs {
            guard position != reportedSent else { return }
            reportedSent = position
            lastFlushMs = now
            sink(taskID, .progressed(Progressed(bytes: position, total: size)))
        }
    }

    private func receiveHeader(_ line: UnsafeRawBufferPointer) {
        lastActivityMs = FileSystem.monotonicMs
        let header = HeaderLine(line)
        if let code = header.statusCode {
            let previousStatus = status
            status = code
            if (300..<400).contains(previousStatus) {
                var effective: UnsafePointer<CChar>?
                sa_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &effective)
                let to = effective.map { String(cString: $0) } ?? currentURL
                sink(taskID, .redirected(Redirected(from: currentURL, to: to, status: previousStatus)))
                currentURL = to
            }
            etag = nil
            lastModified = nil
            contentRangeStart = nil
            contentRangeTotal = nil
            retryAfterMs = nil
            responseHeaders.removeAll()
            return
        }
        if header.value(ifNamed: "set-cookie") != nil { sawSetCookie = true }
        if kind != .download, responseHeaders.count < Self.keptResponseHeaders, let pair = header.pair {
            responseHeaders.append(pair)
        }
        // Only these four become Strings; every other header is skipped in place.
        if let value = header.value(ifNamed: "etag") {
            etag = value
        } else if let value = header.value(ifNamed: "last-modified") {
            lastModified = value
        } else if let value = header.value(ifNamed: "retry-after") {
            retryAfterMs = Int64(value).map { $0 * 1000 }
        } else if let value = header.value(ifNamed: "content-range") {
            // bytes START-END/TOTAL, or bytes */TOTAL
            let spec = value.drop { $0 != " " }.trimmingCharacters(in: .whitespaces)
            let parts = spec.split(separator: "/")
            contentRangeStart = parts.first.flatMap { Int64($0.split(separator: "-").first ?? "") }
            contentRangeTotal = parts.count > 1 ? Int64(parts[1]) : nil
        }
    }

    /// Returns `count` to go on; anything else makes curl stop with a write error.
    private func receiveBody(_ data: UnsafeRawPointer, _ count: Int) -> Int {
        if !bodyStarted {
            bodyStarted = true
            if let refusal = acceptResponse() {
                stopReason = refusal
                return 0
            }
        }
        if fd < 0 {
            // A response nobody keeps: counted, not stored.
            written += Int64(count)
            lastActivityMs = FileSystem.monotonicMs
            return count
        }
        var offset = 0
        while offset < count {
            let result = write(fd, data + offset, count - offset)
            if result < 0 {
                if errno == EINTR { continue }
                stopReason = .permanent(reason: "cannot write \(partPath ?? ""): \(String(cString: strerror(errno)))", code: "write_error")
                return 0
            }
            offset += result
        }
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

    /// Decides, on the first body byte, whether this response may be written
    /// to the partial file. Never appends a mismatched body (SPEC §7).
    private func acceptResponse() -> AttemptOutcome? {
        if !isSuccess(status) {
            return httpFailure()
        }
        var length: curl_off_t = -1
        sa_easy_getinfo_off(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length)
        if requestedOffset > 0 {
            if status == 206 {
                guard contentRangeStart == requestedOffset else {
                    let start = contentRangeStart.map(String.init) ?? "nowhere (no Content-Range)"
                    return .transient(reason: "server sent bytes from \(start) when asked for \(requestedOffset)",
                                      retryAfterMs: nil, restartFromZero: true)
                }
            } else {
                // A full body: the server ignored Range, or If-Range found a changed file.
                let validator = etag ?? lastModified
                let reason = validator != nil && previousValidator != nil && validator != previousValidator
                    ? "the file changed on the server (validator \(previousValidator!) → \(validator!))"
                    : "the server ignored Range and sent the whole file"
                restart(reason: reason)
            }
        }
        if let full = contentRangeTotal {
            total = full
        } else if length >= 0 {
            total = written + Int64(length)
        }
        return nil
    }

    /// The offset goes back to 0: truncate and say why, in the log.
    private func restart(reason: String) {
        ftruncate(fd, 0)
        lseek(fd, 0, SEEK_SET)
        written = 0
        durable = 0
        validatorsLogged = true
        sink(taskID, .progressed(Progressed(bytes: 0, total: nil, etag: etag, lastModified: lastModified,
                                            restartReason: reason)))
    }

    private func httpFailure() -> AttemptOutcome {
        let words = HTTPStatus.phrase(status).map { " \($0)" } ?? ""
        let reason = "server answered \(status)\(words) for \(currentURL)"
        if status == 408 || status == 429 || status >= 500 {
            return .transient(reason: reason, retryAfterMs: retryAfterMs, restartFromZero: false)
        }
        if status == 416 {
            // The range starts at or past the end: if what we hold is exactly
            // the server's size, the file is complete (a restart came after
            // the last byte); verification decides the rest.
            let size = contentRangeTotal ?? total
            if requestedOffset > 0, size == requestedOffset { return .complete(bytes: requestedOffset) }
            let sizeWords = size.map { "its file has \($0) bytes" } ?? "it did not say its size"
            return .transient(reason: "server answered 416 for byte \(requestedOffset) and \(sizeWords)",
                              retryAfterMs: nil, restartFromZero: true)
        }
        return .permanent(reason: reason, code: "http_\(status)")
    }

    /// A download needs a 2xx; a data task's answer may also be a 3xx that
    /// was not followed (304 Not Modified is a result); an upload needs a 2xx.
    private func isSuccess(_ status: Int) -> Bool {
        kind == .data ? (200..<400).contains(status) : (200..<300).contains(status)
    }

    /// fdatasync, then claim the bytes in the log.
    func flush() {
        guard fd >= 0, written > durable || !validatorsLogged else { return }
        fdatasync(fd)
        claim(upTo: written)
    }

    /// The partial file, for the agent's DataSyncer.
    var partFileDescriptor: Int32 { fd }

    /// What `finished` records for an upload or data task: bytes sent for an
    /// upload, bytes received otherwise.
    var resultBytes: Int64 { kind == .upload ? body?.position ?? 0 : written }

    /// Whether a complete response still has to be made durable and published.
    var keepsBody: Bool { fd >= 0 }

    /// After the DataSyncer flushed this file: claim every byte written.
    func claimSynced() {
        claim(upTo: written)
    }

    /// A progress sync returned: bytes before `offset` are durable.
    func claim(upTo offset: Int64) {
        syncPending = false
        guard offset > durable || !validatorsLogged, offset <= written else { return }
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

    /// `idle_timeout` (NSURLSession's timeoutIntervalForRequest): no byte for
    /// that long. Checked by the loop, because curl's low-speed check averages
    /// over several seconds and fires late.
    func isStalled(nowMs: Int64) -> Bool {
        nowMs - lastActivityMs >= Int64(settings.idleTimeout) * 1000
    }

    func stalledOutcome() -> AttemptOutcome {
        flush()
        return .transient(reason: "no data for \(settings.idleTimeout) s (idle_timeout) from \(currentURL)",
                          retryAfterMs: nil, restartFromZero: false)
    }

    /// After curl reports the transfer done: what happened, in our terms.
    func outcome(_ result: CURLcode) -> AttemptOutcome {
        if let stopReason { return stopReason }
        if result == CURLE_OK {
            if !isSuccess(status) { return httpFailure() }
            if !bodyStarted, let refusal = acceptResponse() { return refusal }
            // No fdatasync here: the agent's DataSyncer makes the complete body
            // durable off the loop, then calls `claimSynced`.
            if kind == .download, let total, written != total {
                flush()
                return .transient(reason: "connection closed at byte \(written) of \(total)",
                                  retryAfterMs: nil, restartFromZero: false)
            }
            return .complete(bytes: kind == .upload ? resultBytes : written)
        }
        flush()
        // The server answered with an error while we were still sending (an
        // upload refused early): its answer says more than the broken send.
        if status >= 400 { return httpFailure() }
        let words = String(cString: curl_easy_strerror(result))
        let reason = "\(words) (\(currentURL))"
        switch result {
        case CURLE_UNSUPPORTED_PROTOCOL:
            return .permanent(reason: "refused a redirect to a scheme other than http or https (\(currentURL))", code: "curl_\(result.rawValue)")
        case CURLE_URL_MALFORMAT, CURLE_TOO_MANY_REDIRECTS, CURLE_PEER_FAILED_VERIFICATION,
             CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE, CURLE_FILESIZE_EXCEEDED, CURLE_LOGIN_DENIED,
             CURLE_REMOTE_ACCESS_DENIED:
            return .permanent(reason: reason, code: "curl_\(result.rawValue)")
        default:
            return .transient(reason: reason, retryAfterMs: nil, restartFromZero: false)
        }
    }
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

/// One header line as curl hands it over, read in place.
struct HeaderLine {
    let bytes: UnsafeRawBufferPointer

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// `HTTP/1.1 206 Partial Content` → 206.
    var statusCode: Int? {
        guard bytes.count >= 12, bytes[0] == UInt8(ascii: "H"), bytes[1] == UInt8(ascii: "T"),
              bytes[2] == UInt8(ascii: "T"), bytes[3] == UInt8(ascii: "P"), bytes[4] == UInt8(ascii: "/"),
              let space = bytes.firstIndex(of: UInt8(ascii: " ")), space + 3 < bytes.count else { return nil }
        var code = 0
        for index in space + 1...space + 3 {
            let digit = Int(bytes[index]) - 0x30
            guard (0...9).contains(digit) else { return nil }
            code = code * 10 + digit
        }
        return code
    }

    /// `name: value` as a header, or nil for the status line and the blank end.
    var pair: Header? {
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0 else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        let name = String(text.prefix(colon))
        let value = text.dropFirst(colon + 1).trimmingCharacters(in: .whitespacesAndNewlines)
        return Header(name: name, value: value)
    }

    /// The trimmed value if this line is `name: value` (name matched ignoring case).
    func value(ifNamed lowercaseName: StaticString) -> String? {
        let count = lowercaseName.utf8CodeUnitCount
        guard bytes.count > count, bytes[count] == UInt8(ascii: ":") else { return nil }
        for index in 0..<count where bytes[index] | 0x20 != lowercaseName.utf8Start[index] { return nil }
        var start = count + 1
        var end = bytes.count
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        while start < end, isSpace(bytes[start]) { start += 1 }
        while end > start, isSpace(bytes[end - 1]) { end -= 1 }
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
    }
}

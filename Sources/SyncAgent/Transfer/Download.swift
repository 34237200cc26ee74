import CCurlShims
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// How one attempt ended, before verification and publishing.
enum AttemptOutcome: Equatable {
    /// Every byte of the response is flushed to the partial file.
    case complete(bytes: Int64)
    /// Worth another attempt; `restartFromZero` when the partial file cannot be resumed.
    case transient(reason: String, retryAfterMs: Int64?, restartFromZero: Bool)
    case permanent(reason: String, code: String)
}

/// One attempt of a download task: a curl easy handle streaming the body
/// into `DEST.part` from `offset`, making progress durable (fdatasync)
/// before reporting it (SPEC §6 rule 2).
final class DownloadAttempt {
    typealias Sink = (_ task: String, _ body: EventBody) -> Void

    let taskID: String
    let easy: UnsafeMutableRawPointer
    let partPath: String
    let requestedOffset: Int64
    private let fd: Int32
    private let sink: Sink
    private let settings: TransferSettings
    private var headerList: UnsafeMutablePointer<curl_slist>?

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
    private var validatorsLogged = false
    /// Set when we stopped curl on purpose; says why.
    private var stopReason: AttemptOutcome?

    /// Hands a progress sync to the agent's DataSyncer: (attempt, descriptor, offset to claim when durable).
    typealias SyncRequest = (_ attempt: DownloadAttempt, _ descriptor: Int32, _ offset: Int64) -> Void

    /// Distinguishes attempts of one task, so a late sync of an earlier one is never claimed.
    let serial: UInt64
    private static var nextSerial: UInt64 = 0
    private let requestSync: SyncRequest
    /// A progress sync is in flight: do not queue another.
    private var syncPending = false

    /// - Parameter ifRange: the validator guarding a resume from `offset` (the agent's decision).
    init(task: TaskState, offset: Int64, ifRange: String?, settings: TransferSettings, sink: @escaping Sink,
         requestSync: @escaping SyncRequest) throws {
        self.requestSync = requestSync
        Self.nextSerial += 1
        serial = Self.nextSerial
        taskID = task.id
        partPath = task.partPath
        requestedOffset = offset
        written = offset
        durable = offset
        currentURL = task.currentURL
        total = task.total
        previousValidator = task.etag ?? task.lastModified
        self.settings = settings
        self.sink = sink

        let part = task.partPath
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
        guard let handle = curl_easy_init() else {
            close(file)
            throw SystemError(operation: "curl_easy_init", errno: ENOMEM)
        }
        easy = handle
        configure(task: task, ifRange: ifRange)
    }

    deinit {
        curl_easy_cleanup(easy)
        curl_slist_free_all(headerList)
        close(fd)
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
            bufferSize = Int(min(max(speed / 800, 1024), Int64(bufferSize)))
        }
        sa_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, bufferSize)

        var headers = settings.headers
        for header in task.spec.headers {
            headers.removeAll { $0.name.lowercased() == header.name.lowercased() }
            headers.append(header)
        }
        if requestedOffset > 0 {
            sa_easy_setopt_string(easy, CURLOPT_RANGE, "\(requestedOffset)-")
            if let ifRange { headers.append(Header(name: "If-Range", value: ifRange)) }
        }
        for header in headers {
            headerList = curl_slist_append(headerList, "\(header.name): \(header.value)")
        }
        if headerList != nil { sa_easy_setopt_pointer(easy, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headerList)) }

        let context = Unmanaged.passUnretained(self).toOpaque()
        sa_easy_set_write_callback(easy, { data, size, count, context in
            let attempt = Unmanaged<DownloadAttempt>.fromOpaque(context!).takeUnretainedValue()
            return attempt.receiveBody(UnsafeRawPointer(data!), size * count)
        }, context)
        sa_easy_set_header_callback(easy, { data, size, count, context in
            let attempt = Unmanaged<DownloadAttempt>.fromOpaque(context!).takeUnretainedValue()
            attempt.receiveHeader(UnsafeRawBufferPointer(start: data, count: size * count))
            return size * count
        }, context)
    }

    // MARK: - Callbacks (run inside curl_multi_perform, on the loop thread)

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
            return
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
        var offset = 0
        while offset < count {
            let result = write(fd, data + offset, count - offset)
            if result < 0 {
                if errno == EINTR { continue }
                stopReason = .permanent(reason: "cannot write \(partPath): \(String(cString: strerror(errno)))", code: "write_error")
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
        if status >= 400 || (300..<400).contains(status) {
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

    /// fdatasync, then claim the bytes in the log.
    func flush() {
        guard written > durable || !validatorsLogged else { return }
        fdatasync(fd)
        claim(upTo: written)
    }

    /// The partial file, for the agent's DataSyncer.
    var partFileDescriptor: Int32 { fd }

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
            if status >= 300 || status == 0 { return httpFailure() }
            if !bodyStarted, let refusal = acceptResponse() { return refusal }
            // No fdatasync here: the agent's DataSyncer makes the complete body
            // durable off the loop, then calls `claimSynced`.
            if let total, written != total {
                flush()
                return .transient(reason: "connection closed at byte \(written) of \(total)",
                                  retryAfterMs: nil, restartFromZero: false)
            }
            return .complete(bytes: written)
        }
        flush()
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
    }
}

enum HTTPStatus {
    static func phrase(_ status: Int) -> String? {
        [400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
         408: "Request Timeout", 410: "Gone", 416: "Range Not Satisfiable", 429: "Too Many Requests",
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

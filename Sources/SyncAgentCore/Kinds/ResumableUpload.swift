import Foundation

/// How an upload reaches the server (SPEC §11).
public enum UploadProtocol: String, Codable, Equatable, Sendable, CaseIterable {
    /// One PUT or POST of the whole file: sent again from its first byte after an interruption.
    case plain
    /// tus 1.0.0 (https://tus.io/protocols/resumable-upload).
    case tus
    /// Resumable Uploads for HTTP, the IETF draft (`ResumableUpload.ietfInteropVersion`).
    case ietf
}

/// The keys of a resumable upload (`protocol = "tus" | "ietf"`).
public struct UploadOptions: Codable, Equatable, Sendable {
    public var `protocol`: UploadProtocol
    /// Bytes per request; nil: sized from the measured throughput (`chunk_size = "auto"`).
    public var chunkSize: Int64?
    /// tus with `concatenation`: parts of the file in flight at once, each a child task.
    public var parallel: Int
    /// A part of a parallel upload: these bytes of `body_file`, sent as a tus partial upload.
    public var part: ByteSpan?
    public init(protocol: UploadProtocol, chunkSize: Int64? = nil, parallel: Int = 1, part: ByteSpan? = nil) {
        self.protocol = `protocol`; self.chunkSize = chunkSize; self.parallel = parallel; self.part = part
    }
}

/// `upload_created`: the server made an upload resource for this task, at
/// `url`. Logged (and committed) before the first byte of the file goes out,
/// so a restart asks that URL how far the server got instead of starting over.
public struct UploadCreated: Codable, Equatable, Sendable {
    public var url: String
    public var `protocol`: UploadProtocol
    /// tus: the extensions the server offered (`Tus-Extension`).
    public var extensions: [String]?
    /// Set when an earlier upload of this task was given up: why (it expired, the server lost it).
    public var reason: String?
    /// `body_file`'s status-change time (ctime, ns) when the upload began: any
    /// write moves it, even one that puts the modification time back, so a
    /// file changed since cannot continue the upload.
    public var changedNs: Int64?
    public init(url: String, protocol: UploadProtocol, extensions: [String]? = nil, reason: String? = nil, changedNs: Int64? = nil) {
        self.url = url; self.protocol = `protocol`; self.extensions = extensions; self.reason = reason; self.changedNs = changedNs
    }
}

/// `split`: a tus upload became `parts.count` partial uploads, each a child
/// task; the parent concatenates them once every one has finished.
public struct Split: Codable, Equatable, Sendable {
    public var parts: [String]
    /// `body_file`'s status-change time (ctime, ns) when it was split: the parts must all be of that file.
    public var changedNs: Int64?
    public init(parts: [String], changedNs: Int64? = nil) { self.parts = parts; self.changedNs = changedNs }
}

/// What a resumable upload's log says about its server side.
public struct UploadSession: Equatable, Sendable {
    public var url: String
    public var extensions: [String]?
}

/// What a resumable upload's log says of the file it sends: a `body_file`
/// modified since the upload began (or the file was split) would give the
/// server a mix of two files.
public enum UploadBody {
    /// Said when `body_file`'s ctime is not the one recorded (nil: nothing recorded yet, or the same).
    public static func changeWords(path: String, recordedNs: Int64?, nowNs: Int64) -> String? {
        guard let recordedNs, recordedNs != nowNs else { return nil }
        return "body_file \(path) was modified since the upload began: the server's bytes are of the file as it was"
    }
}

public enum ResumableUpload {
    /// The `Upload-Draft-Interop-Version` of draft-ietf-httpbis-resumable-upload implemented.
    public static let ietfInteropVersion = 9
    /// Auto-sized chunks stay within these bounds (issue: [256 KiB, 64 MiB]).
    public static let smallestChunk: Int64 = 256 << 10
    public static let largestChunk: Int64 = 64 << 20
    /// The first auto-sized chunk measures the link.
    public static let probeChunk: Int64 = 1 << 20
    /// An auto-sized chunk aims to take this long: short enough that an
    /// interruption re-sends little, long enough that requests are few.
    public static let chunkTargetMs: Int64 = 3000
    /// At most this many parts (`parallel`).
    public static let maximumParallel = 16

    /// The furthest a server may truthfully say it holds of an upload this
    /// process has sent nothing to (after a restart): the log's offset (every
    /// confirmed chunk is logged), a chunk confirmed but not yet committed,
    /// and one in flight. A claim past it is of bytes never sent; one short
    /// of it cannot be told from the truth. `chunkSize`: the job's fixed
    /// size (at most 4 GiB) or the server's smallest append; nil for auto,
    /// whose chunks grow at most `ChunkSizer.growth` times from the probe or
    /// from the last chunk logged (`lastChunk`). Chunks under `smallestChunk`
    /// are logged at most once per progress interval: `unlogged` more.
    public static func believableEnd(logged: Int64, chunkSize: Int64?, lastChunk: Int64? = nil, unlogged: Int64 = 0,
                                     size: Int64) -> Int64 {
        let (first, second): (Int64, Int64)
        if let chunkSize {
            (first, second) = (chunkSize + (chunkSize < smallestChunk ? unlogged : 0), chunkSize)
        } else {
            let next = lastChunk.map(ChunkSizer.largestAfter) ?? probeChunk
            (first, second) = (next, ChunkSizer.largestAfter(next))
        }
        // (A server's min-append-size comes here too: any number, so the sum is checked.)
        let (both, overflowed) = first.addingReportingOverflow(second)
        let (end, overflowedAgain) = logged.addingReportingOverflow(both)
        return overflowed || overflowedAgain ? size : min(size, end)
    }

    /// The parts of `size` bytes for `parallel` partial uploads: equal
    /// spans, the last taking the remainder; fewer when the file is small
    /// (no part under the smallest chunk).
    public static func parts(size: Int64, parallel: Int) -> [ByteSpan] {
        let count = Int(max(1, min(Int64(parallel), size / smallestChunk)))
        let each = size / Int64(count)
        return (0..<count).map { index in
            let start = Int64(index) * each
            return ByteSpan(start, index == count - 1 ? size : start + each)
        }
    }
}

/// Chooses each chunk's size (SPEC §11, 动态分片): a fixed `chunk_size`, or
/// for "auto" a 1 MiB probe, then chunks that take about
/// `chunkTargetMs` at the throughput measured so far, re-measured after
/// every chunk so a link that changes speed changes the size.
public struct ChunkSizer: Equatable, Sendable {
    public let fixed: Int64?
    /// The server's largest append (IETF `Upload-Limit: max-append-size`), if it said one.
    public var serverMaximum: Int64?
    /// The server's smallest append (`min-append-size`): only the last chunk may be shorter.
    public var serverMinimum: Int64?
    /// Bytes per second, smoothed; nil before the first chunk.
    public private(set) var throughput: Double?
    /// The last chunk measured: the next auto-sized one is at most `growth` times it.
    public private(set) var lastChunk: Int64?
    /// How much larger one auto-sized chunk may be than the one before: a
    /// restart can then bound what was in flight from the last one logged.
    public static let growth: Int64 = 4

    /// The largest auto-sized chunk that may follow one of `chunk` bytes.
    public static func largestAfter(_ chunk: Int64) -> Int64 {
        min(ResumableUpload.largestChunk, max(ResumableUpload.smallestChunk, chunk * growth))
    }

    public init(fixed: Int64?, serverMaximum: Int64? = nil) {
        self.fixed = fixed
        self.serverMaximum = serverMaximum
    }

    /// The next chunk, at most `remaining` bytes.
    public func next(remaining: Int64) -> Int64 {
        var size: Int64
        if let fixed {
            size = fixed
        } else if let throughput {
            let wanted = throughput * Double(ResumableUpload.chunkTargetMs) / 1000
            size = Int64(min(max(wanted, Double(ResumableUpload.smallestChunk)), Double(ResumableUpload.largestChunk)))
            // Whole 64 KiB blocks: sizes that read well in status and align with the file system.
            size = max(ResumableUpload.smallestChunk, size & ~0xFFFF)
            if let lastChunk { size = min(size, Self.largestAfter(lastChunk)) }
        } else {
            size = ResumableUpload.probeChunk
        }
        if let serverMinimum { size = max(size, serverMinimum) }
        if let serverMaximum { size = min(size, max(1, serverMaximum)) }
        return max(1, min(size, remaining))
    }

    /// A chunk of `bytes` went out and was confirmed in `elapsedMs`.
    public mutating func measured(bytes: Int64, elapsedMs: Int64) {
        guard bytes > 0 else { return }
        lastChunk = bytes
        let rate = Double(bytes) * 1000 / Double(max(1, elapsedMs))
        // A slower link is followed at once (a long chunk on a slow link is much to re-send after a
        // drop); a faster one is believed gradually, weighted towards the newest chunk.
        throughput = throughput.map { rate < $0 ? rate : $0 * 0.3 + rate * 0.7 } ?? rate
    }
}

/// Reading what tus and IETF servers send. Every number is untrusted:
/// overflow-checked, bounded, or refused.
public enum UploadHeaders {
    /// `Upload-Offset` / `Upload-Length` / `Tus-Max-Size`: a non-negative
    /// integer (tus: decimal digits; IETF: a structured-field integer, the same digits).
    public static func integer(_ value: String) -> Int64? {
        let text = value.trimmingCharacters(in: .whitespaces)
        guard !text.isEmpty, text.count <= 18, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int64(text)
    }

    /// `Tus-Extension: creation,termination` → ["creation", "termination"].
    public static func list(_ value: String) -> [String] {
        value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// IETF `Upload-Complete: ?1` (a structured-field boolean).
    public static func boolean(_ value: String) -> Bool? {
        switch value.trimmingCharacters(in: .whitespaces) {
        case "?1": true
        case "?0": false
        default: nil
        }
    }

    /// IETF `Upload-Limit: max-size=100, max-append-size=50, max-age=3600`
    /// (a structured-field dictionary of integers). Unknown or unreadable members are skipped.
    public static func limits(_ value: String) -> [String: Int64] {
        var limits: [String: Int64] = [:]
        for member in value.split(separator: ",") {
            let pair = member.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2, let number = integer(String(pair[1].split(separator: ";").first ?? "")) else { continue }
            limits[pair[0]] = number
        }
        return limits
    }

    /// tus `Upload-Metadata`: `key base64(value)` pairs, comma separated.
    public static func metadata(_ pairs: [(String, String)]) -> String {
        pairs.map { "\($0.0) \(Data($0.1.utf8).base64EncodedString())" }.joined(separator: ",")
    }
}

/// What one answer of a resumable-upload server means, decided without
/// curl: the engine sends, this reads. Statuses a retry may cure (408, 429,
/// 5xx) never get here; they are the engine's transient failures.
public enum UploadAnswer: Equatable, Sendable {
    /// The server holds the first `offset` bytes of the upload.
    case holds(offset: Int64)
    /// A new upload resource, at this absolute URL.
    case created(url: String)
    /// The upload is gone on the server (expired, removed, forgotten): make a new one.
    case gone(reason: String)
    /// The offset sent was not the server's (409): ask it again.
    case offsetMismatch
    /// tus `460 Checksum Mismatch`: the chunk arrived damaged and was dropped; send it again.
    case checksumMismatch
    /// An answer that cannot be followed: the task fails with this reason.
    case refused(reason: String, code: FailureCode)
    /// The server cannot answer now (423 Locked while a dropped request
    /// still holds the upload, 408, 429, 5xx): the attempt is tried again later.
    case tryLater(reason: String)
}

public enum UploadAnswers {
    /// A creation request's answer: `201 Created` (or another 2xx) with a
    /// `Location`, which an IETF server may already have sent in its `104`.
    public static func creation(status: Int, headers: [Header], informational: [Header], requestURL: String) -> UploadAnswer {
        guard (200..<300).contains(status) else { return refusal(status, "creating the upload") }
        guard let location = value("location", in: headers) ?? value("location", in: informational) else {
            return .refused(reason: "the server created the upload but sent no Location to send it to (status \(status))",
                            code: .uploadRefused)
        }
        guard let url = URL(string: location, relativeTo: URL(string: requestURL))?.absoluteString,
              URLRules.hasHTTPScheme(url) else {
            return .refused(reason: "the server's upload URL is not an http or https URL: \(Redaction.url(String(location.prefix(200))))",
                            code: .uploadRefused)
        }
        do {
            try URLRules.checkTransferURL(url, key: "Location")
        } catch {
            // Whatever else the job URL's rules refuse (a URL too long to ask for, a space …), in their words.
            return .refused(reason: "the server's upload URL (its Location) \((error as? KeyError)?.problem ?? "\(error)")", code: .uploadRefused)
        }
        // The file's bytes never go in clear where the job asked for TLS.
        if requestURL.lowercased().hasPrefix("https:"), !url.lowercased().hasPrefix("https:") {
            return .refused(reason: "the server's upload URL \(Redaction.url(url)) is not https, as the job's is", code: .uploadRefused)
        }
        return .created(url: url)
    }

    /// A `HEAD` on the upload URL: how far the server got.
    public static func offset(status: Int, headers: [Header], size: Int64) -> UploadAnswer {
        if let gone = goneReason(status) { return .gone(reason: gone) }
        guard (200..<300).contains(status) else { return refusal(status, "asking how far the upload got") }
        guard let text = value("upload-offset", in: headers), let offset = UploadHeaders.integer(text) else {
            return .refused(reason: "the server did not say how far the upload got (no usable Upload-Offset)", code: .uploadRefused)
        }
        if let length = value("upload-length", in: headers).flatMap(UploadHeaders.integer), length != size {
            return .gone(reason: "the server's upload is \(length) bytes long, not the file's \(size)")
        }
        guard offset <= size else { return .gone(reason: "the server claims \(offset) bytes of a \(size)-byte upload") }
        return .holds(offset: offset)
    }

    /// A `PATCH` that sent `length` bytes from `offset`: the server's new
    /// offset. tus must say it; an IETF server that says nothing took them all.
    public static func append(status: Int, headers: [Header], from offset: Int64, length: Int64, size: Int64) -> UploadAnswer {
        if let gone = goneReason(status) { return .gone(reason: gone) }
        if status == 409 { return .offsetMismatch }
        if status == 460 { return .checksumMismatch }
        guard (200..<300).contains(status) else { return refusal(status, "sending bytes \(offset)–\(offset + length)") }
        guard let text = value("upload-offset", in: headers) else { return .holds(offset: offset + length) }
        // More than was sent (or than the file has) is a hostile or confused answer: believe nothing, ask again.
        guard let confirmed = UploadHeaders.integer(text), confirmed <= min(size, offset + length) else { return .offsetMismatch }
        return .holds(offset: confirmed)
    }

    /// The statuses that mean the upload no longer exists (tus: 404, 410; the
    /// IETF draft gives them no meaning of their own, and they mean the same there).
    public static func goneReason(_ status: Int) -> String? {
        switch status {
        case 404: "the server no longer knows the upload (404 Not Found)"
        case 410: "the server no longer keeps the upload (410 Gone)"
        default: nil
        }
    }

    static func refusal(_ status: Int, _ doing: String) -> UploadAnswer {
        switch status {
        case 408, 423, 429, 500...:
            .tryLater(reason: "the server answered \(status) when \(doing)")
        case 413: .refused(reason: "the file is larger than the server accepts (413) when \(doing)", code: .tooLarge)
        case 412: .refused(reason: "the server does not speak this protocol version (412) when \(doing)", code: .uploadRefused)
        default: .refused(reason: "the server answered \(status) when \(doing)", code: .http(status))
        }
    }

    /// The first header of that name (lower case), trimmed.
    public static func value(_ name: String, in headers: [Header]) -> String? {
        headers.first { $0.name.lowercased() == name }.map { $0.value.trimmingCharacters(in: .whitespaces) }
    }
}

/// What one exchange asked of a server, and what its task knew before the
/// answer: everything the verdict judges a response against (SPEC §7).
/// Offsets are in the exchange's own terms: bytes of the partial file, or
/// of the slice (`#EXT-X-BYTERANGE`) it fetches.
public struct ExchangeAsk: Equatable, Sendable {
    /// Where the body's first byte goes: the bytes already held (a resume,
    /// a range's start), 0 for a fresh request.
    public var offset: Int64
    /// One connection of a segmented download asks for `offset ..< rangeEnd` only.
    public var rangeEnd: Int64?
    /// A slice of the resource (an HLS byte range).
    public var slice: HLSByteRange?
    /// The `If-Range` the request carried.
    public var ifRange: String?
    /// The request asked "only if changed" (`If-None-Match` / `If-Modified-Since`).
    public var conditional: Bool
    /// The statuses that are a result rather than a failure.
    public var accepts: ClosedRange<Int>
    /// The body continues a partial file: its end is checked against the size.
    public var resumes: Bool
    /// The 3xx answers the agent follows itself (none: curl follows, or nobody does).
    public var hopStatuses: Set<Int>
    /// The size the task knew before the answer.
    public var knownTotal: Int64?
    /// The validators of the bytes held, which a full answer is compared with: an ETag
    /// (perhaps weak, `W/"…"`) and a `Last-Modified` date.
    public var heldETag: String?
    public var heldLastModified: String?
    /// The task was retargeted and asks its new URL to confirm the bytes
    /// held: what they were fetched as (`RetargetRules.sameFile`).
    public var retargetHeld: RetargetRules.HeldFile?

    public init(offset: Int64 = 0, rangeEnd: Int64? = nil, slice: HLSByteRange? = nil, ifRange: String? = nil,
                conditional: Bool = false, accepts: ClosedRange<Int> = 200...299, resumes: Bool = true,
                hopStatuses: Set<Int> = [], knownTotal: Int64? = nil, heldETag: String? = nil, heldLastModified: String? = nil,
                retargetHeld: RetargetRules.HeldFile? = nil) {
        self.offset = offset; self.rangeEnd = rangeEnd; self.slice = slice; self.ifRange = ifRange
        self.conditional = conditional; self.accepts = accepts; self.resumes = resumes; self.hopStatuses = hopStatuses
        self.knownTotal = knownTotal; self.heldETag = heldETag; self.heldLastModified = heldLastModified
        self.retargetHeld = retargetHeld
    }
}

/// A header as a server sent it: absent, present but unreadable, or its value.
public enum SentValue<Value: Equatable & Sendable>: Equatable, Sendable {
    case absent
    case unreadable
    case value(Value)

    public var value: Value? {
        if case .value(let value) = self { value } else { nil }
    }
}

/// The head of a response: its status and the headers the verdict reads.
public struct ResponseHead: Equatable, Sendable {
    public var status: Int
    /// The URL that answered (after the redirects curl followed), for the words.
    public var url: String
    public var etag: String?
    public var lastModified: String?
    public var contentRange: SentValue<HTTPNumbers.ContentRange>
    public var contentLength: SentValue<Int64>
    /// `Content-Length` came twice, with different values.
    public var conflictingLengths: Bool
    /// What `Retry-After` asked for.
    public var retryAfterMs: Int64?
    /// Where a 3xx points, resolved against `url` (nil: nowhere usable).
    public var redirectTarget: String?

    public init(status: Int, url: String, etag: String? = nil, lastModified: String? = nil,
                contentRange: SentValue<HTTPNumbers.ContentRange> = .absent, contentLength: SentValue<Int64> = .absent,
                conflictingLengths: Bool = false, retryAfterMs: Int64? = nil, redirectTarget: String? = nil) {
        self.status = status; self.url = url; self.etag = etag; self.lastModified = lastModified
        self.contentRange = contentRange; self.contentLength = contentLength; self.conflictingLengths = conflictingLengths
        self.retryAfterMs = retryAfterMs; self.redirectTarget = redirectTarget
    }
}

/// A response whose body may be written.
public struct Acceptance: Equatable, Sendable {
    /// Where the body ends, once complete (nil: unknown, it ends when the server closes it).
    public var total: Int64?
    /// A `206`'s last byte + 1, from its Content-Range: a body that goes past it is not the range it names.
    public var answerEnd: Int64?
    /// The answer is the whole file where a range was asked: what is held is
    /// cut back to 0 before the body is written, for this reason (logged).
    public var restartReason: String?

    public init(total: Int64?, answerEnd: Int64? = nil, restartReason: String? = nil) {
        self.total = total; self.answerEnd = answerEnd; self.restartReason = restartReason
    }
}

public enum ResponseVerdict: Equatable, Sendable {
    case accept(Acceptance)
    /// Nothing is written: the exchange ends with this outcome.
    case end(AttemptOutcome)
}

/// The response rules (SPEC §7), as pure functions: which answer is taken,
/// restarted from zero, retried or failed, with the reason in words. The
/// exchange asks them at the first body byte and when curl says it is done.
public enum ResponseRules {
    /// On the first byte of a body (or at the end of one that had none):
    /// may it be written? Never a body that does not start where the file ends.
    public static func judge(_ head: ResponseHead, asked: ExchangeAsk) -> ResponseVerdict {
        if let hop = hop(head, asked: asked) { return .end(hop) }
        if !asked.accepts.contains(head.status) { return .end(failure(head, asked: asked)) }
        let shownURL = Redaction.url(head.url)
        if head.conflictingLengths {
            // Which one frames the body is the server's secret (RFC 9112 §6.3 calls it an error).
            return .end(.retryFromZero("server sent two different Content-Length headers for \(shownURL)"))
        }
        if head.contentLength == .unreadable {
            return .end(.retryFromZero("server sent an unreadable Content-Length for \(shownURL)"))
        }
        // A byte-range child counts from the start of its slice.
        let sliceStart = asked.slice?.offset ?? 0
        if asked.slice != nil, head.status != 206 {
            return .end(.permanent(reason: "server answered \(head.status), not 206, to the byte range of \(shownURL)",
                                   code: .rangeIgnored))
        }
        if asked.rangeEnd != nil, head.status != 206 {
            return .end(.rangeRefused(reason: fullAnswerWords(head, asked: asked)
                                      ?? "the server answered \(head.status), not 206, to a range of \(shownURL)"))
        }
        var answerEnd: Int64?
        var restartReason: String?
        if head.status == 206 {
            guard case .value(let range) = head.contentRange, let first = range.first else {
                let what = head.contentRange == .absent ? "no Content-Range" : "an unreadable Content-Range"
                return .end(.retryFromZero("server sent bytes from nowhere (\(what)) when asked for \(asked.offset)"))
            }
            guard first == sliceStart + asked.offset else {
                return .end(.retryFromZero("server sent bytes from \(first) when asked for \(sliceStart + asked.offset)"))
            }
            // A body of another length than its range is not that range: its bytes may sit anywhere
            // (a segment would take the first ones and publish them shifted).
            if let last = range.last {
                if let length = head.contentLength.value, length != last - first + 1 {
                    return .end(.retryFromZero("server sent \(length) bytes (Content-Length) for the \(last - first + 1) bytes "
                                               + "\(first)–\(last) of its Content-Range (\(shownURL))"))
                }
                answerEnd = last + 1 - sliceStart
            }
            // If-Range asks the server to send the whole file if it changed; one that sends the rest
            // of another file anyway would have it joined to the bytes we hold.
            if let sent = asked.ifRange,
               let words = RecoveryPlan.anotherFile(ifRange: sent, etag: head.etag, lastModified: head.lastModified) {
                return .end(asked.rangeEnd != nil ? .rangeRefused(reason: words) : .retryFromZero(words))
            }
            // A retargeted task's bytes came from another URL: its file must show itself the same one.
            if let held = asked.retargetHeld,
               let words = RetargetRules.sameFile(held: held, answer: .init(etag: head.etag, lastModified: head.lastModified,
                                                                           size: range.complete)) {
                return .end(asked.rangeEnd != nil ? .rangeRefused(reason: words) : .retryFromZero(words))
            }
            // Nor may a resume go on in a file of another size.
            if asked.rangeEnd == nil, asked.slice == nil, asked.offset > 0, let known = asked.knownTotal,
               let size = range.complete, size != known {
                return .end(.retryFromZero("the file on the server changed size (\(known) bytes → \(size))"))
            }
        } else if asked.offset > 0 {
            // A full body: the server ignored Range, or If-Range found a changed file.
            if let held = asked.retargetHeld {
                let size = head.contentLength.value
                restartReason = RetargetRules.sameFile(held: held, answer: .init(etag: head.etag, lastModified: head.lastModified, size: size))
                    ?? "the server at the new URL ignored Range and sent the whole file"
            } else {
                restartReason = fullAnswerWords(head, asked: asked) ?? "the server ignored Range and sent the whole file"
            }
        }
        let start = restartReason == nil ? asked.offset : 0
        var total = asked.knownTotal
        if let slice = asked.slice {
            total = slice.length
        } else if head.status == 206, case .value(let range) = head.contentRange, let complete = range.complete {
            total = complete
        } else if let length = head.contentLength.value {
            let (sum, overflow) = start.addingReportingOverflow(length)
            guard !overflow, sum <= HTTPNumbers.maximumLength else {
                return .end(.retryFromZero("server announced an impossible Content-Length (\(length) bytes) for \(shownURL)"))
            }
            total = sum
        } else if head.status != 206 {
            total = nil
        }
        return .accept(Acceptance(total: total, answerEnd: answerEnd, restartReason: restartReason))
    }

    /// When curl says the exchange is over, before anything about its body
    /// is looked at: a 304 to a conditional request, a hop the agent takes
    /// itself, or a status that is not a result. Nil: the body is judged next.
    public static func ending(_ head: ResponseHead, asked: ExchangeAsk) -> AttemptOutcome? {
        if head.status == 304, asked.conditional { return .notModified(etag: head.etag) }
        if let hop = hop(head, asked: asked) { return hop }
        if !asked.accepts.contains(head.status) { return failure(head, asked: asked) }
        return nil
    }

    /// A body that stopped short of where it should end (a connection closed early).
    public static func shortBody(written: Int64, end: Int64?, asked: ExchangeAsk) -> AttemptOutcome? {
        guard asked.resumes, let end, written != end else { return nil }
        return .retry("connection closed at byte \(written) of \(end)")
    }

    /// A status that is not a result: retried (408, 429, 5xx), complete (a
    /// 416 at exactly the end of what is held), restarted or failed.
    public static func failure(_ head: ResponseHead, asked: ExchangeAsk) -> AttemptOutcome {
        let status = head.status
        let phrase = HTTPStatus.phrase(status).map { " \($0)" } ?? ""
        let reason = "server answered \(status)\(phrase) for \(Redaction.url(head.url))"
        if status == 408 || status == 429 || status >= 500 { return .retry(reason, retryAfterMs: head.retryAfterMs) }
        guard status == 416 else { return .permanent(reason: reason, code: .http(status)) }
        // The range starts at or past the end: if what we hold is exactly the server's size, the
        // file is complete (a restart came after the last byte); verification decides the rest.
        let claimed = head.contentRange.value?.complete
        let size = claimed ?? asked.knownTotal
        // Not complete if the server said another size before: our bytes are then the start of
        // another file, and its end says nothing of them. (Not its validators: a 416's may be its
        // error page's.) A slice's `knownTotal` is the slice, not the file.
        if asked.rangeEnd == nil, asked.slice == nil, asked.offset > 0, let claimed, let known = asked.knownTotal, claimed != known {
            return .retryFromZero("server answered 416 for byte \(asked.offset) saying its file has \(claimed) bytes, "
                                  + "where it said \(known) before: the file changed")
        }
        // (Not for one range of a segmented download: its bytes are not the file's end.)
        if asked.offset > 0, size == asked.offset, asked.rangeEnd == nil { return .complete(bytes: asked.offset) }
        let sizeWords = size.map { "its file has \($0) bytes" } ?? "it did not say its size"
        // A playlist's byte range past the end of its file: no restart or retry brings it.
        if let slice = asked.slice, let size = claimed, (slice.offset ?? 0) + asked.offset >= size {
            return .permanent(reason: "the playlist's byte range starts at byte \((slice.offset ?? 0) + asked.offset) of "
                              + "\(Redaction.url(head.url)), whose file has \(size) bytes", code: .http(416))
        }
        return .retryFromZero("server answered 416 for byte \(asked.offset) and \(sizeWords)")
    }

    /// A 3xx the agent follows itself: the next request goes to its target.
    private static func hop(_ head: ResponseHead, asked: ExchangeAsk) -> AttemptOutcome? {
        guard asked.hopStatuses.contains(head.status), let target = head.redirectTarget else { return nil }
        return .redirect(to: target, status: head.status)
    }

    /// Why a full answer came to a ranged request: the file changed (its validators say so), or
    /// it did not and the server would not resume against the validator sent. Nil when its
    /// validators tell neither.
    private static func fullAnswerWords(_ head: ResponseHead, asked: ExchangeAsk) -> String? {
        let sameFile: Bool
        if let held = asked.heldETag, let now = head.etag {
            // The weak comparison (RFC 9110 §8.8.3.2): Apache's `W/"x"` for a file changed within
            // the second becomes `"x"` a second later, and it is the same file.
            guard ETags.opaque(held) == ETags.opaque(now) else { return RecoveryPlan.changedFileWords(from: held, to: now) }
            sameFile = true
        } else if let held = asked.heldLastModified, let now = head.lastModified {
            guard held == now else { return RecoveryPlan.changedFileWords(from: held, to: now) }
            sameFile = true
        } else {
            sameFile = false
        }
        guard sameFile, let sent = asked.ifRange, !ETags.isStrong(sent) else { return nil }
        return RecoveryPlan.weakGuardWords(sent: sent, heldETag: asked.heldETag)
    }
}

public enum HTTPStatus {
    public static func phrase(_ status: Int) -> String? {
        switch status {
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 410: "Gone"
        case 413: "Content Too Large"
        case 416: "Range Not Satisfiable"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        default: nil
        }
    }
}

import Foundation

/// What a restart does with a task, and why — `syncagent replay` prints these
/// and the agent follows the same decisions on start-up.
public enum RecoveryPlan: Equatable, Sendable {
    /// Ended: nothing to do.
    case nothing(TaskPhase)
    /// Never got bytes: a fresh request.
    case startFromZero
    /// Continue with `Range: bytes=N-`, guarded by `If-Range` when a validator is known.
    case resume(at: Int64, ifRange: String?)
    /// A segmented download: fetch these spans of the file (each with
    /// `Range` and `If-Range`), keeping the rest of the partial file.
    case resumeRanges(missing: [ByteSpan], ifRange: String)
    /// Bytes were logged but cannot be trusted to match the server's file.
    case restartFromZero(reason: String)
    /// A resumable upload: ask its URL how far the server got (`HEAD`), then send the rest.
    case resumeUpload(url: String, at: Int64)
    /// Waits for `syncagent resume`.
    case staysPaused(at: Int64)
    /// Waits for its start time or retry backoff.
    case waitUntil(ms: Int64)

    /// A parent waits for its children (and a live one reads its playlist again).
    case waitForChildren(done: Int, total: Int, live: Bool)
    /// A split upload waits for its parts, then concatenates them.
    case waitForParts(done: Int, total: Int)

    /// The plan of `task`, knowing its children if it has any.
    public static func plan(for task: TaskState, in state: AgentState, nowMs: Int64) -> RecoveryPlan {
        if let family = state.families[task.id], task.isFannedOut, !task.phase.isEnded,
           !(task.phase == .paused && task.pauseReason == .user) {
            if task.spec.upload != nil { return .waitForParts(done: family.finished, total: family.total) }
            return .waitForChildren(done: family.finished, total: family.total, live: task.hls?.ended == false)
        }
        return plan(for: task, nowMs: nowMs)
    }

    public static func plan(for task: TaskState, nowMs: Int64) -> RecoveryPlan {
        switch task.phase {
        case .finished, .failed, .cancelled:
            return .nothing(task.phase)
        case .paused where task.pauseReason == .user:
            return .staysPaused(at: task.bytes)
        case .queued, .running, .paused:
            // The server is the judge of what it holds: the log's bytes are what it last confirmed.
            if task.spec.upload != nil, let session = task.upload { return .resumeUpload(url: session.url, at: task.bytes) }
            if task.bytes == 0 {
                if let wait = task.notBeforeMs, wait > nowMs { return .waitUntil(ms: wait) }
                return .startFromZero
            }
            guard task.spec.isResumable else {
                let what = task.spec.kind == .upload ? "an upload" : "a data task"
                return .restartFromZero(reason: "\(what) is sent again from its first byte")
            }
            // A weak ETag cannot guard the rest; a Last-Modified date can, where the server takes it.
            guard let validator = task.etag.flatMap(strongETag) ?? task.lastModified else {
                if let weak = task.etag {
                    return .restartFromZero(reason: "the server's only validator is a weak ETag (\(weak)), and RFC 9110 §13.1.5 "
                                            + "lets If-Range resume only against a strong one")
                }
                return .restartFromZero(reason: "the server sent no validator (ETag or Last-Modified) to resume against")
            }
            if let ranges = task.doneRanges {
                guard let total = task.total, ranges.fits(in: total) else {
                    return .restartFromZero(reason: "the logged ranges do not fit the file's size")
                }
                return .resumeRanges(missing: ranges.missing(upTo: total), ifRange: validator)
            }
            return .resume(at: task.bytes, ifRange: validator)
        }
    }

    /// Why a `206` to a request sent with `If-Range: sent` may continue
    /// another file than the bytes held (nil: the same, as far as its headers
    /// tell). An ETag must be there and the same (a `206` carries the ETag a
    /// `200` would, RFC 9110 §15.3.7); a `Last-Modified` need not be repeated,
    /// but one that is must be the same.
    public static func anotherFile(ifRange sent: String, etag: String?, lastModified: String?) -> String? {
        if sent.hasPrefix("\"") || sent.hasPrefix("W/") {
            guard let etag else { return "the server's answer to a resume carried no ETag (the file had \(sent)): it may be another file" }
            return etag == sent ? nil : changedFileWords(from: sent, to: etag)
        }
        guard let lastModified, lastModified != sent else { return nil }
        return changedFileWords(from: sent, to: lastModified)
    }

    /// "the file changed on the server (validator A → B)": said wherever a validator gives a change away.
    public static func changedFileWords(from old: String, to new: String) -> String {
        "the file changed on the server (validator \(old) → \(new))"
    }

    /// Why a full answer came to a resume guarded by `If-Range: sent` (a date, or a weak ETag)
    /// when the file had not changed: the server would not resume against a validator it does
    /// not hold as strong. (Apache holds a date weak until a minute after the file changed, and
    /// hands out `W/` ETags for a file changed within the second.)
    public static func weakGuardWords(sent: String, heldETag: String?) -> String {
        let etag = heldETag.map { ETags.isWeak($0) ? ", its ETag \($0) being weak" : "" } ?? ""
        return "the server sent the whole file instead of the rest: it would not resume against If-Range: \(sent)"
            + "\(etag) (RFC 9110 §13.1.5 lets If-Range resume only against a strong validator); the file had not changed"
    }

    /// Weak ETags (`W/"…"`) cannot guard a byte range (RFC 9110 §13.1.5).
    public static func strongETag(_ etag: String) -> String? {
        ETags.isWeak(etag) ? nil : etag
    }

    /// The plan in words, for `replay`.
    public var words: String {
        switch self {
        case .nothing(let phase): "nothing: \(phase.rawValue)"
        case .startFromZero: "start from 0"
        case .resume(let offset, let validator?): "resume at byte \(offset) with If-Range: \(validator)"
        case .resume(let offset, nil): "resume at byte \(offset)"
        case .resumeRanges(let missing, let validator):
            "resume \(missing.count) range\(missing.count == 1 ? "" : "s") (\(missing.reduce(0) { $0 + $1.length }) bytes missing: "
                + missing.prefix(4).map(\.description).joined(separator: ", ") + (missing.count > 4 ? ", …" : "")
                + ") with If-Range: \(validator)"
        case .resumeUpload(let url, let offset):
            "ask \(Redaction.url(url)) how far the upload got (the server confirmed \(offset) bytes), then send the rest"
        case .restartFromZero(let reason): "restart from 0: \(reason)"
        case .staysPaused(let offset): "stay paused at byte \(offset) until resumed"
        case .waitUntil(let ms): "wait until \(CivilTime.iso8601(ms: ms)), then start from 0"
        case .waitForChildren(let done, let total, let live):
            "wait for its segments (\(done) of \(total) finished)" + (live ? ", read the live playlist again" : "") + ", then publish"
        case .waitForParts(let done, let total):
            "wait for its parts (\(done) of \(total) finished), then join them into one upload (tus concatenation)"
        }
    }
}

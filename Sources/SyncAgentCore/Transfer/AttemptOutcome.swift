/// How one exchange (or one attempt of a task) ended, before verification
/// and publishing: what the engine then does with the task.
public enum AttemptOutcome: Equatable, Sendable {
    /// The exchange succeeded: every byte of the response is in the partial
    /// file (not yet flushed), or, for an upload, every byte of the body sent.
    case complete(bytes: Int64)
    /// Worth another attempt; `restartFromZero` when the partial file cannot be resumed.
    case transient(reason: String, retryAfterMs: Int64?, restartFromZero: Bool)
    case permanent(reason: String, code: FailureCode)
    /// This machine failed (disk full, I/O error): the task stops, keeping
    /// the bytes the log vouches for, so `resume` continues once fixed.
    case localFailure(reason: String, code: FailureCode)
    /// A redirect this exchange does not follow itself (its request carries
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
    /// `overwrite = "skip"`, and the name the server gave (`name_from_server`)
    /// is taken: by the file `existing` on disk, or by another live task
    /// (nil). The task finishes skipped; nothing of the body is kept.
    case skipped(reason: String, existing: String?)

    /// A transient failure that keeps the bytes written.
    public static func retry(_ reason: String, retryAfterMs: Int64? = nil) -> AttemptOutcome {
        .transient(reason: reason, retryAfterMs: retryAfterMs, restartFromZero: false)
    }

    /// A transient failure whose bytes cannot be continued: the next attempt starts from 0.
    public static func retryFromZero(_ reason: String) -> AttemptOutcome {
        .transient(reason: reason, retryAfterMs: nil, restartFromZero: true)
    }

    /// The words of a failure (nil for an outcome that is not one).
    public var failureReason: String? {
        switch self {
        case .transient(let reason, _, _), .permanent(let reason, _), .localFailure(let reason, _), .rangeRefused(let reason),
             .fallBack(let reason):
            reason
        case .complete, .redirect, .notModified, .skipped:
            nil
        }
    }
}

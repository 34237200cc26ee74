import Foundation

/// What each kind of transfer does (DESIGN §5), answered in one place: the
/// engine asks these questions of a task's kind instead of branching on it.
/// A new kind is a new row here, its parser keys, and — when it has more
/// to do than one exchange, like an HLS parent — a file of behaviour of its
/// own in the engine (`Kinds/`).
public struct KindBehaviour: Equatable, Sendable {
    public enum Body: Equatable, Sendable {
        /// Streamed into `DEST.part`, made durable, published.
        case partialFile
        /// Kept in memory (a playlist), at most `TransferAttempt.playlistLimit` bytes.
        case memory
        /// Counted, not kept.
        case discard
    }

    /// Where the response body goes.
    public var body: Body
    /// The statuses that are a result rather than a failure.
    public var accepts: ClosedRange<Int>
    /// Progress counts the bytes sent (an upload), not those received.
    public var countsSent: Bool
    /// After an interruption it continues from its durable bytes (Range).
    public var resumes: Bool
    /// `finished` keeps the final response's status and headers.
    public var recordsResponse: Bool
    /// A request without a body: redirects can be followed by the agent,
    /// which sends credential headers to the job's own host only.
    public var canFollowRedirectsItself: Bool
    /// Reads a playlist and hands the work to child tasks (SPEC §10).
    public var fansOut: Bool
    /// What its children and the whole are called, when it has children.
    public var family = FamilyWords(child: "segment", whole: "video")
}

/// How people call a parent task's children and the parent itself.
public struct FamilyWords: Equatable, Sendable {
    public var child: String
    public var whole: String
    public var children: String { child + "s" }
}

extension TaskSpec {
    public var behaviour: KindBehaviour {
        switch kind {
        case .download:
            KindBehaviour(body: .partialFile, accepts: 200...299, countsSent: false, resumes: true, recordsResponse: false,
                          canFollowRedirectsItself: true, fansOut: false)
        case .upload:
            // A resumable upload goes on from the offset its server confirmed (SPEC §11); split, its children are parts.
            KindBehaviour(body: .discard, accepts: 200...299, countsSent: upload == nil, resumes: upload != nil, recordsResponse: true,
                          canFollowRedirectsItself: false, fansOut: false, family: FamilyWords(child: "part", whole: "upload"))
        case .data:
            // A data task's answer may be a 3xx it did not follow (304 Not Modified is a result).
            KindBehaviour(body: dest == nil ? .discard : .partialFile, accepts: 200...399, countsSent: false, resumes: false,
                          recordsResponse: true, canFollowRedirectsItself: false, fansOut: false)
        case .hls:
            KindBehaviour(body: .memory, accepts: 200...299, countsSent: false, resumes: false, recordsResponse: false,
                          canFollowRedirectsItself: true, fansOut: true)
        }
    }
}

extension KindBehaviour {
    /// One request of a resumable upload's protocol (OPTIONS, creation,
    /// HEAD, PATCH, DELETE): its answer is read for status and headers, its
    /// body counted, and progress is what the server confirms, never what was sent.
    public static let protocolRequest = KindBehaviour(body: .discard, accepts: 200...299, countsSent: false, resumes: false,
                                                      recordsResponse: true, canFollowRedirectsItself: false, fansOut: false)
}

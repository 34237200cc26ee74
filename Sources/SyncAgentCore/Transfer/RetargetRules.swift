/// `syncagent retarget ID URL` (SPEC §4.3): a task goes on from another URL
/// (a signed link that expired, a mirror). The bytes it holds are kept only
/// if the new URL's answer shows the file they came from: the same
/// validators and the same size. Otherwise it starts over, saying why.
/// Two decisions, both pure: at the retarget, whether there is anything the
/// new URL could confirm (`start`); at the new URL's first answer to a
/// resume, whether it does (`sameFile`, asked by `ResponseRules`).
public enum RetargetRules {
    /// What the bytes held were fetched as, as the log recorded it.
    public struct HeldFile: Equatable, Sendable {
        /// A strong ETag (a weak one cannot guard bytes, RFC 9110 §13.1.5).
        public var etag: String?
        public var lastModified: String?
        public var size: Int64?
        public init(etag: String?, lastModified: String?, size: Int64?) {
            self.etag = etag.flatMap(RecoveryPlan.strongETag); self.lastModified = lastModified; self.size = size
        }
    }

    /// What the new URL's answer says of its file.
    public struct AnsweredFile: Equatable, Sendable {
        public var etag: String?
        public var lastModified: String?
        /// The whole file's size (a `206`'s Content-Range, a `200`'s Content-Length); nil: not said.
        public var size: Int64?
        public init(etag: String?, lastModified: String?, size: Int64?) {
            self.etag = etag; self.lastModified = lastModified; self.size = size
        }
    }

    public enum Start: Equatable, Sendable {
        /// The bytes stay, to be confirmed by the new URL's first answer.
        case keep(bytes: Int64)
        /// Nothing is kept: `reason` says why, nil when nothing was held.
        case startOver(reason: String?)
    }

    /// At the retarget: whether `task`'s bytes can wait for the new URL to
    /// confirm them. Only a resumable transfer's can, and only when the log
    /// knows what to compare: a validator and the file's size.
    public static func start(for task: TaskState) -> Start {
        guard task.bytes > 0 else { return .startOver(reason: nil) }
        let held = "its \(task.bytes) bytes"
        guard task.spec.isResumable else {
            let what = task.spec.kind == .upload ? "an upload" : "a data task"
            return .startOver(reason: "\(what) is sent again from its first byte at the new URL")
        }
        guard task.etag.flatMap(RecoveryPlan.strongETag) != nil || task.lastModified != nil else {
            return .startOver(reason: "\(held) came with no validator (ETag or Last-Modified) to compare the new URL's file with")
        }
        guard let total = task.total else {
            return .startOver(reason: "the size of the file \(held) are part of is not known, so the new URL's cannot be compared with it")
        }
        if let ranges = task.doneRanges, !ranges.fits(in: total) {
            return .startOver(reason: "the logged ranges do not fit the file's size")
        }
        return .keep(bytes: task.bytes)
    }

    /// At the new URL's answer: nil when it is the file the bytes held came
    /// from (every validator both name agrees, an ETag held is repeated, a
    /// date held alone is repeated, and the size is said and the same);
    /// else why it is not, in words.
    public static func sameFile(held: HeldFile, answer: AnsweredFile) -> String? {
        if let etag = held.etag {
            guard let answered = answer.etag else {
                return "the new URL's answer carries no ETag (the bytes held came with \(etag)): it may be another file"
            }
            if answered != etag { return "the new URL serves another file (ETag \(etag) → \(answered))" }
        }
        if let date = held.lastModified {
            if let answered = answer.lastModified {
                if answered != date { return "the new URL serves another file (Last-Modified \(date) → \(answered))" }
            } else if held.etag == nil {
                return "the new URL's answer carries no Last-Modified (the bytes held came with \(date)): it may be another file"
            }
        }
        guard held.etag != nil || held.lastModified != nil else {
            return "the bytes held came with no validator to compare the new URL's file with"
        }
        guard let size = held.size else {
            return "the size of the file the bytes held are part of is not known"
        }
        guard let answered = answer.size else {
            return "the new URL's answer does not say its file's size (the bytes held are of a file of \(size) bytes)"
        }
        if answered != size { return "the file at the new URL has \(answered) bytes, not the \(size) of the file the bytes held are part of" }
        return nil
    }
}

import Foundation

/// `name_from_server` (curl `-J`, wget `--content-disposition`): a download
/// without `dest` is named as its server calls the file: `Content-Disposition`'s
/// `filename*`, then its `filename`, else the last path segment of the URL
/// that answered (after redirects). A server is trusted with a name, never
/// with a path: what it gives is made a plain, visible name first (`safe`).
public enum ServerFileName {
    /// Room for `.part` and a rename's `.N` within a name's 255 bytes, as for a job's `dest`.
    public static let maximumBytes = 240
    /// When neither the header nor the URL gives a usable name: what wget saves such a URL as.
    public static let fallback = "index.html"

    public enum Source: String, Sendable {
        case contentDisposition = "Content-Disposition"
        case url = "the URL"
        case fallback = "the default name"
    }

    /// The name for the answer: its `Content-Disposition` (the header's bytes;
    /// nil when it sent none), else `finalURL`'s last path segment, decoded.
    public static func choose(contentDisposition: [UInt8]?, finalURL: String) -> (name: String, source: Source) {
        if let header = contentDisposition {
            let parsed = ContentDisposition.parse(header)
            // `filename*` over `filename`; one that leaves nothing usable gives way to the next.
            for raw in [parsed.extendedFileName, parsed.fileName].compactMap({ $0 }) {
                if let name = safe(raw) { return (name, .contentDisposition) }
            }
        }
        if let name = safe(lastSegment(of: finalURL)) { return (name, .url) }
        return (fallback, .fallback)
    }

    /// The last segment of a URL's path, percent-decoded (an escape that
    /// decodes to no text is left as it is). Empty for a path ending in `/`.
    static func lastSegment(of url: String) -> String {
        guard let components = URLComponents(string: url) else { return "" }
        let path = components.percentEncodedPath
        let segment = path.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? ""
        return segment.removingPercentEncoding ?? segment
    }

    /// `raw` as a name a file may have here, or nil when nothing usable is
    /// left: the part after its last `/` or `\` (a name, never a path: not
    /// `../../.bashrc`), control characters (NUL, line breaks, escapes,
    /// bidirectional and zero-width marks: `Printable.isControl`, the rule
    /// of a job's `dest`) made `_`, no leading dot or space (never hidden,
    /// never `.` or `..`), no trailing space, and at most `maximumBytes`
    /// bytes of UTF-8, cut between characters, keeping its extension.
    /// Worked on Unicode scalars, never on `Character`s: a `/` followed by
    /// a combining mark is one Character, and still a `/` to the kernel.
    public static func safe(_ raw: String) -> String? {
        var scalars = Array(raw.unicodeScalars)
        if let separator = scalars.lastIndex(where: { $0 == "/" || $0 == "\\" }) {
            scalars.removeSubrange(...separator)
        }
        scalars = scalars.map { Printable.isControl($0) ? "_" : $0 }
        let leading = scalars.prefix { $0 == "." || $0.properties.isWhitespace }.count
        scalars.removeFirst(leading)
        while let last = scalars.last, last.properties.isWhitespace { scalars.removeLast() }
        guard !scalars.isEmpty else { return nil }
        return String(String.UnicodeScalarView(fitted(scalars)))
    }

    /// At most `maximumBytes` of UTF-8: the stem cut, the extension (up to
    /// 40 bytes after the last dot) kept.
    private static func fitted(_ scalars: [Unicode.Scalar]) -> [Unicode.Scalar] {
        func length<S: Sequence<Unicode.Scalar>>(_ part: S) -> Int { part.reduce(0) { $0 + UTF8.width($1) } }
        guard length(scalars) > maximumBytes else { return scalars }
        var stem = scalars, ext: [Unicode.Scalar] = []
        if let dot = scalars.lastIndex(of: "."), dot > 0, (1...40).contains(length(scalars[(dot + 1)...])) {
            stem = Array(scalars[..<dot])
            ext = Array(scalars[dot...])
        }
        var room = maximumBytes - length(ext)
        var kept: [Unicode.Scalar] = []
        for scalar in stem {
            room -= UTF8.width(scalar)
            guard room >= 0 else { break }
            kept.append(scalar)
        }
        return kept + ext
    }
}

extension Destinations {
    /// What a download named by its server does with the path that name
    /// gives (`JobParser.serverNamedPath`), decided when the answer comes.
    public enum ServerNameDecision: Equatable, Sendable {
        /// Published there (the path itself, or `name.N.ext` for `rename`).
        case use(String)
        /// `overwrite = "skip"`: the file is there already, or another task brings it.
        case skip(reason: String, existing: String?)
        case fail(reason: String, code: FailureCode)
    }

    /// `path` for `task`, by the rules a job's destination meets when its
    /// task is created: against the other live tasks' destinations (theirs
    /// and what their servers named) and the files on disk. The task's own
    /// destination, where its partial file is, stays its own: its server
    /// may give that very name; its partial file's name is never free.
    public static func decide(serverNamed path: String, for task: TaskState, in state: AgentState,
                              exists: (String) -> Bool) -> ServerNameDecision {
        guard let own = task.spec.dest else { return .use(path) }
        let part = partPath(of: own)
        if PathRules.isSame(path, own) || PathRules.isSame(path, part) { return .use(own) }
        func onDisk(_ candidate: String) -> Bool { PathRules.isSame(candidate, part) || exists(candidate) }
        let overwrite = task.spec.overwrite
        if overwrite == .rename {
            return .use(firstFree(path, owner: task.id, in: state, exists: onDisk).path)
        }
        if let holder = holder(of: path, in: state, except: task.id) {
            let phase = state[holder]?.phase.rawValue ?? "live"
            if overwrite == .skip {
                return .skip(reason: "skipped: task \(holder) (\(phase)) already brings \(path)", existing: nil)
            }
            return .fail(reason: "its server names it \(path), the destination of task \(holder) (\(phase)); "
                         + "two tasks never write one file (overwrite = \"\(overwrite.rawValue)\")", code: .destReserved)
        }
        guard onDisk(path) else { return .use(path) }
        switch overwrite {
        case .skip: return .skip(reason: "skipped: \(path) already exists", existing: path)
        case .fail: return .fail(reason: "\(path) already exists (overwrite = \"fail\")", code: .destExists)
        case .replace, .update, .rename: return .use(path)
        }
    }
}

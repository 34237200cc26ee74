import Foundation

/// An HLS video retargeted (`syncagent retarget`) to a playlist at another
/// URL: which of its children go on from where. A segment is the same one
/// when the new playlist lists it under the same media sequence number,
/// with the same file name and byte range: the rule a live playlist read
/// again is held to (`HLSFanOut.changeSinceTaken`), since CDNs sign segment
/// URLs anew, in the query or the path, and move them between hosts.
/// Segments taken (finished) are kept as they are; every other one, and the
/// key and init segment it needs, is fetched from the new playlist's URL.
public enum HLSRetarget {
    public struct Move: Hashable, Sendable {
        public var child: String
        public var url: String
        public init(child: String, url: String) { self.child = child; self.url = url }
    }

    public enum Plan: Equatable, Sendable {
        /// The children to move (those already at that URL are not listed).
        case moves([Move])
        /// The new playlist is not this video's: why.
        case refused(String)
    }

    public static func plan(parent: TaskState, playlist: HLSMediaPlaylist, url: String, in state: AgentState) -> Plan {
        let shown = Redaction.url(url)
        let bySequence = Dictionary(playlist.segments.map { ($0.sequence, $0) }, uniquingKeysWith: { first, _ in first })
        func fileName(_ url: String) -> Substring? { URLComponents(string: url)?.path.split(separator: "/").last }
        var moves: [Move] = [], moved: Set<String> = []
        func move(_ id: String?, to target: String?, what: String, of sequence: Int64) -> String? {
            guard let id, let child = state[id], child.phase != .finished, !moved.contains(id) else { return nil }
            guard let target else { return "the playlist at \(shown) lists segment \(sequence) without its \(what)" }
            moved.insert(id)
            if target != child.currentURL { moves.append(Move(child: id, url: target)) }
            return nil
        }
        for entry in parent.hls?.entries ?? [] {
            guard let child = state[entry.child] else { continue }
            if child.phase == .finished {
                // Taken: kept whatever the new playlist says; the key or init segment it plays with may not be yet.
                guard let segment = bySequence[entry.sequence] else { continue }
                if segment.key != nil { _ = move(entry.keyChild, to: segment.key?.uri, what: "key", of: entry.sequence) }
                if segment.map != nil { _ = move(entry.mapChild, to: segment.map?.uri, what: "init segment", of: entry.sequence) }
                continue
            }
            guard let segment = bySequence[entry.sequence] else {
                return .refused("the playlist at \(shown) does not list segment \(entry.sequence), which is not taken yet")
            }
            guard fileName(segment.uri) == fileName(child.spec.url), segment.range == child.spec.byteRange else {
                return .refused("the playlist at \(shown) is another video: its segment \(entry.sequence) is "
                                + "\(Redaction.url(segment.uri)), not \(Redaction.url(child.spec.url))")
            }
            if let refusal = move(entry.child, to: segment.uri, what: "media", of: entry.sequence)
                ?? move(entry.keyChild, to: segment.key?.uri, what: "key", of: entry.sequence)
                ?? move(entry.mapChild, to: segment.map?.uri, what: "init segment", of: entry.sequence) {
                return .refused(refusal)
            }
        }
        return .moves(moves)
    }
}

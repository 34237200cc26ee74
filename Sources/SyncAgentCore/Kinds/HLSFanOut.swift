import Foundation

/// What an HLS parent does with a media playlist it read (SPEC §10), as a
/// pure decision: the child tasks to create for segments it has not taken
/// yet (and for the keys and init segments they need), and the `expanded`
/// event that records them in playback order.
public enum HLSFanOut {
    public struct Plan: Equatable, Sendable {
        public var children: [Child]
        public var expanded: Expanded
        /// Set when a live playlist read again is no longer the one taken: why it ends here.
        public var endedBecause: String?
    }

    public struct Child: Equatable, Sendable {
        public var id: String
        public var spec: TaskSpec
    }

    public struct Refusal: Error, Equatable, CustomStringConvertible, Sendable {
        public var description: String
        public var code: FailureCode
    }

    /// The folder beside the destination where children download: the
    /// parent's reserved partial name, so no other task can use it.
    public static func workDirectory(of parent: TaskState) -> String? { parent.partPath }

    public static func plan(parent: TaskState, playlist: HLSMediaPlaylist, url: String, in state: AgentState) throws -> Plan {
        guard let work = workDirectory(of: parent) else {
            throw Refusal(description: "an HLS task needs a destination", code: .localError)
        }
        let options = parent.spec.hls ?? HLSOptions()
        if !playlist.ended, options.maxDurationS == nil {
            throw Refusal(description: "key \"max_duration\" is required for a live playlist (it has no #EXT-X-ENDLIST): "
                          + "say how many seconds of media to take", code: .maxDurationMissing)
        }
        let limitMs = options.maxDurationS.map { Int64($0) * 1000 }
        var mediaMs = parent.hls?.mediaMs ?? 0
        let after = parent.hls?.lastSequence ?? Int64.min
        var taken = Set(state.tasks.keys)
        var byURL: [String: String] = [:]
        for id in state.children[parent.id] ?? [] {
            if let child = state[id], child.spec.dest.map({ !$0.hasSuffix(".ts") && !$0.hasSuffix(".m4s") }) == true {
                byURL[Self.supportKey(child.spec.url, child.spec.byteRange)] = id
            }
        }
        var children: [Child] = []
        var entries: [HLSEntry] = []
        var limitReached = false

        func child(_ name: String, url: String, range: HLSByteRange?) -> String {
            var id = "\(parent.id).\(name)"
            var suffix = 2
            while taken.contains(id) { id = "\(parent.id).\(name)-\(suffix)"; suffix += 1 }
            taken.insert(id)
            // The job's credentials go to the job's own host only, never to a CDN a playlist names.
            let sameHost = URLRules.hostKey(url) == URLRules.hostKey(parent.spec.url)
            let spec = TaskSpec(url: url, kind: .download, dest: "\(work)/\(name)", priority: parent.spec.priority,
                                overwrite: .replace, headers: parent.spec.headers.filter { sameHost || !$0.isSecret },
                                batch: parent.spec.batch, notify: .none,
                                retries: parent.spec.retries, maxSpeed: parent.spec.maxSpeed, parent: parent.id, byteRange: range,
                                minSpeed: parent.spec.minSpeed, minSpeedTimeS: parent.spec.minSpeedTimeS)
            children.append(Child(id: id, spec: spec))
            return id
        }
        func support(_ prefix: String, _ ext: String, url: String, range: HLSByteRange?) -> String {
            let key = supportKey(url, range)
            if let id = byURL[key] { return id }
            let id = child("\(prefix)\(byURL.count)\(ext)", url: url, range: range)
            byURL[key] = id
            return id
        }

        if let change = changeSinceTaken(playlist, taken: parent.hls?.entries ?? [], in: state) {
            // What was taken is one video; the playlist's new segments belong to another.
            return Plan(children: [], expanded: Expanded(playlist: url, targetDurationMs: playlist.targetDurationMs, ended: true,
                                                         entries: []), endedBecause: change)
        }
        for segment in playlist.segments where segment.sequence > after {
            if let limitMs, mediaMs >= limitMs { limitReached = true; break }
            // Segments a live playlist dropped while we were away: the player must know of the gap.
            let gap = entries.isEmpty && after != Int64.min && segment.sequence > after &+ 1
            let keyChild = segment.key.map { support("key", ".key", url: $0.uri, range: nil) }
            let mapChild = segment.map.map { support("init", ".mp4", url: $0.uri, range: $0.range) }
            let ext = segment.map == nil ? ".ts" : ".m4s"
            let id = child("seg\(segment.sequence)\(ext)", url: segment.uri, range: segment.range)
            entries.append(HLSEntry(child: id, durationMs: segment.durationMs, sequence: segment.sequence,
                                    discontinuity: segment.discontinuity || gap, keyChild: keyChild,
                                    iv: segment.key.map { Hex.encode($0.iv(forSequence: segment.sequence)) }, mapChild: mapChild))
            mediaMs += segment.durationMs
        }
        if let limitMs, mediaMs >= limitMs { limitReached = true }
        // Child ids name files too: the dest of "<parent>.seg7.ts" is "<work>/seg7.ts".
        return Plan(children: children, expanded: Expanded(playlist: url, targetDurationMs: playlist.targetDurationMs,
                                                         ended: playlist.ended || limitReached, entries: entries))
    }

    /// Why a live playlist read again is not the one taken, if it is not: it
    /// must list the segments taken under the same numbers, and never go back
    /// before them (RFC 8216 §6.2.1). One that changed (an encoder restarted,
    /// a variant switched under its URL) would have two videos joined.
    /// Segments are told apart by file name and byte range: CDNs sign segment
    /// URLs anew on every read, in the query or the path, and move them
    /// between edge hosts.
    static func changeSinceTaken(_ playlist: HLSMediaPlaylist, taken: [HLSEntry], in state: AgentState) -> String? {
        guard let first = taken.first?.sequence, let last = taken.last?.sequence else { return nil }
        let bySequence = Dictionary(taken.map { ($0.sequence, $0.child) }, uniquingKeysWith: { old, _ in old })
        func fileName(_ url: String) -> Substring? { URLComponents(string: url)?.path.split(separator: "/").last }
        for segment in playlist.segments where segment.sequence <= last {
            if segment.sequence < first {
                return "the live playlist went back to segment \(segment.sequence), before the first one taken (\(first))"
            }
            guard let id = bySequence[segment.sequence], let child = state[id] else { continue }
            if fileName(child.spec.url) != fileName(segment.uri) || child.spec.byteRange != segment.range {
                return "the live playlist changed segment \(segment.sequence) (\(Redaction.url(child.spec.url)) → "
                    + "\(Redaction.url(segment.uri)))"
            }
        }
        return nil
    }

    private static func supportKey(_ url: String, _ range: HLSByteRange?) -> String {
        range.map { "\(url)#\($0.offset ?? 0)+\($0.length)" } ?? url
    }
}

public enum Hex {
    /// Lowercase hex, without String(format:) (which costs ~14k instructions
    /// a byte). Inlinable, so a caller's digest type is iterated specialized.
    @inlinable
    public static func encode<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        for byte in bytes {
            out.append(digit(byte >> 4))
            out.append(digit(byte & 0x0F))
        }
        return String(decoding: out, as: UTF8.self)
    }

    @inlinable
    public static func digit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 0x30 + nibble : 0x57 + nibble }

    public static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        var index = 0
        while index < chars.count {
            guard let high = nibble(chars[index]), let low = nibble(chars[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func nibble(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// The playlist a player reads offline: every segment as a local file,
/// no key (segments are decrypted), `#EXT-X-ENDLIST`.
public enum HLSLocalPlaylist {
    /// Local file names: `0.ts`, `1.ts`, … (`.m4s` after an init segment),
    /// init segments `init.mp4` (`init-1.mp4` … when the playlist changes them).
    public static func names(of entries: [HLSEntry]) -> (segments: [String], inits: [String: String]) {
        var inits: [String: String] = [:]
        var segments: [String] = []
        for (index, entry) in entries.enumerated() {
            if let map = entry.mapChild, inits[map] == nil {
                inits[map] = inits.isEmpty ? "init.mp4" : "init-\(inits.count).mp4"
            }
            segments.append("\(index)" + (entry.mapChild == nil ? ".ts" : ".m4s"))
        }
        return (segments, inits)
    }

    public static func text(entries: [HLSEntry], targetDurationMs: Int64) -> String {
        let (segments, inits) = names(of: entries)
        let longest = max(targetDurationMs, entries.map(\.durationMs).max() ?? 0)
        var lines = ["#EXTM3U", "#EXT-X-VERSION:\(inits.isEmpty ? 3 : 7)",
                     "#EXT-X-TARGETDURATION:\((longest + 999) / 1000)", "#EXT-X-MEDIA-SEQUENCE:0",
                     "#EXT-X-PLAYLIST-TYPE:VOD"]
        var currentInit: String?
        for (index, entry) in entries.enumerated() {
            if entry.discontinuity { lines.append("#EXT-X-DISCONTINUITY") }
            if let map = entry.mapChild, inits[map] != currentInit {
                currentInit = inits[map]
                lines.append("#EXT-X-MAP:URI=\"\(currentInit!)\"")
            }
            lines.append("#EXTINF:\(entry.durationMs / 1000).\(String(entry.durationMs % 1000).leftPadded(3)),")
            lines.append(segments[index])
        }
        lines.append("#EXT-X-ENDLIST")
        return lines.joined(separator: "\n") + "\n"
    }
}

private extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

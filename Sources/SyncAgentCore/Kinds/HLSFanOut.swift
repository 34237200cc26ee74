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

    /// A rendition chosen (`HLSRenditionChoice`) and its media playlist as read.
    public struct RenditionPlaylist: Equatable, Sendable {
        public var rendition: HLSRendition
        public var playlist: HLSMediaPlaylist
        public var url: String
        public init(rendition: HLSRendition, playlist: HLSMediaPlaylist, url: String) {
            self.rendition = rendition; self.playlist = playlist; self.url = url
        }
    }

    /// - Parameters:
    ///   - renditions: the variant's separate sound and subtitles, read with its first playlist
    ///     (a video with them is a VOD: their segments are children once, as the video's are).
    ///   - variant: the variant chosen from a master, for the local master playlist.
    public static func plan(parent: TaskState, playlist: HLSMediaPlaylist, url: String, renditions: [RenditionPlaylist] = [],
                            variant: HLSVariant? = nil, in state: AgentState) throws -> Plan {
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
        // A rendition plays beside the video: cut where the video was (`max_duration`), never longer.
        let videoMs = entries.reduce(Int64(0)) { $0 &+ $1.durationMs }
        var tracks: [HLSTrack] = []
        for taken in renditions {
            let kind = taken.rendition.kind
            guard let first = taken.playlist.segments.first else {
                throw Refusal(description: "the \(kind == .audio ? "sound" : "subtitles") playlist \(Redaction.url(taken.url)) has no segments",
                              code: .badPlaylist)
            }
            let segmentExtension = Self.segmentExtension(first, kind: kind)
            var trackMs: Int64 = 0
            var trackEntries: [HLSEntry] = []
            for segment in taken.playlist.segments {
                if limitReached, trackMs >= videoMs { break }
                let keyChild = segment.key.map { support("key", ".key", url: $0.uri, range: nil) }
                let mapChild = segment.map.map { support("init", ".mp4", url: $0.uri, range: $0.range) }
                let id = child("\(kind == .audio ? "audio" : "subs")\(segment.sequence).\(segmentExtension)", url: segment.uri,
                               range: segment.range)
                trackEntries.append(HLSEntry(child: id, durationMs: segment.durationMs, sequence: segment.sequence,
                                             discontinuity: segment.discontinuity, keyChild: keyChild,
                                             iv: segment.key.map { Hex.encode($0.iv(forSequence: segment.sequence)) }, mapChild: mapChild))
                trackMs &+= segment.durationMs
            }
            tracks.append(HLSTrack(kind: kind, playlist: taken.url, language: taken.rendition.language, name: taken.rendition.name,
                                   targetDurationMs: taken.playlist.targetDurationMs, segmentExtension: segmentExtension,
                                   entries: trackEntries))
        }
        let separate = tracks.isEmpty ? nil : HLSRenditions(bandwidth: variant?.bandwidth, resolution: variant?.resolution,
                                                            codecs: variant?.codecs, tracks: tracks)
        // Child ids name files too: the dest of "<parent>.seg7.ts" is "<work>/seg7.ts".
        return Plan(children: children, expanded: Expanded(playlist: url, targetDurationMs: playlist.targetDurationMs,
                                                         ended: playlist.ended || limitReached, entries: entries,
                                                         renditions: separate))
    }

    /// The extension a rendition's segments are published with: what players tell formats by.
    /// fMP4 after an init segment; packed audio (`.aac`, `.mp3`, `.ac3`, `.ec3`) as named; WebVTT as `.vtt`.
    static func segmentExtension(_ segment: HLSSegment, kind: HLSRendition.Kind) -> String {
        if segment.map != nil { return "m4s" }
        if kind == .subtitles { return "vtt" }
        let name = URLComponents(string: segment.uri)?.path.split(separator: "/").last ?? ""
        let given = name.split(separator: ".").count > 1 ? name.split(separator: ".").last.map { $0.lowercased() } ?? "" : ""
        return ["aac", "mp3", "ac3", "ec3", "eac3"].contains(given) ? given : "ts"
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
    /// A rendition's files take a prefix (`audio-0.ts`) and its segments' extension.
    public static func names(of entries: [HLSEntry], prefix: String = "",
                             segmentExtension: String? = nil) -> (segments: [String], inits: [String: String]) {
        var inits: [String: String] = [:]
        var segments: [String] = []
        for (index, entry) in entries.enumerated() {
            if let map = entry.mapChild, inits[map] == nil {
                inits[map] = prefix + (inits.isEmpty ? "init.mp4" : "init-\(inits.count).mp4")
            }
            segments.append(prefix + "\(index)" + (segmentExtension.map { "." + $0 } ?? (entry.mapChild == nil ? ".ts" : ".m4s")))
        }
        return (segments, inits)
    }

    public static func text(entries: [HLSEntry], targetDurationMs: Int64, prefix: String = "",
                            segmentExtension: String? = nil) -> String {
        let (segments, inits) = names(of: entries, prefix: prefix, segmentExtension: segmentExtension)
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

/// The master playlist of a video published with its renditions: `index.m3u8`
/// naming `video.m3u8`, `audio.m3u8` and `subs.m3u8` beside it. Every file
/// name is the agent's own; what the server said (a language, a name, codecs)
/// is written only when it is safe inside a quoted attribute, else left out.
public enum HLSLocalMaster {
    public static let videoPlaylist = "video.m3u8"

    public static func playlist(of kind: HLSRendition.Kind) -> String { kind == .audio ? "audio.m3u8" : "subs.m3u8" }
    /// What a rendition's segment and init file names start with.
    public static func prefix(of kind: HLSRendition.Kind) -> String { kind == .audio ? "audio-" : "subs-" }

    public static func text(_ renditions: HLSRenditions) -> String {
        var lines = ["#EXTM3U", "#EXT-X-VERSION:3"]
        var stream = ["BANDWIDTH=\(max(renditions.bandwidth ?? 1, 1))"]
        if let resolution = renditions.resolution, resolution.range(of: #"^[0-9]{1,5}x[0-9]{1,5}$"#, options: .regularExpression) != nil {
            stream.append("RESOLUTION=\(resolution)")
        }
        if let codecs = renditions.codecs, codecs.count <= 200,
           codecs.range(of: #"^[A-Za-z0-9.,+ -]+$"#, options: .regularExpression) != nil {
            stream.append("CODECS=\"\(codecs)\"")
        }
        for track in renditions.tracks {
            let group = track.kind == .audio ? "audio" : "subs"
            var attributes = ["TYPE=\(track.kind == .audio ? "AUDIO" : "SUBTITLES")", "GROUP-ID=\"\(group)\""]
            let language = track.language.flatMap { HLSRenditionChoice.isLanguageTag($0) ? $0 : nil }
            attributes.append("NAME=\"\(safeName(track.name) ?? language ?? group)\"")
            if let language { attributes.append("LANGUAGE=\"\(language)\"") }
            attributes += ["DEFAULT=YES", "AUTOSELECT=YES", "URI=\"\(playlist(of: track.kind))\""]
            lines.append("#EXT-X-MEDIA:" + attributes.joined(separator: ","))
            stream.append("\(track.kind == .audio ? "AUDIO" : "SUBTITLES")=\"\(group)\"")
        }
        lines.append("#EXT-X-STREAM-INF:" + stream.joined(separator: ","))
        lines.append(videoPlaylist)
        return lines.joined(separator: "\n") + "\n"
    }

    /// A rendition's NAME, without what would end its quoted attribute or line: at most 64 characters.
    static func safeName(_ name: String?) -> String? {
        guard let name else { return nil }
        let kept = String(String.UnicodeScalarView(name.unicodeScalars.filter {
            $0 != "\"" && !$0.properties.generalCategory.isControlLike
        }).prefix(64)).trimmingCharacters(in: .whitespaces)
        return kept.isEmpty ? nil : kept
    }
}

private extension Unicode.GeneralCategory {
    /// Control, format, separator (line and paragraph), unassigned and private code points.
    var isControlLike: Bool {
        switch self {
        case .control, .format, .lineSeparator, .paragraphSeparator, .unassigned, .privateUse, .surrogate: true
        default: false
        }
    }
}

private extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

import Foundation

/// An HLS playlist (RFC 8216) as a server sent it: untrusted text, parsed
/// with limits. Tags this agent does not need are ignored, never fatal.
public enum HLSPlaylist: Equatable, Sendable {
    case master([HLSVariant])
    case media(HLSMediaPlaylist)

    /// At most this many segments in one playlist (a 24-hour VOD in 1 s segments is 86,400).
    public static let maximumSegments = 200_000
    /// At most this many `#EXT-X-MEDIA` renditions in one master (streaming services offer a few dozen).
    public static let maximumRenditions = 20_000

    public struct ParseError: Error, Equatable, CustomStringConvertible, Sendable {
        public var message: String
        public var description: String { message }
    }

    /// - Parameter base: the playlist's final URL (after redirects): relative URIs resolve against it.
    ///
    /// Read as mainstream players (hls.js, ffmpeg) read playlists where RFC 8216 is broken in
    /// harmless ways: any line ending (LF, CRLF, CR), a byte order mark, blank lines, whitespace
    /// around a line, a tag's value (`#EXT-X-TARGETDURATION: 10`) or an attribute, a decimal
    /// `#EXT-X-TARGETDURATION`, `BANDWIDTH` or `#EXTINF` written oddly (`10.0`, `.5`, `9.009 ,`),
    /// enumerated values in lower case (`METHOD=aes-128`, `TYPE=audio`, `PLAYLIST-TYPE:vod`),
    /// trailing commas, and text that is not UTF-8 where nothing is read from it (a title, a
    /// comment, a tag this agent ignores). What cannot be read safely is refused, naming it.
    public static func parse(_ bytes: [UInt8], base: String) throws -> HLSPlaylist {
        // No text holds NUL: a media segment or another binary answer.
        guard !bytes.contains(0) else { throw ParseError(message: "not an HLS playlist: the answer is not text") }
        var lines = PlaylistLine.split(bytes)[...]
        while lines.first?.text.isEmpty == true { lines.removeFirst() }
        let first = lines.first?.text ?? ""
        // `#EXTM3U`, alone or followed by whitespace (IPTV lists put attributes there).
        guard first == "#EXTM3U" || (first.hasPrefix("#EXTM3U") && first.dropFirst(7).first?.isWhitespace == true) else {
            let start = String(first.prefix(40))
            throw ParseError(message: "not an HLS playlist: it starts with \"\(start)\", not #EXTM3U")
        }
        var parser = Parser(base: base)
        for line in lines.dropFirst() where !line.text.isEmpty {
            try parser.take(line)
        }
        return try parser.finish()
    }

    private struct Parser {
        let base: String
        var variants: [HLSVariant] = []
        var pendingVariant: HLSVariant?
        /// The `AUDIO` groups whose renditions have a playlist (a URI) of their own.
        var audioGroupsWithPlaylists: Set<String> = []
        /// `#EXT-X-MEDIA` renditions of sound and subtitles, by type and group, in playlist order.
        var renditions: [HLSRendition.Kind: [String: [HLSRendition]]] = [:]
        var renditionCount = 0
        var media = HLSMediaPlaylist()
        var sawMediaTag = false
        // State that applies to the next segment, or to every following one.
        var pendingDurationMs: Int64?
        var pendingTitle = ""
        var pendingDiscontinuity = false
        var pendingRange: HLSByteRange?
        var lastRangeEnd: (uri: String, end: Int64)?
        var key: HLSKey?
        var map: HLSMap?
        var playlistTypeVOD = false

        init(base: String) { self.base = base }

        mutating func take(_ line: PlaylistLine) throws {
            guard line.text.hasPrefix("#") else {
                try line.mustBeText("a playlist URI")
                return try uri(line.text)
            }
            guard line.text.hasPrefix("#EXT") else { return }  // a comment
            let (tag, value) = split(line.text)
            // Only a title may be read from a line that is not text; a tag ignored reads nothing.
            if tag != "#EXTINF", Self.tagsRead.contains(tag) { try line.mustBeText(tag) }
            switch tag {
            case "#EXT-X-STREAM-INF":
                let attributes = HLSAttributes.parse(value)
                // As hls.js: BANDWIDTH, else AVERAGE-BANDWIDTH when BANDWIDTH is missing, unreadable or 0.
                let bandwidth = attributes["BANDWIDTH"].flatMap(HLSNumbers.bitsPerSecond)
                pendingVariant = HLSVariant(uri: "",
                                            bandwidth: bandwidth.flatMap { $0 > 0 ? $0 : nil }
                                                ?? attributes["AVERAGE-BANDWIDTH"].flatMap(HLSNumbers.bitsPerSecond) ?? bandwidth,
                                            resolution: attributes["RESOLUTION"], codecs: attributes["CODECS"],
                                            separateAudio: attributes["AUDIO"])
                pendingVariant?.audioGroup = attributes["AUDIO"]
                pendingVariant?.subtitlesGroup = attributes["SUBTITLES"]
            case "#EXT-X-MEDIA":
                try takeRendition(HLSAttributes.parse(value))
            case "#EXTINF":
                sawMediaTag = true
                let parts = value.split(separator: ",", maxSplits: 1, omittingEmptySubsequences: false)
                guard let duration = HLSNumbers.leadingMilliseconds(String(parts.first ?? "")) else {
                    throw ParseError(message: "bad #EXTINF duration \"\((parts.first ?? "").prefix(40))\"")
                }
                pendingDurationMs = duration
                pendingTitle = parts.count > 1 ? String(parts[1]) : ""
            case "#EXT-X-TARGETDURATION":
                sawMediaTag = true
                // An integer by the RFC; `10.0` or `6.006` in the wild: read as hls.js and ffmpeg read it, to the second.
                guard let ms = HLSNumbers.leadingMilliseconds(value) else {
                    throw ParseError(message: "bad #EXT-X-TARGETDURATION \"\(value.prefix(40))\"")
                }
                media.targetDurationMs = ms / 1000 * 1000
            case "#EXT-X-MEDIA-SEQUENCE":
                guard let sequence = HTTPNumbers.parseCount(value) else {
                    throw ParseError(message: "bad #EXT-X-MEDIA-SEQUENCE \"\(value.prefix(40))\"")
                }
                media.mediaSequence = sequence
            case "#EXT-X-DISCONTINUITY":
                pendingDiscontinuity = true
            case "#EXT-X-ENDLIST":
                media.ended = true
            case "#EXT-X-PLAYLIST-TYPE":
                playlistTypeVOD = value.uppercased() == "VOD"
            case "#EXT-X-BYTERANGE":
                guard let range = HLSByteRange(value) else { throw ParseError(message: "bad #EXT-X-BYTERANGE \"\(value.prefix(40))\"") }
                pendingRange = range
            case "#EXT-X-KEY":
                key = try parseKey(value)
            case "#EXT-X-MAP":
                let attributes = HLSAttributes.parse(value)
                guard let uri = attributes["URI"] else { throw ParseError(message: "#EXT-X-MAP without a URI") }
                let resolved = try resolve(uri, what: "the URI of #EXT-X-MAP")
                var range: HLSByteRange?
                if let text = attributes["BYTERANGE"] {
                    guard let parsed = HLSByteRange(text), parsed.offset != nil else {
                        throw ParseError(message: "bad BYTERANGE in #EXT-X-MAP \"\(text.prefix(40))\"")
                    }
                    range = parsed
                }
                map = HLSMap(uri: resolved, range: range)
            default:
                break
            }
        }

        /// `#EXT-X-MEDIA` of sound or subtitles (video and closed-caption renditions are not fetched).
        /// A URI is held to the rules of every URI a playlist gives, whether or not it is chosen.
        mutating func takeRendition(_ attributes: [String: String]) throws {
            guard let kind = attributes["TYPE"].flatMap({ HLSRendition.Kind(rawValue: $0.lowercased()) }),
                  let group = attributes["GROUP-ID"] else { return }
            guard renditionCount < HLSPlaylist.maximumRenditions else {
                throw ParseError(message: "more than \(HLSPlaylist.maximumRenditions) #EXT-X-MEDIA renditions in one master playlist")
            }
            renditionCount += 1
            let uri = try attributes["URI"].map { try resolve($0, what: "the URI of #EXT-X-MEDIA") }
            if kind == .audio, uri != nil { audioGroupsWithPlaylists.insert(group) }
            renditions[kind, default: [:]][group, default: []].append(
                HLSRendition(kind: kind, group: group, language: attributes["LANGUAGE"], name: attributes["NAME"],
                             isDefault: attributes["DEFAULT"]?.uppercased() == "YES",
                             autoselect: attributes["AUTOSELECT"]?.uppercased() == "YES", uri: uri))
        }

        /// The tags whose values this parser reads.
        static let tagsRead: Set<String> = [
            "#EXT-X-STREAM-INF", "#EXT-X-MEDIA", "#EXTINF", "#EXT-X-TARGETDURATION", "#EXT-X-MEDIA-SEQUENCE",
            "#EXT-X-DISCONTINUITY", "#EXT-X-ENDLIST", "#EXT-X-PLAYLIST-TYPE", "#EXT-X-BYTERANGE", "#EXT-X-KEY", "#EXT-X-MAP",
        ]

        /// `#TAG:value` → the tag and its value, each without the whitespace around it.
        func split(_ line: String) -> (String, String) {
            guard let colon = line.firstIndex(of: ":") else { return (line, "") }
            return (line[..<colon].trimmingCharacters(in: .whitespaces), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }

        /// The URI against the playlist's URL, held to the job URL's rules
        /// (`URLRules.checkTransferURL`): what is wrong with it is said as
        /// those rules say it (a signed URL past 8 KiB is too long, not "not http").
        func resolve(_ uri: String, what: String) throws -> String {
            guard let resolved = URL(string: uri, relativeTo: URL(string: base))?.absoluteString else {
                throw ParseError(message: "\(what) is not a URL: \"\(Redaction.url(String(uri.prefix(80))))\"")
            }
            do {
                try URLRules.checkTransferURL(resolved, key: "uri")
            } catch let error as KeyError {
                throw ParseError(message: "\(what) \(error.problem)")
            }
            return resolved
        }

        func parseKey(_ value: String) throws -> HLSKey? {
            let attributes = HLSAttributes.parse(value)
            // The method's name in any case (`aes-128`): one meaning, however written.
            switch attributes["METHOD"]?.uppercased() {
            case "NONE":
                return nil
            case "AES-128":
                guard let uri = attributes["URI"] else { throw ParseError(message: "#EXT-X-KEY METHOD=AES-128 without a URI") }
                let resolved = try resolve(uri, what: "the URI of #EXT-X-KEY")
                var iv: [UInt8]?
                if let text = attributes["IV"] {
                    guard let bytes = HLSNumbers.iv(text) else { throw ParseError(message: "bad IV in #EXT-X-KEY") }
                    iv = bytes
                }
                return HLSKey(uri: resolved, iv: iv)
            case let method:
                throw ParseError(message: "segments encrypted with METHOD=\(method ?? "none given") (DRM) cannot be decrypted; only AES-128 can")
            }
        }

        mutating func uri(_ line: String) throws {
            let resolved = try resolve(line, what: "a playlist URI")
            if var variant = pendingVariant {
                variant.uri = resolved
                variants.append(variant)
                pendingVariant = nil
                return
            }
            guard let duration = pendingDurationMs else { return }  // a URI without #EXTINF is not a segment
            guard media.segments.count < HLSPlaylist.maximumSegments else {
                throw ParseError(message: "more than \(HLSPlaylist.maximumSegments) segments in one playlist")
            }
            var range = pendingRange
            if var given = range, given.offset == nil {
                // No offset: the sub-range starts where the previous one of this URI ended.
                guard let last = lastRangeEnd, last.uri == resolved else {
                    throw ParseError(message: "#EXT-X-BYTERANGE without an offset, and no earlier range of \(Redaction.url(resolved))")
                }
                given.offset = last.end
                range = given
            }
            if let range, let offset = range.offset { lastRangeEnd = (resolved, offset + range.length) }
            let sequence = media.mediaSequence + Int64(media.segments.count)
            media.segments.append(HLSSegment(uri: resolved, durationMs: duration, sequence: sequence,
                                             discontinuity: pendingDiscontinuity, range: range, key: key, map: map))
            pendingDurationMs = nil
            pendingDiscontinuity = false
            pendingRange = nil
            pendingTitle = ""
        }

        func finish() throws -> HLSPlaylist {
            if !variants.isEmpty {
                // (An AUDIO group whose renditions all lack a URI plays from the variant's own segments.)
                let someHaveAPicture = variants.contains { $0.resolution != nil }
                return .master(variants.map { variant in
                    var variant = variant
                    if let group = variant.separateAudio, !audioGroupsWithPlaylists.contains(group) { variant.separateAudio = nil }
                    variant.audioRenditions = variant.audioGroup.flatMap { renditions[.audio]?[$0] } ?? []
                    variant.subtitleRenditions = variant.subtitlesGroup.flatMap { renditions[.subtitles]?[$0] } ?? []
                    variant.isAudioOnly = HLSCodecs.audioOnly(variant.codecs)
                        ?? (variant.resolution == nil && someHaveAPicture)
                    return variant
                })
            }
            guard sawMediaTag else { throw ParseError(message: "an HLS playlist with neither variants nor segments") }
            var result = media
            if playlistTypeVOD { result.ended = true }
            if result.targetDurationMs == 0 {
                result.targetDurationMs = max(1000, result.segments.map(\.durationMs).max() ?? 1000)
            }
            return .media(result)
        }
    }
}

public struct HLSVariant: Equatable, Sendable {
    public var uri: String
    public var bandwidth: Int64?
    /// `1280x720`, as written.
    public var resolution: String?
    public var codecs: String?
    /// Its `AUDIO` group, when an `#EXT-X-MEDIA:TYPE=AUDIO` of that group has a playlist of
    /// its own: the sound is not in the variant's segments.
    public var separateAudio: String?
    /// Sound without a picture: its `CODECS` are all audio codecs, or, without `CODECS`, it
    /// has no `RESOLUTION` where others of its master have one.
    public var isAudioOnly = false
    /// Its `AUDIO` and `SUBTITLES` group ids, as written.
    public var audioGroup: String?
    public var subtitlesGroup: String?
    /// The renditions of those groups the master defines, in its order.
    public var audioRenditions: [HLSRendition] = []
    public var subtitleRenditions: [HLSRendition] = []

    public init(uri: String, bandwidth: Int64? = nil, resolution: String? = nil, codecs: String? = nil,
                separateAudio: String? = nil, isAudioOnly: Bool = false) {
        self.uri = uri; self.bandwidth = bandwidth; self.resolution = resolution; self.codecs = codecs
        self.separateAudio = separateAudio; self.isAudioOnly = isAudioOnly
    }

    /// `variant = "best" | "worst" | BANDWIDTH | "WxH"` (a job key): the
    /// highest or lowest bandwidth, the one closest to a bandwidth, or the
    /// one with that resolution. nil when no variant matches. The job asks
    /// for a video: an audio-only variant is chosen only from a master
    /// that offers nothing else (a radio station's).
    public static func pick(_ variants: [HLSVariant], rule: String) -> HLSVariant? {
        let withPicture = variants.filter { !$0.isAudioOnly }
        let candidates = withPicture.isEmpty ? variants : withPicture
        let byBandwidth = candidates.enumerated().sorted { ($0.element.bandwidth ?? 0, $0.offset) < ($1.element.bandwidth ?? 0, $1.offset) }.map(\.element)
        switch rule {
        case "best": return byBandwidth.last
        case "worst": return byBandwidth.first
        default:
            if let wanted = HTTPNumbers.parseCount(rule) {
                return byBandwidth.min { abs(($0.bandwidth ?? 0) - wanted) < abs(($1.bandwidth ?? 0) - wanted) }
            }
            return byBandwidth.last { $0.resolution?.lowercased() == rule.lowercased() }
        }
    }
}

/// An `#EXT-X-MEDIA` rendition of sound or subtitles (RFC 8216 §4.3.4.1).
public struct HLSRendition: Equatable, Sendable {
    public enum Kind: String, Codable, Sendable {
        case audio, subtitles
    }

    public var kind: Kind
    public var group: String
    /// RFC 5646, as the server wrote it (untrusted text).
    public var language: String?
    public var name: String?
    public var isDefault: Bool
    public var autoselect: Bool
    /// Its media playlist, resolved; nil: it plays from the variant's own segments.
    public var uri: String?

    public init(kind: Kind, group: String, language: String? = nil, name: String? = nil, isDefault: Bool = false,
                autoselect: Bool = false, uri: String? = nil) {
        self.kind = kind; self.group = group; self.language = language; self.name = name
        self.isDefault = isDefault; self.autoselect = autoselect; self.uri = uri
    }
}

public struct HLSByteRange: Codable, Equatable, Sendable {
    public var length: Int64
    public var offset: Int64?

    public init(length: Int64, offset: Int64?) { self.length = length; self.offset = offset }

    /// `n[@o]`.
    public init?(_ text: String) {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard (1...2).contains(parts.count), let length = HTTPNumbers.parseCount(parts[0]), length > 0,
              length <= HTTPNumbers.maximumLength else { return nil }
        self.length = length
        if parts.count == 2 {
            guard let offset = HTTPNumbers.parseCount(parts[1]), offset <= HTTPNumbers.maximumLength else { return nil }
            self.offset = offset
        }
    }
}

/// AES-128 (the only method that can be decrypted without DRM).
public struct HLSKey: Equatable, Sendable {
    public var uri: String
    /// 16 bytes from the tag; nil: the media sequence number is the IV.
    public var iv: [UInt8]?

    /// The IV of the segment with this media sequence number (RFC 8216 §5.2).
    public func iv(forSequence sequence: Int64) -> [UInt8] {
        if let iv { return iv }
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<8 { bytes[15 - index] = UInt8(truncatingIfNeeded: UInt64(bitPattern: sequence) >> (8 * UInt64(index))) }
        return bytes
    }
}

public struct HLSMap: Equatable, Sendable {
    public var uri: String
    public var range: HLSByteRange?
}

public struct HLSSegment: Equatable, Sendable {
    public var uri: String
    public var durationMs: Int64
    public var sequence: Int64
    public var discontinuity: Bool
    public var range: HLSByteRange?
    public var key: HLSKey?
    public var map: HLSMap?
}

public struct HLSMediaPlaylist: Equatable, Sendable {
    public var targetDurationMs: Int64 = 0
    public var mediaSequence: Int64 = 0
    /// `#EXT-X-ENDLIST` (or a VOD playlist type): no segment will be added.
    public var ended = false
    public var segments: [HLSSegment] = []
    public init() {}
}

/// `KEY=VALUE,KEY="quoted, value"` (RFC 8216 §4.2), read as players read it:
/// names in any case, whitespace around names and unquoted values, and a
/// trailing comma, are all harmless.
enum HLSAttributes {
    static func parse(_ text: String) -> [String: String] {
        var result: [String: String] = [:]
        var rest = Substring(text)
        while !rest.isEmpty {
            guard let equals = rest.firstIndex(of: "=") else { break }
            let name = rest[..<equals].trimmingCharacters(in: .whitespaces).uppercased()
            rest = rest[rest.index(after: equals)...].drop { $0 == " " || $0 == "\t" }
            var value: Substring
            if rest.first == "\"" {
                let body = rest.dropFirst()
                let close = body.firstIndex(of: "\"") ?? body.endIndex
                value = body[..<close]
                rest = close < body.endIndex ? body[body.index(after: close)...] : ""
                if let comma = rest.firstIndex(of: ",") { rest = rest[rest.index(after: comma)...] } else { rest = "" }
            } else {
                let comma = rest.firstIndex(of: ",") ?? rest.endIndex
                value = Substring(rest[..<comma].trimmingCharacters(in: .whitespaces))
                rest = comma < rest.endIndex ? rest[rest.index(after: comma)...] : ""
            }
            if !name.isEmpty, result[name] == nil { result[name] = String(value) }
        }
        return result
    }
}

/// What a variant's `CODECS` say of its picture (RFC 6381 names).
enum HLSCodecs {
    /// Sample entries of sound (`mp4a.40.2`, `ac-3`, `ec-3`, `opus`, `fLaC` …), by the part before the first dot.
    private static let audio: Set<String> = ["mp4a", "ac-3", "ec-3", "ac-4", "opus", "flac", "alac", "mp3", ".mp3",
                                             "dtsc", "dtse", "dtsh", "dtsl", "dtsx", "mha1", "mhm1", "vorbis"]

    /// True when every codec listed is a sound's, false when one is not, nil when none is listed.
    static func audioOnly(_ codecs: String?) -> Bool? {
        let names = (codecs ?? "").split(whereSeparator: { $0 == "," || $0 == " " })
        guard !names.isEmpty else { return nil }
        return names.allSatisfy { name in
            audio.contains(String(name.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)[0]).lowercased())
        }
    }
}

/// One line of a playlist, without its line ending and the whitespace around it.
struct PlaylistLine {
    var number: Int
    /// The line, with bytes that are not UTF-8 shown as U+FFFD.
    var text: String
    var isUTF8: Bool

    /// Lines end at LF, CRLF or CR; a UTF-8 byte order mark may open the first.
    static func split(_ bytes: [UInt8]) -> [PlaylistLine] {
        var body = bytes[...]
        if body.starts(with: [0xEF, 0xBB, 0xBF]) { body = body.dropFirst(3) }
        var lines: [PlaylistLine] = []
        var start = body.startIndex
        var index = start
        func take(upTo end: Int) {
            let raw = body[start..<end]
            let valid = String(validating: raw, as: UTF8.self)
            lines.append(PlaylistLine(number: lines.count + 1,
                                      text: (valid ?? String(decoding: raw, as: UTF8.self)).trimmingCharacters(in: .whitespaces),
                                      isUTF8: valid != nil))
        }
        while index < body.endIndex {
            let byte = body[index]
            if byte == 0x0A || byte == 0x0D {
                take(upTo: index)
                index += byte == 0x0D && index + 1 < body.endIndex && body[index + 1] == 0x0A ? 2 : 1
                start = index
            } else {
                index += 1
            }
        }
        if start < body.endIndex { take(upTo: body.endIndex) }
        return lines
    }

    /// Refuses a line something is read from whose bytes are not UTF-8: a URI guessed from them
    /// would name another file.
    func mustBeText(_ what: String) throws {
        guard isUTF8 else {
            throw HLSPlaylist.ParseError(message: "line \(number) (\(what)) is not UTF-8 text: it cannot be read safely")
        }
    }
}

enum HLSNumbers {
    /// A decimal number of seconds (`9.009`, `10`, `.5`, `10.`) at the start of `text`, as
    /// milliseconds, bounded to a day. What follows the number is not read (hls.js and ffmpeg
    /// read `#EXTINF:10 tvg-id=…,` as 10 s). nil without a digit (`-1`, `abc`).
    static func leadingMilliseconds(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).utf8
        let whole = trimmed.prefix { $0 >= 0x30 && $0 <= 0x39 }
        var fraction = trimmed.dropFirst(whole.count)
        if fraction.first == UInt8(ascii: ".") {
            fraction = fraction.dropFirst().prefix { $0 >= 0x30 && $0 <= 0x39 }
        } else {
            fraction = fraction.prefix(0)
        }
        guard !whole.isEmpty || !fraction.isEmpty else { return nil }
        let seconds = whole.isEmpty ? 0 : HTTPNumbers.parseCount(Substring(whole))
        guard let seconds, seconds <= 86_400 else { return nil }
        var ms = seconds * 1000
        let digits = Array(fraction.prefix(3))
        if !digits.isEmpty, let value = HTTPNumbers.parseCount(String(decoding: digits, as: UTF8.self)) {
            ms += value * [1, 100, 10, 1][digits.count]
        }
        return ms
    }

    /// `BANDWIDTH` bits per second: a decimal integer by the RFC, with a fraction in the wild
    /// (`1280000.0`, `65000.5`): its whole part, as hls.js's `parseInt` and ffmpeg's `atoi`
    /// read it. nil when it does not start with a digit.
    static func bitsPerSecond(_ text: String) -> Int64? {
        let whole = text.utf8.prefix { $0 >= 0x30 && $0 <= 0x39 }
        let rest = text.utf8.dropFirst(whole.count)
        // Anything after the number but a fraction is not a number read safely (`1.2e6`, `2M`).
        guard rest.isEmpty || (rest.first == UInt8(ascii: ".") && rest.dropFirst().allSatisfy { $0 >= 0x30 && $0 <= 0x39 }) else {
            return nil
        }
        return HTTPNumbers.parseCount(Substring(whole))
    }

    /// `0x` and 32 hex digits → 16 bytes.
    static func iv(_ text: String) -> [UInt8]? {
        guard text.utf8.count == 34, text.lowercased().hasPrefix("0x") else { return nil }
        return Hex.decode(String(text.dropFirst(2)))
    }
}

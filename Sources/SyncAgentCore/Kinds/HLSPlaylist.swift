import Foundation

/// An HLS playlist (RFC 8216) as a server sent it: untrusted text, parsed
/// with limits. Tags this agent does not need are ignored, never fatal.
public enum HLSPlaylist: Equatable, Sendable {
    case master([HLSVariant])
    case media(HLSMediaPlaylist)

    /// At most this many segments in one playlist (a 24-hour VOD in 1 s segments is 86,400).
    public static let maximumSegments = 200_000

    public struct ParseError: Error, Equatable, CustomStringConvertible, Sendable {
        public var message: String
        public var description: String { message }
    }

    /// - Parameter base: the playlist's final URL (after redirects): relative URIs resolve against it.
    public static func parse(_ bytes: [UInt8], base: String) throws -> HLSPlaylist {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ParseError(message: "not an HLS playlist: the answer is not text")
        }
        var lines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" || $0 == "\r" })
            .map { $0.trimmingCharacters(in: .whitespaces) }[...]
        while lines.first?.isEmpty == true { lines.removeFirst() }
        // A byte order mark may open it.
        let first = lines.first.map { $0.hasPrefix("\u{FEFF}") ? String($0.dropFirst()) : $0 }
        guard first == "#EXTM3U" else {
            let start = String((first ?? "").prefix(40))
            throw ParseError(message: "not an HLS playlist: it starts with \"\(start)\", not #EXTM3U")
        }
        var parser = Parser(base: base)
        for line in lines.dropFirst() where !line.isEmpty {
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

        mutating func take(_ line: String) throws {
            guard line.hasPrefix("#") else { return try uri(line) }
            guard line.hasPrefix("#EXT") else { return }  // a comment
            let (tag, value) = split(line)
            switch tag {
            case "#EXT-X-STREAM-INF":
                let attributes = HLSAttributes.parse(value)
                pendingVariant = HLSVariant(uri: "", bandwidth: attributes["BANDWIDTH"].flatMap(HTTPNumbers.parseCount),
                                            resolution: attributes["RESOLUTION"], codecs: attributes["CODECS"],
                                            separateAudio: attributes["AUDIO"])
            case "#EXT-X-MEDIA":
                let attributes = HLSAttributes.parse(value)
                if attributes["TYPE"] == "AUDIO", attributes["URI"] != nil, let group = attributes["GROUP-ID"] {
                    audioGroupsWithPlaylists.insert(group)
                }
            case "#EXTINF":
                sawMediaTag = true
                let parts = value.split(separator: ",", maxSplits: 1, omittingEmptySubsequences: false)
                guard let duration = HLSNumbers.milliseconds(String(parts.first ?? "")) else {
                    throw ParseError(message: "bad #EXTINF duration \"\((parts.first ?? "").prefix(40))\"")
                }
                pendingDurationMs = duration
                pendingTitle = parts.count > 1 ? String(parts[1]) : ""
            case "#EXT-X-TARGETDURATION":
                sawMediaTag = true
                guard let seconds = HTTPNumbers.parseCount(value), seconds <= 86_400 else {
                    throw ParseError(message: "bad #EXT-X-TARGETDURATION \"\(value.prefix(40))\"")
                }
                media.targetDurationMs = seconds * 1000
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
                playlistTypeVOD = value == "VOD"
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

        func split(_ line: String) -> (String, String) {
            guard let colon = line.firstIndex(of: ":") else { return (line, "") }
            return (String(line[..<colon]), String(line[line.index(after: colon)...]))
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
            switch attributes["METHOD"] {
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
                return .master(variants.map { variant in
                    var variant = variant
                    if let group = variant.separateAudio, !audioGroupsWithPlaylists.contains(group) { variant.separateAudio = nil }
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

    /// `variant = "best" | "worst" | BANDWIDTH | "WxH"` (a job key): the
    /// highest or lowest bandwidth, the one closest to a bandwidth, or the
    /// one with that resolution. nil when no variant matches.
    public static func pick(_ variants: [HLSVariant], rule: String) -> HLSVariant? {
        let byBandwidth = variants.enumerated().sorted { ($0.element.bandwidth ?? 0, $0.offset) < ($1.element.bandwidth ?? 0, $1.offset) }.map(\.element)
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

public struct HLSByteRange: Codable, Equatable, Sendable {
    public var length: Int64
    public var offset: Int64?

    public init(length: Int64, offset: Int64?) { self.length = length; self.offset = offset }

    /// `n[@o]`.
    public init?(_ text: String) {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
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

/// `KEY=VALUE,KEY="quoted, value"` (RFC 8216 §4.2).
enum HLSAttributes {
    static func parse(_ text: String) -> [String: String] {
        var result: [String: String] = [:]
        var rest = Substring(text)
        while !rest.isEmpty {
            guard let equals = rest.firstIndex(of: "=") else { break }
            let name = rest[..<equals].trimmingCharacters(in: .whitespaces)
            rest = rest[rest.index(after: equals)...]
            var value: Substring
            if rest.first == "\"" {
                let body = rest.dropFirst()
                let close = body.firstIndex(of: "\"") ?? body.endIndex
                value = body[..<close]
                rest = close < body.endIndex ? body[body.index(after: close)...] : ""
                if let comma = rest.firstIndex(of: ",") { rest = rest[rest.index(after: comma)...] } else { rest = "" }
            } else {
                let comma = rest.firstIndex(of: ",") ?? rest.endIndex
                value = rest[..<comma]
                rest = comma < rest.endIndex ? rest[rest.index(after: comma)...] : ""
            }
            if !name.isEmpty, result[name] == nil { result[name] = String(value) }
        }
        return result
    }
}

enum HLSNumbers {
    /// A decimal number of seconds (`9.009`, `10`) as milliseconds, bounded to a day.
    static func milliseconds(_ text: String) -> Int64? {
        let parts = text.trimmingCharacters(in: .whitespaces).split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = HTTPNumbers.parseCount(parts[0]), whole <= 86_400 else { return nil }
        var ms = whole * 1000
        if parts.count == 2 {
            let fraction = parts[1].prefix(3)
            guard parts[1].allSatisfy(\.isASCII), parts[1].allSatisfy(\.isNumber) else { return nil }
            if !fraction.isEmpty, let value = HTTPNumbers.parseCount(fraction) {
                ms += value * [1, 100, 10, 1][fraction.count]
            }
        }
        return ms
    }

    /// `0x` and 32 hex digits → 16 bytes.
    static func iv(_ text: String) -> [UInt8]? {
        guard text.utf8.count == 34, text.lowercased().hasPrefix("0x") else { return nil }
        return Hex.decode(String(text.dropFirst(2)))
    }
}

import Foundation
import Testing
@testable import SyncAgentCore

/// Playlists as servers really write them (issue 38 item 8): broken in ways
/// hls.js and ffmpeg shrug off, each read as they read it; and what cannot be
/// read safely, refused with the reason.
@Suite("HLS: untidy playlists read as players read them")
struct HLSUntidyPlaylistTests {
    let base = "https://cdn.example.com/talk/index.m3u8"

    func parse(_ text: String) throws -> HLSPlaylist {
        try HLSPlaylist.parse(Array(text.utf8), base: base)
    }

    func media(_ text: String) throws -> HLSMediaPlaylist {
        guard case .media(let media) = try parse(text) else { throw HLSPlaylist.ParseError(message: "not a media playlist") }
        return media
    }

    func variants(_ text: String) throws -> [HLSVariant] {
        guard case .master(let variants) = try parse(text) else { throw HLSPlaylist.ParseError(message: "not a master playlist") }
        return variants
    }

    /// The tidy playlist every untidy one below must read as.
    static let tidy = "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXT-X-MEDIA-SEQUENCE:7\n#EXTINF:9.009,\na.ts\n#EXTINF:10,\nb.ts\n#EXT-X-ENDLIST\n"

    @Test(arguments: [
        ("a space after a tag's colon", "#EXTM3U\n#EXT-X-TARGETDURATION: 10\n#EXT-X-MEDIA-SEQUENCE: 7\n#EXTINF: 9.009,\na.ts\n#EXTINF:\t10,\nb.ts\n#EXT-X-ENDLIST\n"),
        ("a space before a tag's colon", "#EXTM3U\n#EXT-X-TARGETDURATION :10\n#EXT-X-MEDIA-SEQUENCE:7\n#EXTINF :9.009,\na.ts\n#EXTINF:10,\nb.ts\n#EXT-X-ENDLIST\n"),
        ("CRLF line endings", Self.tidy.replacingOccurrences(of: "\n", with: "\r\n")),
        ("CR line endings (old Mac)", Self.tidy.replacingOccurrences(of: "\n", with: "\r")),
        ("a byte order mark", "\u{FEFF}" + Self.tidy),
        ("blank lines and indentation", "\n\n  #EXTM3U  \n\n\t#EXT-X-TARGETDURATION:10\n#EXT-X-MEDIA-SEQUENCE:7   \n\n#EXTINF:9.009,\n   a.ts   \n#EXTINF:10,\nb.ts\n\n#EXT-X-ENDLIST\n\n"),
        ("a decimal target duration", "#EXTM3U\n#EXT-X-TARGETDURATION:10.010\n#EXT-X-MEDIA-SEQUENCE:7\n#EXTINF:9.009,\na.ts\n#EXTINF:10,\nb.ts\n#EXT-X-ENDLIST\n"),
        ("#EXTINF without its comma, or with spaces before it", "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXT-X-MEDIA-SEQUENCE:7\n#EXTINF:9.009 ,\na.ts\n#EXTINF:10\nb.ts\n#EXT-X-ENDLIST\n"),
        ("#EXTINF with IPTV attributes before the title", "#EXTM3U x-tvg-url=\"http://h/epg\"\n#EXT-X-TARGETDURATION:10\n#EXT-X-MEDIA-SEQUENCE:7\n#EXTINF:9.009 tvg-id=\"a\",A\na.ts\n#EXTINF:10.000000,B\nb.ts\n#EXT-X-ENDLIST\n"),
        ("a lower-case playlist type instead of ENDLIST", "#EXTM3U\n#EXT-X-PLAYLIST-TYPE:vod\n#EXT-X-TARGETDURATION:10\n#EXT-X-MEDIA-SEQUENCE:7\n#EXTINF:9.009,\na.ts\n#EXTINF:10,\nb.ts\n"),
        ("a title and a comment that are not UTF-8 (Latin-1)", "#EXTM3U\n# caf\u{E9}\n#EXT-X-TARGETDURATION:10\n#EXT-X-MEDIA-SEQUENCE:7\n#EXTINF:9.009,caf\u{E9}\na.ts\n#EXT-X-UNKNOWN:caf\u{E9}\n#EXTINF:10,\nb.ts\n#EXT-X-ENDLIST\n"),
    ])
    func anUntidyMediaPlaylistReadsAsTheTidyOne(_ quirk: String, _ text: String) throws {
        // The Latin-1 rows are sent as Latin-1 bytes, as such a server sends them.
        let bytes = text.contains("caf\u{E9}") ? Array(text.data(using: .isoLatin1)!) : Array(text.utf8)
        let read = try HLSPlaylist.parse(bytes, base: base)
        guard case .media(let untidy) = read, case .media(var tidy) = try parse(Self.tidy) else {
            Issue.record("\(quirk): not a media playlist")
            return
        }
        // Titles are not kept; everything else must match.
        #expect(untidy.segments == tidy.segments, "\(quirk)")
        tidy.segments = untidy.segments
        #expect(untidy == tidy, "\(quirk)")
    }

    @Test func aShortDurationWithoutItsLeadingZeroIsRead() throws {
        let read = try media("#EXTM3U\n#EXTINF:.5,\na.ts\n#EXTINF:2.,\nb.ts\n#EXT-X-ENDLIST\n")
        #expect(read.segments.map(\.durationMs) == [500, 2000])
    }

    @Test func attributesWithWhitespaceLowerCaseNamesAndATrailingCommaAreRead() throws {
        let read = try media("""
            #EXTM3U
            #EXT-X-MAP: URI = "init.mp4" , BYTERANGE="720@0",
            #EXT-X-KEY: method=AES-128, uri="k.bin", IV=0x000102030405060708090A0B0C0D0E0F,
            #EXT-X-BYTERANGE: 1000 @ 2000
            #EXTINF:4,
            all.m4s
            #EXT-X-ENDLIST
            """)
        #expect(read.segments.first?.map == HLSMap(uri: "https://cdn.example.com/talk/init.mp4", range: HLSByteRange(length: 720, offset: 0)))
        #expect(read.segments.first?.key == HLSKey(uri: "https://cdn.example.com/talk/k.bin", iv: Array(0...15)))
        #expect(read.segments.first?.range == HLSByteRange(length: 1000, offset: 2000))
    }

    /// `METHOD=aes-128` is AES-128 (it was refused as DRM); `METHOD=none` is none.
    @Test func anEncryptionMethodInLowerCaseIsTheSameMethod() throws {
        let read = try media("#EXTM3U\n#EXT-X-KEY:METHOD=aes-128,URI=\"k\"\n#EXTINF:1,\na.ts\n#EXT-X-KEY:METHOD=none\n#EXTINF:1,\nb.ts\n")
        #expect(read.segments.map { $0.key != nil } == [true, false])
        #expect(throws: HLSPlaylist.ParseError.self) { try media("#EXTM3U\n#EXT-X-KEY:METHOD=sample-aes,URI=\"k\"\n#EXTINF:1,\na.ts\n") }
    }

    /// A rendition of `TYPE=audio` with a playlist of its own is still one: missed, the video was published silent.
    @Test func aLowerCaseAudioRenditionIsStillSeparateAudio() throws {
        let read = try variants("""
            #EXTM3U
            #EXT-X-MEDIA:TYPE=audio,GROUP-ID="aud",NAME="en",URI="a/en.m3u8"
            #EXT-X-STREAM-INF:BANDWIDTH=800000,AUDIO="aud"
            v1.m3u8
            """)
        #expect(read.first?.separateAudio == "aud")
    }

    /// The report: BANDWIDTH with decimals was unreadable (0), so `best` took the one integer
    /// among them, the 65 kbit/s audio-only variant.
    @Test func decimalBandwidthsAreReadAsPlayersReadThem() throws {
        let read = try variants("""
            #EXTM3U
            #EXT-X-STREAM-INF:BANDWIDTH=65000,CODECS="mp4a.40.2"
            audio/index.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=1280000.0,RESOLUTION=640x360,CODECS="avc1.4d401e,mp4a.40.2"
            360/index.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=2560000.5,RESOLUTION=1280x720,CODECS="avc1.4d401f,mp4a.40.2"
            720/index.m3u8
            """)
        #expect(read.map(\.bandwidth) == [65_000, 1_280_000, 2_560_000])
        #expect(HLSVariant.pick(read, rule: "best")?.uri == "https://cdn.example.com/talk/720/index.m3u8")
        #expect(HLSVariant.pick(read, rule: "worst")?.uri == "https://cdn.example.com/talk/360/index.m3u8")
    }

    @Test func averageBandwidthStandsInForAMissingOrUnreadableBandwidth() throws {
        let read = try variants("""
            #EXTM3U
            #EXT-X-STREAM-INF:AVERAGE-BANDWIDTH=900000,RESOLUTION=640x360
            a.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=2M,AVERAGE-BANDWIDTH=1800000.0,RESOLUTION=1280x720
            b.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=0,AVERAGE-BANDWIDTH=700000,RESOLUTION=426x240
            c.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=3000000,AVERAGE-BANDWIDTH=2000000,RESOLUTION=1920x1080
            d.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=1.2e6,RESOLUTION=256x144
            e.m3u8
            """)
        #expect(read.map(\.bandwidth) == [900_000, 1_800_000, 700_000, 3_000_000, nil])
    }

    @Test(arguments: [
        // CODECS naming only sound, whatever else the variant says.
        ("#EXT-X-STREAM-INF:BANDWIDTH=9000000,CODECS=\"mp4a.40.2\"\nhi-fi.m3u8\n", "hi-fi"),
        ("#EXT-X-STREAM-INF:BANDWIDTH=9000000,CODECS=\"ec-3, mp4a.40.2\"\natmos.m3u8\n", "atmos"),
        ("#EXT-X-STREAM-INF:BANDWIDTH=9000000,CODECS=\"opus\",RESOLUTION=1x1\nopus.m3u8\n", "opus"),
        // No CODECS and no RESOLUTION, where the others have one.
        ("#EXT-X-STREAM-INF:BANDWIDTH=9000000\nbare.m3u8\n", "bare"),
    ])
    func anAudioOnlyVariantIsNeverTheBestVideo(_ audioVariant: String, _ name: String) throws {
        let read = try variants("""
            #EXTM3U
            \(audioVariant)#EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=640x360,CODECS="avc1.4d401e,mp4a.40.2"
            360.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=2500000,RESOLUTION=1280x720,CODECS="avc1.4d401f,mp4a.40.2"
            720.m3u8
            """)
        #expect(read.first?.isAudioOnly == true, "\(name)")
        #expect(HLSVariant.pick(read, rule: "best")?.uri == "https://cdn.example.com/talk/720.m3u8", "\(name)")
        #expect(HLSVariant.pick(read, rule: "worst")?.uri == "https://cdn.example.com/talk/360.m3u8", "\(name)")
        #expect(HLSVariant.pick(read, rule: "9000000")?.uri == "https://cdn.example.com/talk/720.m3u8", "\(name)")
    }

    @Test func aMasterOfSoundAloneStillOffersItsBest() throws {
        let read = try variants("""
            #EXTM3U
            #EXT-X-STREAM-INF:BANDWIDTH=32000,CODECS="mp4a.40.29"
            lo.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=192000,CODECS="mp4a.40.2"
            hi.m3u8
            """)
        #expect(read.allSatisfy { $0.isAudioOnly })
        #expect(HLSVariant.pick(read, rule: "best")?.uri == "https://cdn.example.com/talk/hi.m3u8")
        // A video codec, or a codec not known to be sound, is not audio-only; nor is a master without any RESOLUTION.
        let unknown = try variants("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1,CODECS=\"hvc1.1.6.L93.90,mp4a.40.2\"\nv.m3u8\n"
                                   + "#EXT-X-STREAM-INF:BANDWIDTH=2,CODECS=\"xyz1\"\nx.m3u8\n#EXT-X-STREAM-INF:BANDWIDTH=3\ny.m3u8\n")
        #expect(unknown.map(\.isAudioOnly) == [false, false, false])
    }

    @Test(arguments: [
        // A URI that is not UTF-8: read any way, it would name another file.
        ([0x23, 0x45, 0x58, 0x54, 0x4D, 0x33, 0x55, 0x0A] + Array("#EXTINF:1,\nsegment-".utf8) + [0xE9, 0x2E, 0x74, 0x73, 0x0A],
         "line 3 (a playlist URI) is not UTF-8 text: it cannot be read safely"),
        (Array("#EXTM3U\n#EXT-X-KEY:METHOD=AES-128,URI=\"k".utf8) + [0xFF] + Array("\"\n#EXTINF:1,\na.ts\n".utf8),
         "line 2 (#EXT-X-KEY) is not UTF-8 text: it cannot be read safely"),
        (Array("#EXTM3U\n#EXTINF:-1,\na.ts\n".utf8), "bad #EXTINF duration \"-1\""),
        (Array("#EXTM3U\n#EXTINF: ,\na.ts\n".utf8), "bad #EXTINF duration \"\""),
        (Array("#EXTM3U\n#EXT-X-TARGETDURATION:ten\n".utf8), "bad #EXT-X-TARGETDURATION \"ten\""),
        (Array("#EXTM3U\n#EXT-X-MEDIA-SEQUENCE:7.5\n#EXTINF:1,\na.ts\n".utf8), "bad #EXT-X-MEDIA-SEQUENCE \"7.5\""),
        (Array("#EXTM3U\n#EXT-X-BYTERANGE:1000@-5\n#EXTINF:1,\na.ts\n".utf8), "bad #EXT-X-BYTERANGE \"1000@-5\""),
        // Lower-case tags are not tags to any player: the segment has no #EXTINF.
        (Array("#EXTM3U\n#extinf:1,\na.ts\n".utf8), "an HLS playlist with neither variants nor segments"),
        (Array("#extm3u\n#EXTINF:1,\na.ts\n".utf8), "not an HLS playlist: it starts with \"#extm3u\", not #EXTM3U"),
        (Array("#EXTM3Ux\n#EXTINF:1,\na.ts\n".utf8), "not an HLS playlist: it starts with \"#EXTM3Ux\", not #EXTM3U"),
        ([0x47, 0x40, 0x11, 0x10, 0x00, 0x42], "not an HLS playlist: the answer is not text"),
    ] as [([UInt8], String)])
    func whatCannotBeReadSafelyIsRefused(_ bytes: [UInt8], _ message: String) {
        do {
            _ = try HLSPlaylist.parse(bytes, base: base)
            Issue.record("accepted: \(message)")
        } catch {
            #expect("\(error)" == message)
        }
    }
}

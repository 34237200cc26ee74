import Foundation
import Testing
@testable import SyncAgentCore

/// Separate renditions (SPEC §10, issue 38): `#EXT-X-MEDIA` read from a
/// master, the choice `audio` and `subtitles` make, their segments fanned
/// out beside the video's, and the local master playlist that names them.
@Suite("HLS: separate sound and subtitles renditions")
struct HLSRenditionTests {
    let base = "https://cdn.example.com/talk/master.m3u8"

    /// A master as ffmpeg's `-var_stream_map` writes one, with two languages of sound and subtitles.
    let master = """
        #EXTM3U
        #EXT-X-VERSION:3
        #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="group_aud",NAME="English",DEFAULT=YES,LANGUAGE="en",URI="ven/index.m3u8"
        #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="group_aud",NAME="Français",DEFAULT=NO,LANGUAGE="fr-CA",URI="vfr/index.m3u8"
        #EXT-X-MEDIA:TYPE=SUBTITLES,GROUP-ID="subs",NAME="English",LANGUAGE="en-US",URI="subs/en.m3u8"
        #EXT-X-MEDIA:TYPE=SUBTITLES,GROUP-ID="subs",NAME="Deutsch",LANGUAGE="de",URI="subs/de.m3u8"
        #EXT-X-MEDIA:TYPE=VIDEO,GROUP-ID="cams",NAME="angle",URI="angle/index.m3u8"
        #EXT-X-STREAM-INF:BANDWIDTH=75900,RESOLUTION=320x240,CODECS="avc1.f4000d,mp4a.40.2",AUDIO="group_aud",SUBTITLES="subs"
        vvideo/index.m3u8

        """

    func variant(_ text: String) throws -> HLSVariant {
        guard case .master(let variants) = try HLSPlaylist.parse(Array(text.utf8), base: base), let first = variants.first else {
            throw HLSPlaylist.ParseError(message: "not a master")
        }
        return first
    }

    func choose(_ text: String, audio: String? = nil, subtitles: String? = nil) throws -> [HLSRendition] {
        try HLSRenditionChoice.choose(for: try variant(text), options: HLSOptions(audio: audio, subtitles: subtitles))
    }

    @Test func aMasterGivesEachVariantTheRenditionsOfItsGroups() throws {
        let chosen = try variant(master)
        #expect(chosen.audioGroup == "group_aud" && chosen.subtitlesGroup == "subs")
        #expect(chosen.audioRenditions.map(\.language) == ["en", "fr-CA"])
        #expect(chosen.audioRenditions[0].uri == "https://cdn.example.com/talk/ven/index.m3u8")
        #expect(chosen.audioRenditions[0].isDefault && !chosen.audioRenditions[1].isDefault)
        #expect(chosen.subtitleRenditions.map(\.name) == ["English", "Deutsch"])
        #expect(chosen.separateAudio == "group_aud")
    }

    @Test func theDefaultSoundIsTakenWithoutAsking() throws {
        #expect(try choose(master).map(\.language) == ["en"])
        #expect(try choose(master, audio: "default").map(\.language) == ["en"])
        #expect(try choose(master, audio: "none").isEmpty)
        // Two DEFAULT=YES (against the RFC): the first, as hls.js takes it; none: AUTOSELECT, then the first.
        let twoDefaults = master.replacingOccurrences(of: "DEFAULT=NO", with: "DEFAULT=YES")
        #expect(try choose(twoDefaults).map(\.language) == ["en"])
        let autoselect = master.replacingOccurrences(of: "DEFAULT=YES", with: "DEFAULT=NO")
            .replacingOccurrences(of: "LANGUAGE=\"fr-CA\"", with: "LANGUAGE=\"fr-CA\",AUTOSELECT=YES")
        #expect(try choose(autoselect).map(\.language) == ["fr-CA"])
        #expect(try choose(master.replacingOccurrences(of: "DEFAULT=YES", with: "DEFAULT=NO")).map(\.language) == ["en"])
    }

    @Test func aLanguageIsMatchedAsPlayersMatchIt() throws {
        #expect(try choose(master, audio: "fr").map(\.language) == ["fr-CA"])
        #expect(try choose(master, audio: "FR-ca").map(\.language) == ["fr-CA"])
        #expect(try choose(master, audio: "en-GB").map(\.language) == ["en"])
        #expect(try choose(master, subtitles: "en").map(\.language) == ["en", "en-US"])
        #expect(try choose(master, audio: "none", subtitles: "de").map(\.name) == ["Deutsch"])
    }

    @Test func aLanguageNotOfferedFailsNamingWhatIs() throws {
        #expect(throws: HLSRenditionChoice.Refusal(description: "audio = \"de\": no sound rendition of the chosen variant has that "
                                                   + "language (it offers en, fr-CA)", code: .noRendition)) {
            try choose(master, audio: "de")
        }
        #expect(throws: HLSRenditionChoice.Refusal(description: "subtitles = \"fr\": no subtitles rendition of the chosen variant has "
                                                   + "that language (it offers en-US, de)", code: .noRendition)) {
            try choose(master, subtitles: "fr")
        }
        // A group nobody defined: the sound is in the variant's segments, and no language can be chosen.
        let undefined = master.replacingOccurrences(of: "AUDIO=\"group_aud\"", with: "AUDIO=\"nobody\"")
        #expect(try choose(undefined).isEmpty)
        #expect(throws: HLSRenditionChoice.Refusal(description: "audio = \"en\": the chosen variant offers no sound rendition with a LANGUAGE",
                                                   code: .noRendition)) {
            try choose(undefined, audio: "en")
        }
        #expect(throws: HLSRenditionChoice.Refusal.self) {
            try choose("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\nv.m3u8\n", subtitles: "en")
        }
    }

    /// A rendition without a URI plays from the variant's own segments: nothing more to fetch.
    @Test func soundInTheVariantsSegmentsNeedsNothing() throws {
        let muxed = """
            #EXTM3U
            #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="a",NAME="English",DEFAULT=YES,LANGUAGE="en"
            #EXT-X-STREAM-INF:BANDWIDTH=1,AUDIO="a"
            v.m3u8
            """
        #expect(try choose(muxed).isEmpty)
        #expect(try choose(muxed, audio: "en").isEmpty)
        #expect(try variant(muxed).separateAudio == nil)
    }

    /// Attacks: 10,000 renditions are read (and an error names eight); more than the limit, and a
    /// URI that is not http(s), refuse the master with the reason; a language with control
    /// characters or a slash is shown escaped, never written into the local master.
    @Test func aHostileMasterIsBoundedAndItsWordsAreMadeSafe() throws {
        let many = (0..<10_000).map { "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"n\($0)\",LANGUAGE=\"l\($0)\",URI=\"a\($0).m3u8\"\n" }
        let big = "#EXTM3U\n" + many.joined() + "#EXT-X-STREAM-INF:BANDWIDTH=1,AUDIO=\"a\"\nv.m3u8\n"
        #expect(try variant(big).audioRenditions.count == 10_000)
        #expect(throws: HLSRenditionChoice.Refusal(description: "audio = \"xx\": no sound rendition of the chosen variant has that "
                                                   + "language (it offers l0, l1, l2, l3, l4, l5, l6, l7 and 9992 more)",
                                                   code: .noRendition)) {
            try choose(big, audio: "xx")
        }
        let tooMany = "#EXTM3U\n" + String(repeating: "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"n\"\n", count: 20_001)
            + "#EXT-X-STREAM-INF:BANDWIDTH=1\nv.m3u8\n"
        #expect(throws: HLSPlaylist.ParseError(message: "more than 20000 #EXT-X-MEDIA renditions in one master playlist")) {
            try HLSPlaylist.parse(Array(tooMany.utf8), base: base)
        }
        #expect(throws: HLSPlaylist.ParseError.self) {
            try HLSPlaylist.parse(Array("#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"n\",URI=\"file:///etc/passwd\"\n#EXT-X-STREAM-INF:BANDWIDTH=1,AUDIO=\"a\"\nv.m3u8\n".utf8), base: base)
        }
        // (A quote ends a quoted value: RFC 8216 has no escapes. What is left has no quote, line end or control.)
        let hostile = "#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"x\u{1B}[2J\u{85}\u{2029}y\",LANGUAGE=\"../../e\u{7}tc\",URI=\"../../../a.m3u8\"\n"
            + "#EXT-X-STREAM-INF:BANDWIDTH=1,AUDIO=\"a\"\nv.m3u8\n"
        #expect(throws: HLSRenditionChoice.Refusal(description: "audio = \"en\": no sound rendition of the chosen variant has that "
                                                   + "language (it offers ../../e\\x07tc)", code: .noRendition)) {
            try choose(hostile, audio: "en")
        }
        let chosen = try #require(try choose(hostile, audio: "default").first)
        #expect(chosen.uri == "https://cdn.example.com/a.m3u8")
        let text = HLSLocalMaster.text(HLSRenditions(bandwidth: nil, resolution: "1\n#EXT-X-BAD", codecs: "avc1\",x",
                                                     tracks: [track(.audio, language: chosen.language, name: chosen.name)]))
        #expect(text == """
            #EXTM3U
            #EXT-X-VERSION:3
            #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="audio",NAME="x[2Jy",DEFAULT=YES,AUTOSELECT=YES,URI="audio.m3u8"
            #EXT-X-STREAM-INF:BANDWIDTH=1,AUDIO="audio"
            video.m3u8

            """)
    }

    func track(_ kind: HLSRendition.Kind, language: String?, name: String?, extension ext: String = "ts") -> HLSTrack {
        HLSTrack(kind: kind, playlist: "https://cdn.example.com/\(kind).m3u8", language: language, name: name, targetDurationMs: 2000,
                 segmentExtension: ext, entries: [HLSEntry(child: "v.audio0.\(ext)", durationMs: 2000, sequence: 0)])
    }

    @Test func theLocalMasterNamesLocalPlaylistsOnly() {
        let text = HLSLocalMaster.text(HLSRenditions(bandwidth: 75_900, resolution: "320x240", codecs: "avc1.f4000d,mp4a.40.2",
                                                     tracks: [track(.audio, language: "fr-CA", name: "Français"),
                                                              track(.subtitles, language: "en", name: "English", extension: "vtt")]))
        #expect(text == """
            #EXTM3U
            #EXT-X-VERSION:3
            #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="audio",NAME="Français",LANGUAGE="fr-CA",DEFAULT=YES,AUTOSELECT=YES,URI="audio.m3u8"
            #EXT-X-MEDIA:TYPE=SUBTITLES,GROUP-ID="subs",NAME="English",LANGUAGE="en",DEFAULT=YES,AUTOSELECT=YES,URI="subs.m3u8"
            #EXT-X-STREAM-INF:BANDWIDTH=75900,RESOLUTION=320x240,CODECS="avc1.f4000d,mp4a.40.2",AUDIO="audio",SUBTITLES="subs"
            video.m3u8

            """)
        let entries = [HLSEntry(child: "v.subs0.vtt", durationMs: 2000, sequence: 0), HLSEntry(child: "v.subs1.vtt", durationMs: 1500, sequence: 1)]
        #expect(HLSLocalPlaylist.names(of: entries, prefix: "subs-", segmentExtension: "vtt").segments == ["subs-0.vtt", "subs-1.vtt"])
    }

    func media(_ count: Int, uri: (Int) -> String, ended: Bool = true) -> HLSMediaPlaylist {
        var media = HLSMediaPlaylist()
        media.targetDurationMs = 2000
        media.ended = ended
        media.segments = (0..<count).map {
            HLSSegment(uri: uri($0), durationMs: 2000, sequence: Int64($0), discontinuity: false, range: nil,
                       key: nil, map: nil)
        }
        return media
    }

    func parent(_ options: HLSOptions = HLSOptions()) -> (AgentState, TaskState) {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "v", body: .created(TaskSpec(url: base, kind: .hls, dest: "/dl/talk", hls: options))))
        state.apply(Event(seq: 2, atMs: 2, task: "v", body: .started(Started(attempt: 1, offset: 0, url: base))))
        return (state, state["v"]!)
    }

    @Test func aRenditionsSegmentsAreChildrenBesideTheVideos() throws {
        var (state, parent) = parent(HLSOptions(maxDurationS: 5))
        let sound = HLSRendition(kind: .audio, group: "a", language: "en", name: "English", isDefault: true,
                                 uri: "https://cdn.example.com/en.m3u8")
        let subtitles = HLSRendition(kind: .subtitles, group: "s", language: "en", uri: "https://other.example.net/subs.m3u8")
        let plan = try HLSFanOut.plan(parent: parent, playlist: media(5) { "https://cdn.example.com/v\($0).ts" }, url: base,
                                      renditions: [.init(rendition: sound, playlist: media(5) { "https://cdn.example.com/a\($0).aac" },
                                                         url: "https://cdn.example.com/en.m3u8"),
                                                   .init(rendition: subtitles, playlist: media(5) { "https://other.example.net/s\($0).webvtt" },
                                                         url: "https://other.example.net/subs.m3u8")],
                                      variant: HLSVariant(uri: base, bandwidth: 1000, resolution: "320x240"), in: state)
        // max_duration = 5 takes three 2-second segments of the video, and as much of each rendition.
        #expect(plan.children.map(\.id) == ["v.seg0.ts", "v.seg1.ts", "v.seg2.ts", "v.audio0.aac", "v.audio1.aac", "v.audio2.aac",
                                            "v.subs0.vtt", "v.subs1.vtt", "v.subs2.vtt"])
        #expect(plan.children.allSatisfy { $0.spec.dest?.hasPrefix("/dl/talk.part/") == true && $0.spec.parent == "v" })
        let tracks = try #require(plan.expanded.renditions?.tracks)
        #expect(tracks.map(\.segmentExtension) == ["aac", "vtt"])
        #expect(tracks.map { $0.entries.map(\.child) } == [["v.audio0.aac", "v.audio1.aac", "v.audio2.aac"],
                                                           ["v.subs0.vtt", "v.subs1.vtt", "v.subs2.vtt"]])
        #expect(plan.expanded.renditions?.resolution == "320x240")
        // The fold keeps them with the video; the family counts every child.
        var seq: Int64 = 2
        for child in plan.children { seq += 1; state.apply(Event(seq: seq, atMs: seq, task: child.id, body: .created(child.spec))) }
        state.apply(Event(seq: seq + 1, atMs: seq + 1, task: "v", body: .expanded(plan.expanded)))
        parent = state["v"]!
        #expect(parent.hls?.renditions == plan.expanded.renditions)
        #expect(parent.hls?.entries.count == 3 && parent.hls?.mediaMs == 6000)
        #expect(state.families["v"]?.total == 9)
        #expect(try Snapshot.decode(Snapshot.encode(state)) == state)
        // An empty rendition playlist is refused.
        #expect(throws: HLSFanOut.Refusal.self) {
            try HLSFanOut.plan(parent: self.parent().1, playlist: media(2) { "https://cdn.example.com/v\($0).ts" }, url: base,
                               renditions: [.init(rendition: sound, playlist: media(0) { "\($0)" }, url: "https://cdn.example.com/en.m3u8")],
                               in: self.parent().0)
        }
    }

    @Test func theKeysParseAndTheLogKeepsThem() throws {
        let parser = JobParser(downloadDir: "/dl")
        func job(_ keys: String) throws -> TaskSpec {
            guard case .transfer(_, let spec) = try parser.parse(Array("url = \"https://h/m.m3u8\"\nkind = \"hls\"\ndest = \"v\"\n\(keys)".utf8)) else {
                throw KeyError(key: "url", "not a transfer")
            }
            return spec
        }
        #expect(try job("audio = \"pt-BR\"\nsubtitles = \"en\"\n").hls == HLSOptions(audio: "pt-BR", subtitles: "en"))
        #expect(try job("audio = \"none\"\n").hls?.audio == "none")
        for bad in ["audio = \"../x\"", "audio = \"\"", "subtitles = \"default\u{7}\"", "subtitles = \"en/../x\""] {
            #expect(throws: KeyError.self, "\(bad)") { try job(bad + "\n") }
        }
        #expect(throws: KeyError.self) {
            try parser.parse(Array("url = \"https://h/f.iso\"\naudio = \"en\"\n".utf8))
        }
        let spec = try job("audio = \"fr\"\nsubtitles = \"en\"\n")
        let data = EventCoding.data(of: .created(spec))
        #expect(data.contains("\"audio\":\"fr\"") && data.contains("\"subtitles\":\"en\""))
        let decoded = try EventCoding.body(type: "created", data: data)
        #expect(decoded == .created(spec))
    }
}

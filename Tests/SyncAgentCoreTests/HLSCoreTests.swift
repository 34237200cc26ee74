import Foundation
import Testing
@testable import SyncAgentCore

/// The pure half of HLS (SPEC §10): the playlist parser, the variant
/// choice, the fan-out plan and the fold's parent/child indexes.
@Suite("HLS: playlists, fan-out, parents in the fold")
struct HLSCoreTests {
    let base = "https://cdn.example.com/talk/720/index.m3u8?token=t"

    func parse(_ text: String, base: String? = nil) throws -> HLSPlaylist {
        try HLSPlaylist.parse(Array(text.utf8), base: base ?? self.base)
    }

    @Test func aMediaPlaylistWithEveryTagWeUse() throws {
        let playlist = try parse("""
            #EXTM3U
            #EXT-X-VERSION:7
            #EXT-X-TARGETDURATION:6
            #EXT-X-MEDIA-SEQUENCE:40
            #EXT-X-MAP:URI="init.mp4",BYTERANGE="720@0"
            #EXT-X-KEY:METHOD=AES-128,URI="../keys/k1?x=1",IV=0x000102030405060708090A0B0C0D0E0F
            #EXTINF:5.005,first
            seg40.m4s?sig=abc
            #EXT-X-SOME-FUTURE-TAG:whatever
            #EXT-X-DISCONTINUITY
            #EXT-X-BYTERANGE:1000@2000
            #EXTINF:6,
            all.m4s
            #EXT-X-KEY:METHOD=NONE
            #EXT-X-BYTERANGE:500
            #EXTINF:4.5,
            all.m4s
            #EXT-X-ENDLIST
            """)
        guard case .media(let media) = playlist else { Issue.record("not a media playlist"); return }
        #expect(media.targetDurationMs == 6000)
        #expect(media.ended)
        #expect(media.segments.map(\.sequence) == [40, 41, 42])
        #expect(media.segments.map(\.durationMs) == [5005, 6000, 4500])
        #expect(media.segments[0].uri == "https://cdn.example.com/talk/720/seg40.m4s?sig=abc")
        #expect(media.segments[0].key?.uri == "https://cdn.example.com/talk/keys/k1?x=1")
        #expect(media.segments[0].key?.iv == Array(0...15))
        #expect(media.segments[0].map == HLSMap(uri: "https://cdn.example.com/talk/720/init.mp4", range: HLSByteRange(length: 720, offset: 0)))
        #expect(media.segments[1].discontinuity && !media.segments[2].discontinuity)
        #expect(media.segments[1].range == HLSByteRange(length: 1000, offset: 2000))
        // No offset: it starts where the previous range of the same URI ended.
        #expect(media.segments[2].range == HLSByteRange(length: 500, offset: 3000))
        #expect(media.segments[2].key == nil)
        // Without an IV, the media sequence number is the IV.
        #expect(HLSKey(uri: "k", iv: nil).iv(forSequence: 258) == [UInt8](repeating: 0, count: 14) + [1, 2])
    }

    @Test func aMasterPlaylistAndTheVariantRule() throws {
        guard case .master(let variants) = try parse("""
            #EXTM3U
            #EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=640x360,CODECS="avc1.4d401e,mp4a.40.2"
            360/index.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=2500000,RESOLUTION=1280x720
            720/index.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=200000
            audio.m3u8
            """, base: "https://cdn.example.com/talk/master.m3u8") else { Issue.record("not a master"); return }
        #expect(variants.count == 3)
        #expect(variants[0].codecs == "avc1.4d401e,mp4a.40.2")
        #expect(HLSVariant.pick(variants, rule: "best")?.uri == "https://cdn.example.com/talk/720/index.m3u8")
        // The third has no RESOLUTION where the others have one: sound alone, never the worst video either.
        #expect(variants.map(\.isAudioOnly) == [false, false, true])
        #expect(HLSVariant.pick(variants, rule: "worst")?.uri == "https://cdn.example.com/talk/360/index.m3u8")
        #expect(HLSVariant.pick(variants, rule: "900000")?.resolution == "640x360")
        #expect(HLSVariant.pick(variants, rule: "1280x720")?.bandwidth == 2_500_000)
        #expect(HLSVariant.pick(variants, rule: "1920x1080") == nil)
    }

    /// A fifth adversary: a variant whose sound is a rendition of its own was published silent.
    @Test func aVariantWhoseAudioIsARenditionOfItsOwnIsMarked() throws {
        guard case .master(let variants) = try parse("""
            #EXTM3U
            #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aud",NAME="en",DEFAULT=YES,URI="a/en.m3u8"
            #EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="muxed",NAME="main",DEFAULT=YES
            #EXT-X-STREAM-INF:BANDWIDTH=800000,AUDIO="aud"
            v1.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=700000,AUDIO="muxed"
            v2.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=600000
            v3.m3u8
            """, base: "https://cdn.example.com/m.m3u8") else { Issue.record("not a master"); return }
        #expect(variants.map(\.separateAudio) == ["aud", nil, nil])
    }

    @Test(arguments: [
        ("<html><body>no</body></html>", "not an HLS playlist: it starts with \"<html><body>no</body></html>\", not #EXTM3U"),
        ("#EXTM3U\n#EXTINF:abc,\na.ts", "bad #EXTINF duration \"abc\""),
        ("#EXTM3U\n#EXT-X-KEY:METHOD=SAMPLE-AES,URI=\"k\"\n#EXTINF:1,\na.ts",
         "segments encrypted with METHOD=SAMPLE-AES (DRM) cannot be decrypted; only AES-128 can"),
        ("#EXTM3U\n#EXTINF:1,\nftp://h/a.ts", "a playlist URI must be an http or https URL, not ftp: \"ftp://h/a.ts\""),
        // A signed CDN URL past the 8 KiB the job's own URL may have (what nginx and Apache take in a request
        // line): said as too long, not as "not http" (issue 42).
        ("#EXTM3U\n#EXTINF:1,\na.ts?sig=" + String(repeating: "x", count: 8_200),
         "a playlist URI is 8242 bytes long, over the 8 KiB a URL may have"),
        ("#EXTM3U\n#EXT-X-KEY:METHOD=AES-128,URI=\"k?t=" + String(repeating: "x", count: 8_200) + "\"\n#EXTINF:1,\na.ts",
         "the URI of #EXT-X-KEY is 8237 bytes long, over the 8 KiB a URL may have"),
        ("#EXTM3U\n#EXT-X-MAP:URI=\"ftp://h/init.mp4\"\n#EXTINF:1,\na.ts",
         "the URI of #EXT-X-MAP must be an http or https URL, not ftp: \"ftp://h/init.mp4\""),
        ("#EXTM3U\n#EXT-X-KEY:METHOD=AES-128\n#EXTINF:1,\na.ts", "#EXT-X-KEY METHOD=AES-128 without a URI"),
        ("#EXTM3U\n#EXT-X-BYTERANGE:100\n#EXTINF:1,\na.ts", "#EXT-X-BYTERANGE without an offset, and no earlier range of https://cdn.example.com/talk/720/a.ts"),
        ("#EXTM3U\n#EXT-X-TARGETDURATION:99999999999999999999\n", "bad #EXT-X-TARGETDURATION \"99999999999999999999\""),
        ("#EXTM3U\n", "an HLS playlist with neither variants nor segments"),
    ])
    func whatIsNotAUsablePlaylistSaysWhy(_ text: String, _ message: String) {
        do {
            _ = try parse(text)
            Issue.record("accepted")
        } catch {
            #expect("\(error)" == message)
        }
        #expect(throws: HLSPlaylist.ParseError.self) { try HLSPlaylist.parse([0xFF, 0x00, 0x12], base: base) }
    }

    func parent(_ options: HLSOptions = HLSOptions()) -> (AgentState, TaskState) {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "v", body: .created(TaskSpec(url: base, kind: .hls, dest: "/dl/talk",
                                                                               retries: 3, hls: options))))
        state.apply(Event(seq: 2, atMs: 2, task: "v", body: .started(Started(attempt: 1, offset: 0, url: base))))
        return (state, state["v"]!)
    }

    /// A plan's children and `expanded` folded into `state`, as the agent logs them: the parent after.
    func taken(_ plan: HLSFanOut.Plan, into state: inout AgentState) -> TaskState {
        var seq = state.lastSeq
        for child in plan.children { seq += 1; state.apply(Event(seq: seq, atMs: seq, task: child.id, body: .created(child.spec))) }
        state.apply(Event(seq: seq + 1, atMs: seq + 1, task: "v", body: .expanded(plan.expanded)))
        return state["v"]!
    }

    func media(_ sequences: ClosedRange<Int64>, ended: Bool, keyed: Bool = false) -> HLSMediaPlaylist {
        var media = HLSMediaPlaylist()
        media.targetDurationMs = 2000
        media.ended = ended
        media.segments = sequences.map {
            HLSSegment(uri: "https://cdn.example.com/s\($0).ts", durationMs: 2000, sequence: $0, discontinuity: false,
                       range: nil, key: keyed ? HLSKey(uri: "https://cdn.example.com/key", iv: nil) : nil, map: nil)
        }
        return media
    }

    /// `syncagent retarget` of a video: segments taken stay; the others, and the key they
    /// need, move to the new playlist's URLs, matched by sequence number, file name and range.
    @Test func aRetargetedVideoMovesTheSegmentsNotTakenYet() throws {
        var (state, parent) = parent()
        parent = taken(try HLSFanOut.plan(parent: parent, playlist: media(5...7, ended: true, keyed: true), url: base, in: state), into: &state)
        state.apply(Event(seq: state.lastSeq + 1, atMs: 99, task: "v.seg5.ts", body: .finished(Finished(bytes: 10, dest: "/dl/talk.part/seg5.ts"))))
        // The same video under signed URLs of another host and path.
        var moved = media(5...7, ended: true, keyed: true)
        for index in moved.segments.indices {
            moved.segments[index].uri = "https://edge.example.net/t0k3n/s\(moved.segments[index].sequence).ts?sig=2"
            moved.segments[index].key = HLSKey(uri: "https://edge.example.net/t0k3n/key?sig=2", iv: nil)
        }
        let url = "https://edge.example.net/t0k3n/index.m3u8?sig=2"
        #expect(HLSRetarget.plan(parent: parent, playlist: moved, url: url, in: state) == .moves([
            .init(child: "v.key0.key", url: "https://edge.example.net/t0k3n/key?sig=2"),
            .init(child: "v.seg6.ts", url: "https://edge.example.net/t0k3n/s6.ts?sig=2"),
            .init(child: "v.seg7.ts", url: "https://edge.example.net/t0k3n/s7.ts?sig=2"),
        ]))
        // Another video: a segment not taken named otherwise, or not listed at all.
        var other = moved
        other.segments[1].uri = "https://edge.example.net/t0k3n/other6.ts"
        #expect(HLSRetarget.plan(parent: parent, playlist: other, url: url, in: state) == .refused(
            "the playlist at https://edge.example.net/t0k3n/index.m3u8?sig=<redacted> is another video: its segment 6 is "
            + "https://edge.example.net/t0k3n/other6.ts, not https://cdn.example.com/s6.ts"))
        other.segments.removeLast()
        other.segments[1] = moved.segments[1]
        #expect(HLSRetarget.plan(parent: parent, playlist: other, url: url, in: state) == .refused(
            "the playlist at https://edge.example.net/t0k3n/index.m3u8?sig=<redacted> does not list segment 7, which is not taken yet"))
        // A segment taken need not be listed: it stays as it is.
        other = moved
        other.segments.removeFirst()
        guard case .moves(let without) = HLSRetarget.plan(parent: parent, playlist: other, url: url, in: state),
              case .moves(let with) = HLSRetarget.plan(parent: parent, playlist: moved, url: url, in: state) else {
            Issue.record("refused")
            return
        }
        #expect(Set(without) == Set(with))
    }

    @Test func theFanOutMakesOneChildPerSegmentAndOnePerKey() throws {
        let (state, parent) = parent()
        let plan = try HLSFanOut.plan(parent: parent, playlist: media(5...7, ended: true, keyed: true), url: base, in: state)
        #expect(plan.children.map(\.id) == ["v.key0.key", "v.seg5.ts", "v.seg6.ts", "v.seg7.ts"])
        let segment = plan.children[1].spec
        #expect(segment.parent == "v" && segment.dest == "/dl/talk.part/seg5.ts" && segment.notify == .none && segment.retries == 3)
        #expect(plan.expanded.entries.map(\.keyChild) == ["v.key0.key", "v.key0.key", "v.key0.key"])
        #expect(plan.expanded.entries[0].iv == "00000000000000000000000000000005")
        #expect(plan.expanded.ended)
    }

    @Test func aLivePlaylistNeedsMaxDurationAndStopsThere() throws {
        let (state, parent) = parent()
        #expect(throws: HLSFanOut.Refusal.self) { try HLSFanOut.plan(parent: parent, playlist: media(0...3, ended: false), url: base, in: state) }
        var (live, capped) = self.parent(HLSOptions(maxDurationS: 5))
        let first = try HLSFanOut.plan(parent: capped, playlist: media(0...1, ended: false), url: base, in: live)
        #expect(first.expanded.entries.count == 2 && !first.expanded.ended)
        capped = taken(first, into: &live)
        // Read again: only segments not taken yet, up to max_duration (5 s: three 2-second segments).
        let second = try HLSFanOut.plan(parent: capped, playlist: media(0...6, ended: false), url: base, in: live)
        #expect(second.expanded.entries.map(\.sequence) == [2])
        #expect(second.expanded.ended)
    }

    @Test func theFoldCountsAParentsChildrenAndFreesItsSlot() throws {
        var (state, parent) = parent()
        #expect(state.runningCount == 1)
        let plan = try HLSFanOut.plan(parent: parent, playlist: media(0...1, ended: true), url: base, in: state)
        var seq: Int64 = 2
        func apply(_ body: EventBody, _ task: String) { seq += 1; state.apply(Event(seq: seq, atMs: seq * 10, task: task, body: body)) }
        for child in plan.children { apply(.created(child.spec), child.id) }
        apply(.expanded(plan.expanded), "v")
        #expect(state.runningCount == 0, "a fanned-out parent holds no slot")
        #expect(state["v"]?.phase == .running)
        #expect(state.families["v"]?.total == 2)
        #expect(state.settledParents.isEmpty)
        apply(.started(Started(attempt: 1, offset: 0, url: "u")), "v.seg0.ts")
        #expect(state.runningCount == 1)
        apply(.progressed(Progressed(bytes: 700, total: 1000)), "v.seg0.ts")
        apply(.finished(Finished(bytes: 1000, dest: "/dl/talk.part/seg0.ts")), "v.seg0.ts")
        #expect(state.families["v"]?.bytes == 1000 && state.families["v"]?.finished == 1)
        #expect(state.figures(of: state["v"]!).children?.done == 1)
        apply(.started(Started(attempt: 1, offset: 0, url: "u")), "v.seg1.ts")
        apply(.finished(Finished(bytes: 500, dest: "/dl/talk.part/seg1.ts")), "v.seg1.ts")
        #expect(state.settledParents == ["v"])
        #expect(RecoveryPlan.plan(for: state["v"]!, in: state, nowMs: 0).words == "wait for its segments (2 of 2 finished), then publish")
        apply(.finished(Finished(bytes: 1500, dest: "/dl/talk")), "v")
        #expect(state.settledParents.isEmpty)
        #expect(state.runningCount == 0 && state.activeCount == 0)
    }

    @Test func nothingElseWritesInAVideosFoldersAndCredentialsStayHome() throws {
        var (state, parent) = parent()
        var media = self.media(0...1, ended: true)
        media.segments[1].uri = "https://other-cdn.example.net/s1.ts"
        var withHeaders = parent
        state.apply(Event(seq: 3, atMs: 3, task: "w", body: .created(TaskSpec(url: base, kind: .hls, dest: "/dl/w",
            headers: [Header(name: "X-Api-Key", value: "k"), Header(name: "Accept", value: "*/*")], hls: HLSOptions()))))
        withHeaders = state["w"]!
        let plan = try HLSFanOut.plan(parent: withHeaders, playlist: media, url: base, in: state)
        #expect(plan.children[0].spec.headers.map(\.name) == ["X-Api-Key", "Accept"])
        #expect(plan.children[1].spec.headers.map(\.name) == ["Accept"], "no credential for another host")
        for inside in ["/dl/talk.part/seg5.ts", "/dl/talk.part/out/evil.ts", "/dl/talk/evil.ts"] {
            guard case .refuse(_, let reason) = Destinations.decide(dest: inside, overwrite: .rename, in: state, exists: { _ in false }) else {
                Issue.record("\(inside) was handed out"); continue
            }
            #expect(reason.contains("lies in a folder of task v"))
        }
        _ = parent
    }

    @Test func segmentsALivePlaylistDroppedAreMarkedAsAGap() throws {
        var (state, parent) = parent(HLSOptions(maxDurationS: 60))
        let first = try HLSFanOut.plan(parent: parent, playlist: media(0...1, ended: false), url: base, in: state)
        parent = taken(first, into: &state)
        let later = try HLSFanOut.plan(parent: parent, playlist: media(5...6, ended: false), url: base, in: state)
        #expect(later.expanded.entries.map(\.discontinuity) == [true, false])
    }

    /// The tenth adversary: a live playlist read again listed other segments under the numbers
    /// taken (a0, a1 → b0, b1, b2), and the video was published as both joined. It now ends
    /// with what was taken (the review: failing threw away a capture good up to the change).
    @Test func aLivePlaylistThatChangedWhatItTookEndsTheCaptureThere() throws {
        var (state, parent) = parent(HLSOptions(maxDurationS: 60))
        let first = try HLSFanOut.plan(parent: parent, playlist: media(10...11, ended: false), url: base, in: state)
        parent = taken(first, into: &state)
        // The same segments, signed anew in the query and the path, on another edge host: the same video.
        var resigned = media(10...13, ended: false)
        for index in resigned.segments.indices {
            resigned.segments[index].uri = resigned.segments[index].uri.replacingOccurrences(of: "cdn.example.com/", with: "edge2.cdn.example.com/tok\(index)/")
                + "?token=\(index)"
        }
        let again = try HLSFanOut.plan(parent: parent, playlist: resigned, url: base, in: state)
        #expect(again.expanded.entries.map(\.sequence) == [12, 13] && again.endedBecause == nil)
        var changed = media(10...12, ended: true)
        changed.segments[1].uri = "https://cdn.example.com/b11.ts"
        var back = media(3...12, ended: false)
        back.segments.removeLast(2)
        for playlist in [changed, back] {
            let plan = try HLSFanOut.plan(parent: parent, playlist: playlist, url: base, in: state)
            #expect(plan.children.isEmpty && plan.expanded.entries.isEmpty && plan.expanded.ended)
            #expect(plan.endedBecause != nil)
        }
        #expect(try HLSFanOut.plan(parent: parent, playlist: changed, url: base, in: state).endedBecause
                    == "the live playlist changed segment 11 (https://cdn.example.com/s11.ts → https://cdn.example.com/b11.ts)")
    }

    @Test func aLostChildSettlesItsParent() throws {
        var (state, parent) = parent()
        let plan = try HLSFanOut.plan(parent: parent, playlist: media(0...2, ended: true), url: base, in: state)
        var seq: Int64 = 2
        for child in plan.children { seq += 1; state.apply(Event(seq: seq, atMs: seq, task: child.id, body: .created(child.spec))) }
        state.apply(Event(seq: seq + 1, atMs: seq + 1, task: "v", body: .expanded(plan.expanded)))
        state.apply(Event(seq: seq + 2, atMs: seq + 2, task: "v.seg1.ts", body: .failed(Failed(reason: "404", code: .http(404), bytes: 0))))
        #expect(state.settledParents == ["v"])
        #expect(state.families["v"]?.lost == 1)
    }

    @Test func eachKindAnswersTheEnginesQuestionsInOnePlace() {
        let download = TaskSpec(url: "http://h/a", dest: "/dl/a").behaviour
        #expect(download.body == .partialFile && download.resumes && !download.recordsResponse && download.accepts == 200...299)
        let upload = TaskSpec(url: "http://h/u", kind: .upload, dest: nil, bodyFile: "/f").behaviour
        #expect(upload.countsSent && upload.body == .discard && !upload.resumes && !upload.canFollowRedirectsItself)
        #expect(TaskSpec(url: "http://h/d", kind: .data, dest: nil).behaviour.accepts.contains(304))
        #expect(TaskSpec(url: "http://h/d", kind: .data, dest: "/dl/d").behaviour.body == .partialFile)
        let hls = TaskSpec(url: "http://h/v.m3u8", kind: .hls, dest: "/dl/v").behaviour
        #expect(hls.fansOut && hls.body == .memory && !hls.resumes)
    }

    @Test func theLocalPlaylistNamesLocalFilesOnly() {
        let entries = [HLSEntry(child: "a", durationMs: 2000, sequence: 7, mapChild: "i"),
                       HLSEntry(child: "b", durationMs: 1500, sequence: 8, discontinuity: true, keyChild: "k", iv: "00", mapChild: "i")]
        #expect(HLSLocalPlaylist.text(entries: entries, targetDurationMs: 2000) == """
            #EXTM3U
            #EXT-X-VERSION:7
            #EXT-X-TARGETDURATION:2
            #EXT-X-MEDIA-SEQUENCE:0
            #EXT-X-PLAYLIST-TYPE:VOD
            #EXT-X-MAP:URI="init.mp4"
            #EXTINF:2.000,
            0.m4s
            #EXT-X-DISCONTINUITY
            #EXTINF:1.500,
            1.m4s
            #EXT-X-ENDLIST

            """)
    }
}

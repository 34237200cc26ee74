import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// SPEC §10's separate renditions (issue 38) against ffmpeg's own
/// `-var_stream_map` output served by nginx: the sound (and subtitles)
/// fetched as children beside the video, published as a local master a
/// player reads, or muxed into one file by ffmpeg; ffprobe checks both.
@Suite("HLS: separate sound and subtitles renditions", .serialized)
struct HLSRenditionsTests {
    static let mediaFolder = TempDirectory()
    static let media: HLSMedia? = {
        do { return try HLSMedia.makeRenditions(in: mediaFolder.path) } catch {
            print("HLS media could not be made: \(error)")
            return nil
        }
    }()

    func world(_ config: String = "") throws -> (AgentHarness, Nginx, HLSMedia) {
        let media = try #require(Self.media, "ffmpeg could not make the test media")
        let harness = try AgentHarness(config: config)
        let nginx = try Nginx(in: harness.directory)
        try FileManager.default.createSymbolicLink(atPath: nginx.root + "/hls", withDestinationPath: media.root)
        return (harness, nginx, media)
    }

    func job(_ id: String, _ url: String, _ keys: String = "") -> String {
        "id = \"\(id)\"\nkind = \"hls\"\nurl = \"\(url)\"\ndest = \"\(id)\"\n" + keys
    }

    func task(_ harness: AgentHarness, _ id: String) throws -> [String: Any] {
        try #require(try harness.statusTasks().first { $0["id"] as? String == id })
    }

    /// Each published file `prefix0.ts`, `prefix1.ts` … is byte for byte the segment ffmpeg made in `folder`.
    func expectSegments(in published: String, prefix: String, from folder: String, _ media: HLSMedia,
                        sourceLocation: SourceLocation = #_sourceLocation) throws {
        let sources = try media.segments(of: "rend/\(folder)/index.m3u8")
        #expect(!sources.isEmpty, sourceLocation: sourceLocation)
        for (index, source) in sources.enumerated() {
            #expect(contents("\(published)/\(prefix)\(index).ts") == contents(media.path("rend/\(folder)/\(source)")),
                    "\(published) \(prefix)\(index).ts", sourceLocation: sourceLocation)
        }
    }

    /// The video, its sound and its subtitles, each within a segment of ffmpeg's 10 s.
    func expectPlays(_ file: String, streams: Set<String>, sourceLocation: SourceLocation = #_sourceLocation) {
        let durations = HLSMedia.streamDurations(of: file)
        #expect(Set(HLSMedia.streams(of: file)) == streams, "\(file)", sourceLocation: sourceLocation)
        for type in ["video", "audio"] where streams.contains(type) {
            #expect(abs((durations[type] ?? 0) - 10) <= 2, "\(file) \(type): \(durations)", sourceLocation: sourceLocation)
        }
    }

    @Test func theDefaultSoundAndSubtitlesMakeAFolderAPlayerReads() throws {
        let (harness, nginx, media) = try world()
        try harness.drop("v.job", job("v", nginx.url("hls/rend/master.m3u8"), "subtitles = \"en\"\n"))
        try harness.runUntilIdle()
        let folder = harness.downloads + "/v"
        let master = try String(contentsOfFile: folder + "/index.m3u8", encoding: .utf8)
        #expect(master.contains("#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"audio\",NAME=\"audio_1\",LANGUAGE=\"en\",DEFAULT=YES,AUTOSELECT=YES,URI=\"audio.m3u8\""),
                "\(master)")
        #expect(master.contains("URI=\"subs.m3u8\"") && master.contains("\nvideo.m3u8\n") && !master.contains("http"))
        try expectSegments(in: folder, prefix: "", from: "vvideo", media)
        try expectSegments(in: folder, prefix: "audio-", from: "ven", media)
        // ffprobe plays the master: the picture from video.m3u8, the sound from audio.m3u8.
        #expect(Set(HLSMedia.streams(of: folder + "/index.m3u8")).isSuperset(of: ["video", "audio"]))
        #expect(abs((HLSMedia.duration(of: folder + "/index.m3u8") ?? 0) - 10) <= 2)
        #expect(Set(HLSMedia.streams(of: folder + "/subs.m3u8")) == ["subtitle"])
        let text = HLSMedia.subtitles(of: folder + "/subs.m3u8")
        #expect(text.contains("Hello") && text.contains("World"), "\(text)")
        let parent = try task(harness, "v")
        #expect(parent["state"] as? String == "finished")
        // 5 video segments, 6 of sound (ffmpeg's AAC runs 31 ms past 10 s), 5 of subtitles.
        #expect((parent["children"] as? [String: Int]) == ["done": 16, "total": 16])
        #expect(nginx.requests.filter { $0.uri.hasPrefix("/hls/rend/vfr/") }.isEmpty, "the French sound is not fetched")
        #expect(try FileManager.default.contentsOfDirectory(atPath: harness.downloads) == ["v"])
        try expectVerifyClean(harness)
    }

    @Test func aLanguageIsChosenAndJoinedIntoOneFile() throws {
        let (harness, nginx, media) = try world()
        try harness.drop("fr.job", job("fr", nginx.url("hls/rend/master.m3u8"), "audio = \"fr\"\noutput = \"file\"\n"))
        try harness.drop("frdir.job", job("frdir", nginx.url("hls/rend/master.m3u8"), "audio = \"FR-ca\"\n"))
        try harness.drop("subs.job", job("subs", nginx.url("hls/rend/master.m3u8"), "subtitles = \"en-GB\"\noutput = \"file\"\n"))
        try harness.runUntilIdle()
        try expectSegments(in: harness.downloads + "/frdir", prefix: "audio-", from: "vfr", media)
        // MPEG-TS holds the picture and the sound; with subtitles, MP4 (mov_text).
        expectPlays(harness.downloads + "/fr.ts", streams: ["video", "audio"])
        expectPlays(harness.downloads + "/subs.mp4", streams: ["video", "audio", "subtitle"])
        let text = HLSMedia.subtitles(of: harness.downloads + "/subs.mp4")
        #expect(text.contains("Hello") && text.contains("World"), "\(text)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: harness.downloads).sorted() == ["fr.ts", "frdir", "subs.mp4"])
        try expectVerifyClean(harness)
    }

    @Test func aLanguageNotOfferedFailsNamingThoseThatAre() throws {
        let (harness, nginx, _) = try world()
        try harness.drop("de.job", job("de", nginx.url("hls/rend/master.m3u8"), "audio = \"de\"\n"))
        try harness.drop("nosubs.job", job("nosubs", nginx.url("hls/rend/master.m3u8"), "subtitles = \"ja\"\n"))
        try harness.runUntilIdle(expecting: 4)
        let de = try task(harness, "de")
        #expect(de["error_code"] as? String == "no_rendition")
        #expect((de["error"] as? String)?.hasPrefix("audio = \"de\": no sound rendition of the chosen variant has that language "
                                                    + "(it offers en, fr-CA); the master playlist is http://127.0.0.1:") == true, "\(de)")
        #expect((try task(harness, "nosubs")["error"] as? String)?.contains("(it offers en)") == true)
        #expect(!nginx.requests.contains { $0.uri.hasSuffix(".ts") }, "nothing fetched")
    }

    @Test func anEncryptedSoundIsDecrypted() throws {
        let (harness, nginx, media) = try world()
        try harness.drop("enc.job", job("enc", nginx.url("hls/rend/master-enc.m3u8")))
        try harness.runUntilIdle()
        try expectSegments(in: harness.downloads + "/enc", prefix: "audio-", from: "ven", media)
        let audio = try String(contentsOfFile: harness.downloads + "/enc/audio.m3u8", encoding: .utf8)
        #expect(!audio.contains("EXT-X-KEY"))
        #expect(Set(HLSMedia.streams(of: harness.downloads + "/enc/index.m3u8")).isSuperset(of: ["video", "audio"]))
    }

    /// A folder holding a fake `ffmpeg` (or none), first on PATH, and the tools the agent may spawn.
    func toolFolder(_ harness: AgentHarness, ffmpeg script: String?) throws -> String {
        let bin = harness.directory.file("bin")
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        if let script {
            try script.write(toFile: bin + "/ffmpeg", atomically: true, encoding: .utf8)
            chmod(bin + "/ffmpeg", 0o755)
        }
        return bin
    }

    /// No ffmpeg on PATH: the file cannot be made, the task says why, and keeps its
    /// segments: resumed once ffmpeg is there, it publishes without fetching one again.
    @Test func withoutFFmpegTheTaskFailsSayingSoAndAResumeFinishes() throws {
        let (harness, nginx, _) = try world()
        harness.extraEnvironment["PATH"] = try toolFolder(harness, ffmpeg: nil)
        try harness.drop("f.job", job("f", nginx.url("hls/rend/master.m3u8"), "output = \"file\"\n"))
        try harness.runUntilIdle(expecting: 4)
        let failed = try task(harness, "f")
        #expect(failed["error_code"] as? String == "mux_failed")
        #expect((failed["error"] as? String)?.hasPrefix("ffmpeg is not on PATH") == true, "\(failed)")
        let fetched = nginx.requests.filter { $0.uri.hasSuffix(".ts") }.count
        #expect(fetched == 11)
        harness.extraEnvironment["PATH"] = nil
        #expect(try harness.run(["resume", "f"]).status == 0)
        try harness.runUntilIdle()
        expectPlays(harness.downloads + "/f.ts", streams: ["video", "audio"])
        #expect(nginx.requests.filter { $0.uri.hasSuffix(".ts") }.count == fetched, "no segment fetched again")
        #expect(try FileManager.default.contentsOfDirectory(atPath: harness.downloads) == ["f.ts"])
    }

    /// An ffmpeg that fails: its last words are the task's error.
    @Test func aFailingFFmpegIsQuoted() throws {
        let (harness, nginx, _) = try world()
        harness.extraEnvironment["PATH"] = try toolFolder(harness, ffmpeg: "#!/bin/sh\necho 'first line' >&2\necho 'Invalid data found' >&2\nexit 3\n")
            + ":/usr/bin:/bin"
        try harness.drop("f.job", job("f", nginx.url("hls/rend/master.m3u8"), "output = \"file\"\n"))
        try harness.runUntilIdle(expecting: 4)
        let failed = try task(harness, "f")
        #expect(failed["error_code"] as? String == "mux_failed")
        #expect(failed["error"] as? String == "ffmpeg exited with status 3 joining the video into one file: first line / Invalid data found",
                "\(failed)")
        #expect(!FileManager.default.fileExists(atPath: harness.downloads + "/f.ts"))
    }

    /// kill -9 while ffmpeg muxes: the restart muxes again from the segments kept, and the
    /// file published is the one an uninterrupted run publishes; nothing is fetched twice.
    @Test func killedMidMuxTheFileIsTheSame() throws {
        let (harness, nginx, _) = try world()
        try harness.drop("whole.job", job("whole", nginx.url("hls/rend/master.m3u8"), "output = \"file\"\nsubtitles = \"en\"\n"))
        try harness.runUntilIdle()
        let whole = try #require(contents(harness.downloads + "/whole.mp4"))
        // ffmpeg held at its start until the test lets it go: the agent is killed while it waits.
        let marker = harness.directory.file("ffmpeg-started")
        let gate = harness.directory.file("gate")
        #expect(mkfifo(gate, 0o600) == 0)
        harness.extraEnvironment["PATH"] = try toolFolder(harness, ffmpeg: "#!/bin/sh\necho $$ > '\(marker)'\nread line < '\(gate)'\n"
                                                          + "exec /usr/bin/ffmpeg \"$@\"\n") + ":/usr/bin:/bin"
        try harness.drop("cut.job", job("cut", nginx.url("hls/rend/master.m3u8"), "output = \"file\"\nsubtitles = \"en\"\n"))
        let agent = try harness.startAgent()
        #expect(eventually(within: 60) { FileManager.default.fileExists(atPath: marker) && contents(marker)?.last == 0x0A })
        agent.signal(SIGKILL)
        _ = agent.wait(seconds: 10)
        // The ffmpeg the killed agent left is ended too (one left running writes a file of its own nobody publishes).
        let orphan = try #require(contents(marker).flatMap { pid_t(String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) })
        #expect(kill(orphan, SIGKILL) == 0)
        harness.extraEnvironment["PATH"] = nil
        let fetched = nginx.requests.count
        try harness.runUntilIdle()
        #expect(contents(harness.downloads + "/cut.mp4") == whole)
        #expect(nginx.requests.count == fetched, "nothing fetched again")
        let finished = try harness.events().filter { $0.type == "finished" && $0.task == "cut" }
        #expect(finished.count == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: harness.downloads).sorted() == ["cut.mp4", "whole.mp4"])
    }

    /// kill -9 while the sound's segments download: each segment is finished once, and
    /// the folder is the one an uninterrupted run makes.
    @Test func killedMidDownloadTheFolderIsTheSame() throws {
        let (harness, nginx, media) = try world()
        // 4 KB/s a segment (of 20 to 60 KB). The kill comes as soon as segments take their names in
        // the work folder (after their `finished` is committed), looked for on disk every 20 ms: a
        // `status` call per look took seconds on a loaded machine, and the last segment finished too.
        try harness.drop("v.job", job("v", nginx.url("slow/hls/rend/master.m3u8"), "max_speed = \"4K\"\nsubtitles = \"en\"\n"))
        let agent = try harness.startAgent()
        func segmentsNamed() -> Int {
            ((try? FileManager.default.contentsOfDirectory(atPath: harness.downloads + "/v.part")) ?? []).filter { !$0.hasSuffix(".part") }.count
        }
        #expect(eventually(within: 60) { segmentsNamed() >= 1 })
        agent.signal(SIGKILL)
        _ = agent.wait(seconds: 10)
        let done = try harness.statusTasks().filter { $0["parent"] as? String == "v" && $0["state"] as? String == "finished" }.count
        #expect(done < 16, "killed before the last segment: \(done) of 16 finished")
        try harness.runUntilIdle()
        let folder = harness.downloads + "/v"
        try expectSegments(in: folder, prefix: "", from: "vvideo", media)
        try expectSegments(in: folder, prefix: "audio-", from: "ven", media)
        #expect(Set(HLSMedia.streams(of: folder + "/index.m3u8")).isSuperset(of: ["video", "audio"]))
        let finished = try harness.events().filter { $0.type == "finished" }.compactMap(\.task)
        #expect(finished.count == Set(finished).count && finished.count == 17, "\(finished)")
        try expectVerifyClean(harness)
    }

    /// Renditions that cannot be served fail the video with the reason, never hang it: a sound
    /// "playlist" that is the master itself, one the server does not have, and a live video.
    @Test func renditionsThatCannotBeServedFailSayingWhy() throws {
        let (harness, nginx, media) = try world()
        let video = "#EXT-X-STREAM-INF:BANDWIDTH=75900,RESOLUTION=320x240,AUDIO=\"a\"\nhls/rend/vvideo/index.m3u8\n"
        try ("#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"x\",DEFAULT=YES,URI=\"loop.m3u8\"\n" + video)
            .write(toFile: nginx.root + "/loop.m3u8", atomically: true, encoding: .utf8)
        try ("#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"x\",DEFAULT=YES,URI=\"gone/index.m3u8\"\n" + video)
            .write(toFile: nginx.root + "/missing.m3u8", atomically: true, encoding: .utf8)
        // A live video: its playlist without an end.
        let live = try String(contentsOfFile: media.path("rend/vvideo/index.m3u8"), encoding: .utf8)
            .replacingOccurrences(of: "#EXT-X-ENDLIST", with: "").replacingOccurrences(of: "#EXT-X-PLAYLIST-TYPE:VOD", with: "")
            .replacingOccurrences(of: "seg0", with: "hls/rend/vvideo/seg0")
        try live.write(toFile: nginx.root + "/live-video.m3u8", atomically: true, encoding: .utf8)
        try ("#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"x\",DEFAULT=YES,URI=\"hls/rend/ven/index.m3u8\"\n"
             + "#EXT-X-STREAM-INF:BANDWIDTH=75900,AUDIO=\"a\"\nlive-video.m3u8\n")
            .write(toFile: nginx.root + "/live.m3u8", atomically: true, encoding: .utf8)
        for name in ["loop", "missing", "live"] {
            try harness.drop("\(name).job", job(name, nginx.url("\(name).m3u8"), "retries = 0\nmax_duration = 60\n"))
        }
        try harness.runUntilIdle(expecting: 4)
        let loop = try task(harness, "loop")
        #expect(loop["error_code"] as? String == "bad_playlist")
        #expect((loop["error"] as? String)?.hasPrefix("the sound playlist http://127.0.0.1:\(nginx.port)/loop.m3u8 is a master playlist") == true,
                "\(loop)")
        #expect(try task(harness, "missing")["error_code"] as? String == "http_404")
        let refused = try task(harness, "live")
        #expect(refused["error_code"] as? String == "separate_audio")
        #expect((refused["error"] as? String)?.contains("live-video.m3u8 is a live playlist: syncagent takes separate sound and "
                                                         + "subtitles renditions from VOD playlists only") == true, "\(refused)")
        #expect(!nginx.requests.contains { $0.uri.hasSuffix(".ts") }, "nothing fetched")
        #expect(try FileManager.default.contentsOfDirectory(atPath: harness.downloads).isEmpty)
    }

    /// A video with renditions is not retargeted (its sound would stay at the old URL): said at once.
    @Test func aRetargetOfAVideoWithRenditionsIsRefused() throws {
        let (harness, nginx, _) = try world()
        try harness.drop("v.job", job("v", nginx.url("slow/hls/rend/master.m3u8"), "max_speed = \"20K\"\n"))
        let agent = try harness.startAgent()
        #expect(eventually(within: 60) { (try? harness.statusTasks().contains { $0["parent"] as? String == "v" }) == true })
        let answer = try harness.run(["retarget", "v", nginx.url("hls/rend/master.m3u8")])
        #expect(answer.stdout.contains("cannot retarget: its sound or subtitles come from playlists of their own")
                || answer.stderr.contains("cannot retarget: its sound or subtitles come from playlists of their own"), "\(answer)")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// Attacks from a hostile master: a rendition URI climbing out with `../` and one on
    /// another host, a group nobody defined, two defaults, 10,000 renditions, and a
    /// LANGUAGE and NAME made to break out of the local playlist or name a file elsewhere.
    /// Nothing lands outside DEST, nothing the server wrote names a local file, and the
    /// agent neither crashes nor hangs.
    @Test func aHostileMasterCannotEscapeOrStallTheAgent() throws {
        let (harness, nginx, _) = try world()
        let video = "#EXT-X-STREAM-INF:BANDWIDTH=75900,RESOLUTION=320x240"
        let masters: [String: String] = [
            // `../` resolves on the server (to /hls/rend/ven/); the local names stay the agent's.
            "climb": "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"../../../etc/passwd\",LANGUAGE=\"../../x/y\",DEFAULT=YES,"
                + "URI=\"../../../hls/rend/ven/index.m3u8\"\n\(video),AUDIO=\"a\"\nhls/rend/vvideo/index.m3u8\n",
            // The sound on another host (a CDN's).
            "other": "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"x\",DEFAULT=YES,URI=\"http://localhost:\(nginx.port)/hls/rend/ven/index.m3u8\"\n"
                + "\(video),AUDIO=\"a\"\nhls/rend/vvideo/index.m3u8\n",
            "nobody": "\(video),AUDIO=\"nobody\"\nhls/rend/vvideo/index.m3u8\n",
            "twodefaults": "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"fr\",DEFAULT=YES,URI=\"hls/rend/vfr/index.m3u8\"\n"
                + "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"en\",DEFAULT=YES,URI=\"hls/rend/ven/index.m3u8\"\n"
                + "\(video),AUDIO=\"a\"\nhls/rend/vvideo/index.m3u8\n",
            "many": (0..<10_000).map { "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"n\($0)\",LANGUAGE=\"x\($0)\",URI=\"hls/rend/ven/index.m3u8\"\n" }
                .joined() + "\(video),AUDIO=\"a\"\nhls/rend/vvideo/index.m3u8\n",
            "quote": "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",NAME=\"a\u{1B}]0;pwned\u{7}\u{2028}#EXT-X-ENDLIST\",LANGUAGE=\"en\u{7}/..\",DEFAULT=YES,"
                + "URI=\"hls/rend/ven/index.m3u8\"\n\(video),AUDIO=\"a\"\nhls/rend/vvideo/index.m3u8\n",
        ]
        for (name, text) in masters {
            try ("#EXTM3U\n" + text).write(toFile: nginx.root + "/\(name).m3u8", atomically: true, encoding: .utf8)
            try harness.drop("\(name).job", job(name, nginx.url("\(name).m3u8")))
        }
        try harness.runUntilIdle(seconds: 180)
        for name in masters.keys {
            #expect(try task(harness, name)["state"] as? String == "finished", "\(name)")
            let files = try FileManager.default.contentsOfDirectory(atPath: harness.downloads + "/" + name)
            let expected = name == "nobody" ? ["index.m3u8"] + (0..<5).map { "\($0).ts" }
                : ["index.m3u8", "video.m3u8", "audio.m3u8"] + (0..<5).map { "\($0).ts" } + (0..<6).map { "audio-\($0).ts" }
            #expect(files.sorted() == expected.sorted(), "\(name): \(files)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: harness.downloads).sorted() == masters.keys.sorted())
        let climb = try String(contentsOfFile: harness.downloads + "/climb/index.m3u8", encoding: .utf8)
        #expect(!climb.contains("LANGUAGE") && climb.contains("NAME=\"../../../etc/passwd\",DEFAULT=YES"), "\(climb)")
        let quote = try String(contentsOfFile: harness.downloads + "/quote/index.m3u8", encoding: .utf8)
        #expect(quote.components(separatedBy: "\n").count == 6 && !quote.contains("\u{1B}") && !quote.contains("\u{2028}")
                && !quote.contains("LANGUAGE") && quote.contains("NAME=\"a]0;pwned#EXT-X-ENDLIST\""), "\(quote)")
        // Two defaults: the first.
        #expect(nginx.requests.contains { $0.uri.hasPrefix("/hls/rend/vfr/seg") })
    }
}

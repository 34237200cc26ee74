import Foundation

/// Real HLS made by ffmpeg (SPEC §10's tests): a clear VOD, two renditions
/// under a master playlist, sound alone, an AES-128 copy (encrypted here with openssl, so
/// each clear segment is known), fMP4, one file with byte ranges, and a
/// 100-segment video. Made once per test process, in `root`.
public final class HLSMedia: @unchecked Sendable {
    public let root: String
    /// The AES-128 key of `enc/` (16 bytes).
    public let key: Data

    public static func make(in root: String) throws -> HLSMedia {
        let media = HLSMedia(root: root)
        try media.build()
        return media
    }

    /// `rend/`: a video whose sound and subtitles are renditions of their own, as ffmpeg's
    /// `-var_stream_map` writes them: `master.m3u8` names `vvideo/` (5 segments of 320x240
    /// H.264, and `subs.m3u8`: 5 WebVTT segments, "Hello" and "World"), `ven/` (440 Hz AAC,
    /// `LANGUAGE="en"`, the default) and `vfr/` (660 Hz, `"fr-CA"`), 10 s each.
    /// `master-enc.m3u8` is the same with the English sound under AES-128 (`venc/`).
    public static func makeRenditions(in root: String) throws -> HLSMedia {
        let media = HLSMedia(root: root)
        try media.buildRenditions()
        return media
    }

    private init(root: String) {
        self.root = root
        key = Data((0..<16).map { UInt8(($0 * 37 + 11) & 0xFF) })
    }

    public func path(_ relative: String) -> String { root + "/" + relative }

    /// The segment files a playlist lists, in order (relative to its folder).
    public func segments(of playlist: String) throws -> [String] {
        try String(contentsOfFile: path(playlist), encoding: .utf8).split(separator: "\n")
            .filter { !$0.hasPrefix("#") && !$0.isEmpty }.map(String.init)
    }

    private func build() throws {
        let video = { (size: String, seconds: Int) in
            ["-f", "lavfi", "-i", "testsrc=size=\(size):rate=25:duration=\(seconds)", "-f", "lavfi",
             "-i", "sine=frequency=440:duration=\(seconds)", "-c:v", "libx264", "-preset", "ultrafast", "-g", "50",
             "-c:a", "aac", "-f", "hls", "-hls_time", "2", "-hls_playlist_type", "vod"]
        }
        for folder in ["clear", "lo", "hi", "audio", "enc", "fmp4", "single", "long"] {
            try FileManager.default.createDirectory(atPath: path(folder), withIntermediateDirectories: true)
        }
        try ffmpeg(video("320x240", 20) + ["-hls_segment_filename", path("clear/seg%03d.ts"), path("clear/index.m3u8")])
        try ffmpeg(video("160x120", 10) + ["-hls_segment_filename", path("lo/seg%03d.ts"), path("lo/index.m3u8")])
        try ffmpeg(video("320x240", 10) + ["-hls_segment_filename", path("hi/seg%03d.ts"), path("hi/index.m3u8")])
        // Sound alone, as a master's audio-only variant (64 kbit/s AAC).
        try ffmpeg(["-f", "lavfi", "-i", "sine=frequency=440:duration=10", "-c:a", "aac", "-b:a", "64k", "-f", "hls",
                    "-hls_time", "2", "-hls_playlist_type", "vod", "-hls_segment_filename", path("audio/seg%03d.ts"),
                    path("audio/index.m3u8")])
        try """
            #EXTM3U
            #EXT-X-STREAM-INF:BANDWIDTH=300000,RESOLUTION=160x120,CODECS="avc1.42e00a,mp4a.40.2"
            lo/index.m3u8
            #EXT-X-STREAM-INF:BANDWIDTH=800000,RESOLUTION=320x240,CODECS="avc1.42e00d,mp4a.40.2"
            hi/index.m3u8

            """.write(toFile: path("master.m3u8"), atomically: true, encoding: .utf8)
        try ffmpeg(video("320x240", 10) + ["-hls_segment_type", "fmp4", "-hls_fmp4_init_filename", "init.mp4",
                                           "-hls_segment_filename", path("fmp4/seg%03d.m4s"), path("fmp4/index.m3u8")])
        try ffmpeg(video("160x120", 10) + ["-hls_flags", "single_file", path("single/index.m3u8")])
        try ffmpeg(video("160x120", 200) + ["-hls_segment_filename", path("long/seg%03d.ts"), path("long/index.m3u8")])
        try encryptClear()
    }

    private func buildRenditions() throws {
        try FileManager.default.createDirectory(atPath: path("rend"), withIntermediateDirectories: true)
        try "1\n00:00:00,500 --> 00:00:03,000\nHello\n\n2\n00:00:04,000 --> 00:00:08,000\nWorld\n\n"
            .write(toFile: path("rend/subs.srt"), atomically: true, encoding: .utf8)
        try ffmpeg(["-f", "lavfi", "-i", "testsrc=size=320x240:rate=25:duration=10",
                    "-f", "lavfi", "-i", "sine=frequency=440:duration=10", "-f", "lavfi", "-i", "sine=frequency=660:duration=10",
                    "-i", path("rend/subs.srt"), "-map", "0:v", "-map", "1:a", "-map", "2:a", "-map", "3:s",
                    "-c:v", "libx264", "-preset", "ultrafast", "-g", "50", "-c:a", "aac", "-c:s", "webvtt",
                    "-f", "hls", "-hls_time", "2", "-hls_playlist_type", "vod", "-master_pl_name", "master.m3u8",
                    "-hls_segment_filename", path("rend/v%v/seg%03d.ts"), "-hls_subtitle_path", path("rend/v%v/subs.m3u8"),
                    "-var_stream_map", "v:0,s:0,agroup:aud,sgroup:subs,name:video a:0,agroup:aud,language:en,name:en,default:yes "
                        + "a:1,agroup:aud,language:fr-CA,name:fr",
                    path("rend/v%v/index.m3u8")])
        // ffmpeg names no language for subtitles; a master from a service does.
        let master = try String(contentsOfFile: path("rend/master.m3u8"), encoding: .utf8)
            .replacingOccurrences(of: "TYPE=SUBTITLES,GROUP-ID=\"subs\",NAME=\"subtitle_0\"",
                                  with: "TYPE=SUBTITLES,GROUP-ID=\"subs\",NAME=\"English\",LANGUAGE=\"en\"")
        try master.write(toFile: path("rend/master.m3u8"), atomically: true, encoding: .utf8)
        try encrypt(from: "rend/ven", to: "rend/venc", keyURI: "../key.bin")
        try key.write(to: URL(fileURLWithPath: path("rend/key.bin")))
        try master.replacingOccurrences(of: "URI=\"ven/index.m3u8\"", with: "URI=\"venc/index.m3u8\"")
            .write(toFile: path("rend/master-enc.m3u8"), atomically: true, encoding: .utf8)
    }

    /// `to/`: the segments of `from/` under AES-128 with this media's key, the media sequence number as IV.
    private func encrypt(from: String, to: String, keyURI: String) throws {
        try FileManager.default.createDirectory(atPath: path(to), withIntermediateDirectories: true)
        let hexKey = key.map { String(format: "%02x", $0) }.joined()
        var out: [String] = []
        var index = 0
        for line in try String(contentsOfFile: path(from + "/index.m3u8"), encoding: .utf8).split(separator: "\n").map(String.init) {
            if line.hasPrefix("#EXTINF"), index == 0 { out.append("#EXT-X-KEY:METHOD=AES-128,URI=\"\(keyURI)\"") }
            if !line.hasPrefix("#"), !line.isEmpty {
                try run("/usr/bin/openssl", ["aes-128-cbc", "-K", hexKey, "-iv", String(format: "%032x", index),
                                             "-in", path(from + "/" + line), "-out", path(to + "/" + line)])
                index += 1
            }
            out.append(line)
        }
        try (out.joined(separator: "\n") + "\n").write(toFile: path(to + "/index.m3u8"), atomically: true, encoding: .utf8)
    }

    /// `enc/`: the clear segments under AES-128; the first half with an IV
    /// in the tag, the second with the media sequence number as IV.
    private func encryptClear() throws {
        try key.write(to: URL(fileURLWithPath: path("enc/key.bin")))
        let hexKey = key.map { String(format: "%02x", $0) }.joined()
        let lines = try String(contentsOfFile: path("clear/index.m3u8"), encoding: .utf8).split(separator: "\n").map(String.init)
        var out: [String] = []
        var index = 0
        for line in lines {
            if line.hasPrefix("#EXTINF") {
                if index == 0 {
                    out.append("#EXT-X-KEY:METHOD=AES-128,URI=\"key.bin?session=k1\",IV=0x000102030405060708090a0b0c0d0e0f")
                } else if index == 5 {
                    out.append("#EXT-X-KEY:METHOD=AES-128,URI=\"key.bin?session=k1\"")
                }
                out.append(line)
            } else if !line.hasPrefix("#") && !line.isEmpty {
                let iv = index < 5 ? "000102030405060708090a0b0c0d0e0f" : String(format: "%032x", index)
                try run("/usr/bin/openssl", ["aes-128-cbc", "-K", hexKey, "-iv", iv, "-in", path("clear/" + line),
                                             "-out", path("enc/" + line)])
                out.append(line)
                index += 1
            } else {
                out.append(line)
            }
        }
        try (out.joined(separator: "\n") + "\n").write(toFile: path("enc/index.m3u8"), atomically: true, encoding: .utf8)
    }

    private func ffmpeg(_ arguments: [String]) throws {
        try run("/usr/bin/ffmpeg", ["-loglevel", "error", "-y"] + arguments)
    }

    private func run(_ tool: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw TestFailure("\(tool) \(arguments.prefix(6)): \(text.suffix(500))") }
    }

    /// ffprobe's duration of a playlist or a media file, in seconds.
    public static func duration(of file: String) -> Double? {
        Double(probe(file, "format=duration").trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// ffprobe's duration of each stream of a file, by type (`video`, `audio`, `subtitle`).
    public static func streamDurations(of file: String) -> [String: Double] {
        var durations: [String: Double] = [:]
        for line in probe(file, "stream=codec_type,duration").split(separator: "\n") {
            let fields = line.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            if fields.count == 2, let seconds = Double(fields[1]) { durations[fields[0]] = seconds }
        }
        return durations
    }

    /// ffmpeg's text of the first subtitle stream of a file or playlist, as SubRip.
    public static func subtitles(of file: String) -> String {
        output(of: "/usr/bin/ffmpeg", ["-v", "error", "-i", file, "-map", "0:s:0", "-f", "srt", "-"])
    }

    /// ffprobe's stream types (`video`, `audio`) of a playlist or file.
    public static func streams(of file: String) -> [String] {
        probe(file, "stream=codec_type").split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    private static func probe(_ file: String, _ entries: String) -> String {
        output(of: "/usr/bin/ffprobe", ["-v", "error", "-show_entries", entries, "-of", "csv=p=0", file])
    }

    /// What a program prints on stdout ("" when it cannot start); its stderr is dropped.
    private static func output(of program: String, _ arguments: [String]) -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return "" }
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return text
    }
}

import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// A video and its separate renditions joined into one file (SPEC §10,
/// `output = "file"`): ffmpeg copies the streams (`-c copy`; subtitles as
/// `mov_text`, the text format MP4 holds) from the local media playlists the
/// assembly laid out. It runs on the assembler's thread, as a hook runs:
/// spawned without a shell, stdin closed, in a process group of its own,
/// killed past `timeoutMs`. Its file is written under a name of this run's
/// own, flushed, then renamed to the staging name: an ffmpeg left running
/// by an agent killed mid-mux writes only a file nobody publishes, and the
/// next start muxes again from the segments kept.
enum HLSMuxer {
    static let program = "ffmpeg"
    /// Copying streams runs at disk speed: half an hour is hours of video.
    static let timeoutMs: Int64 = 30 * 60 * 1000
    /// Lines of ffmpeg's errors a failure quotes.
    static let linesQuoted = 4

    /// - Returns: the muxed file's size.
    static func mux(folder: String, tracks: [HLSTrack], isMP4: Bool, into staging: String, root: DownloadRoot) throws -> Int64 {
        let work = String(folder[..<(folder.lastIndex(of: "/") ?? folder.endIndex)])
        let part = "\(work)/muxed-\(Posix.processID)-\(Posix.monotonicMs).part"
        let logFile = work + "/mux.log"
        var arguments = [program, "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
        // The playlists are the agent's own; a segment name in them is never a URL to follow.
        for playlist in [HLSLocalMaster.videoPlaylist] + tracks.map({ HLSLocalMaster.playlist(of: $0.kind) }) {
            arguments += ["-protocol_whitelist", "file", "-i", folder + "/" + playlist]
        }
        arguments += ["-map", "0:v"]
        for (index, track) in tracks.enumerated() { arguments += ["-map", "\(index + 1):\(track.kind == .audio ? "a" : "s"):0"] }
        arguments += ["-c", "copy"]
        if tracks.contains(where: { $0.kind == .subtitles }) { arguments += ["-c:s", "mov_text"] }
        arguments += ["-f", isMP4 ? "mp4" : "mpegts", part]

        let log = try root.openPartial(logFile, truncatingTo: 0)
        let pid: pid_t
        do {
            defer { Posix.close(log) }
            let environment = ProcessInfo.processInfo.environment.map { "\($0.key)=\($0.value)" }
            pid = try Posix.spawn(arguments, environment: environment, output: log)
        } catch let error as SystemError where error.errno == ENOENT || error.errno == EACCES {
            throw HLSPublisher.HLSFailure(reason: "\(program) is not on PATH: it joins a video and its separate sound or subtitles "
                                          + "into one file; install it (or use output = \"directory\") and resume the task",
                                          code: .muxFailed)
        }
        let ended = try waitForExit(pid)
        let exited = ended.map { $0.si_code == CLD_EXITED } ?? false
        let status = ended?._sifields._sigchld.si_status ?? -1
        guard exited, status == 0 else {
            // (Its partial output stays in the work folder, which goes when the video is published or cancelled.)
            let how = ended == nil ? "did not finish within \(timeoutMs / 60_000) minutes"
                : exited ? "exited with status \(status)" : "was killed by signal \(status)"
            throw HLSPublisher.HLSFailure(reason: "\(program) \(how) joining the video into one file" + lastLines(of: logFile, root: root),
                                          code: .muxFailed)
        }
        let fd = try root.openForReading(part)
        do {
            defer { Posix.close(fd) }
            try Posix.dataSync(fd, shown: part)
        }
        try root.rename(part, to: staging)
        try root.syncDirectory(of: staging)
        return root.size(staging) ?? 0
    }

    /// Waits for `pid` to exit, up to `timeoutMs`; past it, its process group is killed. nil: it was.
    private static func waitForExit(_ pid: pid_t) throws -> siginfo_t? {
        let deadline = Posix.monotonicMs + timeoutMs
        while Posix.monotonicMs < deadline {
            if let info = try Posix.reapIfEnded(pid, shown: "\(program) (pid \(pid))") { return info }
            Posix.sleep(ms: 20)
        }
        try Posix.kill(-pid, SIGKILL, shown: "\(program)'s process group \(pid)")
        while try Posix.reapIfEnded(pid, shown: "\(program) (pid \(pid))") == nil { Posix.sleep(ms: 20) }
        return nil
    }

    /// The end of what ffmpeg said, for the failure's words (`: …`), or nothing.
    private static func lastLines(of logFile: String, root: DownloadRoot) -> String {
        let bytes: [UInt8]
        do { bytes = try root.read(logFile, limit: 1 << 20) } catch { return " (its messages could not be read: \(error))" }
        let lines = String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isNewline)
            .map { Printable.escaping(String($0.prefix(300))) }.suffix(linesQuoted)
        return lines.isEmpty ? "" : ": " + lines.joined(separator: " / ")
    }
}

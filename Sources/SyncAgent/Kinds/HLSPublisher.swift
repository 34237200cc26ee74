import _CryptoExtras
import Crypto
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// The fan-in of an HLS parent (SPEC §10): once every segment child has
/// finished, the video is assembled in `<dest>.part/out` — a folder with
/// `0.ts, 1.ts, …` and a local `index.m3u8`, or one concatenated file —
/// with AES-128 segments decrypted on the way. `finished` is then recorded
/// with the final path, and the rename that publishes it follows the
/// commit (the same two steps as a download's `Publisher`).
enum HLSPublisher {
    struct Prepared {
        /// The assembled video, to be renamed to `dest` after the commit.
        var staging: String
        var dest: String
        var bytes: Int64
    }

    /// Where the video is assembled: inside the parent's work folder.
    static func staging(of parent: TaskState) -> String? {
        HLSFanOut.workDirectory(of: parent).map { $0 + "/out" }
    }

    static func prepare(_ parent: TaskState, in state: AgentState, root: DownloadRoot) throws -> Prepared {
        guard let hls = parent.hls, let dest = parent.spec.dest, let staging = staging(of: parent) else {
            throw SystemError(operation: "task \(parent.id) has no playlist to publish", errno: EINVAL)
        }
        let options = parent.spec.hls ?? HLSOptions()
        let tracks = hls.renditions?.tracks ?? []
        let keys = try readKeys(hls.entries + tracks.flatMap(\.entries), in: state, root: root)
        let isFMP4 = isFMP4(hls.entries)
        switch options.output {
        case .file where Set(hls.entries.compactMap(\.mapChild)).count > 1:
            throw HLSFailure(reason: "the playlist changes its fMP4 init segment (#EXT-X-MAP) part-way: one file cannot hold "
                             + "both; use output = \"directory\"", code: .cannotJoin)
        case .file where isFMP4 && hls.entries.contains { $0.mapChild == nil }:
            // Joined, MPEG-TS bytes and fMP4 ones make a file that is neither.
            throw HLSFailure(reason: "the playlist mixes MPEG-TS segments and fMP4 ones (#EXT-X-MAP): one file cannot hold "
                             + "both; use output = \"directory\"", code: .cannotJoin)
        case .directory:
            let bytes = try assembleFolder(hls, at: staging, keys: keys, in: state, root: root)
            return Prepared(staging: staging, dest: try finalPath(dest, parent, in: state, root: root), bytes: bytes)
        case .file where hls.renditions != nil:
            // The video and its renditions laid out as for a folder, then muxed into one file by ffmpeg.
            let work = HLSFanOut.workDirectory(of: parent)!
            _ = try assembleFolder(hls, at: work + "/mux", keys: keys, in: state, root: root)
            let isMP4 = joinsIntoMP4(hls.entries, hls.renditions)
            let bytes = try HLSMuxer.mux(folder: work + "/mux", tracks: tracks, isMP4: isMP4, into: staging, root: root)
            return Prepared(staging: staging, dest: try finalPath(joinedPath(dest, isMP4: isMP4), parent, in: state, root: root),
                            bytes: bytes)
        case .file:
            let bytes = try concatenate(hls, into: staging, keys: keys, in: state, root: root)
            return Prepared(staging: staging, dest: try finalPath(joinedPath(dest, isMP4: isFMP4), parent, in: state, root: root),
                            bytes: bytes)
        }
    }

    /// Whether the video is published as one file, named when its format is known (`joinedPath`).
    static func joinsIntoOneFile(_ spec: TaskSpec) -> Bool { spec.kind == .hls && spec.hls?.output == .file }

    /// Whether the segments are fMP4 (and so the file an `.mp4`): the first one's init segment says.
    static func isFMP4(_ entries: [HLSEntry]) -> Bool { entries.contains { $0.mapChild != nil } }

    /// Whether a joined video is an MP4: fMP4 segments, or subtitles, which MPEG-TS cannot hold
    /// (they are muxed as `mov_text`).
    static func joinsIntoMP4(_ entries: [HLSEntry], _ renditions: HLSRenditions?) -> Bool {
        isFMP4(entries) || renditions?.tracks.contains { $0.kind == .subtitles } == true
    }

    /// The one file a video is joined into. `dest = "talk.ts"` names the file,
    /// not its stem: the extension is the format's, once.
    static func joinedPath(_ dest: String, isMP4: Bool) -> String {
        let lowered = dest.lowercased()
        let stem = lowered.hasSuffix(".ts") ? String(dest.dropLast(3)) : lowered.hasSuffix(".mp4") ? String(dest.dropLast(4)) : dest
        return stem + (isMP4 ? ".mp4" : ".ts")
    }

    /// `overwrite` for the finished video: rename picks a free name; a
    /// folder that exists is never deleted to make room.
    private static func finalPath(_ path: String, _ parent: TaskState, in state: AgentState, root: DownloadRoot) throws -> String {
        guard let existing = root.status(path) else { return path }
        switch parent.spec.overwrite {
        case .rename:
            return Destinations.firstFree(path, owner: parent.id, in: state, exists: { $0 != parent.partPath && root.exists($0) }).path
        case .replace where (existing.st_mode & S_IFMT) != S_IFDIR:
            return path
        case .replace:
            throw HLSFailure(reason: "\(path) is a folder that exists; overwrite = \"replace\" never deletes a folder", code: .destExists)
        case .skip, .fail, .update:
            // (update applies to downloads only: the job parser refuses it for a video.)
            throw HLSFailure(reason: "\(path) already exists (overwrite = \"\(parent.spec.overwrite.rawValue)\")", code: .destExists)
        }
    }

    struct HLSFailure: Error, CustomStringConvertible {
        var reason: String
        var code: FailureCode
        /// The child whose file is at fault (a bad key, a segment that does
        /// not decrypt): failed too, so that `resume` fetches it again.
        var child: String? = nil
        var description: String { reason }
    }

    /// Key bytes by key child: secrets, kept in memory only while assembling.
    private static func readKeys(_ entries: [HLSEntry], in state: AgentState, root: DownloadRoot) throws -> [String: SymmetricKey] {
        var keys: [String: SymmetricKey] = [:]
        for id in Set(entries.compactMap(\.keyChild)) {
            guard let path = state[id]?.dest else { continue }
            let bytes = try root.read(path, limit: 64)
            guard bytes.count == 16 else {
                throw HLSFailure(reason: "the AES-128 key of \(state[id].map { Redaction.url($0.spec.url) } ?? id) has \(bytes.count) bytes, not 16",
                                 code: .badKey, child: id)
            }
            keys[id] = SymmetricKey(data: bytes)
        }
        return keys
    }

    /// A finished child's file as its download left it. One cut short or
    /// grown since (by another process) would be joined as it is now: the
    /// child fails with the video, so that `resume` fetches it again.
    private static func checkUnchanged(_ child: String, size: Int64?, in state: AgentState) throws {
        guard let task = state[child], let size, size != task.bytes else { return }
        throw HLSFailure(reason: "\(task.dest ?? child) has \(size) bytes, not the \(task.bytes) downloaded: it changed since",
                         code: .segmentChanged, child: child)
    }

    /// A segment's bytes as a player wants them: decrypted if it has a key.
    private static func clearBytes(_ entry: HLSEntry, keys: [String: SymmetricKey], in state: AgentState,
                                   root: DownloadRoot) throws -> [UInt8] {
        guard let path = state[entry.child]?.dest else { throw HLSFailure(reason: "segment \(entry.sequence) has no file", code: .localError) }
        let bytes = try root.read(path, limit: 1 << 30)
        try checkUnchanged(entry.child, size: Int64(bytes.count), in: state)
        guard let keyChild = entry.keyChild, let key = keys[keyChild] else { return bytes }
        do {
            let iv = try AES._CBC.IV(ivBytes: Hex.decode(entry.iv ?? "") ?? [])
            return Array(try AES._CBC.decrypt(bytes, using: key, iv: iv))
        } catch {
            throw HLSFailure(reason: "segment \(entry.sequence) does not decrypt with its AES-128 key (its padding is wrong: "
                             + "a wrong key, or a damaged segment)", code: .decryptFailed, child: keyChild)
        }
    }

    /// `out/0.ts, 1.ts, …, init.mp4, index.m3u8`; with renditions, the video's
    /// playlist is `video.m3u8`, each rendition's files are beside it under
    /// its prefix (`audio-0.ts`, `subs-0.vtt`, `audio.m3u8` …), and `index.m3u8`
    /// is the master naming them. Clear segments are moved, not copied; a crash
    /// half-way resumes (what is in `out/` is done).
    private static func assembleFolder(_ hls: HLSProgress, at staging: String, keys: [String: SymmetricKey],
                                       in state: AgentState, root: DownloadRoot) throws -> Int64 {
        try root.makeDirectory(staging)
        guard let renditions = hls.renditions else {
            return try assembleMedia(hls.entries, targetDurationMs: hls.targetDurationMs, playlist: "index.m3u8", at: staging,
                                     keys: keys, in: state, root: root)
        }
        var bytes = try assembleMedia(hls.entries, targetDurationMs: hls.targetDurationMs, playlist: HLSLocalMaster.videoPlaylist,
                                      at: staging, keys: keys, in: state, root: root)
        for track in renditions.tracks {
            bytes += try assembleMedia(track.entries, targetDurationMs: track.targetDurationMs,
                                       playlist: HLSLocalMaster.playlist(of: track.kind), at: staging,
                                       prefix: HLSLocalMaster.prefix(of: track.kind), segmentExtension: track.segmentExtension,
                                       keys: keys, in: state, root: root)
        }
        let master = Array(HLSLocalMaster.text(renditions).utf8)
        try writeFile(master, to: staging + "/index.m3u8", root: root)
        try root.syncDirectory(of: staging + "/index.m3u8")
        return bytes + Int64(master.count)
    }

    /// One media playlist's segments and init segments in `staging`, and its local playlist.
    private static func assembleMedia(_ entries: [HLSEntry], targetDurationMs: Int64, playlist: String, at staging: String,
                                      prefix: String = "", segmentExtension: String? = nil, keys: [String: SymmetricKey],
                                      in state: AgentState, root: DownloadRoot) throws -> Int64 {
        let (names, inits) = HLSLocalPlaylist.names(of: entries, prefix: prefix, segmentExtension: segmentExtension)
        var bytes: Int64 = 0
        var moves: [(child: String, from: String, to: String)] = inits.compactMap { child, name in
            state[child]?.dest.map { (child, $0, staging + "/" + name) }
        }
        for (index, entry) in entries.enumerated() {
            let target = staging + "/" + names[index]
            if entry.keyChild != nil {
                if !root.exists(target) { try writeFile(try clearBytes(entry, keys: keys, in: state, root: root), to: target, root: root) }
            } else if let source = state[entry.child]?.dest {
                moves.append((entry.child, source, target))
            }
        }
        for move in moves where root.exists(move.from) || !root.exists(move.to) {
            if root.exists(move.from) { try checkUnchanged(move.child, size: root.size(move.from), in: state) }
            try root.rename(move.from, to: move.to)
        }
        for name in names + Array(inits.values) { bytes += root.size(staging + "/" + name) ?? 0 }
        let text = Array(HLSLocalPlaylist.text(entries: entries, targetDurationMs: targetDurationMs, prefix: prefix,
                                               segmentExtension: segmentExtension).utf8)
        try writeFile(text, to: staging + "/" + playlist, root: root)
        try root.syncDirectory(of: staging + "/" + playlist)
        return bytes + Int64(text.count)
    }

    /// One file: each init segment where it starts to apply, then every
    /// segment in order, decrypted. Written whole again after a crash.
    private static func concatenate(_ hls: HLSProgress, into staging: String, keys: [String: SymmetricKey],
                                     in state: AgentState, root: DownloadRoot) throws -> Int64 {
        let fd = try root.openPartial(staging, truncatingTo: 0)
        defer { Posix.close(fd) }
        var written: Int64 = 0
        var currentInit: String?
        for entry in hls.entries {
            if let map = entry.mapChild, map != currentInit, let path = state[map]?.dest {
                currentInit = map
                let initBytes = try root.read(path, limit: 64 << 20)
                try checkUnchanged(map, size: Int64(initBytes.count), in: state)
                written += try append(initBytes, to: fd, staging)
            }
            written += try append(try clearBytes(entry, keys: keys, in: state, root: root), to: fd, staging)
        }
        try Posix.dataSync(fd, shown: staging)
        return written
    }

    private static func append(_ bytes: [UInt8], to fd: Int32, _ path: String) throws -> Int64 {
        try bytes.withUnsafeBytes { try Posix.writeAll(fd, $0, shown: path) }
        return Int64(bytes.count)
    }

    /// A complete file: written under `.part`, flushed, renamed.
    private static func writeFile(_ bytes: [UInt8], to path: String, root: DownloadRoot) throws {
        let temporary = Destinations.partPath(of: path)
        let fd = try root.openPartial(temporary, truncatingTo: 0)
        do {
            defer { Posix.close(fd) }
            _ = try append(bytes, to: fd, temporary)
            try Posix.dataSync(fd, shown: temporary)
        }
        try root.rename(temporary, to: path)
    }
}

import Crypto
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// `didFinishDownloadingToURL`, in two steps around a commit: `prepare`
/// checks the flushed partial file and picks the final path, the agent
/// records `finished` with that path and commits, then `complete` renames.
/// A crash between the commit and the rename is finished by `complete` on
/// the next start, so a published file never appears twice.
enum Publisher {
    enum Verdict: Equatable {
        /// Verified (checksums only when the job gave one) and placed; the
        /// partial file's modification time, which the rename keeps.
        case ready(path: String, modifiedNs: Int64)
        /// `overwrite = "skip"` and the destination appeared meanwhile: finish without publishing.
        case skipped(reason: String)
        case failed(reason: String, code: FailureCode)
    }

    /// - Parameter bytes: what the agent wrote and flushed: the partial file
    ///   must still be a regular file of that size (a process that swapped
    ///   in another file, a FIFO or a symlink is caught here, not published).
    /// - Parameter sha256: the file's SHA-256, hashed as its bytes were made
    ///   durable: the job's `sha256` is checked against it without reading
    ///   the file again.
    static func prepare(_ task: TaskState, bytes: Int64, sha256: String, in state: AgentState, root: DownloadRoot) -> Verdict {
        // A name its server gave is where it goes; the partial file stays beside the job's.
        guard let part = task.partPath, let dest = task.finalDest else {
            return .failed(reason: "the task keeps no file", code: .localError)
        }
        let onDisk = root.sizeAndModified(part)
        guard let onDisk, onDisk.size == bytes else {
            let found = onDisk.map { "\($0.size) bytes" } ?? (root.exists(part) ? "not a regular file" : "gone")
            return .failed(reason: "\(part) is not the file the agent wrote (\(bytes) bytes): it is \(found); nothing was published",
                           code: .partChanged)
        }
        if let expected = task.spec.sha256, expected != sha256 {
            return .failed(reason: "sha256 mismatch: expected \(expected), got \(sha256)", code: .checksumMismatch)
        }
        // Re-reading a file costs as much as writing it: only when the job asks for an md5 (rare).
        if let expected = task.spec.md5 {
            let digests: (sha256: String, md5: String?)
            do {
                digests = try hash(part, md5: true, root: root)
            } catch {
                return .failed(reason: "cannot read \(part): \(error)", code: .readError)
            }
            if digests.sha256 != sha256 {
                return .failed(reason: "\(part) changed after its bytes were made durable: its sha256 is \(digests.sha256), "
                               + "they hashed to \(sha256)", code: .checksumMismatch)
            }
            if expected != digests.md5 {
                return .failed(reason: "md5 mismatch: expected \(expected), got \(digests.md5 ?? "")", code: .checksumMismatch)
            }
        }
        // The rename must be able to happen before `finished` vouches for it.
        do {
            try root.makeParent(of: dest)
        } catch {
            return .failed(reason: "cannot publish \(dest): \(error)", code: .destUnreachable)
        }
        guard let existing = root.status(dest) else { return .ready(path: dest, modifiedNs: onDisk.modifiedNs) }
        switch task.spec.overwrite {
        case .replace where (existing.st_mode & S_IFMT) == S_IFDIR, .update where (existing.st_mode & S_IFMT) == S_IFDIR:
            return .failed(reason: "\(dest) is a folder; overwrite = \"\(task.spec.overwrite.rawValue)\" replaces files, never folders",
                           code: .destExists)
        case .replace, .update:
            return .ready(path: dest, modifiedNs: onDisk.modifiedNs)
        case .skip:
            return .skipped(reason: "skipped: \(dest) appeared while the task ran")
        case .fail:
            return .failed(reason: "\(dest) already exists (overwrite = \"\(task.spec.overwrite.rawValue)\")", code: .destExists)
        case .rename:
            // A file appeared at the reserved name meanwhile: the next free
            // name, never one another live task holds (our own partial file aside).
            return .ready(path: Destinations.firstFree(dest, owner: task.id, in: state,
                                                       exists: { $0 != part && root.exists($0) }).path,
                          modifiedNs: onDisk.modifiedNs)
        }
    }

    /// Moves `DEST.part` to the path `finished` recorded. Idempotent: if the
    /// partial file is gone the rename already happened. The caller syncs the
    /// directory (once for a whole batch of renames).
    /// `replacing`: the task's overwrite mode allows it (`OverwriteMode.replacesFiles`).
    static func complete(part: String, to dest: String, replacing: Bool, root: DownloadRoot) throws {
        guard root.exists(part) else { return }
        try root.rename(part, to: dest, replacing: replacing)
    }

    /// Streams the file through SHA-256 (and MD5 when asked): memory stays flat.
    static func hash(_ path: String, md5 wantsMD5: Bool, root: DownloadRoot) throws -> (sha256: String, md5: String?) {
        let fd = try root.openForReading(path)
        defer { Posix.close(fd) }
        return try FileDigest.digests(of: fd, path: path, md5: wantsMD5)
    }
}

/// Checksums streamed through a 1 MiB buffer: memory stays flat.
public enum FileDigest {
    /// `replay --verify`: a finished file's SHA-256, read as it is on disk.
    public static func sha256(ofFile path: String) throws -> String {
        // Only a regular file, never waited on: a FIFO there must not hang `replay --verify`.
        let fd = try FileSystem.openRegular(path, O_RDONLY | O_NOFOLLOW, shown: path).descriptor
        defer { Posix.close(fd) }
        return try digests(of: fd, path: path, md5: false).sha256
    }

    /// `replay --verify`: where the file at `path` no longer holds the bytes
    /// `digests` vouch for within `durable` (each failed chain's damaged
    /// span, see `DurableHashing.check`). Bytes no record covers are not read.
    public static func damage(ofFile path: String, digests: DigestBook, within durable: ByteRanges) throws -> [ByteSpan] {
        let fd = try FileSystem.openRegular(path, O_RDONLY | O_NOFOLLOW, shown: path).descriptor
        defer { Posix.close(fd) }
        return try DurableHashing.check(fd, digests.checks(of: durable).filter { !$0.adopts }, shown: path).damaged
    }

    static func digests(of fd: Int32, path: String, md5 wantsMD5: Bool) throws -> (sha256: String, md5: String?) {
        var sha = SHA256()
        var md5 = Insecure.MD5()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = try Posix.read(fd, into: buffer, shown: path)
            if count == 0 { break }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            sha.update(bufferPointer: chunk)
            if wantsMD5 { md5.update(bufferPointer: chunk) }
        }
        return (Hex.encode(sha.finalize()), wantsMD5 ? Hex.encode(md5.finalize()) : nil)
    }
}

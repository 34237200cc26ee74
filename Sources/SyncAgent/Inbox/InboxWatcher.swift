import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// A name in the inbox as the kernel has it. Names need not be UTF-8: the
/// raw bytes reach the file (so a job named in Latin-1 is taken like any
/// other), `text` shows it, with each byte that is not UTF-8 as `%XX`.
struct InboxName: Hashable, CustomStringConvertible {
    let text: String
    /// The raw bytes, kept only when they are not the UTF-8 of `text`
    /// (a backlog of 10,000 names should not be held twice).
    private let raw: [UInt8]?

    var bytes: [UInt8] { raw ?? Array(text.utf8) }

    init<Bytes: Collection>(bytes: Bytes) where Bytes.Element == UInt8 {
        let array = Array(bytes)
        if let valid = String(validating: array, as: UTF8.self) {
            text = valid
            raw = nil
        } else {
            text = Self.escaped(array)
            raw = array
        }
    }

    init(_ text: String) { self.init(bytes: Array(text.utf8)) }

    var description: String { text }

    /// Valid UTF-8 runs kept, every other byte as `%XX`.
    private static func escaped(_ bytes: [UInt8]) -> String {
        var out = ""
        var index = 0
        while index < bytes.count {
            // The longest valid UTF-8 prefix from here, one scalar at a time.
            var end = index + 1
            var decoded: String?
            for length in 1...4 where index + length <= bytes.count {
                if let scalar = String(validating: bytes[index..<index + length], as: UTF8.self) {
                    decoded = scalar
                    end = index + length
                    break
                }
            }
            out += decoded ?? "%" + String(bytes[index], radix: 16, uppercase: true).leftPadded(to: 2)
            index = end
        }
        return out
    }

    /// Calls `body` with the name as a NUL-terminated C string.
    func withCString<T>(_ body: (UnsafePointer<CChar>) throws -> T) rethrows -> T {
        try (bytes + [0]).withUnsafeBufferPointer { buffer in
            try buffer.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) }
        }
    }
}

private extension String {
    func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

/// inotify on the inbox: names of job files that were closed after writing
/// or moved in. A queue overflow asks the caller for a full rescan.
/// (What another machine writes into a network inbox raises no event here:
/// `InboxPoller` scans such an inbox on an interval.)
final class InboxWatcher {
    let directory: String
    /// Polled by the event loop beside curl's sockets.
    let fd: Int32
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

    struct Changes {
        var names: [InboxName] = []
        /// Created with one link: being written (a close will follow), or
        /// linked in with its other name already removed (none will).
        var created: [InboxName] = []
        var overflowed = false
    }

    init(directory: String) throws {
        self.directory = directory
        try FileSystem.makeDirectory(directory)
        let fd = try Posix.inotify(flags: Int32(IN_NONBLOCK | IN_CLOEXEC))
        // IN_CREATE for what is never written and closed here: a hard link
        // (`ln`, a no-clobber dropper's link(2)) or a symbolic link.
        let mask = UInt32(IN_CLOSE_WRITE) | UInt32(IN_MOVED_TO) | UInt32(IN_CREATE) | UInt32(IN_ONLYDIR)
        do {
            try Posix.watch(fd, directory, events: mask)
        } catch {
            Posix.close(fd)
            throw error
        }
        // Set last: a throw after it would run deinit, closing fd a second time.
        self.fd = fd
    }

    deinit { Posix.close(fd) }

    /// Everything inotify has queued, without blocking. A read that fails
    /// may have lost events: it counts as an overflow, and the caller scans.
    func drain() -> Changes {
        var changes = Changes()
        var seen = Set<InboxName>()
        while true {
            let got: Int?
            do {
                got = try buffer.withUnsafeMutableBytes { try Posix.readAvailable(fd, into: $0, shown: "the inotify events of \(directory)") }
            } catch {
                changes.overflowed = true
                return changes
            }
            guard let count = got, count > 0 else { return changes }
            var offset = 0
            buffer.withUnsafeBytes { raw in
                while offset + MemoryLayout<inotify_event>.size <= count {
                    let base = raw.baseAddress! + offset
                    let mask = base.loadUnaligned(fromByteOffset: 4, as: UInt32.self)
                    let nameLength = Int(base.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
                    let headerSize = MemoryLayout<inotify_event>.size
                    if mask & UInt32(IN_Q_OVERFLOW) != 0 { changes.overflowed = true }
                    if nameLength > 0 {
                        let nameBytes = UnsafeRawBufferPointer(start: base + headerSize, count: nameLength)
                        let name = InboxName(bytes: nameBytes.prefix { $0 != 0 })
                        let created = mask & UInt32(IN_CREATE) != 0
                        // One name can come twice (closed, then renamed over): once is enough.
                        if InboxRules.isJobFileName(name.text) {
                            if !created || isLinked(name) {
                                if seen.insert(name).inserted { changes.names.append(name) }
                            } else {
                                changes.created.append(name)
                            }
                        }
                    }
                    offset += headerSize + nameLength
                }
            }
        }
    }

    /// A name created as a link (hard or symbolic) rather than by a writer
    /// who will close it: a file being written has one link and comes again
    /// with IN_CLOSE_WRITE.
    /// (Gone, or not to be looked at: not linked, so it is awaited as written.)
    private func isLinked(_ name: InboxName) -> Bool {
        let path = Array(directory.utf8) + [UInt8(ascii: "/")] + name.bytes
        guard let info = try? Posix.status(of: path, flags: AT_SYMLINK_NOFOLLOW, shown: "\(directory)/\(name)") else { return false }
        return (info.st_mode & S_IFMT) == S_IFLNK || ((info.st_mode & S_IFMT) == S_IFREG && info.st_nlink > 1)
    }

    /// Job files present now, oldest first (then by name): the order they were dropped.
    func scan() -> [InboxName] { scanJobs().map(\.name) }

    /// As `scan`, with what each file looked like (for a poll's settling).
    func scanJobs() -> [ScannedJob<InboxName>] {
        Self.entries(of: directory).filter { InboxRules.isJobFileName($0.name.text) }
            .sorted { ($0.mtime, $0.name.text) < ($1.mtime, $1.name.text) }
            .map { ScannedJob(name: $0.name, size: $0.size, mtimeNs: $0.mtime, inode: $0.inode) }
    }

    /// Every entry of a directory but `.` and `..`, with raw names, sizes,
    /// inodes and modification times (lstat). Empty if it cannot be read: a
    /// scan finds nothing then, and the next one (at the next start, after an
    /// overflow, or the next poll) tries again.
    static func entries(of directory: String) -> [(name: InboxName, mtime: Int64, size: Int64, inode: UInt64)] {
        guard let descriptor = try? Posix.open(directory, O_RDONLY | O_DIRECTORY) else { return [] }
        defer { Posix.close(descriptor) }
        guard let names = try? Posix.rawEntries(of: descriptor, shown: directory) else { return [] }
        return names.compactMap { entry in
            let name = InboxName(bytes: entry.name)
            // Gone since it was listed (taken meanwhile): not an entry any more.
            guard let info = try? Posix.status(of: entry.name, at: descriptor, flags: AT_SYMLINK_NOFOLLOW, shown: "\(directory)/\(name)")
            else { return nil }
            return (name, info.st_mtim.nanoseconds, Int64(info.st_size), UInt64(info.st_ino))
        }
    }
}

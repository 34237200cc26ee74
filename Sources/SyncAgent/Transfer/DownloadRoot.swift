import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// `download_dir`, opened once: every file the agent writes, renames or
/// removes for a task is reached beneath it without following a symbolic
/// link in any component (SPEC §7). A `link -> /elsewhere` planted inside
/// the folder makes the task fail; it never redirects a write.
///
/// `openat2` with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS does that in one
/// call; kernels before 5.6 get the same rule from `openat` with
/// O_NOFOLLOW, one component at a time.
///
/// The folders of `more_dirs` are opened and reached the same way: a
/// destination beneath one of them is beneath that one.
///
/// Nothing outside them is reached, whatever path a task holds: one the log
/// gives outside them (a task made under another download_dir, or a log not
/// written by this agent) is refused, never admitted (SPEC §6 rule 3), and so
/// is a path with a `.` or `..` name in it, which the walk of old kernels
/// would otherwise follow up and out.
final class DownloadRoot: Sendable {
    let path: String
    /// download_dir first, then each of `more_dirs`, each opened once.
    private let roots: [(path: String, fd: Int32)]

    /// - Parameter more: `more_dirs`, each of which must be there: a folder of a disk not mounted is
    ///   no place to write into (the mount point beneath it is the root file system's).
    init(path: String, more: [String] = []) throws {
        self.path = path
        var roots = [(path, try Posix.open(path, O_RDONLY | O_DIRECTORY, shown: "download_dir \(path)"))]
        for folder in more where !roots.contains(where: { PathRules.isSame($0.0, folder) }) {
            do {
                roots.append((folder, try Posix.open(folder, O_RDONLY | O_DIRECTORY, shown: "more_dirs folder \(folder)")))
            } catch {
                for root in roots { Posix.close(root.1) }
                throw MoreDirUnavailable(folder: folder, errno: (error as? SystemError)?.errno ?? EIO)
            }
        }
        self.roots = roots.map { (path: $0.0, fd: $0.1) }
    }

    deinit { for root in roots { Posix.close(root.fd) } }

    /// A folder of `more_dirs` that cannot be opened: the agent does not start.
    struct MoreDirUnavailable: Error, CustomStringConvertible {
        var folder: String
        var errno: Int32
        var description: String {
            "more_dirs names \(folder), which cannot be opened (\(Posix.words(errno))); make it, or mount its disk, or take it out of more_dirs"
        }
    }

    /// The folders opened (device, inode), whatever their paths name meanwhile: download_dir first.
    func identities() throws -> [(path: String, identity: FileIdentity)] {
        try roots.map { root in
            (root.path, FileIdentity(try Posix.status(of: root.fd, shown: root.path == path ? "download_dir \(path)" : root.path)))
        }
    }

    /// Whether `file` lies beneath download_dir or one of more_dirs.
    func holds(_ file: String) -> Bool { beneath(file) != nil }

    /// The root `file` lies beneath and `file` relative to it, or an error if
    /// it is beneath none (a task created under another download_dir).
    private func relative(_ file: String) throws -> (root: (path: String, fd: Int32), relative: String) {
        guard let found = beneath(file) else {
            throw SystemError(operation: "\(file) is not a plain path beneath download_dir \(path)\(roots.count > 1 ? " or more_dirs" : "")",
                              errno: EXDEV)
        }
        return found
    }

    /// The root `file` lies beneath (the deepest, where one holds another)
    /// and `file` relative to it, or nil: for questions, which an answer of
    /// "no" settles without building an error's message.
    private func beneath(_ file: String) -> (root: (path: String, fd: Int32), relative: String)? {
        // download_dir alone, as always, asked first: almost every file is beneath it.
        if roots.count == 1 { return Self.relative(file, to: path).map { (roots[0], $0) } }
        var found: (root: (path: String, fd: Int32), relative: String)?
        for root in roots {
            guard let relative = Self.relative(file, to: root.path) else { continue }
            if let best = found, best.root.path.utf8.count >= root.path.utf8.count { continue }
            found = (root, relative)
        }
        return found
    }

    /// `file` relative to `folder`, or nil when it is not beneath it by plain names.
    private static func relative(_ file: String, to folder: String) -> String? {
        guard PathRules.isInside(file, folder) else { return nil }
        let relative = file.utf8.dropFirst(folder == "/" ? 1 : folder.utf8.count + 1)
        // Names only: no empty one, no `.`, no `..`. Checked in one pass over the bytes, with
        // nothing allocated: every open asks, a dozen times a file.
        let slash = UInt8(ascii: "/"), dot = UInt8(ascii: ".")
        var length = 0, dots = 0
        for byte in relative {
            if byte == slash {
                if length == 0 || dots == length { return nil }
                length = 0; dots = 0
            } else {
                length += 1
                if byte == dot, dots == length - 1, length <= 2 { dots += 1 }
            }
        }
        if length == 0 || dots == length { return nil }
        return String(decoding: relative, as: UTF8.self)
    }

    /// The directory holding `file`, opened beneath `base` (a root, named
    /// `basePath`; created, with its parents, when `create`), and the file's
    /// own name in it. `relative` is `file` beneath the root, as `relative(_:)` gave it.
    private func parent(of file: String, relative: String, create: Bool, beneath base: Int32,
                        named basePath: String) throws -> (directory: Int32, name: String) {
        // Split on the byte '/', as the kernel does (and without a Character split's cost, on every open).
        let parts = relative.utf8.split(separator: UInt8(ascii: "/")).map { String(decoding: $0, as: UTF8.self) }
        guard let name = parts.last else { throw SystemError(operation: "\(file) names no file", errno: EINVAL) }
        let folders = parts.dropLast()
        if folders.isEmpty {
            return (try Self.duplicate(base, named: basePath), name)
        }
        let joined = folders.joined(separator: "/")
        do {
            return (try Posix.openBeneath(base, joined, O_RDONLY | O_DIRECTORY, shown: "\(basePath)/\(joined)"), name)
        } catch let error as SystemError where error.errno == ENOSYS || (error.errno == ENOENT && create) {
            // Walked below.
        } catch let error as SystemError {
            throw SystemError(operation: "open \(basePath)/\(joined) \(words(error.errno))", errno: error.errno)
        }
        // One component at a time: made if missing, never a symlink.
        var current = try Self.duplicate(base, named: basePath)
        var walked = basePath
        for folder in folders {
            walked += "/" + folder
            var next: Int32 = -1
            do {
                defer { Posix.close(current) }
                if create { try Self.makeDirectory(folder, in: current, shown: walked) }
                do {
                    next = try Posix.open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, at: current)
                } catch let error as SystemError {
                    throw SystemError(operation: "open \(walked) \(words(error.errno))", errno: error.errno)
                }
            }
            current = next
        }
        return (current, name)
    }

    /// A descriptor of the folder `base` of its own, to close when done.
    private static func duplicate(_ base: Int32, named basePath: String) throws -> Int32 {
        do {
            return try Posix.duplicate(base, shown: "download_dir \(basePath)")
        } catch let error as SystemError {
            throw SystemError(operation: "open download_dir \(basePath)", errno: error.errno)
        }
    }

    /// mkdir of `name` in `directory`; one that is there already is fine.
    /// A folder made is a new name in `directory`, synced at once: a power
    /// cut would otherwise take it, and every finished file in it, away.
    private static func makeDirectory(_ name: String, in directory: Int32, shown: String) throws {
        do {
            try Posix.makeDirectory(name, mode: 0o755, at: directory, shown: shown)
        } catch let error as SystemError where error.errno == EEXIST {
            // Made before (or meanwhile): the open that follows checks what it is.
            return
        }
        try Posix.sync(directory, shown: "the folder holding \(shown)")
    }

    /// Says why a symlink stopped us, in the words a user needs.
    private func words(_ error: Int32) -> String {
        guard error == ELOOP || error == EXDEV else { return "" }
        return "(a symbolic link inside download_dir\(roots.count > 1 ? " or more_dirs" : "") is never followed)"
    }

    /// Runs `body` with the directory holding `file` and the file's name in
    /// it. A file directly in the root gets the root's own descriptor (not a
    /// `dup` of it to close again: each small download asks this six times).
    @discardableResult
    private func withParent<T>(of file: String, create: Bool = false, _ body: (Int32, String) throws -> T) throws -> T {
        let (root, relative) = try relative(file)
        if !relative.isEmpty, !relative.utf8.contains(UInt8(ascii: "/")) { return try body(root.fd, relative) }
        let (directory, name) = try parent(of: file, relative: relative, create: create, beneath: root.fd, named: root.path)
        defer { Posix.close(directory) }
        return try body(directory, name)
    }

    /// Opens `name` in `directory` without following a symlink, and only as
    /// a regular file (see `FileSystem.openRegular`).
    private static func openRegular(_ directory: Int32, _ name: String, _ flags: Int32, mode: mode_t = 0,
                                    shown file: String) throws -> Int32 {
        try FileSystem.openRegular(name, at: directory, flags | O_NOFOLLOW, mode: mode, shown: file).descriptor
    }

    /// Another process holds the partial file (a second agent on the same download_dir).
    struct Busy: Error, CustomStringConvertible {
        var path: String
        var description: String {
            "another process is writing \(path) (a second agent sharing download_dir?); nothing was written to it"
        }
    }

    /// A lock on the partial file (flock on a descriptor of its own), held
    /// by the agent for as long as the task may write it, across attempts:
    /// a second process writing the same file is refused, never mixed in.
    func lockPartial(_ file: String) throws -> Int32 {
        try withParent(of: file, create: true) { directory, name in
            let descriptor = try Self.openRegular(directory, name, O_RDONLY | O_CREAT, mode: 0o644, shown: file)
            do {
                try Posix.lock(descriptor, LOCK_EX | LOCK_NB, shown: file)
            } catch let error as SystemError {
                Posix.close(descriptor)
                if error.errno == EWOULDBLOCK { throw Busy(path: file) }
                throw error
            }
            return descriptor
        }
    }

    /// Creates `file` (and the folders above it) if it is not there; never
    /// truncates it, never follows a symlink.
    func makeFile(_ file: String, mode: mode_t) throws {
        try withParent(of: file, create: true) { directory, name in
            Posix.close(try Self.openRegular(directory, name, O_WRONLY | O_CREAT, mode: mode, shown: file))
        }
    }

    /// The partial file, opened for writing (and reading: its durable bytes
    /// are hashed back through it) without following a symlink, cut back
    /// to `offset`: never trust bytes beyond what the log vouches for.
    /// - Parameter mode: 0600 for what must not be readable by others (an HLS key).
    func openPartial(_ file: String, truncatingTo offset: Int64, mode: mode_t = 0o644) throws -> Int32 {
        try withParent(of: file, create: true) { directory, name in
            let opened = try FileSystem.openRegular(name, at: directory, O_RDWR | O_CREAT | O_NOFOLLOW, mode: mode, shown: file)
            let descriptor = opened.descriptor
            // Each call only where it changes something: most part files are
            // new, of the mode asked for, and written from byte 0.
            do {
                // The file may exist already (its lock created it, under the umask).
                if opened.permissions != mode { try Posix.setMode(descriptor, mode, shown: file) }
                if opened.size != offset { try Posix.truncate(descriptor, to: offset, shown: file) }
                // A new descriptor starts at 0; sequential writers (HLS) go on from `offset`.
                if offset != 0 { try Posix.seek(descriptor, to: offset, shown: file) }
            } catch {
                Posix.close(descriptor)
                throw error
            }
            return descriptor
        }
    }

    /// Opens an existing file for reading (checksums), without following a symlink.
    func openForReading(_ file: String) throws -> Int32 {
        try withParent(of: file) { directory, name in
            try Self.openRegular(directory, name, O_RDONLY, shown: file)
        }
    }

    /// lstat beneath the root; nil if absent or unreachable (through a
    /// symbolic link, say): either way nothing the agent may touch is there.
    func status(_ file: String) -> stat? {
        try? withParent(of: file) { directory, name in
            try Posix.status(of: name, at: directory, flags: AT_SYMLINK_NOFOLLOW, shown: file)
        }
    }

    /// Cheap where it matters (every rename decision at intake asks): a
    /// path that is not there through any route is absent beneath the root
    /// too; only a path that is there is looked at without symlinks.
    /// (A start asks it of every finished task's partial file: one outside
    /// the root is absent by its path far more often than not, and opening
    /// its folders each time cost 6,000 instructions a task.)
    func exists(_ file: String) -> Bool {
        let (folder, name) = beneath(file).map { ($0.root.fd, $0.relative) } ?? (AT_FDCWD, file)
        do {
            if try Posix.statusIfPresent(of: name, at: folder, flags: AT_SYMLINK_NOFOLLOW, shown: file) == nil { return false }
        } catch {
            // Not ENOENT (a symbolic link on the way, say): asked beneath the root below.
        }
        return status(file) != nil
    }

    func size(_ file: String) -> Int64? { status(file).map { Int64($0.st_size) } }

    /// Size and modification time (ns) of a regular file; nil for anything else.
    func sizeAndModified(_ file: String) -> (size: Int64, modifiedNs: Int64)? {
        guard let info = status(file), (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return (Int64(info.st_size), info.st_mtim.nanoseconds)
    }

    /// Cuts a partial file back (start-up recovery); absent is fine.
    func truncate(_ file: String, to offset: Int64) throws {
        try withParent(of: file) { directory, name in
            let descriptor: Int32
            do {
                descriptor = try Self.openRegular(directory, name, O_WRONLY, shown: file)
            } catch let error as SystemError where error.errno == ENOENT {
                return
            }
            defer { Posix.close(descriptor) }
            try Posix.truncate(descriptor, to: offset, shown: file)
        }
    }

    /// Removes a file; absent is fine.
    /// Only a regular file: a partial file is one the agent wrote, and a
    /// link, FIFO or folder put in its place is someone else's, left alone.
    func remove(_ file: String) throws {
        try withParent(of: file) { directory, name in
            do {
                guard let info = try Posix.statusIfPresent(of: name, at: directory, flags: AT_SYMLINK_NOFOLLOW, shown: file) else { return }
                guard (info.st_mode & S_IFMT) == S_IFREG else {
                    throw SystemError(operation: "remove \(file): it is not a regular file the agent wrote; left where it is", errno: EPERM)
                }
                try Posix.unlink(name, at: directory, shown: file)
            } catch let error as SystemError where error.errno == ENOENT {
                // Absent is fine.
            }
        }
    }

    /// Renames within the root. Durable once the directory is synced
    /// (`syncDirectory`), which the caller does once for many renames.
    /// Moves `from` to `to`. Unless `replacing`, nothing already at `to`
    /// is replaced: EEXIST instead, in one step (RENAME_NOREPLACE; where a
    /// file system lacks it, a hard link, which fails on a taken name, then an unlink).
    func rename(_ from: String, to: String, replacing: Bool = true) throws {
        try withParent(of: from) { fromDirectory, fromName in
            try withParent(of: to, create: true) { toDirectory, toName in
                if replacing {
                    try Posix.rename(fromName, at: fromDirectory, to: toName, at: toDirectory, shown: "move \(from) to \(to)")
                    return
                }
                do {
                    try Posix.renameNoReplace(fromName, at: fromDirectory, to: toName, at: toDirectory, shown: "move \(from) to \(to)")
                    return
                } catch let error as SystemError where error.errno == EINVAL || error.errno == ENOSYS {
                    // No RENAME_NOREPLACE here: a link, which fails on a taken name, then an unlink.
                } catch let error as SystemError where error.errno == EEXIST {
                    throw SystemError(operation: "move \(from) to \(to), where something else now is", errno: EEXIST)
                }
                try Posix.link(fromName, at: fromDirectory, to: toName, at: toDirectory, shown: "link \(from) as \(to)")
                try Posix.unlink(fromName, at: fromDirectory, shown: "\(from), linked as \(to)")
            }
        }
    }

    /// fsync of the directory that holds `file`.
    func syncDirectory(of file: String) throws {
        try withParent(of: file) { directory, _ in
            try Posix.sync(directory, shown: "the directory of \(file)")
        }
    }

    /// Makes the folders above `file` that are missing, so a rename to it can happen.
    func makeParent(of file: String) throws {
        try withParent(of: file, create: true) { _, _ in }
    }

    /// Makes `folder` (and its parents) beneath the root.
    func makeDirectory(_ folder: String) throws {
        try withParent(of: folder, create: true) { directory, name in
            try Self.makeDirectory(name, in: directory, shown: folder)
        }
    }

    /// Removes `folder` and the plain files and folders in it (an HLS
    /// task's work folder), never following a symlink; absent is fine.
    func removeTree(_ folder: String) throws {
        try withParent(of: folder) { directory, name in try Self.removeTree(name, in: directory, shown: folder) }
    }

    private static func removeTree(_ name: String, in parent: Int32, shown: String) throws {
        let folder: Int32
        do {
            folder = try Posix.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, at: parent, shown: shown)
        } catch let error as SystemError where error.errno == ENOENT {
            return
        } catch let error as SystemError where error.errno == ENOTDIR || error.errno == ELOOP {
            // A file, or a symbolic link: removed itself, never followed.
            try Posix.unlink(name, at: parent, shown: shown)
            return
        }
        defer { Posix.close(folder) }
        for (child, isFolder) in try Posix.entries(of: folder, shown: shown) {
            if isFolder {
                try removeTree(child, in: folder, shown: shown + "/" + child)
            } else {
                try Posix.unlink(child, at: folder, shown: "\(shown)/\(child)")
            }
        }
        try Posix.removeDirectory(name, at: parent, shown: shown)
    }

    /// A whole (small) file, read without following a symlink.
    func read(_ file: String, limit: Int) throws -> [UInt8] {
        let fd = try openForReading(file)
        defer { Posix.close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = try chunk.withUnsafeMutableBytes { try Posix.read(fd, into: $0, shown: file) }
            if count == 0 { return bytes }
            bytes += chunk[0..<count]
            guard bytes.count <= limit else { throw SystemError(operation: "\(file) is over \(limit) bytes", errno: EFBIG) }
        }
    }
}

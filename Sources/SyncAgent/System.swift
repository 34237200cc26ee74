import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Which file a path or a descriptor is: its device and inode.
struct FileIdentity: Equatable {
    var device: UInt64
    var inode: UInt64
    init(_ info: stat) { (device, inode) = (UInt64(info.st_dev), UInt64(info.st_ino)) }
}

/// Higher-level file helpers, built on `Posix` (which makes every call).
enum FileSystem {
    /// Makes `path` and the folders above it that are missing, each with
    /// `mode` (not cut by the umask). With mkdir(2) itself: FileManager's
    /// error leaves errno to whatever ran last, and a file in the way read
    /// "Inappropriate ioctl for device".
    static func makeDirectory(_ path: String, mode: mode_t = 0o700) throws {
        // Not there (or not to be asked): mkdir below says why, if it cannot make it.
        if let info = try? Posix.status(of: path) {
            guard (info.st_mode & S_IFMT) == S_IFDIR else {
                throw SystemError(operation: "create directory \(path) (something other than a folder is in the way)", errno: ENOTDIR)
            }
            return
        }
        let parent = PathRules.folder(of: path)
        if !parent.isEmpty, parent != path { try makeDirectory(parent, mode: mode) }
        do {
            try Posix.makeDirectory(path, mode: mode)
        } catch let error as SystemError where error.errno == EEXIST {
            // Made meanwhile by another process: fine, if a folder.
            guard let info = try? Posix.status(of: path), (info.st_mode & S_IFMT) == S_IFDIR else { throw error }
            return
        }
        try Posix.setMode(path, mode)
        // A new folder is a new name in its parent: durable only once the parent is synced (a power
        // cut on btrfs, or ext4 without a journal, would otherwise take the folder and all in it).
        try syncDirectory(of: path)
    }

    /// The agent's own folder `path` (an inbox's `rejected/`, `.taken/`):
    /// a symbolic link planted there is removed, never followed, so
    /// nothing the agent writes there lands elsewhere; a folder it did not
    /// make (another user's, or one others may write) is refused, never
    /// used (`StrictModes`).
    /// - Parameter what: the folder in words, for the refusal.
    static func makeOwnDirectory(_ path: String, what: String) throws {
        // Nothing there, or not to be asked: makeDirectory says what is wrong.
        if let info = try? Posix.status(of: path, flags: AT_SYMLINK_NOFOLLOW), (info.st_mode & S_IFMT) == S_IFLNK {
            try Posix.unlink(path, shown: "the symbolic link \(path)")
        }
        try makeDirectory(path)
        do {
            try StrictModes.checkOwnFolder(path, what: what)
        } catch let error as SystemError where error.errno == ENOENT {
            // Taken away as soon as it was made: nothing there to trust, and it is made again when it is needed.
        }
    }

    /// Each of `folders` as written, and as a path beneath `root` where a
    /// symbolic link puts it there: `root` itself a link to the folder
    /// holding the state dir, or the inbox a link into `root`. Destinations
    /// are checked against every spelling (found by an adversary: a job
    /// wrote into the inbox through a linked download_dir, and over the log
    /// through a linked state dir).
    static func spellingsBeneath(_ root: String, of folders: [String]) -> [String] {
        let written = PathRules.normalize(root)
        let real = realPath(root) ?? written
        var spellings: [String] = []
        for folder in folders {
            spellings.append(folder)
            guard let target = realPath(folder) else { continue }
            spellings.append(target)
            if PathRules.isSame(target, real) || PathRules.isInside(target, real) {
                let below = String(decoding: target.utf8.dropFirst(real.utf8.count), as: UTF8.self)
                spellings.append(written == "/" ? below : written + below)
            }
        }
        return spellings
    }

    /// Opens `path` (relative to `directory`) without blocking, and only as a
    /// regular file: opening a FIFO where the agent expects a file would
    /// otherwise wait, with the whole loop and stop signals, for a process
    /// to open the other end. Returns the descriptor, the file's size and its
    /// permission bits.
    /// - Parameter shown: the file as errors name it.
    static func openRegular(_ path: String, at directory: Int32 = AT_FDCWD, _ flags: Int32, mode: mode_t = 0,
                            shown: String) throws -> (descriptor: Int32, size: Int64, permissions: mode_t) {
        let descriptor: Int32
        do {
            descriptor = try Posix.open(path, flags | O_NONBLOCK, mode: mode, at: directory, shown: shown)
        } catch let error as SystemError where error.errno == ENXIO {
            // A FIFO with no reader (or a socket) refused a writer.
            throw SystemError(operation: "\(shown) is not a regular file", errno: EINVAL)
        }
        let info: stat
        do {
            info = try Posix.status(of: descriptor, shown: shown)
        } catch {
            Posix.close(descriptor)
            throw error
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            Posix.close(descriptor)
            throw SystemError(operation: "\(shown) is not a regular file", errno: EINVAL)
        }
        return (descriptor, Int64(info.st_size), info.st_mode & 0o7777)
    }

    /// The path with every symbolic link resolved, or nil if it cannot be (absent, unreadable).
    static func realPath(_ path: String) -> String? {
        try? Posix.resolved(path)
    }

    /// The path the kernel has for an open descriptor (/proc/self/fd), nil if it cannot say.
    static func realPath(of descriptor: Int32) -> String? {
        guard let target = try? Posix.linkTarget("/proc/self/fd/\(descriptor)"), !target.isEmpty else { return nil }
        return target
    }

    /// The file `path` names now (following symlinks).
    static func identity(of path: String) throws -> FileIdentity {
        FileIdentity(try Posix.status(of: path))
    }

    /// Whether `path` names something (a dangling symbolic link too). Only
    /// what can be looked at counts: a path that cannot be asked about
    /// (EACCES, ENOTDIR, ELOOP …) is "not there", so that a search for a
    /// free name (`rejected/NAME.1.job` …) always ends.
    static func exists(_ path: String) -> Bool {
        (try? Posix.status(of: path, flags: AT_SYMLINK_NOFOLLOW)) != nil
    }

    /// A rename is only durable once its directory is synced.
    static func syncDirectory(of path: String) throws {
        let directory = PathRules.folder(of: path)
        try sync(directory: directory.isEmpty ? "." : directory)
    }

    /// The entries of `directory` (made, renamed in or out, removed) on disk.
    static func sync(directory: String) throws {
        let fd = try Posix.open(directory, O_RDONLY | O_DIRECTORY, shown: directory)
        defer { Posix.close(fd) }
        try Posix.sync(fd, shown: directory)
    }

    /// Writes a small file atomically: temp name, fsync, rename.
    static func writeAtomically(_ text: String, to path: String, mode: mode_t = 0o644) throws {
        let temp = path + ".tmp"
        let fd = try Posix.create(temp, O_WRONLY | O_TRUNC | O_NOFOLLOW, mode: mode)
        defer { Posix.close(fd) }
        try Array(text.utf8).withUnsafeBytes { try Posix.writeAll(fd, $0, shown: temp) }
        try Posix.sync(fd, shown: temp)
        try Posix.rename(temp, to: path, shown: "rename \(temp) to \(path)")
        try syncDirectory(of: path)
    }

    static var nowMs: Int64 { Posix.nowMs }

    /// For intervals: immune to clock changes.
    static var monotonicMs: Int64 { Posix.monotonicMs }
}

/// A local disk that failed a task: the words name the file, the file
/// system it lives on and the error, so the user knows what to free or fix.
struct DiskFailure: CustomStringConvertible {
    var operation: String
    var path: String
    var errno: Int32

    var code: FailureCode {
        switch errno {
        case ENOSPC, EDQUOT: .diskFull
        case EIO: .ioError
        default: .localError
        }
    }

    var description: String {
        let what = code == .diskFull ? "disk full" : code == .ioError ? "disk I/O error" : "local error"
        let where_ = FileSystem.mountPoint(of: path).map { " on \($0.path) (\($0.type))" } ?? ""
        return "\(what): cannot \(operation) \(path)\(where_): \(String(cString: strerror(errno)))"
    }
}

extension FileSystem {
    /// The mount that holds `path` (the longest mount point that prefixes
    /// it), from /proc/self/mountinfo; nil if that cannot be read.
    static func mountPoint(of path: String) -> (path: String, type: String)? {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return nil }
        var best: (path: String, type: String)?
        for line in text.split(separator: "\n") {
            // id parent major:minor root MOUNT_POINT options … - TYPE source …
            let fields = line.split(separator: " ")
            guard fields.count > 4, let dash = fields.firstIndex(of: "-"), dash + 1 < fields.count else { continue }
            // Octal escapes (\040 for a space) as the kernel writes them.
            let mount = String(fields[4]).replacingOccurrences(of: "\\040", with: " ")
            guard mount == "/" || path == mount || path.hasPrefix(mount + "/") else { continue }
            if mount.count >= (best?.path.count ?? -1) { best = (mount, String(fields[dash + 1])) }
        }
        return best
    }
}

public enum ProcessMemory {
    /// Blocks this large get pages of their own, returned to the system the
    /// moment they are freed. glibc otherwise raises the threshold to the
    /// largest block freed so far, and a growing index (a dictionary of
    /// 100,000 tasks doubling to 8 MiB) then leaves its old storage as a hole
    /// in the heap that the process keeps: 11 MiB of the agent's peak with
    /// 100,000 jobs queued. Smaller than this: the 1 MiB buffers a transfer
    /// allocates, which stay in the heap and are reused.
    static let ownPagesAbove = 2 << 20

    /// False when glibc refused the setting (the agent then only keeps more memory).
    public static func returnLargeBlocksPromptly() -> Bool {
        Posix.setMmapThreshold(Int32(ownPagesAbove))
    }
}

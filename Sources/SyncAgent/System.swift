import Foundation
import CLinuxShims
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Every syscall goes through here: retries EINTR, turns -1 into a typed error.
@discardableResult
func syscall<T: FixedWidthInteger>(_ operation: @autoclosure () -> String, _ call: () -> T) throws -> T {
    while true {
        let result = call()
        if result != -1 { return result }
        if errno == EINTR { continue }
        throw SystemError(operation: operation(), errno: errno)
    }
}

/// Which file a path or a descriptor is: its device and inode.
struct FileIdentity: Equatable {
    var device: UInt64
    var inode: UInt64
    init(_ info: stat) { (device, inode) = (UInt64(info.st_dev), UInt64(info.st_ino)) }
}

enum FileSystem {
    /// Makes `path` and the folders above it that are missing, each with
    /// `mode` (not cut by the umask). With mkdir(2) itself: FileManager's
    /// error leaves errno to whatever ran last, and a file in the way read
    /// "Inappropriate ioctl for device".
    static func makeDirectory(_ path: String, mode: mode_t = 0o700) throws {
        var info = stat()
        if stat(path, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFDIR else {
                throw SystemError(operation: "create directory \(path) (something other than a folder is in the way)", errno: ENOTDIR)
            }
            return
        }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, parent != path { try makeDirectory(parent, mode: mode) }
        guard mkdir(path, mode) == 0 else {
            // Made meanwhile by another process: fine, if a folder.
            if errno == EEXIST, stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR { return }
            throw SystemError(operation: "create directory \(path)", errno: errno)
        }
        try syscall("chmod \(path)") { chmod(path, mode) }
    }

    /// The agent's own folder `path` (an inbox's `rejected/`, `.taken/`):
    /// a symbolic link planted there is removed, never followed, so
    /// nothing the agent writes there lands elsewhere.
    static func makeOwnDirectory(_ path: String) throws {
        var info = stat()
        if lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFLNK {
            try syscall("remove the symbolic link \(path)") { unlink(path) }
        }
        try makeDirectory(path)
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
        let descriptor = openat(directory, path, flags | O_CLOEXEC | O_NONBLOCK, mode)
        if descriptor < 0 {
            // ENXIO: a FIFO with no reader (or a socket) refused a writer.
            let error = errno
            throw SystemError(operation: error == ENXIO ? "\(shown) is not a regular file" : "open \(shown)",
                              errno: error == ENXIO ? EINVAL : error)
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let error = SystemError(operation: "stat \(shown)", errno: errno)
            close(descriptor)
            throw error
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw SystemError(operation: "\(shown) is not a regular file", errno: EINVAL)
        }
        return (descriptor, Int64(info.st_size), info.st_mode & 0o7777)
    }

    /// The path with every symbolic link resolved, or nil if it cannot be (absent, unreadable).
    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The path the kernel has for an open descriptor (/proc/self/fd), nil if it cannot say.
    static func realPath(of descriptor: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/fd/\(descriptor)", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The file `path` names now (following symlinks).
    static func identity(of path: String) throws -> FileIdentity {
        var info = stat()
        try syscall("stat \(path)") { stat(path, &info) }
        return FileIdentity(info)
    }

    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// A rename is only durable once its directory is synced.
    static func syncDirectory(of path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        let fd = try syscall("open \(directory)") { open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { close(fd) }
        try syscall("sync \(directory)") { fsync(fd) }
    }

    /// Writes a small file atomically: temp name, fsync, rename.
    static func writeAtomically(_ text: String, to path: String, mode: mode_t = 0o644) throws {
        let temp = path + ".tmp"
        let fd = try syscall("create \(temp)") { open(temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode) }
        defer { close(fd) }
        try Array(text.utf8).withUnsafeBytes { try writeAll(fd, $0, to: temp) }
        try syscall("fsync \(temp)") { fsync(fd) }
        try syscall("rename \(temp)") { rename(temp, path) }
        try syncDirectory(of: path)
    }

    /// Every byte of `bytes` to `fd` (a short write is continued, EINTR retried).
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, to path: String) throws {
        var offset = 0
        while offset < bytes.count {
            offset += try syscall("write \(path)") { write(fd, bytes.baseAddress! + offset, bytes.count - offset) }
        }
    }

    /// Writes all of `bytes` at `position` (pwrite: the file offset is neither used nor moved).
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at position: Int64, to path: String) throws {
        var offset = 0
        while offset < bytes.count {
            offset += try syscall("write \(path)") {
                pwrite(fd, bytes.baseAddress! + offset, bytes.count - offset, off_t(position) + off_t(offset))
            }
        }
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
        sa_set_mmap_threshold(Int32(ownPagesAbove)) == 1
    }
}

import CCurlShims
import CLinuxShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A failed system call: what was attempted, and errno in words.
public struct SystemError: Error, CustomStringConvertible {
    public var operation: String
    public var errno: Int32
    public init(operation: String, errno: Int32) { self.operation = operation; self.errno = errno }
    public var description: String { "\(operation): \(Posix.words(errno))" }
}

/// Every system call the agent makes, and only here (swift-nio's
/// `System.swift` is the model). The policy, the same for every call:
/// - `EINTR` is retried, by every call but `close`, which Linux completes
///   (the descriptor is released) even when it reports `EINTR`;
/// - -1 becomes a `SystemError` that names what was attempted and on what;
/// - no result is dropped: a call whose failure changes nothing says why in
///   its own documentation comment (`close`).
/// A test may make any call fail with an errno of its choosing (`inject`),
/// so that "a failed sync never becomes claimed progress" and "a failed
/// rename is reported" are checked without a failing disk.
enum Posix {
    /// The calls a test can make fail, by name.
    enum Call: String, Sendable, CaseIterable {
        case open, close, read, write, fsync, fdatasync, syncfs, syncFileRange, ftruncate, lseek, stat, rename, link, unlink,
             mkdir, rmdir, chmod, flock, dup, pipe, fcntl, readlink, opendir, kill, waitpid, pidfd, spawn, inotify, signalfd,
             netlink, getifaddrs, clock
    }

    /// One injected failure: `call` fails with `errno` when the words of what
    /// it attempts contain `matching` (nil: any), `times` times (nil: always).
    struct Fault: Sendable {
        var call: Call
        var errno: Int32
        var matching: String?
        var times: Int?

        init(_ call: Call, errno: Int32, matching: String? = nil, times: Int? = nil) {
            self.call = call; self.errno = errno; self.matching = matching; self.times = times
        }
    }

    private static let faults = Mutex<[Fault]>([])
    /// Read on every call: no lock is taken unless a test has injected a fault.
    private static let armed = Atomic<Bool>(false)

    /// From now on, `fault.call` fails as described (tests only).
    static func inject(_ fault: Fault) {
        faults.withLock { $0.append(fault) }
        armed.store(true, ordering: .sequentiallyConsistent)
    }

    static func removeFaults() {
        faults.withLock { $0.removeAll() }
        armed.store(false, ordering: .sequentiallyConsistent)
    }

    /// The errno a test made `call` fail with, if any (and one use of it spent).
    private static func injected(_ call: Call, _ what: () -> String) -> Int32? {
        guard armed.load(ordering: .relaxed) else { return nil }
        return faults.withLock { list -> Int32? in
            guard let index = list.firstIndex(where: { $0.call == call && ($0.matching.map { what().contains($0) } ?? true) })
            else { return nil }
            let error = list[index].errno
            if let times = list[index].times {
                if times <= 1 { list.remove(at: index) } else { list[index].times = times - 1 }
            }
            return error
        }
    }

    /// Runs `body` until it does not fail with EINTR: -1 becomes a SystemError naming `what`.
    @inline(__always) @discardableResult
    static func checked<T: FixedWidthInteger>(_ call: Call, _ what: @autoclosure () -> String, _ body: () -> T) throws -> T {
        while true {
            if let error = injected(call, what) {
                if error == EINTR { continue }
                throw SystemError(operation: what(), errno: error)
            }
            let result = body()
            if result != -1 { return result }
            let error = Glibc.errno
            if error == EINTR { continue }
            throw SystemError(operation: what(), errno: error)
        }
    }

    static func words(_ error: Int32) -> String { String(cString: strerror(error)) }

    // MARK: - Descriptors

    static func open(_ path: String, _ flags: Int32, mode: mode_t = 0, at directory: Int32 = AT_FDCWD,
                     shown: @autoclosure () -> String? = nil) throws -> Int32 {
        try checked(.open, "open \(shown() ?? path)") { openat(directory, path, flags | O_CLOEXEC, mode) }
    }

    /// `path` beneath `directory`, through no symbolic link (openat2 with
    /// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS; ENOSYS before Linux 5.6).
    static func openBeneath(_ directory: Int32, _ path: String, _ flags: Int32, mode: mode_t = 0,
                            shown: @autoclosure () -> String) throws -> Int32 {
        try checked(.open, "open \(shown())") { sa_openat_beneath(directory, path, flags | O_CLOEXEC, mode) }
    }

    /// Releases a descriptor. Never retried (Linux releases it even on
    /// EINTR), and its errors change nothing the agent relies on: every byte
    /// the agent vouches for was made durable by an fsync or fdatasync that
    /// reported its own error first. Closing a descriptor twice (EBADF) is a
    /// bug that could close another file's: it stops a debug build.
    static func close(_ descriptor: Int32) {
        guard descriptor >= 0 else { return }
        if Glibc.close(descriptor) != 0 {
            assert(Glibc.errno != EBADF, "closed descriptor \(descriptor) twice")
        }
    }

    static func duplicate(_ descriptor: Int32, shown: @autoclosure () -> String) throws -> Int32 {
        try checked(.dup, "duplicate the descriptor of \(shown())") { fcntl(descriptor, F_DUPFD_CLOEXEC, 0) }
    }

    /// A pipe whose ends are non-blocking and closed on exec: (read end, write end).
    static func pipe(shown: String) throws -> (read: Int32, write: Int32) {
        var ends: [Int32] = [0, 0]
        try checked(.pipe, "make \(shown)") { Glibc.pipe(&ends) }
        do {
            for end in ends {
                try checked(.fcntl, "set the flags of \(shown)") { fcntl(end, F_SETFL, O_NONBLOCK) }
                try checked(.fcntl, "set the flags of \(shown)") { fcntl(end, F_SETFD, FD_CLOEXEC) }
            }
        } catch {
            ends.forEach(close)
            throw error
        }
        return (ends[0], ends[1])
    }

    static func setFlags(_ descriptor: Int32, _ flags: Int32, shown: @autoclosure () -> String) throws {
        try checked(.fcntl, "set the flags of \(shown())") { fcntl(descriptor, F_SETFL, flags) }
    }

    /// flock(2): `LOCK_EX | LOCK_NB` fails with EWOULDBLOCK while another holds it.
    static func lock(_ descriptor: Int32, _ operation: Int32, shown: @autoclosure () -> String) throws {
        try checked(.flock, "lock \(shown())") { flock(descriptor, operation) }
    }

    // MARK: - Data

    static func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, shown: @autoclosure () -> String) throws -> Int {
        try checked(.read, "read \(shown())") { Glibc.read(descriptor, buffer.baseAddress, buffer.count) }
    }

    static func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, at position: Int64,
                     shown: @autoclosure () -> String) throws -> Int {
        try checked(.read, "read \(shown())") { pread(descriptor, buffer.baseAddress, buffer.count, off_t(position)) }
    }

    /// Every byte of `bytes` (a short write is continued).
    static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, shown: @autoclosure () -> String) throws {
        var done = 0
        while done < bytes.count {
            done += try checked(.write, "write \(shown())") { Glibc.write(descriptor, bytes.baseAddress! + done, bytes.count - done) }
        }
    }

    /// Every byte of `bytes` at `position` (pwrite: the file offset is neither used nor moved).
    static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at position: Int64,
                         shown: @autoclosure () -> String) throws {
        var done = 0
        while done < bytes.count {
            done += try checked(.write, "write \(shown())") {
                pwrite(descriptor, bytes.baseAddress! + done, bytes.count - done, off_t(position) + off_t(done))
            }
        }
    }

    /// One write that may be short or refused with EAGAIN (a non-blocking pipe): returns what went.
    static func writeSome(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, shown: @autoclosure () -> String) throws -> Int {
        try checked(.write, "write \(shown())") { Glibc.write(descriptor, bytes.baseAddress, bytes.count) }
    }

    static func truncate(_ descriptor: Int32, to length: Int64, shown: @autoclosure () -> String) throws {
        try checked(.ftruncate, "truncate \(shown()) to \(length)") { ftruncate(descriptor, off_t(length)) }
    }

    static func seek(_ descriptor: Int32, to offset: Int64, shown: @autoclosure () -> String) throws {
        try checked(.lseek, "seek \(shown()) to \(offset)") { lseek(descriptor, off_t(offset), SEEK_SET) }
    }

    // MARK: - Durability

    /// The file's data (and what is needed to read it back) on disk.
    static func dataSync(_ descriptor: Int32, shown: @autoclosure () -> String) throws {
        try checked(.fdatasync, "flush \(shown())") { fdatasync(descriptor) }
    }

    /// The file, or a directory's entries, on disk.
    static func sync(_ descriptor: Int32, shown: @autoclosure () -> String) throws {
        try checked(.fsync, "sync \(shown())") { fsync(descriptor) }
    }

    /// Everything of the file system holding `descriptor` on disk.
    static func syncFileSystem(_ descriptor: Int32, shown: @autoclosure () -> String) throws {
        try checked(.syncfs, "sync the file system of \(shown())") { sa_syncfs(descriptor) }
    }

    // MARK: - Names

    static func status(of descriptor: Int32, shown: @autoclosure () -> String) throws -> stat {
        var info = stat()
        try checked(.stat, "stat \(shown())") { fstat(descriptor, &info) }
        return info
    }

    /// The file `path` names (following symbolic links unless `AT_SYMLINK_NOFOLLOW` is in `flags`).
    static func status(of path: String, at directory: Int32 = AT_FDCWD, flags: Int32 = 0,
                       shown: @autoclosure () -> String? = nil) throws -> stat {
        var info = stat()
        try checked(.stat, "stat \(shown() ?? path)") { fstatat(directory, path, &info, flags) }
        return info
    }

    /// Whether anything (a dangling symbolic link too) is at `path`; errors other than ENOENT count as "there".
    static func exists(_ path: String, at directory: Int32 = AT_FDCWD) -> Bool {
        do {
            _ = try status(of: path, at: directory, flags: AT_SYMLINK_NOFOLLOW)
            return true
        } catch {
            return (error as? SystemError)?.errno != ENOENT
        }
    }

    static func rename(_ from: String, at fromDirectory: Int32 = AT_FDCWD, to: String, at toDirectory: Int32 = AT_FDCWD,
                       shown: @autoclosure () -> String) throws {
        try checked(.rename, shown()) { renameat(fromDirectory, from, toDirectory, to) }
    }

    /// A rename that never replaces what is at `to` (EEXIST); EINVAL or
    /// ENOSYS where the file system or kernel lacks RENAME_NOREPLACE.
    static func renameNoReplace(_ from: String, at fromDirectory: Int32, to: String, at toDirectory: Int32,
                                shown: @autoclosure () -> String) throws {
        try checked(.rename, shown()) { sa_rename_noreplace(fromDirectory, from, toDirectory, to) }
    }

    static func link(_ from: String, at fromDirectory: Int32 = AT_FDCWD, to: String, at toDirectory: Int32 = AT_FDCWD,
                     shown: @autoclosure () -> String) throws {
        try checked(.link, shown()) { linkat(fromDirectory, from, toDirectory, to, 0) }
    }

    static func unlink(_ path: String, at directory: Int32 = AT_FDCWD, shown: @autoclosure () -> String? = nil) throws {
        try checked(.unlink, "remove \(shown() ?? path)") { unlinkat(directory, path, 0) }
    }

    static func removeDirectory(_ path: String, at directory: Int32 = AT_FDCWD, shown: @autoclosure () -> String? = nil) throws {
        try checked(.rmdir, "remove \(shown() ?? path)") { unlinkat(directory, path, AT_REMOVEDIR) }
    }

    static func makeDirectory(_ path: String, mode: mode_t, at directory: Int32 = AT_FDCWD,
                              shown: @autoclosure () -> String? = nil) throws {
        try checked(.mkdir, "create directory \(shown() ?? path)") { mkdirat(directory, path, mode) }
    }

    static func setMode(_ descriptor: Int32, _ mode: mode_t, shown: @autoclosure () -> String) throws {
        try checked(.chmod, "chmod \(shown())") { fchmod(descriptor, mode) }
    }

    static func setMode(_ path: String, _ mode: mode_t) throws {
        try checked(.chmod, "chmod \(path)") { chmod(path, mode) }
    }

    /// The target of the symbolic link at `path`.
    static func linkTarget(_ path: String) throws -> String {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = try buffer.withUnsafeMutableBytes { raw in
            try checked(.readlink, "read the link \(path)") { readlink(path, raw.baseAddress!.assumingMemoryBound(to: CChar.self), raw.count - 1) }
        }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }

    /// `path` with every symbolic link resolved.
    static func resolved(_ path: String) throws -> String {
        if let error = injected(.readlink, { "resolve \(path)" }) { throw SystemError(operation: "resolve \(path)", errno: error) }
        guard let resolved = realpath(path, nil) else { throw SystemError(operation: "resolve \(path)", errno: Glibc.errno) }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The names in the open directory `descriptor` (not "." or ".."), and
    /// whether each is a directory. The descriptor is the caller's still.
    static func entries(of descriptor: Int32, shown: @autoclosure () -> String) throws -> [(name: String, isDirectory: Bool)] {
        // fdopendir takes the descriptor over: it gets a duplicate, closed with the stream.
        let own = try duplicate(descriptor, shown: shown())
        guard let stream = fdopendir(own) else {
            let error = Glibc.errno
            close(own)
            throw SystemError(operation: "list \(shown())", errno: error)
        }
        defer { closedir(stream) }
        var found: [(String, Bool)] = []
        while true {
            Glibc.errno = 0
            guard let entry = readdir(stream) else {
                if Glibc.errno != 0 { throw SystemError(operation: "list \(shown())", errno: Glibc.errno) }
                return found
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != ".", name != ".." { found.append((name, entry.pointee.d_type == UInt8(DT_DIR))) }
        }
    }

    // MARK: - Signals

    /// Blocks SIGTERM, SIGINT and SIGHUP, ignores SIGPIPE and SIGIO, and
    /// returns a signalfd that polls readable when one of the three arrives.
    static func stopSignalDescriptor() throws -> Int32 {
        try checked(.signalfd, "watch the stop signals (signalfd)") { sa_stop_signal_fd() }
    }

    /// The signal waiting on a signalfd, or -1 when none could be read (a spurious wake-up).
    static func readSignal(_ descriptor: Int32) -> Int32 { sa_read_signal(descriptor) }

    // MARK: - Time

    /// Wall-clock milliseconds since 1970 (what the log records).
    static var nowMs: Int64 { clock(CLOCK_REALTIME) }

    /// Milliseconds that only go forward: for intervals, immune to clock changes.
    static var monotonicMs: Int64 { clock(CLOCK_MONOTONIC) }

    private static func clock(_ id: clockid_t) -> Int64 {
        var now = timespec()
        // clock_gettime fails only for a clock that does not exist: these two always do.
        let result = clock_gettime(id, &now)
        precondition(result == 0, "clock_gettime(\(id)) failed: \(words(Glibc.errno))")
        return now.milliseconds
    }
}

extension timespec {
    /// The time in one number, as file times are compared and logged.
    var nanoseconds: Int64 { Int64(tv_sec) * 1_000_000_000 + Int64(tv_nsec) }
    var milliseconds: Int64 { Int64(tv_sec) * 1000 + Int64(tv_nsec) / 1_000_000 }
}

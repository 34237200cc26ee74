// sa_stop_signal_fd and sa_read_signal (signalfd) live in CCurlShims.
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
///   its own documentation comment (`close`);
/// - a call that does not fail with -1 (a shim answering an errno value or a
///   negated one, mmap's MAP_FAILED, isatty's 0) says in its comment how its
///   result is checked.
/// A test may make any call fail with an errno of its choosing (`inject`),
/// so that "a failed sync never becomes claimed progress" and "a failed
/// rename is reported" are checked without a failing disk.
///
/// `SyscallRuleTests` fails on a system call made anywhere else under
/// Sources/ (`make check-syscalls` is the same check, by grep). Public: the
/// CLI's few calls (reading a URL list, sleeping between rounds of `status
/// --watch`, blocking signals) go through here too.
public enum Posix {
    /// The calls a test can make fail, by name.
    enum Call: String, Sendable, CaseIterable {
        case open, close, read, write, fsync, fdatasync, syncfs, syncFileRange, ftruncate, lseek, stat, statfs, rename, link, unlink,
             mkdir, rmdir, chmod, flock, dup, pipe, fcntl, readlink, opendir, kill, waitpid, pidfd, spawn, inotify, signalfd,
             netlink, getifaddrs, clock, access, ioctl, sigprocmask, sigaction, sleep, mmap, lease, mallopt, networkManager
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

    /// How many injected failures are still to come (a fault without `times` counts once).
    static var faultsLeft: Int { faults.withLock { $0.reduce(0) { $0 + ($1.times ?? 1) } } }

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
        try checked(call, what(), unless: [], body)!
    }

    /// As above, but a failure with one of `expected` (EAGAIN from a
    /// non-blocking descriptor, ENOENT where absent is an answer) is nil,
    /// not an error: no error's words are built for it.
    @inline(__always)
    static func checked<T: FixedWidthInteger>(_ call: Call, _ what: @autoclosure () -> String, unless expected: [Int32],
                                              _ body: () -> T) throws -> T? {
        while true {
            if let error = injected(call, what) {
                if error == EINTR { continue }
                if expected.contains(error) { return nil }
                throw SystemError(operation: what(), errno: error)
            }
            let result = body()
            if result != -1 { return result }
            let error = Glibc.errno
            if error == EINTR { continue }
            if expected.contains(error) { return nil }
            throw SystemError(operation: what(), errno: error)
        }
    }

    /// For the shims that answer 0 or more on success and a negated errno
    /// on failure (sd-bus's convention; `sa_spawn_hook`'s errno value is
    /// negated by its caller here): the same policy as `checked`.
    @discardableResult
    static func checkedNegative(_ call: Call, _ what: @autoclosure () -> String, _ body: () -> Int32) throws -> Int32 {
        while true {
            if let error = injected(call, what) {
                if error == EINTR { continue }
                throw SystemError(operation: what(), errno: error)
            }
            let result = body()
            if result >= 0 { return result }
            if -result == EINTR { continue }
            throw SystemError(operation: what(), errno: -result)
        }
    }

    /// errno in words (strerror).
    public static func words(_ error: Int32) -> String { String(cString: strerror(error)) }

    // MARK: - Descriptors

    public static func open(_ path: String, _ flags: Int32, mode: mode_t = 0, at directory: Int32 = AT_FDCWD,
                            shown: @autoclosure () -> String? = nil) throws -> Int32 {
        try checked(.open, "open \(shown() ?? path)") { openat(directory, path, flags | O_CLOEXEC, mode) }
    }

    /// `open` with O_CREAT, in the words of making the file ("create …").
    static func create(_ path: String, _ flags: Int32, mode: mode_t, at directory: Int32 = AT_FDCWD,
                       shown: @autoclosure () -> String? = nil) throws -> Int32 {
        try checked(.open, "create \(shown() ?? path)") { openat(directory, path, flags | O_CREAT | O_CLOEXEC, mode) }
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
    public static func close(_ descriptor: Int32) {
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

    /// Whether another process has the file behind `descriptor` (opened
    /// read-only) open for writing, asked with a lease (`sa_open_for_writing`:
    /// 1 or 0; -1 with errno where leases cannot tell, EACCES or EINVAL).
    static func isOpenForWriting(_ descriptor: Int32, shown: @autoclosure () -> String) throws -> Bool {
        try checked(.lease, "ask whether \(shown()) is open for writing") { sa_open_for_writing(descriptor) } == 1
    }

    // MARK: - Data

    public static func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer,
                            shown: @autoclosure () -> String) throws -> Int {
        try checked(.read, "read \(shown())") { Glibc.read(descriptor, buffer.baseAddress, buffer.count) }
    }

    /// A read of a non-blocking descriptor: nil while nothing is there (EAGAIN), 0 at its end.
    static func readAvailable(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer,
                              shown: @autoclosure () -> String) throws -> Int? {
        try checked(.read, "read \(shown())", unless: [EAGAIN]) { Glibc.read(descriptor, buffer.baseAddress, buffer.count) }
    }

    static func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer, at position: Int64,
                     shown: @autoclosure () -> String) throws -> Int {
        try checked(.read, "read \(shown())") { pread(descriptor, buffer.baseAddress, buffer.count, off_t(position)) }
    }

    /// Every byte of `bytes` (a short write is continued).
    public static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, shown: @autoclosure () -> String) throws {
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

    /// One write to a non-blocking descriptor: nil if it is full (EAGAIN), else what went.
    static func writeAvailable(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, shown: @autoclosure () -> String) throws -> Int? {
        try checked(.write, "write \(shown())", unless: [EAGAIN]) { Glibc.write(descriptor, bytes.baseAddress, bytes.count) }
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
    public static func status(of path: String, at directory: Int32 = AT_FDCWD, flags: Int32 = 0,
                              shown: @autoclosure () -> String? = nil) throws -> stat {
        var info = stat()
        try checked(.stat, "stat \(shown() ?? path)") { fstatat(directory, path, &info, flags) }
        return info
    }

    /// The type of the file system `path` is on (`statfs`'s `f_type`, a magic number).
    static func fileSystemType(of path: String) throws -> Int64 {
        var type: CLongLong = 0
        try checked(.statfs, "ask which file system \(path) is on") { sa_file_system_type(path, &type) }
        return Int64(type)
    }

    /// As `status(of:)`, nil when nothing is at `path` (ENOENT): asked
    /// where absence is the common answer, it builds no error for it.
    static func statusIfPresent(of path: String, at directory: Int32 = AT_FDCWD, flags: Int32 = 0,
                                shown: @autoclosure () -> String? = nil) throws -> stat? {
        var info = stat()
        let found = try checked(.stat, "stat \(shown() ?? path)", unless: [ENOENT]) { fstatat(directory, path, &info, flags) }
        return found == nil ? nil : info
    }

    /// As `status(of:)`, for a name that need not be UTF-8 (a job dropped
    /// into the inbox under any bytes): `path` is its bytes, without a NUL.
    static func status(of path: [UInt8], at directory: Int32 = AT_FDCWD, flags: Int32 = 0,
                       shown: @autoclosure () -> String) throws -> stat {
        var info = stat()
        try withCString(path) { name in try checked(.stat, "stat \(shown())") { fstatat(directory, name, &info, flags) } }
        return info
    }

    /// Whether anything (a dangling symbolic link too) is at `path`. ENOENT
    /// and ENOTDIR (a file where a folder of the path should be) say nothing
    /// is; other errors count as "there", so that a decision not to replace
    /// what is there errs on the safe side.
    static func exists(_ path: String, at directory: Int32 = AT_FDCWD) -> Bool {
        var info = stat()
        do {
            return try checked(.stat, "stat \(path)", unless: [ENOENT, ENOTDIR]) {
                fstatat(directory, path, &info, AT_SYMLINK_NOFOLLOW)
            } != nil
        } catch {
            return true
        }
    }

    @discardableResult
    private static func withCString<T>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) throws -> T) rethrows -> T {
        try (bytes + [0]).withUnsafeBufferPointer { buffer in
            try buffer.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) }
        }
    }

    /// Whether `path` may be used as `mode` asks (access(2): R_OK, W_OK, X_OK, F_OK).
    static func access(_ path: String, _ mode: Int32) throws {
        try checked(.access, "access \(path)") { Glibc.access(path, mode) }
    }

    static func rename(_ from: String, at fromDirectory: Int32 = AT_FDCWD, to: String, at toDirectory: Int32 = AT_FDCWD,
                       shown: @autoclosure () -> String) throws {
        try checked(.rename, shown()) { renameat(fromDirectory, from, toDirectory, to) }
    }

    /// As above, from a name that need not be UTF-8 (its bytes, without a NUL).
    static func rename(_ from: [UInt8], at fromDirectory: Int32, to: String, at toDirectory: Int32,
                       shown: @autoclosure () -> String) throws {
        try withCString(from) { name in try checked(.rename, shown()) { renameat(fromDirectory, name, toDirectory, to) } }
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
        try rawEntries(of: descriptor, shown: shown()).map { (String(decoding: $0.name, as: UTF8.self), $0.isDirectory) }
    }

    /// As `entries`, each name as the bytes the kernel has (they need not be UTF-8).
    static func rawEntries(of descriptor: Int32, shown: @autoclosure () -> String) throws -> [(name: [UInt8], isDirectory: Bool)] {
        // fdopendir takes its descriptor over: it gets one of its own, opened
        // afresh. (A dup would share the caller's read position, and a second
        // listing through it would start where the first ended: nothing.)
        let own = try open(".", O_RDONLY | O_DIRECTORY, at: descriptor, shown: shown())
        if let error = injected(.opendir, { "list \(shown())" }) {
            close(own)
            throw SystemError(operation: "list \(shown())", errno: error)
        }
        // fdopendir answers NULL (not -1) when it fails.
        guard let stream = fdopendir(own) else {
            let error = Glibc.errno
            close(own)
            throw SystemError(operation: "list \(shown())", errno: error)
        }
        defer {
            // Closes `own`: its errors mean what `close`'s do (see there).
            let closed = closedir(stream)
            assert(closed == 0 || Glibc.errno != EBADF, "closed the descriptor of a listing twice")
        }
        var found: [(name: [UInt8], isDirectory: Bool)] = []
        while true {
            // readdir answers NULL at the end and on an error, which only errno tells apart.
            Glibc.errno = 0
            guard let entry = readdir(stream) else {
                if Glibc.errno != 0 { throw SystemError(operation: "list \(shown())", errno: Glibc.errno) }
                return found
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { Array($0.prefix { $0 != 0 }) }
            if name == [UInt8(ascii: ".")] || name == [UInt8(ascii: "."), UInt8(ascii: ".")] { continue }
            var isDirectory = entry.pointee.d_type == UInt8(DT_DIR)
            if entry.pointee.d_type == UInt8(DT_UNKNOWN) {
                // A file system that does not fill d_type in: asked of the entry itself (gone meanwhile: not a folder).
                isDirectory = (try? status(of: name, at: own, flags: AT_SYMLINK_NOFOLLOW, shown: shown()))
                    .map { ($0.st_mode & S_IFMT) == S_IFDIR } ?? false
            }
            found.append((name, isDirectory))
        }
    }

    // MARK: - Processes

    /// This process's id (getpid cannot fail).
    static var processID: pid_t { getpid() }

    /// The user whose rights the process acts with (geteuid cannot fail):
    /// the one whose folders and jobs the agent trusts.
    public static var effectiveUserID: uid_t { geteuid() }

    /// Who is in group `gid`: the uids whose primary group it is (every user
    /// of the user database looked at) and the names it lists; nil when the
    /// group database has no such group. Not thread-safe (getpwent walks one
    /// shared cursor): asked on one thread, at start-up and by the loop.
    static func groupMembers(_ gid: gid_t) -> (primary: [uid_t], listed: [String])? {
        var entry = group()
        var found: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 1 << 16)
        guard getgrgid_r(gid, &entry, &buffer, buffer.count, &found) == 0, found != nil else { return nil }
        var listed: [String] = []
        if var member = entry.gr_mem {
            while let name = member.pointee {
                listed.append(String(cString: name))
                member += 1
            }
        }
        var primary: [uid_t] = []
        setpwent()
        while let user = getpwent() {
            if user.pointee.pw_gid == gid { primary.append(user.pointee.pw_uid) }
        }
        endpwent()
        return (primary, listed)
    }

    /// The login name of `uid`, nil when the user database has none (or
    /// cannot be read): only for words, never for a decision.
    public static func userName(of uid: uid_t) -> String? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        let status = getpwuid_r(uid, &entry, &buffer, buffer.count, &found)
        guard status == 0, found != nil, let name = entry.pw_name else { return nil }
        return String(cString: name)
    }

    /// Ends the process at once: no atexit handler, no buffer flushed, as a
    /// `kill -9` would (crash tests). _exit cannot fail and does not return.
    static func exitImmediately(_ status: Int32) -> Never { _exit(status) }

    /// Sends `signal` to process `pid`; to its whole process group for a negative `pid`.
    static func kill(_ pid: pid_t, _ signal: Int32, shown: @autoclosure () -> String) throws {
        try checked(.kill, "signal \(shown())") { Glibc.kill(pid, signal) }
    }

    /// Collects the child `pid` if it has ended (waitid with WNOHANG): how
    /// it ended, or nil while it runs.
    static func reapIfEnded(_ pid: pid_t, shown: @autoclosure () -> String) throws -> siginfo_t? {
        var info = siginfo_t()
        try checked(.waitpid, "wait for \(shown())") { waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG) }
        // WNOHANG: si_pid stays 0 while the process runs.
        return info._sifields._sigchld.si_pid != 0 ? info : nil
    }

    /// pidfd_open(2): a descriptor that polls readable when `pid` exits. ENOSYS before Linux 5.3.
    static func processDescriptor(_ pid: pid_t, shown: @autoclosure () -> String) throws -> Int32 {
        try checked(.pidfd, "open a pidfd for \(shown())") { sa_pidfd_open(pid) }
    }

    /// Starts `arguments[0]` (searched on PATH) with `environment`
    /// ("KEY=value" each) the way a hook starts (see `sa_spawn_hook`),
    /// writing to `output` (if >= 0). The shim answers 0 or an errno value
    /// (posix_spawn's convention), negated here for `checkedNegative`.
    static func spawn(_ arguments: [String], environment: [String], output: Int32) throws -> pid_t {
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        try checkedNegative(.spawn, "start \(arguments.first ?? "")") { -sa_spawn_hook(argv, envp, output, &pid) }
        return pid
    }

    // MARK: - Signals

    /// Blocks `signals` for the calling thread, and the threads it starts afterwards (sigprocmask).
    public static func block(signals: [Int32]) throws {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        try checked(.sigprocmask, "block signals \(signals)") { sigprocmask(SIG_BLOCK, &set, nil) }
    }

    /// From now on `signal` is ignored (SIGPIPE: a reader gone is a failed write, not a death).
    /// signal(2) answers SIG_ERR, not -1, when it fails: compared as a number here.
    public static func ignore(signal: Int32) throws {
        try checked(.sigaction, "ignore signal \(signal)") { unsafeBitCast(Glibc.signal(signal, SIG_IGN), to: Int.self) }
    }

    /// A descriptor readable when SIGTERM, SIGINT or SIGHUP comes, which
    /// are blocked for it; SIGPIPE and SIGIO are ignored (`sa_stop_signal_fd`).
    public static func stopSignals() throws -> Int32 {
        try checked(.signalfd, "make a signalfd for the stop signals") { sa_stop_signal_fd() }
    }

    /// The next signal waiting on the descriptor `stopSignals` made, or nil when none is (EAGAIN).
    public static func nextSignal(_ descriptor: Int32) throws -> Int32? {
        try checked(.signalfd, "read the stop signals", unless: [EAGAIN]) { sa_read_signal(descriptor) }
    }

    // MARK: - Terminal

    /// Whether `descriptor` is a terminal. isatty answers 0 with errno
    /// ENOTTY (or EBADF) for "no": there is no failure to report.
    public static func isTerminal(_ descriptor: Int32) -> Bool {
        if injected(.ioctl, { "ask whether descriptor \(descriptor) is a terminal" }) != nil { return false }
        return isatty(descriptor) == 1
    }

    /// The size in character cells of the terminal at `descriptor` (ioctl TIOCGWINSZ).
    public static func terminalSize(_ descriptor: Int32) throws -> (columns: Int, rows: Int) {
        var size = winsize()
        try checked(.ioctl, "ask the size of the terminal") { ioctl(descriptor, UInt(TIOCGWINSZ), &size) }
        return (Int(size.ws_col), Int(size.ws_row))
    }

    // MARK: - Watching

    /// An inotify instance (inotify_init1).
    static func inotify(flags: Int32) throws -> Int32 {
        try checked(.inotify, "start inotify") { inotify_init1(flags) }
    }

    /// Watches `path` for `events` on the inotify instance `descriptor`; returns the watch.
    @discardableResult
    static func watch(_ descriptor: Int32, _ path: String, events: UInt32) throws -> Int32 {
        try checked(.inotify, "watch \(path)") { inotify_add_watch(descriptor, path, events) }
    }

    // MARK: - Network

    /// A non-blocking rtnetlink socket, readable when a link or a route changes (`sa_netlink_route_socket`).
    static func routeEvents() throws -> Int32 {
        try checked(.netlink, "open a routing socket") { sa_netlink_route_socket() }
    }

    /// Reads and drops every routing event waiting (`sa_netlink_drain`); ENOBUFS: some were lost.
    static func drainRouteEvents(_ descriptor: Int32) throws {
        try checked(.netlink, "read routing events") { sa_netlink_drain(descriptor) }
    }

    /// The addresses of this machine's interfaces (getifaddrs): 4 bytes an
    /// IPv4 one, 16 an IPv6 one; other families are left out.
    static func interfaceAddresses() throws -> [[UInt8]] {
        var list: UnsafeMutablePointer<ifaddrs>?
        try checked(.getifaddrs, "list the network interfaces") { getifaddrs(&list) }
        defer { freeifaddrs(list) }
        var found: [[UInt8]] = []
        var entry = list
        while let current = entry {
            if let address = current.pointee.ifa_addr {
                switch Int32(address.pointee.sa_family) {
                case AF_INET:
                    address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { found.append(withUnsafeBytes(of: $0.pointee.sin_addr) { Array($0) }) }
                case AF_INET6:
                    address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { found.append(withUnsafeBytes(of: $0.pointee.sin6_addr) { Array($0) }) }
                default: break
                }
            }
            entry = current.pointee.ifa_next
        }
        return found
    }

    // NetworkManager over the system bus, through the sd-bus shims: they
    // answer a negated errno when they fail (sd-bus's convention).

    /// Connects and subscribes to NetworkManager's signals: the bus descriptor to poll.
    static func connectNetworkManager() throws -> Int32 {
        try checkedNegative(.networkManager, "connect to the system bus") { sa_nm_open() }
    }

    /// Lets the connection go (it answers nothing).
    static func disconnectNetworkManager() { sa_nm_close() }

    /// Processes what the bus has: whether NetworkManager signalled something since the last call.
    static func networkManagerSignalled() throws -> Bool {
        try checkedNegative(.networkManager, "read the system bus") { sa_nm_process() } == 1
    }

    /// NetworkManager's State and Metered (Metered 0, unknown, when only it cannot be read).
    /// Fails when State cannot be read: NetworkManager does not run.
    static func networkManagerState() throws -> (state: UInt32, metered: UInt32) {
        var state: UInt32 = 0, metered: UInt32 = 0
        try checkedNegative(.networkManager, "ask NetworkManager its state") { sa_nm_read(&state, &metered) }
        return (state, metered)
    }

    // MARK: - Memory

    /// `count` bytes of private memory, its pages made at once (MAP_POPULATE).
    /// mmap fails with MAP_FAILED, which is -1 as a number: checked as one.
    static func mapMemory(_ count: Int, shown: @autoclosure () -> String) throws -> UnsafeMutableRawPointer {
        let address = try checked(.mmap, "map \(shown())") {
            Int(bitPattern: mmap(nil, count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0))
        }
        return UnsafeMutableRawPointer(bitPattern: address)!
    }

    /// Gives back what `mapMemory` mapped. munmap fails only for a range
    /// that was never mapped (EINVAL), a bug: it stops a debug build.
    static func unmapMemory(_ address: UnsafeMutableRawPointer, _ count: Int) {
        let result = munmap(address, count)
        assert(result == 0, "munmap: \(words(Glibc.errno))")
    }

    /// glibc's M_MMAP_THRESHOLD (`sa_set_mmap_threshold`): whether it was
    /// taken. mallopt answers 1 or 0 and sets no errno: refused is all it says.
    static func setMmapThreshold(_ bytes: Int32) -> Bool {
        if injected(.mallopt, { "mallopt M_MMAP_THRESHOLD" }) != nil { return false }
        return sa_set_mmap_threshold(bytes) == 1
    }

    // MARK: - Time

    /// Wall-clock milliseconds since 1970 (what the log records).
    static var nowMs: Int64 { clock(CLOCK_REALTIME) }

    /// Milliseconds that only go forward: for intervals, immune to clock changes.
    static var monotonicMs: Int64 { clock(CLOCK_MONOTONIC) }

    /// Waits `ms` milliseconds.
    public static func sleep(ms: Int) { sleep(microseconds: ms * 1000) }

    /// Waits `microseconds`: an interrupted sleep goes on for the time left.
    /// nanosleep fails otherwise only for an interval out of range (EINVAL),
    /// which this never asks for: that stops the program.
    public static func sleep(microseconds: Int) {
        var request = timespec(tv_sec: microseconds / 1_000_000, tv_nsec: (microseconds % 1_000_000) * 1000)
        var remaining = timespec()
        do {
            try checked(.sleep, "sleep \(microseconds) µs") {
                let result = nanosleep(&request, &remaining)
                // Interrupted (EINTR): what is left, when tried again.
                if result == -1 { request = remaining }
                return result
            }
        } catch {
            preconditionFailure("\(error)")
        }
    }

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

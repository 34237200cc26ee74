import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// forgetfs (forgetfs/forgetfs.c beside this file), mounted for a test: a FUSE
/// file system that keeps only what was made durable, by strict POSIX rules,
/// when the test cuts the power (issue 41). A file's bytes and size are
/// durable as of its last fsync/fdatasync; a directory's entries as of its
/// last fsync (which also keeps the attributes of what it names); a syncfs
/// keeps everything (`syncfs()` here, or `preloadLibrary` in a process).
/// `cut()` drops the rest and unmounts; `mount()` is the boot after it.
///
/// Built with cc and libfuse3 (fuse3, libfuse3-dev: `make test-deps`) once
/// per source; mounting needs root and /dev/fuse. Where either is missing
/// the initialiser returns nil and prints why, and the test skips.
public final class ForgetFS {
    public let path: String
    public let backing: String
    private let directory: String
    /// Held so that the folder outlives the mount in it.
    private let owner: TempDirectory
    private var daemon: ChildProcess?
    private var mounts = 0

    /// `LD_PRELOAD` this into a process so its `syncfs(2)` reaches forgetfs
    /// (the kernel never sends FUSE_SYNCFS to a FUSE daemon).
    public static var preloadLibrary: String? { try? tools.get().preload }

    public init?(in directory: TempDirectory, name: String = "forgetfs") throws {
        guard getuid() == 0, access("/dev/fuse", R_OK | W_OK) == 0 else {
            print("skipped: forgetfs needs root and /dev/fuse")
            return nil
        }
        self.directory = directory.path
        owner = directory
        path = directory.file(name)
        backing = directory.file(name + "-backing")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: backing, withIntermediateDirectories: true)
        _ = try Self.tools.get()
        try mount()
    }

    /// Mounts (again): after a cut, what the "disk" holds is all there is.
    public func mount() throws {
        guard daemon == nil else { throw TestFailure("forgetfs is mounted already") }
        mounts += 1
        let child = try ChildProcess(try Self.tools.get().daemon, [backing, path], environment: [:],
                                     outputIn: directory, name: "forgetfs-\(mounts)")
        guard eventually(within: 10, { child.stdout.contains("mounted") || !child.isRunning }), child.isRunning else {
            throw TestFailure("forgetfs did not mount at \(path): \(child.stderr)")
        }
        daemon = child
    }

    /// The power cut: what was never made durable is gone, and the file
    /// system is unmounted (every descriptor still open on it fails).
    /// Kill what writes to it first: a process outliving the cut keeps
    /// writing into a file system that is no longer there.
    public func cut() throws {
        guard let daemon else { throw TestFailure("forgetfs is not mounted") }
        try control(Self.cutRequest)
        guard daemon.wait(seconds: 30) != nil else { throw TestFailure("forgetfs did not stop after the cut") }
        self.daemon = nil
        guard daemon.stderr.contains("power cut") else { throw TestFailure("forgetfs: no cut: \(daemon.stderr)") }
    }

    /// A cut, then the boot after it.
    public func powerCycle() throws {
        try cut()
        try mount()
    }

    /// syncfs(2) as forgetfs sees it: everything becomes durable.
    public func syncfs() throws { try control(Self.syncfsRequest) }

    private static let syncfsRequest = UInt(0xF741)
    private static let cutRequest = UInt(0xF742)

    private func control(_ request: UInt) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw TestFailure("cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard ioctl(fd, request) == 0 else {
            throw TestFailure("forgetfs ioctl \(String(request, radix: 16)) on \(path): \(String(cString: strerror(errno)))")
        }
    }

    deinit {
        guard let daemon else { return }
        // A clean unmount; lazy, so a descriptor left open elsewhere cannot hold it.
        daemon.signal(SIGTERM)
        if daemon.wait(seconds: 5) == nil {
            _ = TestMount.run("/bin/umount", ["-l", path])
            daemon.signal(SIGKILL)
            daemon.wait(seconds: 5)
        }
    }

    // MARK: - Built once per source

    struct Tools {
        var daemon: String
        var preload: String
    }

    static let tools: Result<Tools, TestFailure> = Result { try build() }.mapError { $0 as? TestFailure ?? TestFailure("\($0)") }

    private static func build() throws -> Tools {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("forgetfs")
        let daemonSource = sources.appendingPathComponent("forgetfs.c").path
        let preloadSource = sources.appendingPathComponent("syncfs_preload.c").path
        // Named by a digest of the sources: a changed source is built anew, once.
        var digest: UInt64 = 0xCBF2_9CE4_8422_2325
        for source in [daemonSource, preloadSource] {
            for byte in FileManager.default.contents(atPath: source) ?? Data() { digest = (digest ^ UInt64(byte)) &* 0x100_0000_01B3 }
        }
        let folder = NSTemporaryDirectory() + "/syncagent-forgetfs-" + String(digest, radix: 16)
        let tools = Tools(daemon: folder + "/forgetfs", preload: folder + "/libforgetfs-syncfs.so")
        if FileManager.default.isExecutableFile(atPath: tools.daemon), FileManager.default.fileExists(atPath: tools.preload) {
            return tools
        }
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // Built under temporary names, then renamed: another test process may build the same at once.
        let unique = UUID().uuidString
        let script = """
            set -e
            flags=$(pkg-config --cflags --libs fuse3) || { echo "no libfuse3: run make test-deps (fuse3 libfuse3-dev)" >&2; exit 1; }
            cc -O2 -Wall -o '\(tools.daemon).\(unique)' '\(daemonSource)' $flags
            cc -O2 -Wall -shared -fPIC -o '\(tools.preload).\(unique)' '\(preloadSource)'
            mv '\(tools.daemon).\(unique)' '\(tools.daemon)'
            mv '\(tools.preload).\(unique)' '\(tools.preload)'
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw TestFailure("cannot build forgetfs: \(text)") }
        return tools
    }
}

/// File operations as a careful program makes them, for tests on forgetfs.
public enum Durably {
    public enum Flush { case none, data, full }

    /// Creates or replaces `path`'s bytes (O_TRUNC), flushed as asked.
    public static func write(_ data: Data, to path: String, flush: Flush = .none) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw TestFailure("cannot create \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        try data.withUnsafeBytes { buffer in
            var done = 0
            while done < buffer.count {
                let put = Glibc.write(fd, buffer.baseAddress! + done, buffer.count - done)
                guard put > 0 else { throw TestFailure("cannot write \(path): \(String(cString: strerror(errno)))") }
                done += put
            }
        }
        try self.flush(fd, flush, path)
    }

    public static func flush(_ fd: Int32, _ flush: Flush, _ path: String) throws {
        switch flush {
        case .none: return
        case .data: guard fdatasync(fd) == 0 else { throw TestFailure("fdatasync \(path): \(String(cString: strerror(errno)))") }
        case .full: guard fsync(fd) == 0 else { throw TestFailure("fsync \(path): \(String(cString: strerror(errno)))") }
        }
    }

    /// fsync of a directory (opened O_DIRECTORY): its entries become durable.
    public static func syncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw TestFailure("cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw TestFailure("fsync \(path): \(String(cString: strerror(errno)))") }
    }

    /// mkdir, then fsync of the parent: a folder that survives a cut.
    public static func makeDirectory(_ path: String, mode: mode_t = 0o700) throws {
        guard mkdir(path, mode) == 0 || errno == EEXIST else {
            throw TestFailure("mkdir \(path): \(String(cString: strerror(errno)))")
        }
        try syncDirectory(path)
        try syncDirectory((path as NSString).deletingLastPathComponent)
    }

    /// A job as a careful script drops it: a temp name, fsync, rename, fsync of the inbox.
    public static func dropJob(_ text: String, named name: String, in inbox: String) throws {
        let temp = inbox + "/." + name + ".tmp"
        try write(Data(text.utf8), to: temp, flush: .full)
        guard rename(temp, inbox + "/" + name) == 0 else { throw TestFailure("cannot rename \(temp): \(String(cString: strerror(errno)))") }
        try syncDirectory(inbox)
    }
}

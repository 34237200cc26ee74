import Foundation
#if canImport(Glibc)
import Glibc
#endif

public struct AgentAlreadyRunning: Error, CustomStringConvertible {
    public var stateDir: String
    public var pid: Int32?
    /// Set when the other agent has a state directory of its own but this inbox.
    public var inbox: String? = nil
    public var description: String {
        let who = pid.map { "agent pid \($0)" } ?? "another agent"
        if let inbox { return "\(who) is already watching inbox \(inbox) (with another state dir); one agent per inbox" }
        return "\(who) is already running on state dir \(stateDir); one agent per state directory"
    }
}

/// One agent per state directory (like one background URLSession per
/// identifier): an flock on the state directory itself, held for the
/// agent's lifetime. The kernel drops it when the process dies, even by
/// SIGKILL, so a crash never leaves it stale, and whether it is held is the
/// truth about whether an agent runs. (A lock on a file in the directory
/// could be defeated by deleting the file: a second agent would then lock a
/// new one and write the same log.) `agent.lock` beside it names the holder,
/// "PID STARTED_AT_MS", for `status` and for a second agent's error.
final class StateLock {
    private let directory: Int32
    private let nameFile: Int32

    /// How long a starting agent waits for the lock: `AgentLiveness.probe`
    /// holds it shared for a few microseconds, which must not look like a
    /// second agent.
    private static let probeWaitMs = 1000

    init(path: String, stateDir: String) throws {
        directory = try syscall("open \(stateDir)") { open(stateDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        do {
            nameFile = try syscall("open \(path)") { open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600) }
        } catch {
            close(directory)
            throw error
        }
        do {
            // Both: the directory's cannot be deleted away; the file's is what an older
            // agent takes, and what a file system without directory flocks (NFS) still has.
            try Self.acquire(directory, named: stateDir, optional: true, stateDir: stateDir, holderFile: path)
            try Self.acquire(nameFile, named: path, optional: false, stateDir: stateDir, holderFile: path)
        } catch {
            close(nameFile)
            close(directory)
            throw error
        }
        // The pid is what a second agent names in its error and `status` shows: worth failing for.
        let line = Array("\(getpid()) \(FileSystem.nowMs)\n".utf8)
        do {
            try syscall("truncate \(path)") { ftruncate(nameFile, 0) }
            try syscall("write the pid into \(path)") { line.withUnsafeBytes { pwrite(nameFile, $0.baseAddress, $0.count, 0) } }
        } catch {
            close(nameFile)
            close(directory)
            throw error
        }
    }

    private static func acquire(_ fd: Int32, named name: String, optional: Bool, stateDir: String, holderFile: String) throws {
        try acquire(fd, named: name, optional: optional) {
            AgentAlreadyRunning(stateDir: stateDir, pid: AgentLiveness.holder(readingFrom: holderFile)?.pid)
        }
    }

    /// An exclusive flock, waited for up to `probeWaitMs`. `optional`: a
    /// file system that cannot lock this descriptor (an NFS directory) is
    /// not an error; another holder always is (`held`).
    fileprivate static func acquire(_ fd: Int32, named name: String, optional: Bool, held: () -> Error) throws {
        var waitedMs = 0
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let error = errno
            if error == EINTR { continue }
            guard error == EWOULDBLOCK else {
                if optional && [EBADF, ENOLCK, EOPNOTSUPP, EINVAL].contains(error) { return }
                throw SystemError(operation: "lock \(name)", errno: error)
            }
            guard waitedMs < probeWaitMs else { throw held() }
            usleep(10_000)
            waitedMs += 10
        }
    }

    deinit {
        // Best effort on the way out: the lock itself dies with the fd.
        _ = ftruncate(nameFile, 0)
        close(nameFile)
        close(directory)
    }
}

/// One agent per inbox too. Two agents with state directories of their own
/// and one inbox each took the jobs the other had moved to `.taken/` and not
/// yet recorded: one job, two tasks, one destination. The lock is an flock on
/// `.taken/`, the agents' own folder there (the inbox itself is what `submit`
/// locks while it writes).
final class InboxLock {
    private let folder: Int32

    init(inbox: String, stateDir: String) throws {
        let taken = Intake.takenDirectory(of: inbox)
        try FileSystem.makeDirectory(inbox)
        try FileSystem.makeOwnDirectory(taken)
        let folder = try syscall("open \(taken)") { open(taken, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        do {
            try StateLock.acquire(folder, named: taken, optional: true) {
                AgentAlreadyRunning(stateDir: stateDir, pid: Self.flockHolder(of: folder), inbox: inbox)
            }
        } catch {
            close(folder)
            throw error
        }
        self.folder = folder
    }

    deinit { close(folder) }

    /// The pid holding an flock on `fd`'s file, as /proc/locks tells it
    /// ("1: FLOCK  ADVISORY  WRITE 1234 fd:00:5678 0 EOF"): the other agent
    /// keeps no file of its own in the inbox to name itself.
    private static func flockHolder(of fd: Int32) -> Int32? {
        var info = stat()
        guard fstat(fd, &info) == 0, let text = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return nil }
        let device = UInt64(info.st_dev)
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        let file = String(format: "%02x:%02x:%llu", major, minor, UInt64(info.st_ino))
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count > 5, fields[1] == "FLOCK", fields[5] == file, let pid = Int32(fields[4]) else { continue }
            return pid
        }
        return nil
    }
}

/// Whether an agent runs on a state directory, for `status` and the
/// control commands: read from the agent's lock, never from the log (which
/// a `kill -9` leaves saying "running").
public struct AgentLiveness: Equatable, Sendable {
    public var running: Bool
    public var pid: Int32?
    public var startedAtMs: Int64?

    public static let notRunning = AgentLiveness(running: false, pid: nil, startedAtMs: nil)

    /// Tries the agent's locks (the state directory's, and `agent.lock`)
    /// shared and lets go at once: taken means no agent holds them. A
    /// missing directory means no agent ever ran.
    public static func probe(stateDir: String) -> AgentLiveness {
        let lockFile = stateDir + "/agent.lock"
        guard isHeld(open(stateDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) || isHeld(open(lockFile, O_RDONLY | O_CLOEXEC | O_NOFOLLOW))
        else { return .notRunning }
        let holder = holder(readingFrom: lockFile)
        return AgentLiveness(running: true, pid: holder?.pid, startedAtMs: holder?.startedAtMs)
    }

    /// Whether another process holds `fd`'s flock (taken shared for an instant to ask). Closes `fd`.
    private static func isHeld(_ fd: Int32) -> Bool {
        guard fd >= 0 else { return false }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            _ = flock(fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK
    }

    /// "PID STARTED_AT_MS" (an older agent wrote only "PID").
    static func holder(readingFrom path: String) -> (pid: Int32, startedAtMs: Int64?)? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let words = String(decoding: buffer[0..<count], as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard let first = words.first, let pid = Int32(first) else { return nil }
        return (pid, words.count > 1 ? Int64(words[1]) : nil)
    }
}

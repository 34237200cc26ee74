import Foundation
#if canImport(Glibc)
import Glibc
#endif

public struct AgentAlreadyRunning: Error, CustomStringConvertible {
    public var stateDir: String
    public var pid: Int32?
    public var description: String {
        let who = pid.map { "agent pid \($0)" } ?? "another agent"
        return "\(who) is already running on state dir \(stateDir); one agent per state directory"
    }
}

/// One agent per state directory (like one background URLSession per
/// identifier): an flock held for the agent's lifetime. The kernel drops
/// it when the process dies, even by SIGKILL, so a crash never leaves it
/// stale, and whether it is held is the truth about whether an agent runs.
/// The file names the holder: "PID STARTED_AT_MS".
final class StateLock {
    private let fd: Int32

    /// How long a starting agent waits for the lock: `AgentLiveness.probe`
    /// holds it shared for a few microseconds, which must not look like a
    /// second agent.
    private static let probeWaitMs = 1000

    init(path: String, stateDir: String) throws {
        fd = try syscall("open \(path)") { open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600) }
        var waitedMs = 0
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let error = errno
            if error == EINTR { continue }
            guard error == EWOULDBLOCK else {
                close(fd)
                throw SystemError(operation: "lock \(path)", errno: error)
            }
            guard waitedMs < Self.probeWaitMs else {
                let holder = AgentLiveness.holder(readingFrom: fd)
                close(fd)
                throw AgentAlreadyRunning(stateDir: stateDir, pid: holder?.pid)
            }
            usleep(10_000)
            waitedMs += 10
        }
        // The pid is what a second agent names in its error and `status` shows: worth failing for.
        let line = Array("\(getpid()) \(FileSystem.nowMs)\n".utf8)
        do {
            try syscall("truncate \(path)") { ftruncate(fd, 0) }
            try syscall("write the pid into \(path)") { line.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } }
        } catch {
            close(fd)
            throw error
        }
    }

    deinit {
        // Best effort on the way out: the lock itself dies with the fd.
        _ = ftruncate(fd, 0)
        close(fd)
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

    /// Tries the lock shared and lets go at once: taken means no agent
    /// holds it. A missing lock file means no agent ever ran here.
    public static func probe(lockFile: String) -> AgentLiveness {
        let fd = open(lockFile, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .notRunning }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            _ = flock(fd, LOCK_UN)
            return .notRunning
        }
        guard errno == EWOULDBLOCK else { return .notRunning }
        let holder = holder(readingFrom: fd)
        return AgentLiveness(running: true, pid: holder?.pid, startedAtMs: holder?.startedAtMs)
    }

    /// "PID STARTED_AT_MS" (an older agent wrote only "PID").
    static func holder(readingFrom fd: Int32) -> (pid: Int32, startedAtMs: Int64?)? {
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let words = String(decoding: buffer[0..<count], as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard let first = words.first, let pid = Int32(first) else { return nil }
        return (pid, words.count > 1 ? Int64(words[1]) : nil)
    }
}

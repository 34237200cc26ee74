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
/// it when the process dies, even by SIGKILL, so a crash never leaves it stale.
final class StateLock {
    private let fd: Int32

    init(path: String, stateDir: String) throws {
        fd = try syscall("open \(path)") { open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600) }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK else {
                let error = SystemError(operation: "lock \(path)", errno: errno)
                close(fd)
                throw error
            }
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
            let text = count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
            close(fd)
            throw AgentAlreadyRunning(stateDir: stateDir, pid: Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        // The pid is what a second agent names in its error: worth failing for.
        let pid = Array("\(getpid())\n".utf8)
        do {
            try syscall("truncate \(path)") { ftruncate(fd, 0) }
            try syscall("write the pid into \(path)") { pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } }
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

import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A server that closes every descriptor it inherits as it starts (dante does, as daemons
/// do), run in a process group of its own. Not a Foundation `Process`: that one takes the
/// close of a descriptor it handed the child for the child's end and waits for it, blocking,
/// which hung every later `Process` of the test run while the server lived on. Signals are
/// unblocked and default in the child (the test runner's mask is not inherited), and `stop`
/// ends the whole group, bounded.
public final class SpawnedDaemon {
    public let pid: pid_t
    private var reaped = false

    /// - Parameters:
    ///   - output: a file that takes its standard output and error.
    public init(_ executable: String, _ arguments: [String], output: String) throws {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var child: pid_t = 0
        let result = posix_spawn(&child, executable, &actions, &attributes, argv, [nil])
        guard result == 0 else { throw TestFailure("posix_spawn \(executable): \(String(cString: strerror(result)))") }
        pid = child
    }

    public var isRunning: Bool {
        guard !reaped else { return false }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid { reaped = true }
        return !reaped
    }

    /// SIGTERM to its group, then SIGKILL to what is left of it after `seconds`.
    public func stop(seconds: Double = 5) {
        guard !reaped else { return }
        kill(-pid, SIGTERM)
        if !eventually(within: seconds, { !isRunning }) {
            kill(-pid, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
            reaped = true
        }
        // Children it forked that outlived it.
        kill(-pid, SIGKILL)
    }

    deinit { stop() }
}

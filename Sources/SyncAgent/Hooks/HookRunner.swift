import CLinuxShims
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// The processes of `on_task_end` and `on_batch_end` (SPEC §5): spawned
/// without a shell, watched through pidfds in the agent's one poll, killed
/// (with their process group) past `hook_timeout`, reaped here and nowhere
/// else. The agent records what starts and how each ends.
final class HookRunner {
    struct Process {
        var run: HookPlan.Run
        var pid: pid_t
        /// -1 on a kernel without pidfd_open: the agent then polls on a short tick.
        var pidfd: Int32
        var startedMs: Int64
        var deadlineMs: Int64
        var killed = false
        /// Killed because the agent stopped, not for running past `hook_timeout`.
        var stopped = false
    }

    /// Hooks at once, at most: a batch of 2,000 ends must not fork 2,000 processes.
    static let maximumRunning = 4
    /// How often exits are looked for when no pidfd tells.
    static let tickMs: Int64 = 100

    private(set) var running: [Process] = []
    /// Where hooks write: `STATE_DIR/hooks.log`, kept to about `logLimit`
    /// (the previous one as `hooks.log.1`), so a chatty hook cannot fill the
    /// disk or the agent's own log.
    private let logPath: String
    static let logLimit: Int64 = 4 << 20

    init(stateDir: String) {
        logPath = stateDir + "/hooks.log"
    }

    var freeSlots: Int { Self.maximumRunning - running.count }
    var fds: [Int32] { running.map(\.pidfd).filter { $0 >= 0 } }

    /// The next moment the loop must wake for a hook: a deadline, or the tick.
    var nextWakeMs: Int64? {
        guard !running.isEmpty else { return nil }
        let deadline = running.map(\.deadlineMs).min()!
        return running.contains { $0.pidfd < 0 } ? min(deadline, FileSystem.monotonicMs + Self.tickMs) : deadline
    }

    /// Spawns `command` with the agent's environment plus the run's. On
    /// failure, the reason in words (the program not found, …).
    func spawn(_ run: HookPlan.Run, command: [String], timeoutS: Int) -> Result<pid_t, HookFailure> {
        var environment = ProcessInfo.processInfo.environment
        for (key, value) in run.environment { environment[key] = value }
        let argv = command.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let output = openLog()
        defer { if output >= 0 { close(output) } }
        let error = sa_spawn_hook(argv, envp, output, &pid)
        guard error == 0 else {
            return .failure(HookFailure(description: "cannot start \(command[0]): \(String(cString: strerror(error)))"))
        }
        let now = FileSystem.monotonicMs
        running.append(Process(run: run, pid: pid, pidfd: sa_pidfd_open(pid), startedMs: now,
                               deadlineMs: now + Int64(timeoutS) * 1000))
        return .success(pid)
    }

    /// The hooks' log, rotated once it passes `logLimit`; -1 (output
    /// dropped) if it cannot be opened.
    private func openLog() -> Int32 {
        var status = stat()
        if stat(logPath, &status) == 0, Int64(status.st_size) > Self.logLimit {
            _ = rename(logPath, logPath + ".1")
        }
        return open(logPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0o600)
    }

    /// The agent is stopping: running hooks get SIGTERM (with their groups),
    /// `grace` to finish, then SIGKILL, so no hook outlives its time limit
    /// unwatched. Returns how each ended.
    func stopAll(graceMs: Int64) -> [(run: HookPlan.Run, ended: HookEnded)] {
        guard !running.isEmpty else { return [] }
        for process in running {
            _ = kill(-process.pid, SIGTERM)
            _ = kill(process.pid, SIGTERM)
        }
        var ended = reap()
        let deadline = FileSystem.monotonicMs + graceMs
        while !running.isEmpty && FileSystem.monotonicMs < deadline {
            usleep(20_000)
            ended += reap()
        }
        for index in running.indices {
            running[index].deadlineMs = 0
            running[index].stopped = true
        }
        // SIGKILL is reaped at once unless a process is stuck in the kernel (D state):
        // the stop must still end within its 5 s, so such a one is left, unrecorded.
        let killDeadline = FileSystem.monotonicMs + 500
        repeat {
            ended += reap()
            if !running.isEmpty { usleep(5_000) }
        } while !running.isEmpty && FileSystem.monotonicMs < killDeadline
        return ended
    }

    /// Kills overdue hooks and collects every one that has exited.
    func reap() -> [(run: HookPlan.Run, ended: HookEnded)] {
        let now = FileSystem.monotonicMs
        for index in running.indices where !running[index].killed && running[index].deadlineMs <= now {
            // The whole group: a script's own children go too.
            _ = kill(-running[index].pid, SIGKILL)
            _ = kill(running[index].pid, SIGKILL)
            running[index].killed = true
        }
        var ended: [(run: HookPlan.Run, ended: HookEnded)] = []
        running.removeAll { process in
            var info = siginfo_t()
            // WNOHANG: si_pid stays 0 while the process runs.
            guard waitid(P_PID, id_t(process.pid), &info, WEXITED | WNOHANG) == 0, info._sifields._sigchld.si_pid != 0 else {
                return false
            }
            if process.pidfd >= 0 { close(process.pidfd) }
            let status = info._sifields._sigchld.si_status
            let exited = info.si_code == CLD_EXITED
            ended.append((process.run, HookEnded(hook: process.run.hook, batchSeq: process.run.batchSeq, pid: process.pid,
                                                 exitStatus: exited ? status : nil, signal: exited ? nil : status,
                                                 timedOut: process.killed && !process.stopped, durationMs: FileSystem.monotonicMs - process.startedMs)))
            return true
        }
        return ended
    }
}

struct HookFailure: Error, CustomStringConvertible {
    var description: String
}

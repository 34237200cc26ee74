import Foundation
import Logging
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
    private let logger: Logger
    /// What went wrong with hooks.log last, said once until it changes or comes right.
    private var logProblem: String?

    init(stateDir: String, logger: Logger = Logger(label: "syncagent")) {
        logPath = stateDir + "/hooks.log"
        self.logger = logger
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
        let output = openLog()
        defer { Posix.close(output) }
        let pid: pid_t
        do {
            pid = try Posix.spawn(command, environment: environment.map { "\($0.key)=\($0.value)" }, output: output)
        } catch {
            let errno = (error as? SystemError)?.errno ?? EINVAL
            return .failure(HookFailure(description: "cannot start \(command[0]): \(Posix.words(errno))"))
        }
        let now = FileSystem.monotonicMs
        let pidfd: Int32
        do {
            pidfd = try Posix.processDescriptor(pid, shown: "hook pid \(pid)")
        } catch {
            // No pidfd (ENOSYS before Linux 5.3, or out of descriptors): the exit is looked for on a short tick.
            pidfd = -1
        }
        running.append(Process(run: run, pid: pid, pidfd: pidfd, startedMs: now, deadlineMs: now + Int64(timeoutS) * 1000))
        return .success(pid)
    }

    /// The hooks' log, rotated once it passes `logLimit`; -1 (output
    /// dropped) if it cannot be opened. Either failure is logged: a log
    /// that is not rotated grows past its limit, and dropped output leaves
    /// a failing hook with nothing to say why.
    private func openLog() -> Int32 {
        var problem: String?
        do {
            if let status = try Posix.statusIfPresent(of: logPath), Int64(status.st_size) > Self.logLimit {
                try Posix.rename(logPath, to: logPath + ".1", shown: "rename \(logPath) to \(logPath).1")
            }
        } catch {
            problem = "hooks.log is not rotated: \(error)"
        }
        var output: Int32 = -1
        do {
            output = try Posix.open(logPath, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, mode: 0o600)
        } catch {
            problem = "hook output is dropped: \(error)"
        }
        if problem != logProblem, let problem {
            logger.warning("\(problem)", metadata: ["file": "\(logPath)"])
        }
        logProblem = problem
        return output
    }

    /// The agent is stopping: running hooks get SIGTERM (with their groups),
    /// `grace` to finish, then SIGKILL, so no hook outlives its time limit
    /// unwatched. Returns how each ended.
    func stopAll(graceMs: Int64) -> [(run: HookPlan.Run, ended: HookEnded)] {
        guard !running.isEmpty else { return [] }
        for process in running { send(SIGTERM, to: process) }
        var ended = reap()
        let deadline = FileSystem.monotonicMs + graceMs
        while !running.isEmpty && FileSystem.monotonicMs < deadline {
            Posix.sleep(ms: 20)
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
            if !running.isEmpty { Posix.sleep(ms: 5) }
        } while !running.isEmpty && FileSystem.monotonicMs < killDeadline
        return ended
    }

    /// `signal` to the hook's whole process group (a script's own children
    /// go too), then to the hook itself, in case it left its group. A
    /// process already gone (ESRCH) is reaped as usual; any other refusal
    /// (EPERM: a hook that became another user's) is logged, since the hook
    /// then outlives its time limit.
    private func send(_ signal: Int32, to process: Process) {
        for target in [-process.pid, process.pid] {
            do {
                try Posix.kill(target, signal, shown: target < 0 ? "the process group of hook pid \(process.pid)" : "hook pid \(process.pid)")
            } catch let error as SystemError where error.errno == ESRCH {
                // Gone already.
            } catch {
                logger.warning("cannot stop a hook", metadata: ["pid": "\(process.pid)", "hook": "\(process.run.hook.rawValue)",
                                                                "error": "\(error)"])
            }
        }
    }

    /// Kills overdue hooks and collects every one that has exited.
    func reap() -> [(run: HookPlan.Run, ended: HookEnded)] {
        let now = FileSystem.monotonicMs
        for index in running.indices where !running[index].killed && running[index].deadlineMs <= now {
            send(SIGKILL, to: running[index])
            running[index].killed = true
        }
        var ended: [(run: HookPlan.Run, ended: HookEnded)] = []
        running.removeAll { process in
            let info: siginfo_t?
            let failure: String?
            do {
                info = try Posix.reapIfEnded(process.pid, shown: "hook pid \(process.pid)")
                failure = nil
            } catch {
                // Not ours to wait for any more (ECHILD): its end cannot be
                // known, and waiting for it would hold the agent for good.
                (info, failure) = (nil, "\(error)")
            }
            guard info != nil || failure != nil else { return false }
            Posix.close(process.pidfd)
            let status = info?._sifields._sigchld.si_status
            let exited = info.map { $0.si_code == CLD_EXITED } ?? false
            ended.append((process.run, HookEnded(hook: process.run.hook, batchSeq: process.run.batchSeq, pid: process.pid,
                                                 exitStatus: exited ? status : nil, signal: exited ? nil : status,
                                                 timedOut: process.killed && !process.stopped,
                                                 durationMs: FileSystem.monotonicMs - process.startedMs, error: failure)))
            return true
        }
        return ended
    }
}

struct HookFailure: Error, CustomStringConvertible {
    var description: String
}

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
    /// Where hooks write: `STATE_DIR/hooks.log`, kept to `logLimit` (the
    /// previous one as `hooks.log.1`), so a chatty hook cannot fill the disk
    /// or the agent's own log. Hooks write into a pipe, not the file: the
    /// agent copies what comes and rotates the file as it goes, so a single
    /// run that writes gigabytes is held to the limit too (a file handed to
    /// the hook would grow for as long as the hook held it).
    private let logPath: String
    static let logLimit: Int64 = 4 << 20
    /// The read end (non-blocking, polled by the loop) and the write end
    /// every hook gets as its stdout and stderr (blocking: a hook that
    /// writes faster than the agent copies waits, it does not fail).
    private let output: (read: Int32, write: Int32)
    /// What is copied at one wake-up, at most: a hook that never stops
    /// writing must not hold the loop.
    static let copiedPerWake = 1 << 20
    private let logger: Logger
    /// What went wrong with hooks.log last, said once until it changes or comes right.
    private var logProblem: String?

    init(stateDir: String, logger: Logger = Logger(label: "syncagent")) throws {
        logPath = stateDir + "/hooks.log"
        self.logger = logger
        output = try Posix.pipe(shown: "the hooks' output pipe")
        do {
            try Posix.setFlags(output.write, 0, shown: "the hooks' output pipe")
        } catch {
            Posix.close(output.read)
            Posix.close(output.write)
            throw error
        }
    }

    deinit {
        Posix.close(output.read)
        Posix.close(output.write)
    }

    var freeSlots: Int { Self.maximumRunning - running.count }
    /// The hooks' pidfds and their output pipe: the loop wakes for either.
    var fds: [Int32] { [output.read] + running.map(\.pidfd).filter { $0 >= 0 } }

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
        let pid: pid_t
        do {
            pid = try Posix.spawn(command, environment: environment.map { "\($0.key)=\($0.value)" }, output: output.write)
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

    /// Copies what the hooks wrote into hooks.log, up to `copiedPerWake`
    /// bytes (the pipe stays readable for the rest), rotating the file
    /// before a write would take it past `logLimit`. Output that cannot be
    /// written is dropped, and said once in the agent's log: a log that is
    /// not rotated grows past its limit, and dropped output leaves a failing
    /// hook with nothing to say why.
    func copyOutput() {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var copied = 0
        var log: (fd: Int32, size: Int64)?
        var problem: String?
        defer {
            if let log { Posix.close(log.fd) }
            if problem != logProblem, let problem { logger.warning("\(problem)", metadata: ["file": "\(logPath)"]) }
            if copied > 0 { logProblem = problem }
        }
        while copied < Self.copiedPerWake {
            let count: Int
            do {
                // nil: nothing more for now. (Never at its end: the agent holds the write end.)
                guard let read = try buffer.withUnsafeMutableBytes({ try Posix.readAvailable(output.read, into: $0, shown: "the hooks' output pipe") }),
                      read > 0 else { return }
                count = read
            } catch {
                problem = "hook output is dropped: \(error)"
                return
            }
            copied += count
            do {
                if log == nil { log = try openLog() }
                if let current = log, current.size > 0, current.size + Int64(count) > Self.logLimit {
                    Posix.close(current.fd)
                    log = nil
                    do {
                        try Posix.rename(logPath, to: logPath + ".1", shown: "rename \(logPath) to \(logPath).1")
                    } catch {
                        problem = "hooks.log is not rotated: \(error)"
                    }
                    log = try openLog()
                }
                guard let current = log else { continue }
                try buffer.withUnsafeBytes { try Posix.writeAll(current.fd, UnsafeRawBufferPointer(rebasing: $0[..<count]), shown: logPath) }
                log = (current.fd, current.size + Int64(count))
            } catch {
                problem = "hook output is dropped: \(error)"
                if let current = log { Posix.close(current.fd) }
                log = nil
            }
        }
    }

    /// hooks.log opened for appending, with its size.
    private func openLog() throws -> (fd: Int32, size: Int64) {
        let fd = try Posix.open(logPath, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, mode: 0o600)
        do {
            return (fd, Int64(try Posix.status(of: fd, shown: logPath).st_size))
        } catch {
            Posix.close(fd)
            throw error
        }
    }

    /// The agent is stopping: running hooks get SIGTERM (with their groups),
    /// `grace` to finish, then SIGKILL, so no hook outlives its time limit
    /// unwatched. Returns how each ended.
    func stopAll(graceMs: Int64) -> [(run: HookPlan.Run, ended: HookEnded)] {
        guard !running.isEmpty else {
            copyOutput()
            return []
        }
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
        // After the reaping: what an ended hook wrote is all in the pipe by now, and in
        // hooks.log before its end is recorded.
        copyOutput()
        return ended
    }
}

struct HookFailure: Error, CustomStringConvertible {
    var description: String
}

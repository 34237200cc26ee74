import Foundation

/// Where the loop's group commits are written: one at a time, on a thread
/// of its own, so the loop goes on with transfers while SQLite writes the
/// batch and waits for its WAL flush, and the renames the batch vouches
/// for are made and their folders synced. The loop learns it is done
/// through `fd`, or waits for it (`wait`) before anything that must follow
/// every commit so far.
///
/// Its state is guarded by `condition`, which the compiler cannot check;
/// the work handed over touches nothing the loop touches until `wait`
/// returns (the condition's lock orders the two).
final class CommitThread: @unchecked Sendable {
    /// Readable when a commit handed over is done.
    var fd: Int32 { done.fd }
    private let done: WorkerResults<Bool>
    private let condition = NSCondition()
    // Under `condition`:
    private var work: (() -> Void)?
    private var busy = false
    private var stopping = false

    init() throws {
        done = try WorkerResults()
        let thread = Thread { [self] in serve() }
        thread.name = "syncagent.commit"
        thread.start()
    }

    /// Runs `job` on the thread; the one before it must be done (`wait`).
    func start(_ job: @escaping () -> Void) {
        condition.lock()
        precondition(!busy, "a commit is already in flight")
        work = job
        busy = true
        condition.broadcast()
        condition.unlock()
    }

    /// Blocks until the job handed over last is done.
    func wait() {
        condition.lock()
        while busy { condition.wait() }
        condition.unlock()
        _ = done.drain()
    }

    /// Ends the thread once its job is done (the log is closing).
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while busy { condition.wait() }
        condition.unlock()
        // (No job runs, and none will: nothing posts to it any more.)
        done.close()
    }

    private func serve() {
        condition.lock()
        while true {
            if let job = work {
                work = nil
                condition.unlock()
                job()
                condition.lock()
                busy = false
                condition.broadcast()
                done.post(true)
            } else if stopping {
                condition.unlock()
                return
            } else {
                condition.wait()
            }
        }
    }
}

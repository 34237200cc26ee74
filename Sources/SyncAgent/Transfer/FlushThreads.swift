import Foundation

/// Threads that spend their lives blocked in the kernel, waiting for a disk
/// flush. Dispatch's pool is sized for work that uses a CPU: on two cores
/// it ran two flushes at a time and added a third only after a second of
/// blocking, so the flushes of six transfers queued behind each other. The
/// block layer merges flushes issued together, so they are issued together:
/// up to `limit` at once, a thread started only when every thread is busy
/// (a few threads live for the agent's life, asleep when idle).
///
/// Its state is guarded by `condition`, which the compiler cannot check.
final class FlushThreads: @unchecked Sendable {
    private let condition = NSCondition()
    private let limit: Int
    private let name: String
    // Under `condition`:
    private var work: [@Sendable () -> Void] = []
    private var threads = 0
    private var idle = 0
    private var stopping = false

    init(name: String, limit: Int) {
        self.name = name
        self.limit = limit
    }

    func run(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        work.append(job)
        // More work waiting than threads asleep to take it: one more thread.
        if work.count > idle, threads < limit {
            threads += 1
            let thread = Thread { [self] in serve() }
            thread.name = name
            thread.start()
        }
        condition.signal()
        condition.unlock()
    }

    /// Threads end once the work queued before this call is done.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }

    private func serve() {
        condition.lock()
        while true {
            if let job = work.first {
                work.removeFirst()
                condition.unlock()
                job()
                condition.lock()
            } else if stopping {
                threads -= 1
                condition.unlock()
                return
            } else {
                idle += 1
                condition.wait()
                idle -= 1
            }
        }
    }
}

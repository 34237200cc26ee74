import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Removes taken job files whose events are committed, on a thread of its
/// own, while the agent is quiet (no transfer making files, no backlog
/// being taken) or once `heldAtMost` wait.
///
/// Why not at once: on ext4 without a journal, a file created soon after
/// others were deleted in its block group costs the kernel a look at each
/// of them (`recently_deleted`). Removing each job as its task was
/// recorded made every partial file of the transfers that followed pay
/// for the jobs removed before it: measured on 2,000 small downloads, the
/// unlinks cost the intake 0.15 s and the file creations 30% of the
/// agent's CPU. A job left in `.taken/` a while is harmless: its task is
/// in the log, and a restart that finds it there removes it (`Intake`).
/// Its state is guarded by `condition`, which the compiler cannot check.
final class TakenFileRemover: @unchecked Sendable {
    /// Removed even while the agent is busy past this many, so `.taken/`
    /// (and what a restart reads back) stays small under a steady stream.
    static let heldAtMost = 4096

    private let condition = NSCondition()
    // Under `condition`:
    private var waiting: [String] = []
    private var quiet = false
    private var closing = false
    private var finished = false
    private var failures: [(path: String, errno: Int32)] = []

    init() {
        let thread = Thread { [self] in work() }
        thread.name = "syncagent.taken-remover"
        thread.start()
    }

    /// Taken files whose tasks (or controls) the log now holds.
    func remove(_ paths: [String]) {
        guard !paths.isEmpty else { return }
        condition.lock()
        waiting.append(contentsOf: paths)
        if quiet || waiting.count >= Self.heldAtMost { condition.broadcast() }
        condition.unlock()
    }

    /// Whether files may be removed now: nothing is being made in the download folders.
    func setQuiet(_ isQuiet: Bool) {
        condition.lock()
        if quiet != isQuiet {
            quiet = isQuiet
            if isQuiet, !waiting.isEmpty { condition.broadcast() }
        }
        condition.unlock()
    }

    /// The removals that failed since the last call (ENOENT is not one: gone is what removing was for).
    func takeFailures() -> [(path: String, errno: Int32)] {
        condition.lock()
        defer { condition.unlock() }
        let taken = failures
        failures.removeAll()
        return taken
    }

    /// Removes every file still waiting and stops the thread (the agent stops).
    func finish() {
        condition.lock()
        closing = true
        condition.broadcast()
        while !finished { condition.wait() }
        condition.unlock()
    }

    private func work() {
        while true {
            condition.lock()
            while !closing, waiting.isEmpty || !(quiet || waiting.count >= Self.heldAtMost) { condition.wait() }
            let batch = waiting
            waiting.removeAll()
            if batch.isEmpty {
                finished = true
                condition.broadcast()
                condition.unlock()
                unlinkers.stop()
                return
            }
            condition.unlock()
            removeFiles(batch)
        }
    }

    /// A few unlinks at a time: with `discard` among a disk's mount options each
    /// waits for the device to drop the file's blocks (2,000 jobs took 0.19 s
    /// one after the other, 0.06 s four at a time).
    private static let unlinksAtOnce = 4
    private let unlinkers = FlushThreads(name: "syncagent.unlink", limit: TakenFileRemover.unlinksAtOnce)

    private func removeFiles(_ batch: [String]) {
        let group = DispatchGroup()
        let share = (batch.count + Self.unlinksAtOnce - 1) / Self.unlinksAtOnce
        for start in stride(from: 0, to: batch.count, by: max(share, 1)) {
            let paths = batch[start..<min(start + share, batch.count)]
            group.enter()
            unlinkers.run { [self] in
                var failed: [(path: String, errno: Int32)] = []
                for path in paths {
                    do {
                        try Posix.unlink(path)
                    } catch let error as SystemError where error.errno != ENOENT {
                        failed.append((path, error.errno))
                    } catch {
                        // Gone already (ENOENT): what removing it was for.
                    }
                }
                if !failed.isEmpty {
                    condition.lock()
                    failures += failed
                    condition.unlock()
                }
                group.leave()
            }
        }
        group.wait()
    }
}

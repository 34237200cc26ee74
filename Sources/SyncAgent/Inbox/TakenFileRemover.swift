import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Removes taken job files whose events are committed, a few at a time on
/// threads of their own, while the agent is quiet (no transfer making
/// files, no backlog being taken) or once `heldAtMost` wait.
///
/// Why not at once: on ext4 without a journal, a file created soon after
/// others were deleted in its block group costs the kernel a look at each
/// of them (`recently_deleted`). Removing each job as its task was
/// recorded made every partial file of the transfers that followed pay
/// for the jobs removed before it: measured on 2,000 small downloads, the
/// unlinks cost the intake 0.15 s and the file creations 30% of the
/// agent's CPU. A job left in `.taken/` a while is harmless: its task is
/// in the log, and a restart that finds it there removes it (`Intake`).
/// Its state is guarded by `lock`, which the compiler cannot check.
final class TakenFileRemover: @unchecked Sendable {
    /// Removed even while the agent is busy past this many, so `.taken/`
    /// (and what a restart reads back) stays small under a steady stream.
    static let heldAtMost = 4096

    private let lock = NSLock()
    // Under `lock`:
    private var waiting: [String] = []
    private var quiet = false
    private var failures: [(path: String, errno: Int32)] = []

    /// A few unlinks at a time: with `discard` among a disk's mount options each
    /// waits for the device to drop the file's blocks (2,000 jobs took 0.19 s
    /// one after the other, 0.06 s four at a time).
    private static let unlinksAtOnce = 4
    private let unlinkers = FlushThreads(name: "syncagent.unlink", limit: TakenFileRemover.unlinksAtOnce)
    /// The removals handed to `unlinkers` and not yet done.
    private let removing = DispatchGroup()

    /// Taken files whose tasks (or controls) the log now holds.
    func remove(_ paths: [String]) {
        guard !paths.isEmpty else { return }
        removeFiles(lock.withLock {
            waiting += paths
            return releasable()
        })
    }

    /// Whether files may be removed now: nothing is being made in the download folders.
    func setQuiet(_ isQuiet: Bool) {
        removeFiles(lock.withLock {
            quiet = isQuiet
            return releasable()
        })
    }

    /// The removals that failed since the last call (ENOENT is not one: gone is what removing was for).
    func takeFailures() -> [(path: String, errno: Int32)] {
        lock.withLock {
            defer { failures.removeAll() }
            return failures
        }
    }

    /// Removes every file still waiting, and waits for every removal (the agent stops).
    func finish() {
        removeFiles(lock.withLock {
            defer { waiting.removeAll() }
            return waiting
        })
        removing.wait()
        unlinkers.stop()
    }

    /// Under `lock`: the files that may go now, taken off the waiting list.
    private func releasable() -> [String] {
        guard quiet || waiting.count >= Self.heldAtMost else { return [] }
        defer { waiting.removeAll() }
        return waiting
    }

    private func removeFiles(_ batch: [String]) {
        let share = max((batch.count + Self.unlinksAtOnce - 1) / Self.unlinksAtOnce, 1)
        for start in stride(from: 0, to: batch.count, by: share) {
            let paths = batch[start..<min(start + share, batch.count)]
            removing.enter()
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
                if !failed.isEmpty { lock.withLock { failures += failed } }
                removing.leave()
            }
        }
    }
}

import Foundation

/// Group commit for directory syncs. A new file's name is durable once its
/// directory is fsynced after the name was made; any fsync of that directory
/// that *starts* after then will do. So while one sync of a folder runs, the
/// callers that arrive meanwhile wait for the next one, which they all share:
/// six transfers finishing into one folder cost about two directory syncs,
/// not six.
///
/// Its state is guarded by `condition`, which the compiler cannot check.
final class SharedSyncs: @unchecked Sendable {
    private struct Folder {
        /// Syncs started and finished so far (one runs at a time, so they finish in order).
        var started: UInt64 = 0
        var finished: UInt64 = 0
        var running = false
        /// Callers inside `sync` for this folder; at none, the folder is forgotten.
        var users = 0
        /// The most recent sync that failed, and its error.
        var lastFailure: (number: UInt64, error: Error)?
    }

    private let condition = NSCondition()
    private var folders: [String: Folder] = [:]

    /// Returns once a run of `flush` for `key` that started after this call
    /// has finished: its own run, or one it shares. Throws what that run
    /// threw (or a later one's failure: a caller is never told a failed
    /// sync covered it).
    func sync(_ key: String, _ flush: () throws -> Void) throws {
        condition.lock()
        defer {
            folders[key]!.users -= 1
            if folders[key]!.users == 0 { folders[key] = nil }
            condition.unlock()
        }
        folders[key, default: Folder()].users += 1
        let needed = folders[key]!.started + 1
        while folders[key]!.finished < needed {
            if folders[key]!.running {
                condition.wait()
                continue
            }
            folders[key]!.running = true
            folders[key]!.started += 1
            let number = folders[key]!.started
            condition.unlock()
            var failure: Error?
            do { try flush() } catch { failure = error }
            condition.lock()
            folders[key]!.running = false
            folders[key]!.finished = number
            if let failure { folders[key]!.lastFailure = (number, failure) }
            condition.broadcast()
        }
        if let failure = folders[key]!.lastFailure, failure.number >= needed { throw failure.error }
    }

    /// Callers inside `sync` for `key` now (for tests that wait for them to arrive).
    func callers(_ key: String) -> Int {
        condition.lock()
        defer { condition.unlock() }
        return folders[key]?.users ?? 0
    }
}

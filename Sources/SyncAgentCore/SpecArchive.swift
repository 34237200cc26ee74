import Foundation

/// Where a job let go from memory is read back from: the log's `created`
/// event, through the reader the agent installs before it lets any go
/// (`AgentState.releaseSpec`). A job never changes once created, so reading
/// it back gives what was held, and the fold, the scheduler and a snapshot
/// see the same task either way.
///
/// The one effect the core reaches: installed by the shell, called from
/// the agent's thread and the compaction's, one call at a time.
public enum SpecArchive {
    /// The job recorded by task `id`'s `created` event at a seq (any task's
    /// when `id` is nil). Throws when the log no longer holds it (a failing
    /// disk, rows deleted behind the agent's back).
    public typealias Reader = @Sendable (_ id: String?, _ createdSeq: Int64) throws -> TaskSpec

    private static let lock = NSLock()
    nonisolated(unsafe) private static var reader: Reader?
    /// The last job read: the fold reads several fields of one task in a row.
    nonisolated(unsafe) private static var lastRead: (seq: Int64, spec: TaskSpec)?
    nonisolated(unsafe) private static var firstFailure: String?

    /// Installs (or with nil removes) the reader, and forgets any failure.
    public static func install(_ newReader: Reader?) {
        lock.withLock {
            reader = newReader
            lastRead = nil
            firstFailure = nil
        }
    }

    /// Set once a job could not be read back: a task then stood on a
    /// placeholder, so nothing may be committed or started from this state.
    public static var failure: String? { lock.withLock { firstFailure } }

    static func spec(of id: String?, createdAt seq: Int64) -> TaskSpec {
        lock.withLock {
            if let lastRead, lastRead.seq == seq { return lastRead.spec }
            do {
                guard let reader else { throw NoReader() }
                let spec = try reader(id, seq)
                lastRead = (seq, spec)
                return spec
            } catch {
                if firstFailure == nil { firstFailure = "cannot read the job created at seq \(seq) back from the log: \(error)" }
                // A data task with nowhere to write and nothing to announce: the
                // least a placeholder can do before the failure is noticed.
                return TaskSpec(url: "", kind: .data, dest: nil, notify: .none)
            }
        }
    }

    private struct NoReader: Error, CustomStringConvertible {
        var description: String { "no reader is installed" }
    }
}

import Foundation

/// Where a job let go from memory is read back from: the log's `created`
/// event, through the reader the agent installs before it lets any go
/// (`AgentState.releaseSpec`). A job never changes once created, so reading
/// it back gives what was held, and the fold, the scheduler and a snapshot
/// see the same task either way.
///
/// The one effect the core reaches: installed by the shell, called from
/// the agent's thread and the compaction's, one call at a time. One agent
/// per process: a second reader installed replaces the first.
public enum SpecArchive {
    /// The job recorded by task `id`'s `created` event at a seq (any task's
    /// when `id` is nil). Throws when the log no longer holds it (a failing
    /// disk, rows deleted behind the agent's back).
    public typealias Reader = @Sendable (_ id: String?, _ createdSeq: Int64) throws -> TaskSpec

    private static let lock = NSLock()
    nonisolated(unsafe) private static var reader: Reader?
    /// The last job read: the fold reads several fields of one task in a row.
    nonisolated(unsafe) private static var lastRead: (seq: Int64, spec: TaskSpec)?

    /// Installs (or with nil removes) the reader.
    public static func install(_ newReader: Reader?) {
        lock.withLock {
            reader = newReader
            lastRead = nil
        }
    }

    /// Reads that failed on the calling thread so far: a task then stood on
    /// a placeholder, so what the thread did since may not be committed or
    /// stored. Each thread counts its own: a snapshot on the compaction's
    /// thread that met one fails alone, and the agent goes on.
    public static var failuresOnThisThread: Int { Failures.ofThisThread.count }

    /// What the last failure on this thread said, if any came after `count`.
    public static func failure(since count: Int) -> String? {
        let failures = Failures.ofThisThread
        return failures.count > count ? failures.last : nil
    }

    /// `work`'s result, or an error if a job it read back on this thread was
    /// a placeholder: what it made must not be stored or acted on.
    public static func checkingReads<T>(_ work: () throws -> T) throws -> T {
        let failuresBefore = failuresOnThisThread
        let result = try work()
        if let failure = failure(since: failuresBefore) { throw Unreadable(description: failure) }
        return result
    }

    /// A job could not be read back (`checkingReads`).
    public struct Unreadable: Error, CustomStringConvertible {
        public var description: String
    }

    /// The job, read back; a placeholder when it cannot be (and the failure counted).
    static func spec(of id: String?, createdAt seq: Int64) -> TaskSpec {
        // A data task with nowhere to write and nothing to announce: the
        // least a placeholder can do before the failure is noticed.
        read(of: id, createdAt: seq) ?? TaskSpec(url: "", kind: .data, dest: nil, notify: .none)
    }

    /// The job, read back; nil when it cannot be (the failure counted).
    static func read(of id: String?, createdAt seq: Int64) -> TaskSpec? {
        let result: Result<TaskSpec, any Error> = lock.withLock {
            if let lastRead, lastRead.seq == seq { return .success(lastRead.spec) }
            guard let reader else { return .failure(NoReader()) }
            do {
                let spec = try reader(id, seq)
                lastRead = (seq, spec)
                return .success(spec)
            } catch {
                return .failure(error)
            }
        }
        switch result {
        case .success(let spec):
            return spec
        case .failure(let error):
            let failures = Failures.ofThisThread
            failures.count += 1
            failures.last = "cannot read the job created at seq \(seq) back from the log: \(error)"
            return nil
        }
    }

    private struct NoReader: Error, CustomStringConvertible {
        var description: String { "no reader is installed" }
    }

    /// One thread's failed reads; only that thread touches it.
    private final class Failures {
        var count = 0
        var last: String?

        static var ofThisThread: Failures {
            let key = "SyncAgentCore.SpecArchive.failures"
            let dictionary = Thread.current.threadDictionary
            if let failures = dictionary[key] as? Failures { return failures }
            let failures = Failures()
            dictionary[key] = failures
            return failures
        }
    }
}

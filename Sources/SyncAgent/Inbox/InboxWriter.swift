import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Drops a job into the inbox the safe way: a hidden temp name the agent
/// ignores, fsync, then rename to `*.job`, so it is never seen half-written.
public struct InboxWriter {
    public var inbox: String
    public init(inbox: String) { self.inbox = inbox }

    /// Returns the job file's path.
    public func write(_ text: String, prefix: String) throws -> String {
        try FileSystem.makeDirectory(inbox)
        let unique = "\(FileSystem.nowMs)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let path = "\(inbox)/\(prefix)-\(unique).job"
        try FileSystem.writeAtomically(text, to: path)
        return path
    }
}

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
        try write([(text, prefix)])[0]
    }

    /// A job file is its user's to read and write, no one else's (SPEC §4.1).
    static let jobMode: mode_t = 0o600

    /// From this many jobs, one syncfs beats a fsync each.
    static let syncWholeFileSystemFrom = 32

    /// Many jobs at the price of two syncs, not two each (10,000 URLs from
    /// `submit -i` took 30-45 s with one fsync and one directory sync per
    /// job): every job is written under its temp name, the file system is
    /// synced once, then each is renamed in and the inbox synced once. (A
    /// few jobs fsync their own files instead: a syncfs would also flush
    /// every dirty page of the file system, the agent's gigabytes among
    /// them.) A crash before the end leaves temp names the agent ignores,
    /// or some of the jobs in: the caller prints ids only after this returns.
    public func write(_ jobs: [(text: String, prefix: String)]) throws -> [String] {
        try FileSystem.makeDirectory(inbox)
        let paths = jobs.map { uniquePath($0.prefix) }
        var written: [String] = []
        defer {
            for path in written {
                // A failed submit's leftovers: a temp name the agent never
                // takes, so one that cannot be removed is only clutter, and
                // the error the caller gets is the one that stopped the write.
                do { try Posix.unlink(path + ".tmp") } catch {}
            }
        }
        let syncsEachFile = jobs.count < Self.syncWholeFileSystemFrom
        for (job, path) in zip(jobs, paths) {
            let temp = path + ".tmp"
            let fd = try Posix.create(temp, O_WRONLY | O_EXCL | O_NOFOLLOW, mode: Self.jobMode)
            written.append(path)
            defer { Posix.close(fd) }
            // Exactly that, whatever the umask took away: a job may carry credentials, and is the user's alone.
            try Posix.setMode(fd, Self.jobMode, shown: temp)
            try Array(job.text.utf8).withUnsafeBytes { try Posix.writeAll(fd, $0, shown: temp) }
            if syncsEachFile { try Posix.sync(fd, shown: temp) }
        }
        let folder = try Posix.open(inbox, O_RDONLY | O_DIRECTORY)
        defer { Posix.close(folder) }
        if !syncsEachFile { try Posix.syncFileSystem(folder, shown: inbox) }
        for path in paths {
            try Posix.rename(path + ".tmp", to: path, shown: "rename \(path).tmp")
            written.removeFirst()
        }
        try Posix.sync(folder, shown: inbox)
        return paths
    }

    /// An exclusive flock on the inbox folder (made 0700 if missing, like
    /// every folder of the agent's: jobs may carry credentials), for a
    /// writer that must check and write without another writer between.
    /// Close the descriptor to let go.
    public func lock() throws -> Int32 {
        try FileSystem.makeDirectory(inbox)
        let fd = try Posix.open(inbox, O_RDONLY | O_DIRECTORY)
        do {
            try Posix.lock(fd, LOCK_EX, shown: inbox)
        } catch {
            Posix.close(fd)
            throw error
        }
        return fd
    }

    private func uniquePath(_ prefix: String) -> String {
        "\(inbox)/\(prefix)-\(FileSystem.nowMs)-\(Posix.processID)-\(UInt32.random(in: 0...UInt32.max)).job"
    }

    /// The prefix a job's file name was written with (`uniquePath`), or nil
    /// for a name not of that shape. The prefix may itself hold '-': the three
    /// fields after it are counted from the end.
    public static func prefix(ofName name: String) -> String? {
        guard name.hasSuffix(".job") else { return nil }
        let fields = name.dropLast(".job".count).split(separator: "-", omittingEmptySubsequences: false)
        guard fields.count >= 4, fields.suffix(3).allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isNumber) }) else { return nil }
        return fields.dropLast(3).joined(separator: "-")
    }
}

import CLinuxShims
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
        defer { for path in written { unlink(path + ".tmp") } }
        let syncsEachFile = jobs.count < Self.syncWholeFileSystemFrom
        for (job, path) in zip(jobs, paths) {
            let temp = path + ".tmp"
            let fd = try syscall("create \(temp)") { open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644) }
            written.append(path)
            defer { close(fd) }
            try Array(job.text.utf8).withUnsafeBytes { try FileSystem.writeAll(fd, $0, to: temp) }
            if syncsEachFile { try syscall("fsync \(temp)") { fsync(fd) } }
        }
        let folder = try syscall("open \(inbox)") { open(inbox, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { close(folder) }
        if !syncsEachFile { try syscall("sync the file system of \(inbox)") { sa_syncfs(folder) } }
        for path in paths {
            try syscall("rename \(path).tmp") { rename(path + ".tmp", path) }
            written.removeFirst()
        }
        try syscall("fsync \(inbox)") { fsync(folder) }
        return paths
    }

    /// An exclusive flock on the inbox folder (made 0700 if missing, like
    /// every folder of the agent's: jobs may carry credentials), for a
    /// writer that must check and write without another writer between.
    /// Close the descriptor to let go.
    public func lock() throws -> Int32 {
        try FileSystem.makeDirectory(inbox)
        let fd = try syscall("open \(inbox)") { open(inbox, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        while flock(fd, LOCK_EX) != 0 {
            guard errno == EINTR else {
                let error = SystemError(operation: "lock \(inbox)", errno: errno)
                close(fd)
                throw error
            }
        }
        return fd
    }

    private func uniquePath(_ prefix: String) -> String {
        "\(inbox)/\(prefix)-\(FileSystem.nowMs)-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).job"
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

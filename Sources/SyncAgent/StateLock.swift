import Foundation
#if canImport(Glibc)
import Glibc
#endif

public struct AgentAlreadyRunning: Error, CustomStringConvertible {
    public var stateDir: String
    public var pid: Int32?
    /// Set when the other agent has a state directory of its own but this inbox.
    public var inbox: String? = nil
    public var description: String {
        let who = pid.map { "agent pid \($0)" } ?? "another agent"
        if let inbox { return "\(who) is already watching inbox \(inbox) (with another state dir); one agent per inbox" }
        return "\(who) is already running on state dir \(stateDir); one agent per state directory"
    }
}

/// One agent per state directory (like one background URLSession per
/// identifier): an flock on the state directory itself, held for the
/// agent's lifetime. The kernel drops it when the process dies, even by
/// SIGKILL, so a crash never leaves it stale, and whether it is held is the
/// truth about whether an agent runs. (A lock on a file in the directory
/// could be defeated by deleting the file: a second agent would then lock a
/// new one and write the same log.) `agent.lock` beside it names the holder,
/// "PID STARTED_AT_MS", for `status` and for a second agent's error.
final class StateLock {
    private let directory: Int32
    private let nameFile: Int32

    /// How long a starting agent waits for the lock: `AgentLiveness.probe`
    /// holds it shared for a few microseconds, which must not look like a
    /// second agent.
    private static let probeWaitMs = 1000

    init(path: String, stateDir: String) throws {
        // Both descriptors are kept in locals until nothing can fail: an
        // initialiser that throws once every stored property is set runs
        // deinit too, which would clear and close them a second time.
        let directory = try Posix.open(stateDir, O_RDONLY | O_DIRECTORY)
        let nameFile: Int32
        do {
            nameFile = try Posix.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600)
        } catch {
            Posix.close(directory)
            throw error
        }
        do {
            // Both: the directory's cannot be deleted away; the file's is what an older
            // agent takes, and what a file system without directory flocks (NFS) still has.
            try Self.acquire(directory, named: stateDir, optional: true, stateDir: stateDir, holderFile: path)
            try Self.acquire(nameFile, named: path, optional: false, stateDir: stateDir, holderFile: path)
        } catch {
            Posix.close(nameFile)
            Posix.close(directory)
            throw error
        }
        // The pid is what a second agent names in its error and `status` shows: worth failing for.
        let line = Array("\(Posix.processID) \(FileSystem.nowMs)\n".utf8)
        do {
            try Posix.truncate(nameFile, to: 0, shown: path)
            try line.withUnsafeBytes { try Posix.writeAll(nameFile, $0, at: 0, shown: "the pid into \(path)") }
        } catch {
            Posix.close(nameFile)
            Posix.close(directory)
            throw error
        }
        self.directory = directory
        self.nameFile = nameFile
    }

    private static func acquire(_ fd: Int32, named name: String, optional: Bool, stateDir: String, holderFile: String) throws {
        try acquire(fd, named: name, optional: optional) {
            AgentAlreadyRunning(stateDir: stateDir, pid: AgentLiveness.holder(readingFrom: holderFile)?.pid)
        }
    }

    /// An exclusive flock, waited for up to `probeWaitMs`. `optional`: a
    /// file system that cannot lock this descriptor (an NFS directory) is
    /// not an error; another holder always is (`held`).
    fileprivate static func acquire(_ fd: Int32, named name: String, optional: Bool, held: () -> Error) throws {
        var waitedMs = 0
        while true {
            do {
                try Posix.lock(fd, LOCK_EX | LOCK_NB, shown: name)
                return
            } catch let error as SystemError where error.errno == EWOULDBLOCK {
                guard waitedMs < probeWaitMs else { throw held() }
                Posix.sleep(ms: 10)
                waitedMs += 10
            } catch let error as SystemError where optional && [EBADF, ENOLCK, EOPNOTSUPP, EINVAL].contains(error.errno) {
                return
            }
        }
    }

    deinit {
        // The pid is cleared on the way out, where nothing is left to tell
        // of a failure: none is needed either, since a pid in agent.lock is
        // believed only while its lock is held (`AgentLiveness.probe`), and
        // the lock itself dies with the descriptor.
        do { try Posix.truncate(nameFile, to: 0, shown: "agent.lock") } catch {}
        Posix.close(nameFile)
        Posix.close(directory)
    }
}

/// One agent per inbox too. Two agents with state directories of their own
/// and one inbox each took the jobs the other had moved to `.taken/` and not
/// yet recorded: one job, two tasks, one destination. The lock is an flock on
/// `.taken/`, the agents' own folder there (the inbox itself is what `submit`
/// locks while it writes).
final class InboxLock {
    private let folder: Int32
    /// The `.taken/` locked: the one its path must go on naming.
    let identity: FileIdentity

    init(inbox: String, stateDir: String) throws {
        let taken = Intake.takenDirectory(of: inbox)
        try StrictModes.makeTrusted(inbox, what: "inbox")
        try FileSystem.makeOwnDirectory(taken, what: Intake.takenWords)
        let folder = try Posix.open(taken, O_RDONLY | O_DIRECTORY)
        do {
            try StateLock.acquire(folder, named: taken, optional: true) {
                AgentAlreadyRunning(stateDir: stateDir, pid: Self.flockHolder(of: folder), inbox: inbox)
            }
            identity = FileIdentity(try Posix.status(of: folder, shown: taken))
        } catch {
            Posix.close(folder)
            throw error
        }
        self.folder = folder
    }

    deinit { Posix.close(folder) }

    /// The pid holding an flock on `fd`'s file, as /proc/locks tells it
    /// ("1: FLOCK  ADVISORY  WRITE 1234 fd:00:5678 0 EOF"): the other agent
    /// keeps no file of its own in the inbox to name itself. Nil when that cannot be told.
    private static func flockHolder(of fd: Int32) -> Int32? {
        guard let info = try? Posix.status(of: fd, shown: "the inbox's .taken folder"),
              let text = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return nil }
        let device = UInt64(info.st_dev)
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff))
        let minor = (device & 0xff) | ((device >> 12) & ~UInt64(0xff))
        let file = String(format: "%02x:%02x:%llu", major, minor, UInt64(info.st_ino))
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count > 5, fields[1] == "FLOCK", fields[5] == file, let pid = Int32(fields[4]) else { continue }
            return pid
        }
        return nil
    }
}

/// Whether an agent runs on a state directory, for `status` and the
/// control commands: read from the agent's lock, never from the log (which
/// a `kill -9` leaves saying "running").
public struct AgentLiveness: Equatable, Sendable {
    public var running: Bool
    public var pid: Int32?
    public var startedAtMs: Int64?

    public static let notRunning = AgentLiveness(running: false, pid: nil, startedAtMs: nil)

    /// Tries the agent's locks (the state directory's, and `agent.lock`)
    /// shared and lets go at once: taken means no agent holds them. A
    /// missing directory means no agent ever ran.
    public static func probe(stateDir: String) -> AgentLiveness {
        let lockFile = stateDir + "/agent.lock"
        guard isHeld(stateDir, O_RDONLY | O_DIRECTORY) || isHeld(lockFile, O_RDONLY | O_NOFOLLOW) else { return .notRunning }
        let holder = holder(readingFrom: lockFile)
        return AgentLiveness(running: true, pid: holder?.pid, startedAtMs: holder?.startedAtMs)
    }

    /// Whether another process holds the flock of `path` (taken shared for
    /// an instant to ask). What cannot be opened holds no lock an agent
    /// could have taken there: false.
    private static func isHeld(_ path: String, _ flags: Int32) -> Bool {
        guard let fd = try? Posix.open(path, flags) else { return false }
        // Closing the only descriptor of this open file lets go of a lock taken here: no LOCK_UN to check.
        defer { Posix.close(fd) }
        do {
            try Posix.lock(fd, LOCK_SH | LOCK_NB, shown: path)
            return false
        } catch {
            return (error as? SystemError)?.errno == EWOULDBLOCK
        }
    }

    /// "PID STARTED_AT_MS" (an older agent wrote only "PID"); nil when it cannot be read.
    static func holder(readingFrom path: String) -> (pid: Int32, startedAtMs: Int64?)? {
        guard let fd = try? Posix.open(path, O_RDONLY | O_NOFOLLOW) else { return nil }
        defer { Posix.close(fd) }
        var buffer = [UInt8](repeating: 0, count: 64)
        guard let count = try? buffer.withUnsafeMutableBytes({ try Posix.read(fd, into: $0, at: 0, shown: path) }), count > 0
        else { return nil }
        let words = String(decoding: buffer[0..<count], as: UTF8.self).split(whereSeparator: \.isWhitespace)
        guard let first = words.first, let pid = Int32(first) else { return nil }
        return (pid, words.count > 1 ? Int64(words[1]) : nil)
    }
}

import Crypto
import Foundation
import Logging
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Turns job files in the inbox into `created` (or `rejected`) events,
/// exactly once each, even if the agent dies half-way (SPEC §4.1).
final class Intake {
    let inbox: String
    let rejectedDirectory: String
    let parser: JobParser
    private let log: EventLog
    private let logger: Logger
    /// A control job found in the inbox; returns an error sentence if it cannot apply.
    var applyControl: (ControlJob) -> String? = { _ in nil }

    /// Files that failed to parse while perhaps still being written (seen by
    /// a scan, not by close-write): looked at again after a grace period,
    /// the way transmission's watchdir keeps a retry set.
    private(set) var retryAt: [String: Int64] = [:]
    static let graceMs: Int64 = 2000

    init(inbox: String, parser: JobParser, log: EventLog, logger: Logger) throws {
        self.inbox = inbox
        self.rejectedDirectory = inbox + "/rejected"
        self.parser = parser
        self.log = log
        self.logger = logger
        try FileSystem.makeDirectory(rejectedDirectory)
    }

    var isIdle: Bool { retryAt.isEmpty }

    /// Earliest moment a retry is due, for the loop's poll timeout.
    var nextRetryMs: Int64? { retryAt.values.min() }

    func takeDueRetries(nowMs: Int64) {
        for (name, due) in retryAt.sorted(by: { $0.value < $1.value }) where due <= nowMs {
            retryAt[name] = nil
            take(name, closedAfterWriting: true)
        }
    }

    /// `closedAfterWriting`: inotify said the writer closed it or it was
    /// renamed in, so its content is final and a parse error is final too.
    func take(_ name: String, closedAfterWriting: Bool) {
        let path = inbox + "/" + name
        let file: JobFile
        do {
            guard let read = try JobFile.load(path) else { retryAt[name] = nil; return }
            file = read
        } catch let error as KeyError {
            reject(name, error.description)
            return
        } catch {
            // Left in place it would be looked at forever (and keep an
            // --exit-when-idle agent from ever being idle).
            reject(name, "the job file cannot be read: \(error)")
            return
        }

        if log.state.takenSources.contains(file.identity) {
            // The agent died after recording this job and before removing it.
            unlink(path)
            return
        }

        let job: Job
        do {
            job = try parser.parse(file.bytes, source: JobSource(file: name, identity: file.identity))
        } catch let error as KeyError {
            let recent = FileSystem.nowMs - file.modifiedMs < Self.graceMs
            if !closedAfterWriting && recent {
                retryAt[name] = FileSystem.monotonicMs + Self.graceMs
            } else {
                reject(name, error.description)
            }
            return
        } catch {
            reject(name, "\(error)")
            return
        }
        retryAt[name] = nil

        switch job {
        case .transfer(let requestedID, let spec):
            let id: String
            if let requestedID {
                guard log.state[requestedID] == nil else {
                    reject(name, "key \"id\" \"\(requestedID)\" is already used by another task")
                    return
                }
                id = requestedID
            } else {
                id = newTaskID()
            }
            if let problem = Self.unreadableBody(spec) {
                reject(name, problem)
                return
            }
            log.record(.created(spec), task: id)
            logger.info("job taken", metadata: ["task.id": "\(id)", "file": "\(name)", "url": "\(spec.url)"])
        case .control(let control):
            if let problem = applyControl(control) {
                reject(name, problem)
                return
            }
        }
        // Removed only once the log holds the task: see `removeTakenFiles`.
        takenAwaitingCommit.append(path)
    }

    /// Job files whose events are recorded but maybe not yet committed.
    private var takenAwaitingCommit: [String] = []

    var hasTakenFiles: Bool { !takenAwaitingCommit.isEmpty }

    /// Called after the log committed: a taken job leaves the inbox only
    /// when its task is durable, so a crash in between loses nothing (and
    /// the identity check keeps it from becoming two tasks).
    func removeTakenFiles() {
        for path in takenAwaitingCommit { unlink(path) }
        takenAwaitingCommit.removeAll(keepingCapacity: true)
    }

    /// A body file that is missing or not a readable regular file makes the
    /// job bad input, said at intake rather than at the first attempt.
    static func unreadableBody(_ spec: TaskSpec) -> String? {
        guard let path = spec.bodyFile else { return nil }
        var info = stat()
        guard stat(path, &info) == 0 else {
            return "key \"body_file\": \(path) cannot be read: \(String(cString: strerror(errno)))"
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else { return "key \"body_file\": \(path) is not a regular file" }
        guard access(path, R_OK) == 0 else {
            return "key \"body_file\": \(path) cannot be read: \(String(cString: strerror(errno)))"
        }
        return nil
    }

    private func reject(_ name: String, _ sentence: String) {
        retryAt[name] = nil
        let source = inbox + "/" + name
        let target = rejectedDirectory + "/" + name
        do {
            try FileSystem.writeAtomically("\(name): \(sentence)\n", to: target + ".error")
            try syscall("move \(name) to rejected/") { rename(source, target) }
        } catch {
            logger.error("cannot move rejected job", metadata: ["file": "\(name)", "error": "\(error)"])
        }
        log.record(.rejected(Rejected(file: name, error: sentence)))
        logger.warning("job rejected", metadata: ["file": "\(name)", "reason": "\(sentence)"])
    }

    /// Six lowercase letters and digits, unused so far. One random draw
    /// gives all six (randomElement() would make a getrandom call per letter).
    private func newTaskID() -> String {
        let alphabet = Array("abcdefghijkmnpqrstuvwxyz23456789")
        while true {
            var bits = UInt64.random(in: 0...UInt64.max)
            var id = ""
            for _ in 0..<6 {
                id.append(alphabet[Int(bits & 31)])
                bits >>= 5
            }
            if log.state[id] == nil { return id }
        }
    }
}

/// A job file's bytes and the identity that makes intake exactly-once.
struct JobFile {
    var bytes: [UInt8]
    var identity: String
    var modifiedMs: Int64

    /// nil when the file is gone (taken or removed meanwhile).
    static func load(_ path: String) throws -> JobFile? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        if fd < 0 {
            if errno == ENOENT { return nil }
            if errno == ELOOP { throw KeyError(key: nil, "the job file is a symbolic link; drop the file itself") }
            throw SystemError(operation: "open \(path)", errno: errno)
        }
        defer { close(fd) }
        var info = stat()
        try syscall("stat \(path)") { fstat(fd, &info) }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw KeyError(key: nil, "the job is not a regular file")
        }
        // Sized from fstat (a job is small); one byte over the limit is enough
        // to know it is too big, however the file grows meanwhile.
        let capacity = min(Int(info.st_size), JobParser.maximumSize) + 1
        var bytes = [UInt8](repeating: 0, count: capacity)
        var filled = 0
        while filled < bytes.count {
            let got = try bytes.withUnsafeMutableBytes { buffer in
                try syscall("read \(path)") { read(fd, buffer.baseAddress! + filled, buffer.count - filled) }
            }
            if got == 0 { break }
            filled += got
        }
        if filled > JobParser.maximumSize || Int(info.st_size) > JobParser.maximumSize {
            throw KeyError(key: nil, "the job file is \(info.st_size) bytes, over the 64 KiB limit")
        }
        bytes.removeSubrange(filled...)
        let digest = Hex.string(SHA256.hash(data: bytes).prefix(12))
        let ctime = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
        let identity = "\(info.st_dev):\(info.st_ino):\(ctime):\(digest)"
        let modifiedMs = Int64(info.st_mtim.tv_sec) * 1000 + Int64(info.st_mtim.tv_nsec) / 1_000_000
        return JobFile(bytes: bytes, identity: identity, modifiedMs: modifiedMs)
    }
}

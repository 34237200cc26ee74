import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Moves job files out of the inbox into `.taken/` (SPEC §4.1), under
/// names unique within this agent's life that keep the job's own name for
/// a restart to read back. One thread at a time: the loop's, or the
/// backlog reader's while the loop waits for it — a hand-over the type
/// system cannot see, hence unchecked.
final class TakenMover: @unchecked Sendable {
    let inbox: String
    let takenDirectory: String
    /// The inbox and `.taken/`, opened once: a move is one renameat.
    private var inboxFd: Int32 = -1
    private var takenFd: Int32 = -1
    private var counter = 0
    private let runStamp = String(UInt64(FileSystem.nowMs), radix: 36)

    enum Outcome {
        /// Now at this path in `.taken/`.
        case moved(String)
        /// Gone meanwhile: taken by nobody, nothing to do.
        case gone
        /// Could not be moved (errno); it stays in the inbox.
        case failed(Int32)
        /// Not the agent's user's alone (SPEC §4.1): left in the inbox, unread.
        case leftAlone(FolderTrust.Problem, inode: UInt64)
    }

    init(inbox: String, takenDirectory: String) {
        self.inbox = inbox
        self.takenDirectory = takenDirectory
    }

    deinit {
        Posix.close(inboxFd)
        Posix.close(takenFd)
    }

    func move(_ name: InboxName) -> Outcome {
        // Looked at where it lies, to leave another user's file there; what
        // decides is the owner of the descriptor the job is read from (`JobFile.load`).
        if let refusal = refusal(of: name) { return refusal }
        counter += 1
        // Short and unique; the job's own name follows for a restart to read back.
        let takenName = "\(runStamp)-\(counter)-" + Intake.prefix(of: name.text, bytes: 200)
        switch rename(name, toTaken: takenName) {
        case 0: return .moved(takenDirectory + "/" + takenName)
        case ENOENT: return .gone
        case let error: return .failed(error)
        }
    }

    /// `.leftAlone` for a name whose file is not the agent's user's to give
    /// (or `.gone`); nil for one to move. A symbolic link of the user's is
    /// moved, and refused as a job where it is read.
    private func refusal(of name: InboxName) -> Outcome? {
        let info: stat
        do {
            if inboxFd < 0 { inboxFd = try Posix.open(inbox, O_RDONLY | O_DIRECTORY) }
            info = try Posix.status(of: name.bytes, at: inboxFd, flags: AT_SYMLINK_NOFOLLOW, shown: "\(inbox)/\(name)")
        } catch let error as SystemError where error.errno == ENOENT {
            return .gone
        } catch {
            // Not to be looked at here: the move and the read say what it is.
            return nil
        }
        let isLink = (info.st_mode & S_IFMT) == S_IFLNK
        let problem = FolderTrust.jobProblem(owner: UInt32(info.st_uid), mode: isLink ? UInt32(0) : UInt32(info.st_mode & 0o7777),
                                             me: StrictModes.me)
        return problem.map { .leftAlone($0, inode: UInt64(info.st_ino)) }
    }

    /// renameat from the inbox into `.taken/`; 0 or errno. A `.taken/`
    /// removed while we run is made again, once.
    private func rename(_ name: InboxName, toTaken takenName: String) -> Int32 {
        for attempt in 0..<2 {
            do {
                if inboxFd < 0 { inboxFd = try Posix.open(inbox, O_RDONLY | O_DIRECTORY) }
                if takenFd < 0 {
                    try FileSystem.makeOwnDirectory(takenDirectory, what: Intake.takenWords)
                    takenFd = try Posix.open(takenDirectory, O_RDONLY | O_DIRECTORY)
                }
                try Posix.rename(name.bytes, at: inboxFd, to: takenName, at: takenFd, shown: "move \(name) to .taken/")
                return 0
            } catch {
                let error = (error as? SystemError)?.errno ?? EIO
                // ENOENT is also what a deleted `.taken/` (or inbox) answers.
                guard error == ENOENT, inboxFd >= 0, takenFd >= 0, attempt == 0,
                      !FileSystem.exists(takenDirectory) || !FileSystem.exists(inbox) else { return error }
                Posix.close(inboxFd)
                Posix.close(takenFd)
                inboxFd = -1; takenFd = -1
            }
        }
        return ENOENT
    }
}

/// A backlog of jobs (the inbox at start-up, or after inotify lost count)
/// moved into `.taken/` and read on a worker thread, in order, while the
/// loop parses and records the ones before. Taking a job is mostly the
/// kernel's work on two big directories (a rename, an open and a read): on
/// 100,000 queued jobs that was 40% of the time, now beside the parsing.
///
/// At most `capacity` jobs wait in `.taken/` unrecorded, as one did
/// before: a crash leaves them there and the next start takes them.
/// Its state is guarded by `condition`, which the compiler cannot check.
final class BacklogReader: @unchecked Sendable {
    struct Fetched {
        var name: InboxName
        var outcome: TakenMover.Outcome
        /// The file read, when moved (`.success(nil)`: gone by the time it was opened).
        var file: Result<JobFile?, Error>?
    }

    static let capacity = 128
    private let condition = NSCondition()
    // Under `condition`:
    private var ready: [Fetched] = []
    /// Every name was handed over (or the loop stopped listening).
    private var allHanded = false
    /// No more names will be read.
    private var closing = false
    private var finished = false

    /// Starts reading `names` but those `skipping`, with `mover`, which is the reader's until `close`.
    init(names: [InboxName], skipping: Set<InboxName>, mover: TakenMover) {
        allHanded = names.isEmpty
        let thread = Thread { [self] in work(names, skipping, mover) }
        thread.name = "syncagent.backlog"
        thread.start()
    }

    private func work(_ names: [InboxName], _ skipping: Set<InboxName>, _ mover: TakenMover) {
        var next = 0
        while true {
            condition.lock()
            while !allHanded, ready.count >= Self.capacity, !closing { condition.wait() }
            if allHanded || closing {
                finished = true
                condition.broadcast()
                condition.unlock()
                return
            }
            condition.unlock()

            let name = names[next]
            next += 1
            var fetched: Fetched?
            if !skipping.contains(name) {
                let outcome = mover.move(name)
                fetched = Fetched(name: name, outcome: outcome)
                if case .moved(let path) = outcome { fetched?.file = Result { try JobFile.load(path) } }
            }
            condition.lock()
            if let fetched { ready.append(fetched) }
            if next == names.count { allHanded = true }
            condition.broadcast()
            condition.unlock()
        }
    }

    /// The jobs read since the last call, in order; waits for at least one.
    /// Empty once every name was handed over.
    func next() -> [Fetched] {
        condition.lock()
        defer { condition.unlock() }
        while ready.isEmpty, !allHanded { condition.wait() }
        let batch = ready
        ready.removeAll(keepingCapacity: true)
        condition.broadcast()
        return batch
    }

    /// Reads no further and waits for the worker: the mover is the
    /// caller's again. Jobs moved and not yet handed over (only when the
    /// loop stopped early, on an error) stay in `.taken/` for the next start.
    func close() {
        condition.lock()
        allHanded = true
        closing = true
        condition.broadcast()
        while !finished { condition.wait() }
        condition.unlock()
    }
}

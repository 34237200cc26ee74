import Crypto
import Foundation
import Logging
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Turns job files in the inbox into `created`, `controlled` or `rejected`
/// events, exactly once each, even if the agent dies half-way (SPEC §4.1).
///
/// A job is *taken* by moving it out of the inbox first, into
/// `INBOX/.taken/` (same file system, so the rename is atomic): whatever
/// a script renames over its name afterwards is a new job in the inbox,
/// never removed unread. Files in `.taken/` are read, recorded, and
/// removed after the commit, while the agent is quiet (`TakenFileRemover`);
/// a restart finds any left there and knows from their identity whether
/// the log already holds them.
final class Intake {
    let inbox: String
    let rejectedDirectory: String
    let takenDirectory: String
    var parser: JobParser
    private let log: EventLog
    private let logger: Logger
    /// Whether a path exists beneath download_dir (for `rename` reservations).
    private let exists: (String) -> Bool
    /// A control job found in the inbox; returns an error sentence if it cannot apply.
    var applyControl: (ControlJob, JobSource) -> String? = { _, _ in nil }

    /// Taken files that failed to parse while perhaps still being written
    /// (seen by a scan, not by close-write): looked at again in `.taken/`
    /// after a grace period, the way transmission's watchdir keeps a retry set.
    private(set) var retryAt: [String: (name: String, due: Int64)] = [:]
    static let graceMs: Int64 = 2000
    /// Names that could not be moved out of the inbox (logged once); left
    /// alone until the next start instead of being tried on every wake-up.
    private var stuck: Set<InboxName> = []
    /// Moves jobs into `.taken/`: the loop's, or a backlog reader's while it runs.
    private let mover: TakenMover
    /// Removes taken files once their events are committed.
    private let remover = TakenFileRemover()

    /// Where jobs go once taken, until their tasks are recorded: the agent's own folder in the inbox.
    static func takenDirectory(of inbox: String) -> String { inbox + "/.taken" }
    /// Where rejected jobs go, each with its `.error`.
    static func rejectedDirectory(of inbox: String) -> String { inbox + "/rejected" }
    /// The agent's folders in the inbox, in words (a refusal names them).
    static let takenWords = "the inbox's .taken folder"
    static let rejectedWords = "the inbox's rejected folder"

    init(inbox: String, parser: JobParser, log: EventLog, logger: Logger, exists: @escaping (String) -> Bool) throws {
        self.inbox = inbox
        self.rejectedDirectory = Self.rejectedDirectory(of: inbox)
        self.takenDirectory = Self.takenDirectory(of: inbox)
        self.parser = parser
        self.log = log
        self.logger = logger
        self.exists = exists
        self.mover = TakenMover(inbox: inbox, takenDirectory: takenDirectory)
        try FileSystem.makeOwnDirectory(rejectedDirectory, what: Self.rejectedWords)
        try FileSystem.makeOwnDirectory(takenDirectory, what: Self.takenWords)
    }

    /// Names created with one link and not yet seen closed, with when to
    /// take them anyway: a job linked in (`ln`) whose other name was
    /// removed before we looked never comes again with a close.
    private var awaitingClose: [InboxName: Int64] = [:]

    func awaitClose(_ name: InboxName) {
        if awaitingClose[name] == nil { awaitingClose[name] = FileSystem.monotonicMs + Self.graceMs }
    }

    var isIdle: Bool { retryAt.isEmpty && awaitingClose.isEmpty && backlog == nil && takesAfterBacklog.isEmpty }

    /// Whether a name found by a scan still waits for something other than
    /// intake: a file that could not be moved, or one not the user's to take.
    func isStuck(_ name: InboxName) -> Bool { stuck.contains(name) || leftAlone[name] != nil }

    /// Files in the inbox that are not the agent's user's alone (another
    /// user's, or writable by others), by name, with the inode said once:
    /// each is named in the log once, and left where it is. Bounded: past
    /// 4,096 names it starts afresh (a file may then be named again).
    private var leftAlone: [InboxName: UInt64] = [:]

    private func sayLeftAlone(_ name: InboxName, at path: String, _ problem: FolderTrust.Problem, inode: UInt64) {
        guard leftAlone[name] != inode else { return }
        if leftAlone.count >= 4096 { leftAlone.removeAll() }
        leftAlone[name] = inode
        logger.warning("\(FolderTrust.jobSentence(problem, path: path) { Posix.userName(of: uid_t($0)) })",
                       metadata: ["file": "\(path)"])
    }

    /// Another user's file found in `.taken/` (moved there by a mover that
    /// saw the user's file, or left from before): it goes back into the
    /// inbox under its name, unread; where that name is taken, it stays.
    private func putBack(_ takenPath: String, name: String, _ refused: JobFile.NotTheUsers) {
        let inboxName = InboxName(name)
        do {
            try Posix.renameNoReplace(takenPath, at: AT_FDCWD, to: inbox + "/" + name, at: AT_FDCWD,
                                      shown: "move \(takenPath) back into the inbox")
            sayLeftAlone(inboxName, at: "\(inbox)/\(name)", refused.problem, inode: refused.inode)
        } catch {
            sayLeftAlone(inboxName, at: takenPath, refused.problem, inode: refused.inode)
        }
    }

    /// Earliest moment a retry is due, for the loop's poll timeout.
    var nextRetryMs: Int64? { (retryAt.values.map(\.due) + awaitingClose.values).min() }

    func takeDueRetries(nowMs: Int64) {
        // Not closed within the grace period: taken as a scan would find it
        // (gone already if it was closed and taken meanwhile).
        for (name, due) in awaitingClose where due <= nowMs {
            awaitingClose[name] = nil
            take(name, closedAfterWriting: false)
        }
        for (path, retry) in retryAt.sorted(by: { $0.value.due < $1.value.due }) where retry.due <= nowMs {
            retryAt[path] = nil
            process(path, name: retry.name, closedAfterWriting: true)
        }
    }

    /// `closedAfterWriting`: inotify said the writer closed it or it was
    /// renamed in, so its content is final and a parse error is final too.
    func take(_ name: InboxName, closedAfterWriting: Bool) {
        awaitingClose[name] = nil
        guard !stuck.contains(name) else { return }
        // The backlog's reader may be moving this very name: its mover is not shared.
        guard backlog == nil else { return takesAfterBacklog.append((name, closedAfterWriting)) }
        taken(name, mover.move(name), file: nil, closedAfterWriting: closedAfterWriting)
    }

    /// A backlog found by a scan (none of it seen closed): the inbox at
    /// start-up, or after inotify lost count. It is taken a slice at a time
    /// (`takeBacklogSlice`, once per loop turn), so transfers keep moving
    /// while 100,000 jobs are taken; the moves and reads run on a
    /// `BacklogReader` beside the parsing. Another overflow meanwhile makes
    /// one more scan once this backlog is taken.
    func startBacklog(scan: @escaping () -> [InboxName]) {
        rescan = scan
        guard backlog == nil else { return rescanDue = true }
        beginBacklog(scan(), closed: false)
    }

    /// Names inotify reported closed or moved in. A burst of more than a
    /// slice (a drain holds up to ~8,000 jobs) is taken as a backlog, a
    /// slice per loop turn: a stop or a running download used to wait for
    /// all of it.
    func take(closed names: [InboxName]) {
        guard names.count > Self.backlogSlice, backlog == nil else {
            for name in names { take(name, closedAfterWriting: true) }
            return
        }
        for name in names { awaitingClose[name] = nil }
        beginBacklog(names, closed: true)
    }

    /// Names a poll of the inbox found standing still (none seen closed):
    /// taken as a start-up scan's are, after any backlog going on.
    func take(polled names: [InboxName]) {
        let names = names.filter { !isStuck($0) }
        guard !names.isEmpty else { return }
        if backlog != nil {
            takesAfterBacklog += names.map { ($0, false) }
        } else if names.count > Self.backlogSlice {
            beginBacklog(names, closed: false)
        } else {
            for name in names { take(name, closedAfterWriting: false) }
        }
    }

    private func beginBacklog(_ names: [InboxName], closed: Bool) {
        backlog = BacklogReader(names: names, skipping: stuck, mover: mover)
        backlogWasClosed = closed
    }

    var isTakingBacklog: Bool { backlog != nil }

    /// Up to `backlogSlice` jobs of the backlog (about 20 ms of work), then a commit.
    static let backlogSlice = 256

    func takeBacklogSlice(commit: () throws -> Void) throws {
        guard let reader = backlog else { return }
        var count = 0
        while count < Self.backlogSlice {
            let batch = reader.next()
            if batch.isEmpty {
                try commit()
                finishBacklog()
                return
            }
            for fetched in batch { taken(fetched.name, fetched.outcome, file: fetched.file, closedAfterWriting: backlogWasClosed) }
            count += batch.count
        }
        try commit()
    }

    /// Every job of the backlog was handed over: the mover is the loop's
    /// again, for the names inotify reported meanwhile and a scan due.
    private func finishBacklog() {
        endBacklog()
        let deferred = takesAfterBacklog
        takesAfterBacklog.removeAll()
        if rescanDue, let rescan {
            // The scan finds the deferred names too, if they are still there.
            rescanDue = false
            startBacklog(scan: rescan)
            return
        }
        for (name, closed) in deferred where !closed { take(name, closedAfterWriting: false) }
        take(closed: deferred.filter(\.1).map(\.0))
    }

    /// Stops reading the backlog (the agent stops): jobs moved and not yet
    /// recorded stay in `.taken/`, the rest in the inbox, for the next start.
    func endBacklog() {
        guard let reader = backlog else { return }
        backlog = nil
        reader.close()
    }

    /// Whether taken files may be removed now: no transfer is making files
    /// and no backlog is being taken (see `TakenFileRemover`).
    func mayRemoveTakenFiles(_ quiet: Bool) {
        remover.setQuiet(quiet && backlog == nil)
        for (path, error) in remover.takeFailures() { cannotRemove(path, error) }
    }

    /// The agent stops: every taken file whose events are committed is removed now.
    func finishRemovals() {
        remover.finish()
        for (path, error) in remover.takeFailures() { cannotRemove(path, error) }
    }

    /// What a move out of the inbox came to; `file` is the moved file already read, if it was.
    private func taken(_ name: InboxName, _ outcome: TakenMover.Outcome, file: Result<JobFile?, Error>?, closedAfterWriting: Bool) {
        switch outcome {
        case .moved(let takenPath):
            // The user's own file under a name another's had: taken, and nothing to skip at an idle exit.
            leftAlone[name] = nil
            process(takenPath, name: name.text, closedAfterWriting: closedAfterWriting, file: file)
        case .gone:
            return
        case .leftAlone(let problem, let inode):
            sayLeftAlone(name, at: "\(inbox)/\(name.text)", problem, inode: inode)
        case .failed(let error):
            stuck.insert(name)
            logger.error("cannot take a job out of the inbox; it stays until the next start",
                         metadata: ["file": "\(inbox)/\(name.text)", "error": "\(String(cString: strerror(error)))"])
        }
    }

    /// Jobs a previous agent moved into `.taken/` and did not finish with.
    func takeLeftovers() {
        for entry in InboxWatcher.entries(of: takenDirectory).sorted(by: { ($0.mtime, $0.name.text) < ($1.mtime, $1.name.text) }) {
            // "<stamp>-<counter>-<name>": the job's own name for its events.
            let parts = entry.name.text.split(separator: "-", maxSplits: 2)
            let name = parts.count == 3 ? String(parts[2]) : entry.name.text
            process(takenDirectory + "/" + entry.name.text, name: name, closedAfterWriting: false)
        }
    }

    /// Reads a file moved into `.taken/` and records what it is. A file
    /// that does not parse yet, changed within the grace period and was not
    /// seen closed may still be written (the writer's descriptor follows it
    /// into `.taken/`): it is read again there after the grace period.
    private func process(_ takenPath: String, name: String, closedAfterWriting: Bool, file read: Result<JobFile?, Error>? = nil) {
        let file: JobFile
        do {
            guard let read = try (read ?? Result { try JobFile.load(takenPath) }).get() else { return }
            file = read
        } catch is JobFile.StillBeingWritten {
            // Its writer's descriptor followed it into `.taken/`: looked at again after the grace period.
            retryAt[takenPath] = (name, FileSystem.monotonicMs + Self.graceMs)
            return
        } catch let refused as JobFile.NotTheUsers {
            // Swapped in after it was looked at in the inbox, or left in `.taken/` from before: back where it came from.
            return putBack(takenPath, name: name, refused)
        } catch {
            let sentence = (error as? KeyError)?.description ?? "the job file cannot be read: \(error)"
            // Known by what lstat says: a restart between the commit and the move must not reject it twice.
            let identity = JobFile.unreadableIdentity(takenPath)
            if let identity, let recorded = identity.forms.first(where: log.state.rejectedSources.contains) {
                return moveRecordedRejection(takenPath, name: name, identity: recorded)
            }
            reject(takenPath, name: name, sentence, identity: identity?.forms[0])
            return
        }

        if file.recordedForms.contains(where: log.state.hasTaken) {
            // The agent died after recording this job and before removing it.
            takenAwaitingCommit.append(takenPath)
            return
        }
        if let recorded = file.recordedForms.first(where: log.state.rejectedSources.contains) {
            return moveRecordedRejection(takenPath, name: name, identity: recorded)
        }
        if file.links > 1, isInRejected(file.inode) {
            // A power cut fell between its move to rejected/ and the sync of `.taken/`: one file,
            // two names, its rename having changed what its identity was when it was rejected.
            takenAwaitingCommit.append(takenPath)
            return
        }

        let source = JobSource(file: name, identity: file.identity)
        let job: Job
        do {
            job = try parser.parse(file.bytes, source: source)
        } catch let error as KeyError {
            if !closedAfterWriting, FileSystem.nowMs - file.modifiedMs < Self.graceMs {
                retryAt[takenPath] = (name, FileSystem.monotonicMs + Self.graceMs)
                return
            }
            reject(takenPath, name: name, error.description, identity: file.identity)
            return
        } catch {
            reject(takenPath, name: name, "\(error)", identity: file.identity)
            return
        }

        switch job {
        case .transfer(let requestedID, let spec):
            let id: String
            if let requestedID {
                if let conflict = log.state.conflict(ofNewTaskID: requestedID) {
                    reject(takenPath, name: name, "key \"id\" \(conflict.sentence(for: requestedID))", identity: file.identity)
                    return
                }
                id = requestedID
            } else {
                id = newTaskID()
            }
            if let problem = Self.unreadableBody(spec, rules: parser.bodyFileRules) {
                reject(takenPath, name: name, problem, identity: file.identity)
                return
            }
            create(spec, id: id)
        case .control(let control):
            if let problem = applyControl(control, source) {
                reject(takenPath, name: name, problem, identity: file.identity)
                return
            }
        }
        // Removed only once the log holds the task: see `removeTakenFiles`.
        takenAwaitingCommit.append(takenPath)
    }

    /// Records the task with the destination it reserves (SPEC §4.2): two
    /// live tasks never share a file. A conflict that `overwrite` settles
    /// without a transfer ends the task at once, with the reason. (An RPC
    /// `addUri` comes here too, as a job file does.)
    func create(_ spec: TaskSpec, id: String) {
        var spec = spec
        var ending: EventBody?
        if let dest = spec.dest {
            // A download its server names holds this name only for its partial file: any free one will do.
            let overwrite = spec.nameFromServer == true ? .rename : spec.overwrite
            switch Destinations.decide(dest: dest, overwrite: overwrite, in: log.state, hints: &renameHints, exists: exists) {
            case .use(let path):
                spec.dest = path
            case .skip(_, let reason):
                ending = .finished(Finished(bytes: 0, dest: nil, skipped: reason))
            case .refuse(_, let reason):
                ending = .failed(Failed(reason: reason, code: .destReserved, bytes: 0))
            }
        }
        log.record(.created(spec), task: id)
        if let ending { log.record(ending, task: id) }
        logger.info("job taken", metadata: ["task.id": "\(id)", "file": "\(spec.source?.file ?? "")",
                                            "url": "\(Redaction.url(spec.url))"])
    }

    /// Job files whose events are recorded but maybe not yet committed.
    private var takenAwaitingCommit: [String] = []

    /// Where `overwrite = "rename"` goes on looking for a free name, per destination.
    private var renameHints = Destinations.RenameHints()

    /// Rejected jobs whose `rejected` event is maybe not yet committed, with where they go.
    private var rejectedAwaitingCommit: [(takenPath: String, target: String, name: String)] = []
    /// Where the search for a free `rejected/` name of a much-rejected job
    /// resumes: probing from 0 each time made a job rejected again and again
    /// under one name (a cron job with a typo) cost more with every rejection.
    /// A number freed later is skipped, never reused wrongly; bounded in size.
    private var nextRejectionNumber: [String: Int] = [:]

    var hasTakenFiles: Bool { !takenAwaitingCommit.isEmpty || !rejectedAwaitingCommit.isEmpty }

    /// Called before the commit that records taken jobs: their moves out of
    /// the inbox are made durable first. Otherwise a power cut could put a
    /// job back in the inbox once its task is on disk, and its next move
    /// (a new ctime, a new identity) would make it a second task.
    func makeMovesDurable() throws {
        guard hasTakenFiles else { return }
        try FileSystem.sync(directory: takenDirectory)
        try FileSystem.sync(directory: inbox)
    }

    /// Called after the log committed: a taken job is removed (or moved to
    /// rejected/) only when its event is durable, so a crash in between
    /// loses nothing (and the identity check keeps it from becoming two).
    func removeTakenFiles() {
        for pending in rejectedAwaitingCommit { moveToRejected(pending.takenPath, target: pending.target, name: pending.name) }
        if !rejectedAwaitingCommit.isEmpty {
            // The new name first, then the old one gone: a power cut in between leaves both names of
            // one file, which `process` knows again (`isInRejected`); the other way round, neither.
            do {
                try FileSystem.sync(directory: rejectedDirectory)
                try FileSystem.sync(directory: takenDirectory)
            } catch {
                logger.error("cannot sync rejected/", metadata: ["folder": "\(rejectedDirectory)", "error": "\(error)"])
            }
        }
        rejectedAwaitingCommit.removeAll()
        remover.remove(takenAwaitingCommit)
        takenAwaitingCommit.removeAll(keepingCapacity: true)
    }

    /// The reader of the backlog being taken.
    private var backlog: BacklogReader?
    /// Names inotify reported while a backlog is taken, taken after it.
    private var takesAfterBacklog: [(InboxName, Bool)] = []
    /// How the backlog was found, and whether to look again once it is taken.
    private var rescan: (() -> [InboxName])?
    private var rescanDue = false
    /// The backlog is a burst inotify saw closed (its parse errors are final), not a scan's.
    private var backlogWasClosed = false

    private func cannotRemove(_ path: String, _ error: Int32) {
        logger.error("cannot remove a taken job", metadata: ["file": "\(path)", "error": "\(String(cString: strerror(error)))"])
    }

    /// A body file that is missing or not a readable regular file makes the
    /// job bad input, said at intake rather than at the first attempt; so
    /// does one whose links lead where `rules` let no job read from (the
    /// path as written was checked when the job was parsed).
    static func unreadableBody(_ spec: TaskSpec, rules: BodyFileRules) -> String? {
        guard let path = spec.bodyFile else { return nil }
        do {
            let info = try Posix.status(of: path)
            guard (info.st_mode & S_IFMT) == S_IFREG else { return "key \"body_file\": \(path) is not a regular file" }
            try Posix.access(path, R_OK)
            let resolved = try Posix.resolved(path)
            let shown = PathRules.isSame(resolved, path) ? nil : "\(Printable.escaping(path)) (which leads to \(Printable.escaping(resolved)))"
            let fileSystem = try Posix.fileSystemType(of: resolved)
            if let problem = rules.problem(resolved, fromRPC: spec.source?.isRPC ?? false, shown: shown)
                ?? BodyFileRules.problem(resolved, fileSystemType: fileSystem, shown: shown) {
                return "key \"body_file\" \(problem)"
            }
        } catch {
            return "key \"body_file\": \(path) cannot be read: \(Posix.words((error as? SystemError)?.errno ?? EIO))"
        }
        return nil
    }

    /// Records the rejection once, then moves the job to `rejected/` with
    /// its `.error` beside it. The event comes first: if the move fails the
    /// file stays in `.taken/`, and a restart only retries the move.
    private func reject(_ takenPath: String, name: String, _ sentence: String, identity: String?) {
        let shown = Printable.escaping(Redaction.text(sentence))
        log.record(.rejected(Rejected(file: name, error: shown, identity: identity)))
        logger.warning("job rejected", metadata: ["file": "\(name)", "reason": "\(shown)"])
        // The job leaves `.taken/` only once its event is committed: moved
        // before, a crash left it in rejected/ with no event (found by an
        // adversary). Its `.error` is written now; a crash before the commit
        // rejects it again from `.taken/`, to the same place.
        guard let target = rejectionTarget(for: name) else { return }
        writeErrorFile(target, name: name, shown)
        rejectedAwaitingCommit.append((takenPath, target, name))
        CrashPoint.rejectedRecorded.reached()
    }

    /// `NAME.error` beside a rejected job: why, in one line.
    private func writeErrorFile(_ target: String, name: String, _ sentence: String) {
        do {
            // Read with `cat`: the job's name (any bytes but '/') goes in escaped.
            try FileSystem.writeAtomically("\(Printable.escaping(name)): \(Printable.escaping(sentence))\n", to: target + ".error")
        } catch {
            // The job itself is still moved: the event holds the sentence.
            logger.error("cannot write the .error file", metadata: ["file": "\(target).error", "error": "\(error)"])
        }
    }

    /// `rejected/NAME` (with `NAME.error` beside it): a shortened name where
    /// NAME would pass NAME_MAX, `NAME.1.job` … where a rejected job of that
    /// name is already there or on its way. Nil (logged) if rejected/ cannot be made.
    private func rejectionTarget(for name: String) -> String? {
        do {
            try FileSystem.makeOwnDirectory(rejectedDirectory, what: Self.rejectedWords)
        } catch {
            logger.error("cannot make rejected/; the job stays in .taken/ until the next start",
                         metadata: ["file": "\(name)", "error": "\(error)"])
            return nil
        }
        let base = Self.prefix(of: name, bytes: 200, marked: true)
        var number = nextRejectionNumber[base] ?? 0
        func target() -> String { rejectedDirectory + "/" + Destinations.candidate(base, number: number) }
        while FileSystem.exists(target()) || rejectedAwaitingCommit.contains(where: { $0.target == target() }) { number += 1 }
        if number > 0 {
            if nextRejectionNumber.count >= 4096 { nextRejectionNumber.removeAll() }
            nextRejectionNumber[base] = number + 1
        }
        return target()
    }

    /// Rejected and recorded, but the move to rejected/ did not happen (a
    /// crash after the commit). Its `.error` was written before the commit,
    /// at the first free number, as this is.
    private func moveRecordedRejection(_ takenPath: String, name: String, identity: String) {
        guard let target = rejectionTarget(for: name) else { return }
        // Its `.error` (again) beside the name it gets now: when it was rejected, rejected/ may not have been there to hold one.
        if let recorded = log.state.rejected.last(where: { $0.identity == identity }) {
            writeErrorFile(target, name: name, recorded.error)
        }
        moveToRejected(takenPath, target: target, name: name)
    }

    /// Whether rejected/ holds a name of the file `inode` (looked for only
    /// for a job file with more than one name, which is rare).
    private func isInRejected(_ inode: UInt64) -> Bool {
        InboxWatcher.entries(of: rejectedDirectory).contains { entry in
            (try? Posix.status(of: rejectedDirectory + "/" + entry.name.text, flags: AT_SYMLINK_NOFOLLOW)).map { UInt64($0.st_ino) } == inode
        }
    }

    /// A rejected job whose event is committed, out of `.taken/` into rejected/.
    private func moveToRejected(_ takenPath: String, target: String, name: String) {
        do {
            try Posix.rename(takenPath, to: target, shown: "move \(name) to rejected/")
        } catch {
            logger.error("cannot move a rejected job to rejected/; it stays in .taken/ until the next start",
                         metadata: ["file": "\(name)", "error": "\(error)"])
        }
    }

    /// At most `bytes` bytes of `name`, cut on a character boundary. With
    /// `marked`, a cut name ends in `~` and a digest of the whole, so two
    /// long names stay apart.
    static func prefix(of name: String, bytes limit: Int, marked: Bool = false) -> String {
        guard name.utf8.count > limit else { return name }
        var cut = ""
        for character in name {
            if cut.utf8.count + character.utf8.count > limit - (marked ? 9 : 0) { break }
            cut.append(character)
        }
        return marked ? cut + "~" + Hex.encode(SHA256.hash(data: Array(name.utf8)).prefix(4)) : cut
    }

    /// Six lowercase letters and digits, unused so far. One random draw
    /// gives all six (randomElement() would make a getrandom call per letter).
    private func newTaskID() -> String {
        IDRules.random { log.state.conflict(ofNewTaskID: $0) != nil }
    }
}

/// A job file's bytes and the identity that makes intake exactly-once:
/// its inode, ctime and a digest of its bytes. Not its device number,
/// which a FUSE or btrfs file system may get anew at each mount (a job
/// recorded and still in `.taken/` was taken again after such a boot).
struct JobFile {
    var bytes: [UInt8]
    var identity: String
    /// The identity as an earlier build wrote it too (with the device
    /// first): a job it recorded and left in `.taken/` is known by it.
    var formerIdentity: String
    var modifiedMs: Int64
    var inode: UInt64
    /// Its names (hard links).
    var links: Int

    /// Every form the log may hold this file's identity in.
    var recordedForms: [String] { [identity, formerIdentity] }

    /// The identity of a file that cannot be read as a job (a FIFO, a
    /// directory, a symlink, over 64 KiB): its inode and ctime, no content.
    /// Nil when it cannot be looked at either (gone meanwhile).
    static func unreadableIdentity(_ path: String) -> (forms: [String], device: UInt64)? {
        guard let info = try? Posix.status(of: path, flags: AT_SYMLINK_NOFOLLOW) else { return nil }
        let identity = "\(info.st_ino):\(info.st_ctim.nanoseconds):unreadable"
        return ([identity, "\(info.st_dev):" + identity], UInt64(info.st_dev))
    }

    /// A writer still has the job open: it is read once closed.
    struct StillBeingWritten: Error {}

    /// The file is not the agent's user's alone (SPEC §4.1): not read.
    struct NotTheUsers: Error {
        var problem: FolderTrust.Problem
        var inode: UInt64
    }

    /// nil when the file is gone (taken or removed meanwhile).
    static func load(_ path: String) throws -> JobFile? {
        let fd: Int32
        do {
            fd = try Posix.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
        } catch let error as SystemError where error.errno == ENOENT {
            return nil
        } catch let error as SystemError where error.errno == ELOOP {
            throw KeyError(key: nil, "the job file is a symbolic link; drop the file itself")
        }
        defer { Posix.close(fd) }
        let info = try Posix.status(of: fd, shown: path)
        // Asked of the descriptor read, not of a path looked at before: whatever was
        // renamed or linked in meanwhile, these are the bytes whose owner is judged.
        if let problem = FolderTrust.jobProblem(owner: UInt32(info.st_uid), mode: UInt32(info.st_mode & 0o7777), me: StrictModes.me) {
            throw NotTheUsers(problem: problem, inode: UInt64(info.st_ino))
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw KeyError(key: nil, "the job is not a regular file")
        }
        // Found by a scan, or created and quiet past the grace period, while
        // its writer still holds it (found by an adversary: a writer that
        // paused 2 s had its first lines taken as the whole job). Where
        // leases cannot tell (not the file's owner, no leases on that file
        // system), it is read as before.
        let beingWritten: Bool
        do {
            beingWritten = try Posix.isOpenForWriting(fd, shown: path)
        } catch {
            beingWritten = false
        }
        if beingWritten { throw StillBeingWritten() }
        // Sized from fstat (a job is small); one byte over the limit is enough
        // to know it is too big, however the file grows meanwhile.
        let capacity = min(Int(info.st_size), JobParser.maximumSize) + 1
        var bytes = [UInt8](repeating: 0, count: capacity)
        var filled = 0
        while filled < bytes.count {
            let got = try bytes.withUnsafeMutableBytes { buffer in
                try Posix.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled...]), shown: path)
            }
            if got == 0 { break }
            filled += got
        }
        if filled > JobParser.maximumSize || Int(info.st_size) > JobParser.maximumSize {
            throw KeyError(key: nil, "the job file is \(info.st_size) bytes, over the 64 KiB limit")
        }
        bytes.removeSubrange(filled...)
        let digest = Hex.encode(SHA256.hash(data: bytes).prefix(12))
        // Kept for the task's life (its spec, the taken set): copied out of
        // the interpolation's buffer, which grew to twice the text.
        let identity = String(decoding: Array("\(info.st_ino):\(info.st_ctim.nanoseconds):\(digest)".utf8), as: UTF8.self)
        let modifiedMs = info.st_mtim.milliseconds
        return JobFile(bytes: bytes, identity: identity, formerIdentity: "\(info.st_dev):" + identity, modifiedMs: modifiedMs,
                       inode: UInt64(info.st_ino), links: Int(info.st_nlink))
    }
}

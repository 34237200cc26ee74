import Foundation
import Logging
import Testing
import TestSupport
@testable import SyncAgent
@testable import SyncAgentCore

/// Failures no disk gives on demand, injected through `Posix.inject`: each
/// test names what it breaks by its own temporary folder (`matching:`), so a
/// test running beside these never meets their faults, and the suite runs
/// one test at a time because `removeFaults` clears every fault.
@Suite("Posix: system calls that fail", .serialized)
final class PosixFaultTests {
    let directory = TempDirectory()

    init() { Posix.removeFaults() }
    deinit { Posix.removeFaults() }

    private func file(_ name: String, bytes: Int = 0) throws -> String {
        let path = directory.file(name)
        #expect(FileManager.default.createFile(atPath: path, contents: Data(repeating: 7, count: bytes)))
        return path
    }

    private func failure(_ body: () throws -> Void) -> Error? {
        do {
            try body()
            return nil
        } catch {
            return error
        }
    }

    // MARK: - The policy

    @Test func anInterruptedCallIsRetriedAndSucceeds() throws {
        let path = try file("data", bytes: 10)
        let fd = try Posix.open(path, O_RDWR)
        defer { Posix.close(fd) }
        Posix.inject(.init(.fdatasync, errno: EINTR, matching: directory.path, times: 3))
        try Posix.dataSync(fd, shown: path)
        #expect(Posix.faultsLeft == 0, "each EINTR was met, and the call tried again")
    }

    @Test func aFailedCallIsASystemErrorNamingWhatAndWhere() throws {
        let path = try file("data", bytes: 10)
        let fd = try Posix.open(path, O_RDWR)
        defer { Posix.close(fd) }
        Posix.inject(.init(.fdatasync, errno: EIO, matching: directory.path, times: 1))
        let error = failure { try Posix.dataSync(fd, shown: path) } as? SystemError
        #expect(error?.errno == EIO)
        #expect(error?.description == "flush \(path): Input/output error")
        // Spent: the next one goes to the disk, which is fine.
        try Posix.dataSync(fd, shown: path)
    }

    @Test func aSecondListingOfOneDescriptorFindsEveryNameAgain() throws {
        for name in ["a", "b", "c"] { _ = try file(name) }
        let fd = try Posix.open(directory.path, O_RDONLY | O_DIRECTORY)
        defer { Posix.close(fd) }
        let first = try Posix.entries(of: fd, shown: directory.path).map(\.name).sorted()
        let second = try Posix.entries(of: fd, shown: directory.path).map(\.name).sorted()
        #expect(first == ["a", "b", "c"])
        #expect(second == first, "a listing through a dup shared the read position, and the second found nothing")
    }

    // MARK: - A failed sync never becomes claimed progress

    @Test func aFailedSyncReportsItsErrnoAndNoDurableOffset() throws {
        let path = try file("part", bytes: 1000)
        let fd = try Posix.open(path, O_RDWR)
        defer { Posix.close(fd) }
        let task = "sync-" + (directory.path as NSString).lastPathComponent
        let syncer = try DataSyncer()
        Posix.inject(.init(.fdatasync, errno: EIO, matching: "task \(task)", times: 1))
        syncer.sync(fd, .init(taskID: task, attempt: 7, offset: 1000, complete: false))
        syncer.waitForAll()
        let failed = syncer.drain()
        #expect(failed.count == 1)
        #expect(failed.first?.error == EIO)
        #expect(failed.first?.durableOffset == nil, "a failed sync never becomes claimed progress")

        // The same sync that works vouches for its offset.
        syncer.sync(fd, .init(taskID: task, attempt: 8, offset: 1000, complete: true))
        syncer.waitForAll()
        let synced = syncer.drain()
        #expect(synced.first?.error == nil)
        #expect(synced.first?.durableOffset == 1000)
    }

    /// A claim of more than `DataSyncer.bytesHashedApart` is hashed on a thread
    /// of its own while its flush runs, a smaller one after the flush: either
    /// way the claim carries the file's digest, and a flush or a read that
    /// fails claims nothing, whatever the other half found.
    @Test(arguments: [1000, Int(DataSyncer.bytesHashedApart) + 4321])
    func aClaimWaitsForItsFlushAndItsHashAndEitherFailingClaimsNothing(size: Int) throws {
        let path = directory.file("claimed-\(size)")
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        #expect(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
        let fd = try Posix.open(path, O_RDWR)
        defer { Posix.close(fd) }
        let task = "claim-\(size)-" + (directory.path as NSString).lastPathComponent
        let syncer = try DataSyncer()
        func claim(attempt: UInt64) -> DataSyncer.Done? {
            let chain = DigestChain(anchor: 0)
            syncer.sync(fd, .init(taskID: task, attempt: attempt, offset: Int64(size), complete: false),
                        hashing: .init(claims: [(chain, Int64(size))]))
            syncer.waitForAll()
            return syncer.drain().first
        }
        let whole = try #require(claim(attempt: 1))
        #expect(whole.error == nil && whole.durableOffset == Int64(size))
        #expect(whole.digests.last?.to == Int64(size))
        #expect(whole.digests.last?.sha256.hex == sha256Hex(ofFile: path))

        Posix.inject(.init(.fdatasync, errno: EIO, matching: "task \(task)", times: 1))
        let flushFailed = try #require(claim(attempt: 2))
        #expect(flushFailed.error == EIO && flushFailed.durableOffset == nil, "a failed flush claims nothing")

        Posix.inject(.init(.read, errno: EIO, matching: "task \(task)", times: 1))
        let readFailed = try #require(claim(attempt: 3))
        #expect(readFailed.error == EIO && readFailed.durableOffset == nil, "bytes that could not be read back are not vouched for")
    }

    @Test func aSyncThatCannotStartIsReportedAsFailed() throws {
        let syncer = try DataSyncer()
        syncer.sync(-1, .init(taskID: "no-file", attempt: 1, offset: 50, complete: true))
        syncer.waitForAll()
        let done = syncer.drain()
        #expect(done.first?.error == EBADF)
        #expect(done.first?.durableOffset == nil)
    }

    // MARK: - A failed rename is reported

    private func downloads() throws -> (root: DownloadRoot, folder: String) {
        let folder = directory.file("downloads")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return (try DownloadRoot(path: folder), folder)
    }

    /// A path with `..` in it is never reached beneath download_dir, on a
    /// kernel without openat2 too (ENOSYS, injected): its walk, one name at a
    /// time, would have gone up the `..` and made the file beside the folder.
    /// Such a path can only come from a log someone else wrote.
    @Test func aPathUpADotDotIsNotBeneathDownloadDirEvenWithoutOpenat2() throws {
        let (root, folder) = try downloads()
        for file in [folder + "/../escaped.bin", folder + "/sub/../../escaped.bin", folder + "/./escaped.bin", folder + "//escaped.bin"] {
            Posix.inject(.init(.open, errno: ENOSYS, matching: folder + "/", times: 1))
            #expect(failure { try root.makeFile(file, mode: 0o644) } != nil, "\(file)")
            Posix.removeFaults()
            #expect(!root.exists(file))
        }
        #expect(!FileManager.default.fileExists(atPath: directory.file("escaped.bin")))
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0 != "sub" }.isEmpty)
    }

    @Test func aFailedRenameInTheDownloadFolderNamesBothPaths() throws {
        let (root, folder) = try downloads()
        let part = folder + "/sub/a.bin.part", dest = folder + "/sub/a.bin"
        try root.makeFile(part, mode: 0o644)
        for replacing in [true, false] {
            Posix.inject(.init(.rename, errno: EIO, matching: directory.path, times: 1))
            let error = failure { try root.rename(part, to: dest, replacing: replacing) }
            #expect((error as? SystemError)?.errno == EIO)
            #expect("\(error.map { "\($0)" } ?? "")" == "move \(part) to \(dest): Input/output error")
            #expect(root.exists(part) && !root.exists(dest))
        }
        Posix.inject(.init(.rename, errno: EEXIST, matching: directory.path, times: 1))
        let taken = failure { try root.rename(part, to: dest, replacing: false) }
        #expect("\(taken.map { "\($0)" } ?? "")" == "move \(part) to \(dest), where something else now is: File exists")
    }

    @Test func aPublishWhoseRenameFailsThrowsAndPublishesNothing() throws {
        let (root, folder) = try downloads()
        let part = folder + "/b.bin.part", dest = folder + "/b.bin"
        try root.makeFile(part, mode: 0o644)
        Posix.inject(.init(.rename, errno: EROFS, matching: directory.path, times: 1))
        let error = failure { try Publisher.complete(part: part, to: dest, replacing: true, root: root) }
        let words = error.map { "\($0)" } ?? "no error"
        #expect(words.contains(part) && words.contains(dest) && words.contains("Read-only file system"), "\(words)")
        #expect(root.exists(part) && !root.exists(dest))
        // Nothing injected: it happens.
        try Publisher.complete(part: part, to: dest, replacing: true, root: root)
        #expect(!root.exists(part) && root.exists(dest))
    }

    // MARK: - The state directory's lock

    @Test func aLockFileThatCannotBeClearedStopsTheStartAndHoldsNothing() throws {
        let lockFile = directory.file("agent.lock")
        Posix.inject(.init(.ftruncate, errno: EIO, matching: lockFile, times: 1))
        let error = failure { _ = try StateLock(path: lockFile, stateDir: directory.path) }
        #expect(error.map { "\($0)" } == "truncate \(lockFile) to 0: Input/output error")
        // The failed start let go of both locks: the next one takes them.
        let lock = try StateLock(path: lockFile, stateDir: directory.path)
        #expect(AgentLiveness.holder(readingFrom: lockFile)?.pid == getpid())
        withExtendedLifetime(lock) {}
    }

    @Test func aSecondAgentIsRefusedAndTheFirstKeepsItsLock() throws {
        let lockFile = directory.file("agent.lock")
        let first = try StateLock(path: lockFile, stateDir: directory.path)
        // Refused after its init set every descriptor: deinit ran on what the
        // refusal had closed already (a debug build stops in Posix.close).
        let error = failure { _ = try StateLock(path: lockFile, stateDir: directory.path) }
        #expect((error as? AgentAlreadyRunning)?.pid == getpid())
        #expect(AgentLiveness.probe(stateDir: directory.path).pid == getpid())
        withExtendedLifetime(first) {}
    }

    @Test func anInterruptedFlockIsRetried() throws {
        Posix.inject(.init(.flock, errno: EINTR, matching: directory.path, times: 2))
        let lock = try StateLock(path: directory.file("agent.lock"), stateDir: directory.path)
        #expect(Posix.faultsLeft == 0)
        #expect(AgentLiveness.probe(stateDir: directory.path).running, "the lock was taken after all")
        withExtendedLifetime(lock) {}
    }

    @Test func aLockThatFailsIsAnErrorNotAnotherAgent() throws {
        let lockFile = directory.file("agent.lock")
        Posix.inject(.init(.flock, errno: EIO, matching: lockFile, times: 1))
        let error = failure { _ = try StateLock(path: lockFile, stateDir: directory.path) }
        #expect(!(error is AgentAlreadyRunning))
        #expect(error.map { "\($0)" } == "lock \(lockFile): Input/output error")
    }

    // MARK: - Hooks

    private func run() -> HookPlan.Run {
        HookPlan.Run(hook: .taskEnd, task: "hooked", batchSeq: nil, environment: [:])
    }

    private func waitForEnd(_ hooks: HookRunner) -> [HookEnded] {
        var ended: [HookEnded] = []
        for _ in 0..<500 where !hooks.running.isEmpty {
            ended += hooks.reap().map(\.ended)
            Posix.sleep(ms: 10)
        }
        return ended
    }

    @Test func aHooksLogThatCannotBeRotatedIsSaid() throws {
        _ = try file("hooks.log", bytes: Int(HookRunner.logLimit) + 1)
        let capture = LogCapture()
        let hooks = try HookRunner(stateDir: directory.path, logger: Logger(label: "test") { _ in capture })
        Posix.inject(.init(.rename, errno: EIO, matching: directory.file("hooks.log"), times: 1))
        guard case .success = hooks.spawn(run(), command: ["echo", "output"], timeoutS: 10) else {
            Issue.record("the hook did not start")
            return
        }
        #expect(waitForEnd(hooks).first?.exitStatus == 0, "the hook runs all the same")
        let said = capture.messages.joined(separator: "\n")
        #expect(said.contains("hooks.log is not rotated: rename \(directory.file("hooks.log")) to \(directory.file("hooks.log")).1: Input/output error"),
                "\(said)")
    }

    @Test func hookOutputThatCannotBeWrittenIsSaid() throws {
        let capture = LogCapture()
        let hooks = try HookRunner(stateDir: directory.path, logger: Logger(label: "test") { _ in capture })
        Posix.inject(.init(.open, errno: EACCES, matching: directory.file("hooks.log"), times: 1))
        guard case .success = hooks.spawn(run(), command: ["echo", "output"], timeoutS: 10) else {
            Issue.record("the hook did not start")
            return
        }
        _ = waitForEnd(hooks)
        #expect(capture.messages.contains { $0.contains("hook output is dropped: open \(directory.file("hooks.log")): Permission denied") },
                "\(capture.messages)")
    }

    @Test func aHookThatCannotBeWaitedForEndsWithTheReason() throws {
        let hooks = try HookRunner(stateDir: directory.path)
        guard case .success(let pid) = hooks.spawn(run(), command: ["sleep", "30"], timeoutS: 60) else {
            Issue.record("the hook did not start")
            return
        }
        defer {
            // The test's own cleanup: the process is not the runner's any more.
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
        Posix.inject(.init(.waitpid, errno: ECHILD, matching: "hook pid \(pid)", times: 1))
        let ended = hooks.reap().map(\.ended)
        #expect(ended.count == 1)
        #expect(ended.first?.error == "wait for hook pid \(pid): No child processes")
        #expect(ended.first?.exitStatus == nil && ended.first?.signal == nil)
        #expect(hooks.running.isEmpty, "a hook that cannot be waited for must not hold the agent for good")
    }

    @Test func aHookThatCannotStartSaysWhy() throws {
        let hooks = try HookRunner(stateDir: directory.path)
        guard case .failure(let failure) = hooks.spawn(run(), command: ["/nonexistent/hook"], timeoutS: 10) else {
            Issue.record("a missing program started")
            return
        }
        #expect(failure.description == "cannot start /nonexistent/hook: No such file or directory")
    }

    // MARK: - The inbox

    @Test func anInboxThatCannotBeWatchedClosesItsInotifyOnce() throws {
        let inbox = directory.file("inbox")
        Posix.inject(.init(.inotify, errno: ENOSPC, matching: "watch \(inbox)", times: 1))
        let error = failure { _ = try InboxWatcher(directory: inbox) }
        #expect(error.map { "\($0)" } == "watch \(inbox): No space left on device")
    }

    @Test func aFailedReadOfInotifyAsksForARescan() throws {
        let inbox = directory.file("inbox")
        let watcher = try InboxWatcher(directory: inbox)
        Posix.inject(.init(.read, errno: EIO, matching: inbox, times: 1))
        #expect(watcher.drain().overflowed, "events a failed read may have lost are looked for by a scan")
        #expect(!watcher.drain().overflowed)
    }

    @Test func aTakenJobThatCannotBeRemovedIsToldNotLost() throws {
        let inbox = directory.file("inbox")
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        // The rename names the job, not its folder: a name no other test's job has.
        let name = "posix-" + (directory.path as NSString).lastPathComponent + ".job"
        #expect(FileManager.default.createFile(atPath: inbox + "/" + name, contents: Data("url = \"http://h/x\"\n".utf8)))
        let mover = TakenMover(inbox: inbox, takenDirectory: Intake.takenDirectory(of: inbox))
        Posix.inject(.init(.rename, errno: EIO, matching: name, times: 1))
        guard case .failed(let error) = mover.move(InboxName(name)) else {
            Issue.record("the move did not fail")
            return
        }
        #expect(error == EIO)
        #expect(FileManager.default.fileExists(atPath: inbox + "/" + name), "a job that could not be taken stays in the inbox")
        guard case .moved = mover.move(InboxName(name)) else {
            Issue.record("the job was not taken once the disk answered")
            return
        }
    }

    // MARK: - Taken jobs removed later

    private func takenJobs(_ count: Int, in folder: String) throws -> [String] {
        try FileManager.default.createDirectory(atPath: directory.file(folder), withIntermediateDirectories: true)
        return try (0..<count).map { try file("\(folder)/\($0).job", bytes: 20) }
    }

    private func remaining(_ paths: [String]) -> Int { paths.count { FileManager.default.fileExists(atPath: $0) } }

    @Test func takenJobsWaitWhileFilesAreBeingMadeAndGoOnceTheAgentIsQuiet() throws {
        let remover = TakenFileRemover()
        let jobs = try takenJobs(3, in: "taken-quiet")
        remover.remove(jobs)
        // Time for a remover that did not wait to do its work: then none may be gone.
        Thread.sleep(forTimeInterval: 0.3)
        #expect(remaining(jobs) == 3, "removed while transfers were making files")
        remover.setQuiet(true)
        #expect(eventually(within: 10) { remaining(jobs) == 0 })
        // Quiet still: a job recorded now goes without another word.
        let later = try takenJobs(1, in: "taken-quiet-later")
        remover.remove(later)
        #expect(eventually(within: 10) { remaining(later) == 0 })
        remover.finish()
        #expect(remover.takeFailures().isEmpty)
    }

    @Test func aBusyAgentRemovesItsTakenJobsOnceTooManyWait() throws {
        let remover = TakenFileRemover()
        let jobs = try takenJobs(TakenFileRemover.heldAtMost, in: "taken-many")
        remover.remove(Array(jobs.dropLast()))
        Thread.sleep(forTimeInterval: 0.3)
        #expect(remaining(jobs) == jobs.count, "removed below the bound, while busy")
        remover.remove([jobs.last!])
        #expect(eventually(within: 30) { remaining(jobs) == 0 }, "\(remaining(jobs)) of \(jobs.count) left")
        remover.finish()
    }

    @Test func aStoppingAgentRemovesEveryTakenJobAndToldWhichItCouldNot() throws {
        let remover = TakenFileRemover()
        let jobs = try takenJobs(3, in: "taken-stop")
        try FileManager.default.removeItem(atPath: jobs[0])
        Posix.inject(.init(.unlink, errno: EIO, matching: jobs[1], times: 1))
        remover.remove(jobs)
        remover.finish()
        #expect(!FileManager.default.fileExists(atPath: jobs[2]), "left behind though the agent stopped")
        #expect(FileManager.default.fileExists(atPath: jobs[1]))
        // A job already gone is what removing it was for; a disk that refused is said.
        let failures = remover.takeFailures()
        #expect(failures.map(\.path) == [jobs[1]] && failures.map(\.errno) == [EIO], "\(failures)")
    }
}

/// Every message a logger was given, with its metadata.
final class LogCapture: LogHandler, @unchecked Sendable {
    private let lock = NSLock()
    private var said: [String] = []
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    var messages: [String] { lock.withLock { said } }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        lock.withLock { said.append("\(event.message) \(event.metadata ?? [:])") }
    }
}

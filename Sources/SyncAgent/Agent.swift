import CCurlShims
import Foundation
import Logging
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// The agent: one loop on one thread around `curl_multi_poll`, with the
/// inbox's inotify fd and a signalfd beside curl's sockets. Every wake-up:
/// take jobs → finish attempts → schedule → announce → commit the batch of
/// new events in one transaction. The `EventLog` is the only mutable state
/// that matters, and only this loop touches it.
public final class Agent {
    public static let exitAllFinished: Int32 = 0
    public static let exitSomeFailed: Int32 = 4

    var config: AgentConfig
    private let paths: AgentPaths
    /// Where `config` came from, read again on SIGHUP.
    private let configFile: String?
    let logger: Logger
    private let notifier: BackgroundNoticePoster
    /// Notices recorded as posted, handed to the notifier once that record is committed.
    private var noticesAfterCommit: [Notice] = []
    var settings: TransferSettings

    var log: EventLog!
    private var intake: Intake!
    let multi: CurlMulti
    /// In-flight attempts by their curl easy handle.
    var attempts: [UnsafeMutableRawPointer: Exchange] = [:]
    /// Exchanges that re-read a live playlist: not an attempt of their task.
    var refreshes: Set<UInt64> = []
    var attemptByTask: [String: UnsafeMutableRawPointer] = [:]
    /// Set whenever something could let a queued task start or a batch drain.
    var needsScheduling = true
    /// When this run began: a task that ended failed since then makes
    /// `--exit-when-idle` exit 4.
    private var runStartedAtMs: Int64 = 0
    /// The log's last seq when this run began: an intake is what came after it.
    private var runStartedAtSeq: Int64 = 0
    /// `finished` is recorded with its final path; the rename waits for the commit.
    var renamesAfterCommit: [Rename] = []
    /// Finished files whose rename failed after their commit (a folder made immutable, a file
    /// system remounted read-only): tried again with each check of the held files, and at the next start.
    var unpublished: [Rename] = []
    /// Locks on the partial files of tasks that may write them (see
    /// `DownloadRoot.lockPartial`), by task id; released once a task stops.
    var partLocks: [String: Int32] = [:]
    /// Live HLS parents: when each reads its playlist again (monotonic ms),
    /// and how many reads in a row failed.
    var refreshAt: [String: Int64] = [:]
    var refreshFailures: [String: Int] = [:]
    /// Reads in a row that brought no new segment, per live parent.
    var staleRefreshes: [String: Int] = [:]
    static let staleReadsBeforeEnding = 30
    /// HLS work folders to remove once their video's rename is committed.
    var cleanupsAfterCommit: [String] = []
    /// When a waiting task (not_before, retry backoff) becomes startable;
    /// recomputed at each scheduling pass, not on every wake-up.
    private var nextTimedWakeMs: Int64?
    /// Events wait at most this long for their transaction.
    static let commitIntervalMs: Int64 = 20
    private var lastCommitMs: Int64 = 0
    /// Makes file data durable off the loop (see DataSyncer).
    let syncer: DataSyncer
    /// Assembles finished HLS videos off the loop (see HLSAssembler).
    let assembler: HLSAssembler
    /// Makes new partial files off the loop (see PartialPreparer).
    private let preparer: PartialPreparer
    /// Complete bodies whose data is being made durable, by task id.
    private var awaitingSync: [String: (attempt: Exchange, bytes: Int64, download: SegmentedDownload?)] = [:]
    /// The session's cookies; nil for `cookies = "off"`.
    var cookies: CookieJar?
    /// download_dir, opened once: every task file is reached beneath it.
    var root: DownloadRoot!
    /// The config's hooks that are running.
    private let hooks: HookRunner
    /// "task finished" and "task failed", said once the commit has made them true: an agent
    /// stopping before that commit (a held file replaced) must not have said them.
    private var logLinesAfterCommit: [(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata)] = []
    /// Update tasks whose 304 could not be believed: their next attempt asks for the whole file.
    private var fetchWhole: Set<String> = []
    /// `max_overall_speed` was shared out (see `shareOverallSpeed`).
    private var sharingSpeed = false
    /// Whether there is a network and whether it is metered.
    var network: NetworkMonitor!
    /// Said once: `allow_metered = false` means nothing without NetworkManager.
    var warnedMeteredUnknown = false
    /// When tasks waiting for the network are looked at again (monotonic ms).
    var nextNetworkCheckMs: Int64 = 0
    /// What each task waiting for the network could not reach: its server's address, or none (its name did
    /// not resolve, or its connect failed before curl chose an address). No entry: it waits since before
    /// this agent started.
    var waitingFor: [String: (address: String?, nameUnresolved: Bool)] = [:]
    /// Downloads running over several connections, by task id.
    var segmented: [String: SegmentedDownload] = [:]
    /// Resumable uploads (tus, IETF) carrying out their protocol, by task id.
    var uploads: [String: UploadRun] = [:]
    /// How far this process sent each task's upload, kept across its attempts: a
    /// server's later claim past it is of bytes it never received (see `UploadRun.believableEnd`).
    var uploadReach: [String: UploadReach] = [:]
    /// `DELETE`s of cancelled uploads, by curl handle: no task waits for them.
    var terminations: [UnsafeMutableRawPointer: Exchange] = [:]
    /// Compacts the log off the loop (see Compactor).
    private let compactor: BackgroundCompactor
    /// The seq the newest snapshot covers: the agent compacts by itself once the log grows far past it.
    private var snapshotSeq: Int64 = 0
    /// What `syncagent compact` asked and no compaction has started on yet: a cutoff in seconds,
    /// and the request files that asked for it. One compaction each, in order, from the next commit.
    private var compactionRequests: [(olderThanS: Int64, files: [String])] = []
    /// The request files the running compaction answers (none: the agent's own): its report names them.
    private var compactionAnswers: [String] = []
    private var compactionRequestedBy: [String]? { compactionAnswers.isEmpty ? nil : compactionAnswers }
    /// Set once the loop has ended: the last commits start no compaction.
    private var stopping = false
    /// The event log, the inbox and download_dir as opened (device, inode),
    /// and when they are next looked for at their paths (monotonic ms). See `checkHeldFilesAreStillThere`.
    private var held: [(name: String, path: String, identity: FileIdentity)] = []
    private var nextHeldCheckMs: Int64 = 0

    /// The state the agent holds: always the fold of the log it writes.
    public var state: AgentState { log?.state ?? AgentState() }

    /// - Parameter configFile: the file `config` was read from, read again on
    ///   SIGHUP (nil: nothing to reload).
    public init(config: AgentConfig, paths: AgentPaths, configFile: String? = nil, logger: Logger) throws {
        self.config = config
        self.paths = paths
        self.configFile = configFile
        self.logger = logger
        self.notifier = BackgroundNoticePoster(DesktopNotifier(logger: logger))
        self.settings = TransferSettings(config: config)
        self.multi = try CurlMulti()
        self.syncer = try DataSyncer()
        self.assembler = try HLSAssembler()
        self.preparer = try PartialPreparer()
        self.compactor = try BackgroundCompactor()
        self.hooks = HookRunner(stateDir: paths.stateDir)
    }

    /// Runs until SIGTERM/SIGINT (exit 0) or, with `exitWhenIdle`, until the
    /// inbox is empty and nothing is queued or running (0, or 4 if a task failed).
    public func run(exitWhenIdle: Bool) throws -> Int32 {
        try FileSystem.makeDirectory(paths.stateDir)
        let lock = try StateLock(path: paths.lockFile, stateDir: paths.stateDir)
        let inboxLock = try InboxLock(inbox: paths.inbox, stateDir: paths.stateDir)
        defer { withExtendedLifetime((lock, inboxLock)) {} }
        // Blocked before anything slow, so a stop signal during start-up is not lost.
        let signalFd = sa_stop_signal_fd()
        guard signalFd >= 0 else { throw SystemError(operation: "signalfd", errno: errno) }
        defer { close(signalFd) }

        runStartedAtMs = FileSystem.nowMs
        log = try EventLog(store: EventStore(writingTo: paths.eventLog))
        defer { log.store.close() }
        held = [("the event log", paths.eventLog, try FileSystem.identity(of: paths.eventLog))]
        snapshotSeq = try log.store.newestSnapshotSeq()
        runStartedAtSeq = log.state.lastSeq
        // A snapshot the last run was killed while writing: its parts, with no row, go now, not at the next snapshot.
        let unnamedParts = try log.store.removeUnnamedSnapshotParts()
        if unnamedParts > 0 { logger.info("removed the parts of a snapshot cut short", metadata: ["parts": "\(unnamedParts)"]) }
        let longLog = Compaction.isDue(lastSeq: log.state.lastSeq, snapshotSeq: snapshotSeq)
        if longLog {
            // A long log with no recent snapshot: the state just folded is stored
            // now, before the loop starts, so the compaction that follows (in
            // the background) reads it instead of folding the whole log again.
            try log.store.writeSnapshot(log.state, nowMs: FileSystem.nowMs, olderThanS: config.keepEndedS)
            snapshotSeq = log.state.lastSeq
        }
        // A compaction cut short (a crash, a stop, or the snapshot just written) is finished at once, with its cutoff.
        let unfinishedCompaction = try log.store.unfinishedCompaction()
        cookies = try CookieJar.make(mode: config.cookies, stateDir: paths.stateDir)
        try FileSystem.makeDirectory(paths.downloadDir, mode: 0o755)
        root = try DownloadRoot(path: paths.downloadDir)
        held.append(("download_dir", paths.downloadDir, try root.identity()))
        // download_dir changed since some tasks were made: they keep their destinations (a
        // failed one may be run again). Before, each failed at its next start, its bytes reset to 0.
        let recorded = log.state.orderedTasks
        for index in recorded.indices where recorded[index].phase != .cancelled {
            // Read in place: most tasks of a long log ended long ago.
            guard let dest = recorded[index].spec.dest, !root.holds(dest) else { continue }
            // A finished one only if its rename is still to be done (looked for only outside the root).
            if recorded[index].phase == .finished {
                guard let part = recorded[index].spec.behaviour.fansOut ? HLSPublisher.staging(of: recorded[index]) : recorded[index].partPath,
                      access(part, F_OK) == 0 else { continue }
            }
            root.admitFormer(folderOf: dest)
        }
        network = NetworkMonitor(logger: logger)
        log.record(.agentStarted(AgentStarted(pid: getpid(), version: SyncAgentVersion.current, hooks: config.hooks)))
        resumeInterruptedTasks()
        try log.commit()
        // Waiting jobs live in the log, not in memory: read back, as each task
        // starts, on a connection of their own (see SpecArchive).
        try JobReader.install(eventLog: paths.eventLog)
        defer { SpecArchive.install(nil) }
        // (Tests of the whole agent set the limit low, so their few jobs go too.)
        let heldWhole = ProcessInfo.processInfo.environment["SYNCAGENT_QUEUE_HELD_WHOLE"].flatMap { Int($0) }
        let released = try log.startLettingWaitingJobsGo(queueHeldWhole: heldWhole ?? 4096)
        if released > 0 { logger.debug("waiting jobs left to the log", metadata: ["tasks": "\(released)"]) }
        // (Not `commit()`: a compaction left unfinished must start before any other.)
        announceCommitted()
        // A long log is compacted at once, not at the first commit of new work (an idle agent may make none).
        if let olderThanS = unfinishedCompaction {
            startCompaction(olderThanS: olderThanS, trigger: longLog ? "log_size" : "interrupted")
        }
        startCompactionIfDue()

        let watcher = try InboxWatcher(directory: paths.inbox)
        // (Looked up after the watch: a folder replaced in between is caught at the first check.)
        held.append(("the inbox", paths.inbox, try FileSystem.identity(of: paths.inbox)))
        intake = try Intake(inbox: paths.inbox, parser: jobParser(), log: log, logger: logger,
                            exists: { [unowned self] path in self.existsOnceRenamed(path) })
        intake.applyControl = { [unowned self] control, source in self.apply(control, source: source) }
        // Its lock (see InboxLock): `.taken/` deleted or replaced would let a second agent take the inbox.
        held.append(("the inbox's .taken folder", intake.takenDirectory, try FileSystem.identity(of: intake.takenDirectory)))
        // Jobs a previous agent had moved out of the inbox but not yet recorded.
        intake.takeLeftovers()
        logger.info("agent started", metadata: [
            "state_dir": "\(paths.stateDir)", "inbox": "\(paths.inbox)", "tasks": "\(log.state.tasks.count)"])
        var stopSignal: Int32?
        intake.startBacklog(scan: watcher.scan)
        // A stop leaves the rest of a backlog for the next start.
        defer { intake.endBacklog() }

        while stopSignal == nil {
            if FileSystem.monotonicMs >= nextHeldCheckMs {
                try checkHeldFilesAreStillThere()
                publishAgain()
                nextHeldCheckMs = FileSystem.monotonicMs + Self.heldCheckIntervalMs
            }
            // Tasks start once the backlog is all taken, in priority order across all of it.
            if needsScheduling, !intake.isTakingBacklog {
                needsScheduling = false
                try settleParents()
                // A transfer writes files named by its `created` event: that event must be on disk
                // first, or a crash could leave a partial file no log knows (and a second name).
                if log.hasPendingCreations { try commit() }
                try startReadyTasks()
                try announceDrainedBatches()
                try startOwedHooks()
            }
            // Group commit across wake-ups: one WAL fsync per interval at most,
            // however many events the wake-ups in between recorded.
            if log.hasPending, FileSystem.monotonicMs - lastCommitMs >= Self.commitIntervalMs {
                try commit()
            } else if !log.hasPending {
                // An intake's last commit came while it was still going: its snapshot is due once it is over.
                startCompactionIfDue()
            }

            if exitWhenIdle && isIdle(watcher) { break }
            let ready = multi.poll(extraFds: [watcher.fd, signalFd, syncer.fd, preparer.fd, assembler.fd, compactor.fd] + hooks.fds + network.fds,
                                   timeoutMs: pollTimeoutMs())
            if let before = network.refresh(ready: ready) { networkChanged(from: before) }
            checkTheNetwork()
            if ready.contains(syncer.fd) { applySynced(syncer.drain()) }
            if ready.contains(preparer.fd) { partialsPrepared(preparer.drain()) }
            if ready.contains(assembler.fd) { assembled(assembler.drain()) }
            if ready.contains(compactor.fd) { compacted(compactor.drain()) }
            if ready.contains(signalFd) {
                let signal = sa_read_signal(signalFd)
                if signal == SIGHUP {
                    reloadConfig()
                } else if signal > 0 {
                    stopSignal = signal
                    break
                }
            }
            if ready.contains(watcher.fd) {
                let changes = watcher.drain()
                if changes.overflowed {
                    // The queue lost names: the directory itself is the truth.
                    logger.info("more jobs arrived than inotify could queue; taking them from a scan of the inbox",
                                metadata: ["inbox": "\(paths.inbox)"])
                    intake.startBacklog(scan: watcher.scan)
                } else {
                    // Awaited first: a close in the same drain takes the name and ends the wait.
                    for name in changes.created { intake.awaitClose(name) }
                    intake.take(closed: changes.names)
                }
                needsScheduling = true
            }
            if intake.isTakingBacklog {
                try intake.takeBacklogSlice { try commit() }
                needsScheduling = true
            }
            let now = FileSystem.monotonicMs
            if let due = intake.nextRetryMs, due <= now {
                intake.takeDueRetries(nowMs: now)
                needsScheduling = true
            }
            if let wake = nextTimedWakeMs, wake <= FileSystem.nowMs {
                needsScheduling = true
            }
            refreshDuePlaylists()
            if let wake = hooks.nextWakeMs, wake <= FileSystem.monotonicMs || hooks.fds.contains(where: ready.contains) {
                hooksEnded()
            }
            multi.perform()
            // Each completion is matched to its attempt first: finishing one (a segmented
            // download's last connection) frees others, whose handles curl_easy_init may reuse.
            let done = multi.completed()
            for (easy, result) in done { if let deletion = terminations[easy] { terminationEnded(deletion, deletion.outcome(result)) } }
            let completed = done.compactMap { easy, result in attempts[easy].map { ($0, result) } }
            for (attempt, result) in completed where attempts[attempt.easy] === attempt {
                finish(attempt, attempt.outcome(result))
            }
            abortStalledAttempts()
            openWaitingConnections()
        }

        // Bodies already complete are published, not paused. A video being
        // assembled is not waited for (a join can take longer than a stop
        // may): its parent is paused with its children and assembled again.
        intake.endBacklog()
        stopping = true
        // A cancelled upload's DELETE still out is given up: the server expires it.
        for easy in terminations.keys { multi.remove(easy) }
        terminations.removeAll()
        syncer.waitForAll()
        applySynced(syncer.drain())
        // Tasks whose file is still being made are paused below, like those that ran, without waiting
        // for a stalled disk: the log says so first (the preparer waits for its worker when it goes).
        compacted(compactor.stop())
        if let stopSignal {
            pauseAllForStop()
            // Within the 5 s a stop may take: hooks get 2 s to finish, then are killed.
            for (run, ended) in hooks.stopAll(graceMs: 2000) { log.record(.hookEnded(ended), task: run.task) }
            log.record(.agentStopped(AgentStopped(reason: stopSignal == SIGINT ? "SIGINT" : "SIGTERM")))
            try commit()
            notifier.finish(within: 1)
            logger.info("agent stopped", metadata: ["signal": "\(stopSignal)"])
            return Self.exitAllFinished
        }
        log.record(.agentStopped(AgentStopped(reason: "idle")))
        try commit()
        // The last batch's notice is on its way: a desktop session answers in milliseconds.
        notifier.finish(within: 5)
        let tasks = log.state.orderedTasks
        let failed = tasks.indices.count { tasks[$0].phase == .failed && (tasks[$0].endedAtMs ?? 0) >= runStartedAtMs }
        logger.info("agent idle, exiting", metadata: ["failed": "\(failed)"])
        publishAgain()
        for rename in unpublished {
            // Finished in the log, not where the user looks: this run did not do all it was asked.
            logger.error("a finished file is not in place; the next start moves it there",
                         metadata: ["task.id": "\(rename.task)", "dest": "\(rename.dest)", "part": "\(rename.part)"])
        }
        return failed > 0 || !unpublished.isEmpty ? Self.exitSomeFailed : Self.exitAllFinished
    }

    /// What the syncer made durable: progress is claimed by the attempt that
    /// asked (if it still runs); complete bodies are verified and recorded
    /// finished. A failed sync claims nothing and stops its task.
    private func applySynced(_ results: [DataSyncer.Done]) {
        for done in results where !done.complete {
            if let download = segmented[done.taskID], download.syncSerial == done.attempt {
                segmentsSynced(download, error: done.error)
                continue
            }
            guard let easy = attemptByTask[done.taskID], let attempt = attempts[easy], attempt.serial == done.attempt else { continue }
            if let error = done.error {
                finish(attempt, attempt.syncFailed(errno: error))
            } else {
                attempt.claim(upTo: done.offset)
            }
        }
        for done in results where done.complete {
            let id = done.taskID
            guard let (attempt, bytes, download) = awaitingSync.removeValue(forKey: id) else { continue }
            guard let task = log.state[id] else { continue }
            if let error = done.error {
                if task.phase == .running {
                    let failure = DiskFailure(operation: "flush", path: task.partPath ?? "", errno: error)
                    fail(task, reason: failure.description, code: failure.code, metrics: attempt.metrics,
                         keeping: download?.covered ?? attempt.durable)
                }
                continue
            }
            if let download {
                log.record(.progressed(download.completeProgress(bytes: bytes)), task: id)
            } else {
                attempt.claimSynced()
            }
            CrashPoint.downloadComplete.reached { try? log.commit() }
            // Paused or cancelled meanwhile: the body stays a partial file (a
            // resume then meets 416 and finishes), or is already gone.
            guard let task = log.state[id], task.phase == .running else { continue }
            switch Publisher.prepare(task, bytes: bytes, in: log.state, root: root) {
            case .ready(let path, let modifiedNs):
                recordFinished(task, attempt, bytes: bytes, dest: path, modifiedNs: modifiedNs, received: download?.bytesReceived)
                renamesAfterCommit.append(Rename(task: id, part: task.partPath!, dest: path, replacing: task.spec.overwrite.replacesFiles))
            case .skipped(let reason):
                removePartial(task.partPath!, of: id)
                log.record(.finished(Finished(bytes: root.size(task.spec.dest!) ?? 0, dest: task.spec.dest,
                                              metrics: attempt.metrics, skipped: reason)), task: id)
            case .failed(let reason, .checksumMismatch) where download != nil || attempt.plan.ask.offset > 0:
                // SPEC §7: a bad checksum is final only after a full re-download. This body was put
                // together from pieces (a resume, or several connections): fetched again whole, on one.
                startOverWhole(task, because: reason + " in a file put together from pieces", metrics: attempt.metrics,
                               oneConnection: download != nil)
            case .failed(let reason, let code):
                // A file swapped in under the agent is not its to remove.
                fail(task, reason: reason, code: code, metrics: attempt.metrics, removingPartial: code != .partChanged)
            }
        }
        needsScheduling = true
    }

    /// Whether `path` is there as the next commit leaves it: that commit
    /// renames finished bodies before any task it records can start, so a
    /// finished body's partial file is as good as gone, and its destination
    /// as good as there. (Without this, a job for the same destination taken
    /// in those few milliseconds was refused: the agent's own finished body
    /// looked like a stranger's partial file.)
    private func existsOnceRenamed(_ path: String) -> Bool {
        if renamesAfterCommit.contains(where: { $0.dest == path }) { return true }
        if renamesAfterCommit.contains(where: { $0.part == path }) { return false }
        return root.exists(path)
    }

    /// Group commit, then the file-system effects that must follow it:
    /// taken jobs leave the inbox, finished files take their final name.
    func commit() throws {
        let tookJobs = intake?.hasTakenFiles ?? false
        // Before a taken job's file goes or a file is published: the events that
        // vouch for them must go into the log someone reads, naming the folder there is.
        if tookJobs || !renamesAfterCommit.isEmpty { try checkHeldFilesAreStillThere() }
        try log.commit()
        lastCommitMs = FileSystem.monotonicMs
        announceCommitted()
        if tookJobs { CrashPoint.intakeCommitted.reached() }
        intake.map { $0.removeTakenFiles() }
        if !renamesAfterCommit.isEmpty { CrashPoint.finishedCommitted.reached() }
        var synced = Set<String>()
        for rename in renamesAfterCommit {
            do { try publish(rename, synced: &synced) } catch { cannotPublish(rename, error) }
        }
        renamesAfterCommit.removeAll()
        // A video's work folder holds it until its rename is done: never removed with it inside.
        for folder in cleanupsAfterCommit where !unpublished.contains(where: { PathRules.isInside($0.part, folder) }) {
            removeWorkFolder(folder)
        }
        cleanupsAfterCommit.removeAll()
        startCompactionIfDue()
    }

    /// A finished file's rename, made once `finished` is committed.
    struct Rename {
        var task: String
        var part: String
        var dest: String
        var replacing: Bool
    }

    /// What a commit has made true, said: the log lines of ends, and the notices recorded as posted.
    private func announceCommitted() {
        for line in logLinesAfterCommit { logger.log(level: line.level, line.message, metadata: line.metadata) }
        logLinesAfterCommit.removeAll()
        for notice in noticesAfterCommit { notifier.post(notice) }
        noticesAfterCommit.removeAll()
    }

    /// Every 2 s, and before a commit that removes a taken job's file or publishes one.
    private static let heldCheckIntervalMs: Int64 = 2000

    /// A file the agent holds open deleted, moved or replaced under it. The
    /// agent would go on with the one it has open: events written where no
    /// `status` and no next start reads them (and the state directory's lock
    /// gone with them, letting a second agent start), jobs dropped into a
    /// new inbox never seen, files published into a folder moved away. It
    /// stops instead; the next start (systemd restarts it) opens what is there.
    struct HeldFileReplaced: Error, CustomStringConvertible {
        var name: String
        var path: String
        var inbox: String
        var description: String {
            // A moved inbox took its `.taken/` along: say where to look.
            let waiting = path == inbox ? ".taken/ of the folder that was moved away (move them into the inbox)" : "\(inbox)/.taken/ for it"
            return "\(name) \(path) was deleted, moved or replaced while the agent ran; stopped so nothing is written where "
                + "the log does not say. Start the agent again to use what is there now; jobs taken but not yet "
                + "recorded wait in " + waiting
        }
    }

    private func checkHeldFilesAreStillThere() throws {
        for file in held {
            guard (try? FileSystem.identity(of: file.path)) == file.identity else {
                throw HeldFileReplaced(name: file.name, path: file.path, inbox: paths.inbox)
            }
        }
    }

    /// A requested compaction, or the agent's own once the log has grown far
    /// past its newest snapshot. None starts once the agent is stopping:
    /// nothing would record its outcome.
    private func startCompactionIfDue() {
        if !compactor.busy, !stopping {
            if !compactionRequests.isEmpty {
                let request = compactionRequests.removeFirst()
                compactionAnswers = request.files
                startCompaction(olderThanS: request.olderThanS, trigger: "requested")
            } else if Compaction.isDue(lastSeq: log.state.lastSeq, snapshotSeq: snapshotSeq) {
                compactionAnswers = []
                startCompaction(olderThanS: config.keepEndedS, trigger: "log_size")
            } else if let intake, intake.isIdle, !log.hasPending, !needsScheduling,
                      Compaction.tasksCreated(in: log.state, after: max(snapshotSeq, runStartedAtSeq)) >= Compaction.tasksBeforeIntakeSnapshot {
                // Just committed, nothing recorded since: the state is the fold of the file, and is stored as it is.
                // (Not while a scheduling pass is due: tasks starting would copy the indexes it shares at once.)
                compactionAnswers = []
                startCompaction(olderThanS: config.keepEndedS, trigger: "intake", given: log.state)
            }
        }
    }

    /// Said in the agent's log, so a person (or a test) sees a compaction
    /// run before its `compacted` event reports it.
    private func startCompaction(olderThanS: Int64, trigger: String, given: AgentState? = nil) {
        compactor.start(eventLog: paths.eventLog, olderThanS: olderThanS, trigger: trigger, given: given)
        logger.info("compaction started", metadata: ["trigger": "\(trigger)", "older_than_s": "\(olderThanS)"])
    }

    /// What a compaction came to, recorded; a failed one is tried again only
    /// once the log has grown as much again, not after every commit.
    private func compacted(_ outcomes: [BackgroundCompactor.Outcome]) {
        for outcome in outcomes {
            switch outcome.result {
            case .success(var report):
                snapshotSeq = report.snapshotSeq
                report.requestedBy = compactionRequestedBy
                log.record(.compacted(report))
                // A snapshot of many live tasks can outweigh the events it covers: the
                // file may grow when no ended task was old enough to go. Said so.
                logger.info(report.tasks == 0 ? "log snapshot written; no ended task was old enough to drop" : "log compacted", metadata: [
                    "snapshot_seq": "\(report.snapshotSeq)", "tasks": "\(report.tasks)", "events": "\(report.events)",
                    "bytes_before": "\(report.bytesBefore)", "bytes_after": "\(report.bytesAfter)"])
            case .failure(let error):
                snapshotSeq = log.state.lastSeq
                // Recorded too: `syncagent compact` waits for this answer, whichever it is.
                var report = Compacted.failed("\(error)", olderThanS: outcome.olderThanS, trigger: outcome.trigger)
                report.requestedBy = compactionRequestedBy
                log.record(.compacted(report))
                logger.error("cannot compact the log", metadata: ["log": "\(paths.eventLog)", "error": "\(error)"])
            }
        }
    }

    private func isIdle(_ watcher: InboxWatcher) -> Bool {
        // needsScheduling: a pass (which also announces drained batches) is still due.
        // (A cancelled upload's DELETE is waited for too: the server should hear of it.)
        guard !needsScheduling, log.state.activeCount == 0, attempts.isEmpty, terminations.isEmpty, awaitingSync.isEmpty,
              intake.isIdle, !compactor.busy,
              compactionRequests.isEmpty,
              log.state.owedNotices.isEmpty, hooks.running.isEmpty, log.state.owedTaskHooks.isEmpty,
              log.state.owedBatchHooks.isEmpty else { return false }
        // Waiting for the network is work this agent will resume (within total_timeout).
        if log.state.orderedTasks.contains(where: { $0.phase == .paused && $0.pauseReason?.waitsForNetwork == true }) { return false }
        let leftovers = watcher.scan().filter { !intake.isStuck($0) }
        if leftovers.isEmpty { return true }
        // Files whose inotify events are still queued: take them now.
        for name in leftovers { intake.take(name, closedAfterWriting: false) }
        needsScheduling = true
        return false
    }

    private func pollTimeoutMs() -> Int32 {
        // A scheduling pass or the next slice of a backlog is due: look at the sockets, but do not sleep.
        if needsScheduling || intake.isTakingBacklog { return 0 }
        var timeout: Int64 = 1000
        if log.hasPending { timeout = min(timeout, lastCommitMs + Self.commitIntervalMs - FileSystem.monotonicMs) }
        if let due = intake.nextRetryMs { timeout = min(timeout, due - FileSystem.monotonicMs) }
        if let wake = nextTimedWakeMs { timeout = min(timeout, wake - FileSystem.nowMs) }
        if let refresh = refreshAt.values.min() { timeout = min(timeout, refresh - FileSystem.monotonicMs) }
        if let hook = hooks.nextWakeMs { timeout = min(timeout, hook - FileSystem.monotonicMs) }
        return Int32(max(0, timeout))
    }

    // MARK: - Recovery

    /// Tasks the last agent left running (crash) or paused on its way out go
    /// back to the queue at the offset the log vouches for, no further.
    private func resumeInterruptedTasks() {
        let tasks = log.state.orderedTasks
        for index in tasks.indices {
            // Read in place, copying no task: most tasks of a long log ended
            // long ago and need one look at most.
            let phase = tasks[index].phase
            if phase == .queued || phase == .failed { continue }
            let fansOut = tasks[index].spec.behaviour.fansOut
            if phase == .finished, !fansOut {
                // A crash between committing `finished` and the rename leaves the body at its part path.
                if let part = tasks[index].partPath, root.exists(part) { completePublication(of: tasks[index], part: part) }
                continue
            }
            let task = tasks[index]
            if fansOut { completeHLSPublishing(task) }
            // Tasks that waited for the network look again with this agent's network.
            let interrupted = task.phase == .running
                || (task.phase == .paused && (task.pauseReason == .agentStopping || task.pauseReason?.waitsForNetwork == true))
            guard interrupted else { continue }
            // A resumable upload goes on from what its server confirmed (and asks it again).
            var offset = task.spec.upload != nil ? task.bytes : resumePoint(for: task).offset
            // A segmented download keeps its ranges: the file is cut after the last one.
            var keptEnd = offset
            if let ranges = heldRanges(of: task, plan: RecoveryPlan.plan(for: task, nowMs: FileSystem.nowMs)) {
                (offset, keptEnd) = (ranges.covered, ranges.spans.last?.end ?? 0)
            }
            // Never trust bytes beyond what the log vouches for (no-op if absent).
            if let part = task.partPath, task.spec.behaviour.body == .partialFile {
                do { try root.truncate(part, to: keptEnd) } catch {
                    logger.error("cannot cut back a partial file", metadata: ["task.id": "\(task.id)", "error": "\(error)"])
                }
            }
            let reason = task.phase == .running ? "agent restarted after an unclean stop" : "agent restarted"
            log.record(.resumed(Resumed(bytes: offset, reason: reason)), task: task.id)
            logger.info("task resumed", metadata: ["task.id": "\(task.id)", "offset": "\(offset)"])
        }
        for (_, batch) in log.state.owedNotices.sorted(by: { $0.key < $1.key }) { announce(batch) }
    }

    private func completePublication(of task: TaskState, part: String) {
        guard let dest = task.dest else { return }
        if isUnpublishedBody(of: task, part: part, dest: dest) {
            completeRename(of: task, from: part, to: dest)
        } else {
            logger.info("leaving a partial file that is not the body this task finished with",
                        metadata: ["task.id": "\(task.id)", "part": "\(part)"])
        }
    }

    /// Whether `part` is the body `task` finished with and never renamed (a
    /// crash between the commit and the rename), rather than another live
    /// task's download of the same path (`replace`, `update`), a later
    /// publication's, or a file of the user's: no live task holds the
    /// path, this task published it last, and the file has the size and
    /// modification time `finished` recorded.
    private func isUnpublishedBody(of task: TaskState, part: String, dest: String) -> Bool {
        guard Destinations.holder(of: dest, in: log.state, except: task.id) == nil,
              let record = log.state.published[dest], record.size == task.bytes,
              let onDisk = root.sizeAndModified(part), onDisk.size == task.bytes else { return false }
        return record.modifiedNs.map { $0 == onDisk.modifiedNs } ?? true
    }

    /// Died between committing `finished` and the rename: the rename the
    /// log vouches for is done now. False (and logged) if it cannot be.
    @discardableResult
    func completeRename(of task: TaskState, from source: String, to dest: String) -> Bool {
        let rename = Rename(task: task.id, part: source, dest: dest, replacing: task.spec.overwrite.replacesFiles)
        var synced = Set<String>()
        do {
            try publish(rename, synced: &synced)
            return true
        } catch {
            cannotPublish(rename, error)
            return false
        }
    }

    /// The rename that publishes a finished file, then its directory synced: the rename is
    /// durable once that is, and one sync serves every file published there (`synced`).
    private func publish(_ rename: Rename, synced: inout Set<String>) throws {
        try Publisher.complete(part: rename.part, to: rename.dest, replacing: rename.replacing, root: root)
        if synced.insert((rename.dest as NSString).deletingLastPathComponent).inserted { try root.syncDirectory(of: rename.dest) }
    }

    /// The renames `commit` could not make, tried again. One whose
    /// destination another live task now holds, or whose file is gone, is
    /// left to the next start's recovery, which checks more than this can.
    private func publishAgain() {
        guard !unpublished.isEmpty else { return }
        unpublished.removeAll { rename in
            guard Destinations.holder(of: rename.dest, in: log.state, except: rename.task) == nil, root.exists(rename.part) else {
                logger.warning("a finished file could not be moved into place and is no longer waiting to be",
                               metadata: ["task.id": "\(rename.task)", "dest": "\(rename.dest)", "part": "\(rename.part)"])
                return true
            }
            var synced = Set<String>()
            do {
                try publish(rename, synced: &synced)
                logger.notice("published after all", metadata: ["task.id": "\(rename.task)", "dest": "\(rename.dest)"])
                // A video's work folder, kept while the video was inside it.
                if let work = log.state[rename.task].flatMap(HLSFanOut.workDirectory(of:)), PathRules.isInside(rename.part, work) {
                    removeWorkFolder(work)
                }
                return true
            } catch {
                return false
            }
        }
    }

    /// A rename the log vouches for did not happen. Something that appeared
    /// at `dest` meanwhile, under a mode that replaces nothing, is left as
    /// it is, and so is the download beside it: each start tries again. Any
    /// other refusal (a folder made immutable, a read-only remount) is tried
    /// again while the agent runs (`publishAgain`), and an idle exit says it is left.
    private func cannotPublish(_ rename: Rename, _ error: Error) {
        let metadata: Logger.Metadata = ["task.id": "\(rename.task)", "dest": "\(rename.dest)", "error": "\(error)"]
        if let error = error as? SystemError, error.errno == EEXIST {
            logger.error("something appeared where a finished task publishes; it is left alone, the download stays beside it",
                         metadata: metadata.merging(["part": "\(rename.part)"]) { $1 })
        } else {
            logger.error("cannot publish", metadata: metadata)
            unpublished.append(rename)
        }
    }

    /// Where the next attempt starts: the logged bytes with their `If-Range`
    /// validator, if the recovery plan says resume and the partial file holds
    /// them; else 0 (the attempt then cuts the file to match).
    func resumePoint(for task: TaskState) -> (offset: Int64, ifRange: String?) {
        guard case .resume(let at, let validator) = RecoveryPlan.plan(for: task, nowMs: FileSystem.nowMs),
              let part = task.partPath, let size = root.size(part), size >= at else { return (0, nil) }
        return (at, validator)
    }

    // MARK: - Scheduling and attempts

    private func startReadyTasks() throws {
        releaseIdleLocks()
        let now = FileSystem.nowMs
        let completing = Array(awaitingSync.keys)
        for id in SchedulerPolicy.tasksToStart(in: log.state, nowMs: now, limits: config.limits, completing: completing,
                                               extraConnections: extraConnectionsByHost) {
            // (One whose file a stopped attempt asked for goes once that file is made.)
            guard preparer.preparing[id] == nil else { continue }
            // Its job, let go while it waited, is read back: every step from here on reads it.
            try log.holdJob(of: id)
            guard let task = log.state[id] else { continue }
            start(task)
        }
        nextTimedWakeMs = SchedulerPolicy.nextWakeMs(in: log.state, nowMs: now)
    }

    /// A task that stopped (ended, paused, waiting to retry) holds no lock.
    private func releaseIdleLocks() {
        for (id, descriptor) in partLocks where attemptByTask[id] == nil && awaitingSync[id] == nil && segmented[id] == nil {
            close(descriptor)
            partLocks[id] = nil
        }
    }

    /// `total_timeout` (timeoutIntervalForResource) runs from the task's first
    /// start, across attempts, pauses and restarts.
    func deadlineMs(of task: TaskState) -> Int64 {
        (task.firstStartedAtMs ?? FileSystem.nowMs) + Int64(config.totalTimeout) * 1000
    }

    var totalTimeoutWords: String { "did not finish within total_timeout (\(config.totalTimeout) s) of its first start" }

    func start(_ task: TaskState) {
        if meteredLinkForbids(task) {
            pause(task.id, reason: .metered, bytesIfIdle: task.bytes)
            needsScheduling = true
            return
        }
        // (A video joined into one file is named once its playlist tells its format: see `expand`.)
        if let dest = task.spec.dest, !HLSPublisher.joinsIntoOneFile(task.spec), endedByExistingDest(task, dest) { return }
        if deadlineMs(of: task) <= FileSystem.nowMs {
            fail(task, reason: totalTimeoutWords, code: .totalTimeout, keeping: task.bytes)
            needsScheduling = true
            return
        }
        if task.isFannedOut {
            resumeParent(task)
            return
        }
        if task.spec.upload != nil {
            startResumableUpload(task)
            return
        }
        if startSegmented(task) { return }
        let (offset, ifRange) = task.bytes > 0 ? resumePoint(for: task) : (0, nil)
        let ifChanged = offset == 0 ? validatorsForUpdate(task) : nil
        if offset == 0, ifChanged == nil, task.spec.behaviour.body == .partialFile, partLocks[task.id] == nil,
           let part = task.partPath {
            // A new file: made by a worker, the request sent once it is (`partialsPrepared`).
            let attempt = task.nextAttempt
            log.record(.started(Started(attempt: attempt, offset: 0, url: task.currentURL)), task: task.id)
            preparer.prepare(part, mode: partialMode(of: task), for: task.id, attempt: attempt, root: root)
            return
        }
        beginAttempt(task, offset: offset, ifRange: ifRange, ifChanged: ifChanged, recordingStart: true)
    }

    /// `overwrite = "skip"` or `"fail"`, and `path` exists: the task ends
    /// without a transfer (true), skipped or failed.
    func endedByExistingDest(_ task: TaskState, _ path: String) -> Bool {
        guard task.spec.overwrite == .skip || task.spec.overwrite == .fail, root.exists(path) else { return false }
        if task.spec.overwrite == .skip {
            log.record(.finished(Finished(bytes: root.size(path) ?? 0, dest: path, skipped: "skipped: \(path) already exists")),
                       task: task.id)
        } else {
            fail(task, reason: "\(path) already exists (overwrite = \"fail\")", code: .destExists)
        }
        needsScheduling = true
        return true
    }

    /// An HLS key is a secret on disk too: readable by its owner only.
    private func partialMode(of task: TaskState) -> mode_t {
        task.spec.parent != nil && task.spec.dest?.hasSuffix(".key") == true ? 0o600 : 0o644
    }

    /// The attempts whose partial files were made: each starts if its task
    /// still waits for it. A task cancelled or failed meanwhile has its file
    /// removed again (the worker may have made it after the removal), unless
    /// another task now holds that path.
    private func partialsPrepared(_ results: [PartialPreparer.Prepared]) {
        for prepared in results {
            guard let task = log.state[prepared.taskID] else { continue }
            if task.phase == .running, task.attempts == prepared.attempt, attemptByTask[task.id] == nil, !stopping {
                beginAttempt(task, offset: 0, ifRange: nil, ifChanged: nil, recordingStart: false)
            } else if task.phase.isEnded, task.bytes == 0, let part = task.partPath, let dest = task.spec.dest,
                      Destinations.holder(of: dest, in: log.state, except: task.id) == nil {
                removePartial(part, of: task.id)
            }
        }
        needsScheduling = true
    }

    /// Sets up the transfer and hands it to curl (`started` recorded first unless it already was).
    private func beginAttempt(_ task: TaskState, offset: Int64, ifRange: String?, ifChanged: PublishedValidators?,
                              recordingStart: Bool) {
        let attempt: Exchange
        do {
            // A playlist is read into memory; everything else that keeps a body into its partial file.
            let keepsFile = task.spec.behaviour.body == .partialFile
            let mode = partialMode(of: task)
            let makePartial: () throws -> Int32 = { [unowned self] in
                guard keepsFile, let part = task.partPath else { return -1 }
                if partLocks[task.id] == nil { partLocks[task.id] = try root.lockPartial(part) }
                return try root.openPartial(part, truncatingTo: offset, mode: mode)
            }
            // A conditional request makes its partial file only if a body comes (a 304 brings none).
            let sink: Exchange.Sink
            if keepsFile, let part = task.partPath {
                sink = .partialFile(ifChanged != nil ? PartialFile(path: part, makeOnFirstByte: makePartial)
                                        : PartialFile(path: part, descriptor: try makePartial()))
            } else if task.spec.behaviour.body == .memory {
                sink = .memory(limit: Self.playlistLimit, overflow: Self.playlistTooLarge)
            } else {
                sink = .discard
            }
            attempt = try makeExchange(task, offset: offset, ifRange: ifRange, ifChanged: ifChanged, sink: sink)
            let id = task.id, serial = attempt.serial
            attempt.onProgress = { [unowned self] progress in self.log.record(.progressed(progress), task: id) }
            attempt.onRedirected = { [unowned self] hop in self.log.record(.redirected(hop), task: id) }
            attempt.onSyncWanted = { [unowned self] descriptor, offset in
                self.syncer.sync(descriptor, .init(taskID: id, attempt: serial, offset: offset, complete: false))
            }
        } catch {
            refuseStart(task, error)
            return
        }
        if recordingStart {
            log.record(.started(Started(attempt: task.nextAttempt, offset: offset, url: task.currentURL)), task: task.id)
        }
        register(attempt)
    }

    /// A task whose attempt could not be set up fails, keeping its bytes unless another process holds its partial file.
    func refuseStart(_ task: TaskState, _ error: Error) {
        needsScheduling = true
        switch error {
        case let busy as DownloadRoot.Busy:
            fail(task, reason: "cannot start: \(busy)", code: .destBusy, removingPartial: false)
        case let error as SystemError:
            let failure = DiskFailure(operation: "open", path: task.partPath ?? "", errno: error.errno)
            let code = failure.code == .localError ? FailureCode.cannotStart : failure.code
            fail(task, reason: "cannot start: \(error)", code: code, keeping: task.bytes)
        default:
            fail(task, reason: "cannot start: \(error)", code: .cannotStart, keeping: task.bytes)
        }
    }

    /// Why a 304 cannot be taken as "unchanged", if it cannot.
    private func doubtAbout304(_ task: TaskState, etag: String?, sent: String?) -> String? {
        if let etag, let sent, etag != sent, etag.trimmingPrefix("W/") != sent.trimmingPrefix("W/") {
            return "the server answered 304 Not Modified with ETag \(etag), not the \(sent) asked about"
        }
        guard let dest = task.spec.dest else { return nil }
        // The sha256 a file was checked against when published says it without reading it
        // again (a 1,000-file hourly sync must not hash 1,000 files on the loop).
        if let expected = task.spec.sha256, log.state.published[dest]?.sha256 != expected {
            return "the server answered 304 Not Modified, but \(dest) was not published with the job's sha256"
        }
        // md5 is not recorded at publication (rare in jobs): checked by reading the file.
        guard let expected = task.spec.md5 else { return nil }
        guard let digests = try? Publisher.hash(dest, md5: true, root: root) else {
            return "the server answered 304 Not Modified, but \(dest) cannot be read to check it"
        }
        return digests.md5 == expected ? nil : "the server answered 304 Not Modified, but \(dest) does not match the job's md5"
    }

    /// `overwrite = "update"`: the validators to ask with, if this agent
    /// published the file at `dest` and it is still that file (same size and
    /// modification time). Otherwise the whole file is fetched again.
    func validatorsForUpdate(_ task: TaskState) -> PublishedValidators? {
        guard task.spec.overwrite == .update, !fetchWhole.contains(task.id), let dest = task.spec.dest,
              let published = log.state.published[dest], let onDisk = root.sizeAndModified(dest) else { return nil }
        return published.validators(for: task.spec.url, size: onDisk.size, modifiedNs: onDisk.modifiedNs)
            .map { PublishedValidators(etag: $0.etag, lastModified: $0.lastModified) }
    }

    /// Hands an attempt to curl and indexes it by handle and by task.
    /// An HLS playlist is kept in memory, at most this many bytes.
    static let playlistLimit = 16 << 20
    static func playlistTooLarge(_ url: String) -> AttemptOutcome {
        .permanent(reason: "the playlist at \(Redaction.url(url)) is over \(playlistLimit >> 20) MiB", code: .badPlaylist)
    }

    /// The exchange of `task`'s request (or of one step of its protocol).
    func makeExchange(_ task: TaskState, offset: Int64 = 0, rangeEnd: Int64? = nil, ifRange: String? = nil,
                      ifChanged: PublishedValidators? = nil, protocolRequest: ProtocolRequest? = nil,
                      sink: Exchange.Sink) throws -> Exchange {
        // A child's credentials are its parent's, for its parent's host.
        let origin = task.spec.parent.flatMap { log.state[$0]?.spec.url }
        let plan = try RequestPlan.of(task, sharedHeaders: settings.headers, origin: origin, offset: offset, rangeEnd: rangeEnd,
                                      ifRange: ifRange, ifChanged: ifChanged, protocolRequest: protocolRequest)
        return try Exchange(for: task.id, plan: plan, sink: sink, settings: settings, speedCap: task.spec.maxSpeed,
                            deadlineMs: deadlineMs(of: task), cookies: cookies)
    }

    func register(_ attempt: Exchange) {
        attempts[attempt.easy] = attempt
        attemptByTask[attempt.taskID] = attempt.easy
        multi.add(attempt.easy)
        shareOverallSpeed()
    }

    /// Gives each running transfer its share of `max_overall_speed`, again
    /// whenever one starts or stops (and on SIGHUP). `capsChanged`: their own
    /// caps changed (SIGHUP's `max_speed`), so each is set even with nothing shared.
    func shareOverallSpeed(capsChanged: Bool = false) {
        guard capsChanged || config.maxOverallSpeed != nil || sharingSpeed || !segmented.isEmpty else { return }
        // Set once a cap was shared, so that removing it on SIGHUP gives each transfer its own cap back.
        sharingSpeed = config.maxOverallSpeed != nil || !segmented.isEmpty
        var own: [String: Int64?] = [:], connections: [String: Int64] = [:]
        for attempt in attempts.values {
            own[attempt.taskID] = attempt.ownSpeedCap
            connections[attempt.taskID, default: 0] += 1
        }
        let shares = SpeedShares.split(overall: config.maxOverallSpeed, own: own)
        // A task's cap is shared by its connections (a segmented download has several).
        func cap(of attempt: Exchange) -> Int64? {
            (shares[attempt.taskID] ?? nil).map { max(1, $0 / max(1, connections[attempt.taskID] ?? 1)) }
        }
        for attempt in attempts.values where !attempt.limitSpeed(to: cap(of: attempt)) {
            logger.warning("curl refused a new speed limit", metadata: ["task.id": "\(attempt.taskID)"])
        }
    }

    /// Records a hop (a redirect the agent follows, a master playlist's
    /// variant) and starts the next request at its target.
    func hop(_ task: TaskState, to target: String, status: Int) {
        log.record(.redirected(Redirected(from: task.currentURL, to: target, status: status)), task: task.id)
        if let moved = log.state[task.id] { start(moved) }
    }

    /// Removes an attempt from curl; its partial file keeps the durable bytes.
    @discardableResult
    func detach(_ id: String) -> Exchange? {
        guard let easy = attemptByTask.removeValue(forKey: id), let attempt = attempts.removeValue(forKey: easy) else { return nil }
        multi.remove(easy)
        shareOverallSpeed()
        if attempt.sawSetCookie { saveCookies() }
        return attempt
    }

    func saveCookies() {
        do { try cookies?.save() } catch {
            logger.error("cannot save cookies", metadata: ["file": "\(cookies?.file ?? "")", "error": "\(error)"])
        }
    }

    /// The loop's own timers: `idle_timeout` per attempt, `total_timeout` per
    /// task, and the progress interval for bytes no later write will sync.
    private func abortStalledAttempts() {
        let now = FileSystem.monotonicMs
        let wallNow = FileSystem.nowMs
        // A DELETE no one answers is given up after idle_timeout: the server expires the upload.
        for deletion in terminations.values where deletion.isStalled(nowMs: now) {
            terminationEnded(deletion, deletion.stalledOutcome())
        }
        for attempt in attempts.values where attempts[attempt.easy] === attempt {
            // (An attempt ended by an earlier one in this loop, as connections of one download are, is skipped.)
            if attempt.deadlineMs <= wallNow {
                // No flush: failing deletes the partial file.
                let url = Redaction.url(log.state[attempt.taskID]?.currentURL ?? "")
                finish(attempt, .permanent(reason: "\(totalTimeoutWords) (\(url))", code: .totalTimeout))
            } else if attempt.isStalled(nowMs: now) {
                finish(attempt, attempt.stalledOutcome())
            } else {
                attempt.syncIfOverdue(nowMs: now)
            }
        }
    }

    func finish(_ attempt: Exchange, _ outcome: AttemptOutcome) {
        let id = attempt.taskID
        var outcome = outcome
        // The bytes the log vouches for once the attempt is over.
        var durable = attempt.durable
        let download = segmented[id]
        if let run = uploads[id], run.serial == attempt.serial {
            detach(id)
            guard let ended = uploadStepEnded(run, attempt, outcome) else {
                needsScheduling = true
                return
            }
            uploads[id] = nil
            // Held across attempts, not past the upload's end.
            if case .complete = ended { uploadReach[id] = nil }
            outcome = ended
            // What the server confirmed, as the log says it.
            durable = log.state[id]?.bytes ?? 0
        } else if let download, !refreshes.contains(attempt.serial) {
            // One connection of several: the task's attempt may go on without it.
            guard let ended = connectionEnded(download, attempt, outcome) else {
                needsScheduling = true
                return
            }
            outcome = ended
            // Only what the others wrote before a transient failure is flushed and claimed: after a
            // failed sync a second fdatasync of the same file reports success for pages it lost.
            let flushing = if case .transient(_, _, false) = outcome { true } else { false }
            durable = stopSegmented(download, flushing: flushing)
        } else {
            detach(id)
        }
        needsScheduling = true
        guard let task = log.state[id] else { return }
        if refreshes.remove(attempt.serial) != nil {
            refreshed(task, attempt, outcome)
            return
        }

        var metrics = attempt.metrics
        // A segmented download received through all its connections.
        if let download { metrics.bytesReceived = download.bytesReceived }
        switch outcome {
        case .complete where task.spec.behaviour.fansOut:
            playlistArrived(task, attempt)
        case .complete(let bytes) where attempt.keepsBody:
            // Published once its data is durable (see DataSyncer).
            awaitingSync[id] = (attempt, bytes, download)
            syncer.sync(attempt.partialFile?.descriptor ?? -1, .init(taskID: id, attempt: attempt.serial, offset: bytes, complete: true))
        case .complete(let bytes):
            recordFinished(task, attempt, bytes: bytes, dest: nil)
        case .transient(let reason, let retryAfterMs, let restartFromZero):
            // Only a download keeps what it received; anything else starts over.
            let bytes = restartFromZero || !task.spec.isResumable ? 0 : durable
            let address = NetworkPolicy.connectAddress(reported: metrics.remoteAddress, url: task.currentURL,
                                                       viaProxy: attempt.goesThroughProxy)
            switch NetworkPolicy.verdict(failedOnTheWire: attempt.failedOnTheWire, url: task.currentURL,
                                         reachable: network.reaches(address, nameUnresolved: attempt.nameUnresolved),
                                         attemptStartedMs: attempt.startedMs, routesChangedMs: network.routesChangedMs) {
            case .waitForNetwork:
                // No retry is spent; a route to the server coming back resumes it.
                log.record(.paused(Paused(bytes: bytes, reason: .offline, metrics: metrics)), task: id)
                waitingFor[id] = (address, attempt.nameUnresolved)
                logger.notice("task waits for the network", metadata: ["task.id": "\(id)", "reason": "\(reason)"])
                return
            case .retryAtOnce:
                // The link went and came back while it ran (a flap): again now, no retry spent.
                log.record(.paused(Paused(bytes: bytes, reason: .offline, metrics: metrics)), task: id)
                log.record(.resumed(Resumed(bytes: bytes, reason: "the network changed during the attempt")), task: id)
                return
            case .retry:
                break
            }
            let decision = RetryDecision.decide(
                reason: reason, attemptsUsed: task.attemptsUsed,
                retriesAllowed: task.spec.retries ?? config.retries, retryAfterMs: retryAfterMs,
                nowMs: FileSystem.nowMs, deadlineMs: attempt.deadlineMs, totalTimeoutS: config.totalTimeout,
                jitter: Double.random(in: 0...1))
            switch decision {
            case .retry(let delay):
                log.record(.retrying(Retrying(attempt: task.attempts, reason: reason, delayMs: delay, bytes: bytes, metrics: metrics)),
                           task: id)
                logger.notice("task will retry", metadata: ["task.id": "\(id)", "reason": "\(reason)", "delay_ms": "\(delay)"])
            case .fail(let words, let code):
                // A server outage: what arrived is kept, so `resume` goes on from there.
                fail(task, reason: words, code: code, metrics: metrics, keeping: bytes)
            }
        case .permanent(let reason, let code):
            fail(task, reason: reason, code: code, metrics: metrics)
        case .localFailure(let reason, let code):
            fail(task, reason: reason, code: code, metrics: metrics, keeping: durable)
        case .fallBack(let reason):
            // Not the server failing to serve the file: the agent changing how it asks. Again at once, from 0.
            log.record(.retrying(Retrying(attempt: task.attempts, reason: reason, delayMs: 0, bytes: 0, metrics: metrics, free: true)),
                       task: id)
            logger.notice("task goes on over one connection", metadata: ["task.id": "\(id)", "reason": "\(reason)"])
        case .rangeRefused(let reason):
            // Only a connection of a segmented download asks for a range of its own (handled above).
            fail(task, reason: reason, code: .rangeIgnored, metrics: metrics)
        case .redirect(let target, let status):
            follow(task, to: target, status: status, metrics: metrics)
        case .notModified(let etag):
            // Nothing was written. Believed only if it confirms what we have (RFC 9111 §4.3.4: a
            // 304 naming another ETag is about another representation) and the file answers for
            // the job's checksum (see doubtAbout304); otherwise the whole file is fetched.
            if let doubt = doubtAbout304(task, etag: etag, sent: attempt.plan.headers.first { $0.name == "If-None-Match" }?.value) {
                fetchWhole.insert(id)
                startOverWhole(task, because: doubt, metrics: metrics)
                return
            }
            if let part = task.partPath { removePartial(part, of: id) }
            let dest = task.spec.dest
            let onDisk = dest.flatMap(root.sizeAndModified)
            log.record(.finished(Finished(bytes: onDisk?.size ?? 0, dest: dest, metrics: metrics, modifiedNs: onDisk?.modifiedNs,
                                          unchanged: true)), task: id)
            logLinesAfterCommit.append((.info, "task unchanged", ["task.id": "\(id)", "dest": "\(dest ?? "-")"]))
        }
    }

    /// Tried again at once from byte 0, what the task has so far thrown away (no retry's delay).
    /// - Parameter oneConnection: a segmented download's next attempt takes a single connection.
    private func startOverWhole(_ task: TaskState, because reason: String, metrics: AttemptMetrics, oneConnection: Bool = false) {
        let why = reason + "; fetching the whole file"
        if let part = task.partPath { removePartial(part, of: task.id) }
        if oneConnection { log.record(.progressed(Progressed(bytes: 0, fallback: why)), task: task.id) }
        log.record(.retrying(Retrying(attempt: task.attempts, reason: why, delayMs: 0, bytes: 0, metrics: metrics)), task: task.id)
        logger.notice("task will retry", metadata: ["task.id": "\(task.id)", "reason": "\(why)", "delay_ms": "0"])
    }

    /// A hop the attempt left to us: the same checks curl makes (http or
    /// https, at most max_redirects), recorded like curl's own hops; the
    /// next request goes to the new URL without the job's credentials
    /// unless it is the job's own host.
    private func follow(_ task: TaskState, to target: String, status: Int, metrics: AttemptMetrics) {
        guard (try? URLRules.checkTransferURL(target, key: "Location")) != nil else {
            fail(task, reason: "refused a redirect to a scheme other than http or https (\(Redaction.url(target)))",
                 code: .curl(Int(CURLE_UNSUPPORTED_PROTOCOL.rawValue)), metrics: metrics)
            return
        }
        guard task.redirects < settings.maxRedirects else {
            fail(task, reason: "more than \(settings.maxRedirects) redirects from \(Redaction.url(task.spec.url))",
                 code: .curl(Int(CURLE_TOO_MANY_REDIRECTS.rawValue)), metrics: metrics)
            return
        }
        hop(task, to: target, status: status)
    }

    /// `finished` with what the attempt learned: where the body went (if it
    /// was kept), and for upload and data tasks the response's status and headers.
    /// - Parameter modifiedNs: the published file's modification time (a rename keeps the partial file's).
    /// - Parameter received: the bytes all connections of a segmented download received.
    func recordFinished(_ task: TaskState, _ attempt: Exchange, bytes: Int64, dest: String?, modifiedNs: Int64? = nil,
                        received: Int64? = nil) {
        var metrics = attempt.metrics
        if let received { metrics.bytesReceived = received }
        let response = task.spec.behaviour.recordsResponse ? attempt.responseHeaders : nil
        log.record(.finished(Finished(bytes: bytes, dest: dest, sha256: task.spec.sha256,
                                      status: response == nil ? nil : metrics.status,
                                      responseHeaders: response, metrics: metrics, modifiedNs: modifiedNs)), task: task.id)
        logLinesAfterCommit.append((.info, "task finished", ["task.id": "\(task.id)", "dest": "\(dest ?? "-")", "bytes": "\(bytes)",
                                                         "status": "\(metrics.status)"]))
    }

    /// Records `failed`. `keeping` > 0: the partial file keeps that many
    /// durable bytes (a full disk, a server outage), so that `resume` goes
    /// on from there; otherwise the partial file is removed.
    /// - Parameter removingPartial: false when the partial file is not ours to remove (another process holds it).
    func fail(_ task: TaskState, reason: String, code: FailureCode, metrics: AttemptMetrics? = nil, keeping: Int64 = 0,
              removingPartial: Bool = true) {
        let kept = task.spec.isResumable ? keeping : 0
        // An HLS parent's partial name is its children's folder: their bytes stay for `resume`.
        if kept == 0, removingPartial, task.spec.behaviour.body == .partialFile, let part = task.partPath {
            removePartial(part, of: task.id)
        }
        refreshAt[task.id] = nil
        log.record(.failed(Failed(reason: reason, code: code, bytes: kept, metrics: metrics)), task: task.id)
        logLinesAfterCommit.append((.error, "task failed", ["task.id": "\(task.id)", "reason": "\(reason)"]))
    }

    func removePartial(_ part: String, of id: String) {
        do { try root.remove(part) } catch {
            logger.error("cannot remove a partial file", metadata: ["task.id": "\(id)", "error": "\(error)"])
        }
    }

    private func pauseAllForStop() {
        for id in Set(attemptByTask.keys).union(segmented.keys).union(preparer.preparing.keys).sorted() {
            pause(id, reason: .agentStopping, bytesIfIdle: 0)
        }
        // A parent waiting for its children stops with them.
        for id in log.state.families.keys.sorted() where log.state[id]?.phase == .running {
            pause(id, reason: .agentStopping, bytesIfIdle: 0)
        }
    }

    /// Records `paused`, stopping the task's attempt if one runs: a download
    /// keeps its durable bytes, anything else will start over. A task with no
    /// attempt keeps `bytesIfIdle`.
    @discardableResult
    func pause(_ id: String, reason: PauseReason, bytesIfIdle: Int64) -> Int64 {
        if let download = segmented[id] {
            let bytes = stopSegmented(download, flushing: true)
            log.record(.paused(Paused(bytes: bytes, reason: reason)), task: id)
            return bytes
        }
        let attempt = detach(id)
        attempt?.flush()
        var bytes = attempt.map { $0.plan.ask.resumes ? $0.durable : 0 } ?? bytesIfIdle
        // A resumable upload keeps what its server confirmed.
        if uploads.removeValue(forKey: id) != nil { bytes = log.state[id]?.bytes ?? 0 }
        log.record(.paused(Paused(bytes: bytes, reason: reason, metrics: attempt?.metrics)), task: id)
        return bytes
    }

    // MARK: - Control jobs

    /// Carries out a control job and records what came of it for each
    /// target task (SPEC §4.3). Returns an error sentence for the job file
    /// when it names no task.
    private func apply(_ control: ControlJob, source: JobSource) -> String? {
        if control.action == .compact {
            let olderThanS = control.olderThanS ?? config.keepEndedS
            // Started at the next commit, or once the running one ends: every request gets its report.
            let outcome = compactor.busy ? "compaction queued after the running one (ended tasks older than \(olderThanS) s)"
                : "compaction started (ended tasks older than \(olderThanS) s)"
            // Requests for one cutoff share a compaction; another cutoff gets its own, after.
            if let same = compactionRequests.firstIndex(where: { $0.olderThanS == olderThanS }) {
                compactionRequests[same].files.append(source.file)
            } else {
                compactionRequests.append((olderThanS, [source.file]))
            }
            log.record(.controlled(Controlled(action: control.action.rawValue, target: "*", outcome: outcome,
                                              file: source.file, identity: source.identity)))
            return nil
        }
        let targets: [TaskState]
        if control.task == "*" {
            // A forgotten task is out of the user's sight: "all" does not include it.
            targets = log.state.orderedTasks.filter { !$0.forgotten }
        } else if let task = log.state[control.task] {
            targets = [task]
        } else {
            return "key \"task\": no task has the id \"\(control.task)\""
        }
        var outcomes: [String] = []
        for task in targets {
            let outcome = carryOut(control.action, on: task)
            // One line per task for a single target; for "*", only what changed.
            if control.task != "*" || !outcome.hasPrefix("nothing to do") { outcomes.append("\(task.id): \(outcome)") }
        }
        let words = outcomes.isEmpty ? "nothing to do: no task to \(control.action.rawValue)" : Controlled.outcome(of: outcomes)
        log.record(.controlled(Controlled(action: control.action.rawValue, target: control.task, outcome: words,
                                          file: source.file, identity: source.identity)),
                   task: control.task == "*" ? nil : control.task)
        needsScheduling = true
        return nil
    }

    func carryOut(_ action: ControlJob.Action, on task: TaskState) -> String {
        if action == .forget { return forget(task) }
        if action == .resume, task.phase == .failed,
           let cancelled = (log.state.children[task.id] ?? []).first(where: { log.state[$0]?.phase == .cancelled }) {
            let (child, whole) = task.spec.upload != nil ? ("part", "upload") : ("segment", "video")
            return "cannot run again: its \(child) \(cancelled) was cancelled; cancel the \(whole) and submit it again"
        }
        // On a parent, control applies to its children too, whenever it applies to the parent.
        let applies = switch action {
        case .pause: task.phase.isActive
        case .resume: task.phase == .paused || task.phase == .failed
        case .cancel: !task.phase.isEnded || task.phase == .failed
        case .forget, .compact: false
        }
        if applies, log.state.families[task.id] != nil { carryOutOnChildren(action, of: task) }
        switch (action, task.phase) {
        case (.pause, .queued), (.pause, .running):
            return "paused at byte \(pause(task.id, reason: .user, bytesIfIdle: task.bytes))"
        case (.pause, .paused) where task.pauseReason != .user:
            // It waited for the network; now it waits for the user, whatever the network does.
            return "paused at byte \(pause(task.id, reason: .user, bytesIfIdle: task.bytes))"
        case (.resume, .paused):
            log.record(.resumed(Resumed(bytes: task.bytes, reason: "resumed by the user")), task: task.id)
            return "resumed at byte \(task.bytes)"
        case (.resume, .failed):
            // Run again: the way to recover after freeing disk space or a server outage.
            if let dest = task.spec.dest, let holder = Destinations.holder(of: dest, in: log.state, except: task.id) {
                return "cannot run again: \(dest) is now the destination of task \(holder)"
            }

            // A task that failed keeping nothing left no partial file: one there now is someone else's
            // (the reason it was refused at intake, or a second agent's), and running again would truncate it.
            if task.bytes == 0, task.spec.behaviour.body == .partialFile, let part = task.partPath, root.exists(part) {
                return "cannot run again: \(part) exists and is not this task's; move it away first"
            }
            // The bytes kept when it failed, if its partial file still holds them.
            // (A resumable upload's bytes are on its server: its HEAD says what it still holds.)
            let kept = task.spec.upload != nil ? task.bytes : task.partPath.flatMap(root.size) ?? 0
            let bytes = task.spec.isResumable && kept >= task.bytes ? task.bytes : 0
            log.record(.resumed(Resumed(bytes: bytes, reason: "run again by the user after: \(task.error ?? "a failure")")),
                       task: task.id)
            return "runs again from byte \(bytes)"
        case (.cancel, .queued), (.cancel, .running), (.cancel, .paused), (.cancel, .failed):
            let download = segmented[task.id]
            let attempt = download == nil ? detach(task.id) : nil
            attempt?.flush()
            var bytes = download.map { stopSegmented($0, flushing: false) } ?? attempt?.durable ?? task.bytes
            // A task that failed keeping nothing has no partial file: one there is not its to remove.
            if let part = task.partPath, task.phase != .failed || task.bytes > 0 { removePartial(part, of: task.id) }
            if uploads.removeValue(forKey: task.id) != nil { bytes = task.bytes }
            terminateUpload(of: task)
            log.record(.cancelled(Cancelled(bytes: bytes, metrics: attempt?.metrics)), task: task.id)
            return "cancelled"
        case (.pause, let phase), (.resume, let phase), (.cancel, let phase), (.forget, let phase), (.compact, let phase):
            return "nothing to do: task already \(phase.rawValue)"
        }
    }

    /// An ended task leaves `status`, its segments with it; a live one is
    /// refused, since forgetting must never lose a transfer.
    private func forget(_ task: TaskState) -> String {
        guard task.phase.isEnded else { return "nothing to do: task is \(task.phase.rawValue); cancel it first" }
        // Read afresh: forgetting a video forgets its segments, which "*" then meets again.
        guard log.state[task.id]?.forgotten == false else { return "nothing to do: task already forgotten" }
        log.record(.forgotten(Forgotten()), task: task.id)
        for child in log.state.children[task.id] ?? [] where log.state[child]?.forgotten == false {
            log.record(.forgotten(Forgotten()), task: child)
        }
        return "forgotten"
    }

    // MARK: - Configuration

    /// SIGHUP: read the config file again. Settings that transfers use take
    /// effect for the next attempts; paths need a restart. A file that no
    /// longer parses is reported and the running settings kept.
    private func reloadConfig() {
        var file = configFile ?? "the default config file"
        do {
            let reloaded = try ResolvedConfig.load(configFile: configFile, stateDir: paths.stateDir, inbox: paths.inbox)
            file = reloaded.file
            let changes = AgentConfig.changes(from: config, to: reloaded.config)
            let needRestart = changes.filter(AgentConfig.restartKeys.contains)
                + (reloaded.paths.downloadDir != paths.downloadDir && !changes.contains("download_dir") ? ["download_dir"] : [])
            let applied = changes.filter { !AgentConfig.restartKeys.contains($0) }
            var next = reloaded.config
            // Paths stay as the agent started with them.
            next.inbox = config.inbox; next.stateDir = config.stateDir; next.downloadDir = config.downloadDir
            next.cookies = config.cookies
            config = next
            settings = TransferSettings(config: next)
            intake.parser = jobParser()
            log.record(.configReloaded(ConfigReloaded(file: file, applied: applied, needRestart: needRestart, hooks: next.hooks)))
            // Running transfers follow max_speed too: before, only the next attempts were held to it,
            // though the log said "applied".
            let capsChanged = applied.contains("max_speed")
            if capsChanged { for attempt in attempts.values { attempt.speedCapOfConfig = next.maxSpeed } }
            shareOverallSpeed(capsChanged: capsChanged)
            logger.notice("config reloaded", metadata: ["file": "\(file)", "applied": "\(applied)", "need_restart": "\(needRestart)"])
            // allow_metered may now hold back, or let go, tasks the link had no say over before.
            if applied.contains("allow_metered") { applyNetworkPolicy() }
        } catch {
            log.record(.configReloaded(ConfigReloaded(file: file, applied: [], needRestart: [], error: "\(error)")))
            logger.error("config not reloaded; keeping the running settings", metadata: ["file": "\(file)", "error": "\(error)"])
        }
        needsScheduling = true
    }

    private func jobParser() -> JobParser {
        JobParser(downloadDir: paths.downloadDir, defaultNotify: config.notify,
                  forbiddenDirs: FileSystem.spellingsBeneath(paths.downloadDir, of: [paths.stateDir, paths.inbox]))
    }

    // MARK: - Notifications

    /// `batch_finished` is committed, then `notified`, then the notice goes
    /// out: a restart never posts one twice.
    private func announceDrainedBatches() throws {
        let drained = Notices.drainedBatches(in: log.state)
        let ownNotices = log.state.owedOwnNotices.sorted()
        guard !drained.isEmpty || !ownNotices.isEmpty else { return }
        for id in ownNotices {
            guard let task = log.state[id] else { continue }
            post(Notices.ownNotice(for: task), batch: nil, task: id)
        }
        for batch in drained { log.record(.batchFinished(batch)) }
        try commit()
        if !drained.isEmpty { CrashPoint.batchFinishedCommitted.reached() }
        for batch in drained { announce(batch) }
        // `notified` goes to disk, then the notices go out (see `post`).
        try commit()
    }

    // MARK: - Hooks

    /// Starts the runs the log says are owed, as slots allow. `hook_started`
    /// is committed before any process is spawned: a crash in between loses
    /// a run rather than repeat it (at most once per end, like notices).
    private func startOwedHooks() throws {
        let runs = HookPlan.due(in: log.state, limit: hooks.freeSlots)
        guard !runs.isEmpty else { return }
        var starting: [(run: HookPlan.Run, command: [String])] = []
        for run in runs {
            guard let command = run.hook == .taskEnd ? config.onTaskEnd : config.onBatchEnd else { continue }
            log.record(.hookStarted(HookStarted(hook: run.hook, batchSeq: run.batchSeq, program: command[0])), task: run.task)
            starting.append((run, command))
        }
        try commit()
        CrashPoint.hookStartCommitted.reached()
        for (run, command) in starting {
            if case .failure(let failure) = hooks.spawn(run, command: command, timeoutS: config.hookTimeout) {
                log.record(.hookEnded(HookEnded(hook: run.hook, batchSeq: run.batchSeq, pid: nil, durationMs: 0,
                                                error: failure.description)), task: run.task)
                logger.error("hook not started", metadata: ["hook": "\(run.hook.rawValue)", "error": "\(failure)"])
                // Its slot is free again: the next owed run must not wait for an unrelated wake-up.
                needsScheduling = true
            }
        }
    }

    /// Records how each finished (or overdue, now killed) hook ended.
    private func hooksEnded() {
        for (run, ended) in hooks.reap() {
            log.record(.hookEnded(ended), task: run.task)
            if ended.exitStatus != 0 {
                let how = ended.timedOut ? "killed after hook_timeout (\(config.hookTimeout) s)"
                    : ended.signal.map { "ended by signal \($0)" } ?? "exit status \(ended.exitStatus ?? -1)"
                logger.warning("hook failed", metadata: ["hook": "\(run.hook.rawValue)", "task.id": "\(run.task ?? "-")", "how": "\(how)"])
            }
            // A slot is free: the next owed run can start.
            needsScheduling = true
        }
    }

    /// A batch's notice, or, for a batch of `notify = "none"` tasks alone (there for
    /// `on_batch_end`), a `notified` that says none was wanted.
    private func announce(_ batch: BatchFinished) {
        guard let shown = Notices.noticed(batch, in: log.state) else {
            log.record(.notified(Notified(batch: batch.batch, summary: Notices.notice(for: batch, in: log.state).summary,
                                          delivered: false, warning: "not shown: its tasks have notify = \"none\"")))
            return
        }
        post(Notices.notice(for: shown, in: log.state), batch: batch.batch, task: nil)
    }

    /// At most once (SPEC §6.3): `notified` is committed before the notice goes out, so a crash
    /// in between loses it rather than repeat it, like a hook's run.
    private func post(_ notice: Notice, batch: String?, task: String?) {
        log.record(.notified(Notified(batch: batch, summary: notice.summary)), task: task)
        noticesAfterCommit.append(notice)
    }
}

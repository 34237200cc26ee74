import CCurlShims
import Foundation
import Logging
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// The agent: one loop on one thread around `curl_multi_poll`, with the
/// inbox's inotify fd, a signalfd and the workers' wake-up pipes beside
/// curl's sockets. Every wake-up: take jobs → end exchanges → schedule →
/// announce → commit the batch of new events in one transaction. The
/// `EventLog` is the only mutable state that matters; the runners hold
/// what their tasks' transfers need while they run (`Runners`).
public final class Agent {
    public static let exitAllFinished: Int32 = 0
    public static let exitSomeFailed: Int32 = 4

    private var config: AgentConfig
    private let paths: AgentPaths
    /// Where `config` came from, read again on SIGHUP.
    private let configFile: String?
    private let logger: Logger
    private let notifier: BackgroundNoticePoster
    /// Opened as the agent is made: without libcurl, it stops before taking any job.
    private let curl: CurlMulti
    private let syncer: DataSyncer
    private let assembler: HLSAssembler
    private let preparer: PartialPreparer

    // Made as the run starts, once the log and download_dir are open.
    private var log: EventLog!
    private var context: RunnerContext!
    private var runners: Runners!
    private var network: NetworkWatch!
    private var compaction: CompactionScheduler!
    private var announcements: Announcements!
    private var control: ControlDesk!
    private var intake: Intake!
    private var inboxPoller: InboxPoller?
    /// aria2's JSON-RPC, when `rpc = true`.
    private var rpc: RPCDesk?
    private var held: HeldFiles

    /// When this run began: a task that ended failed since then makes `--exit-when-idle` exit 4.
    private var runStartedAtMs: Int64 = 0
    /// When a waiting task (not_before, retry backoff) becomes startable;
    /// recomputed at each scheduling pass, not on every wake-up.
    private var nextTimedWakeMs: Int64?
    /// Events wait at most this long for their transaction.
    static let commitIntervalMs: Int64 = 20
    private var lastCommitMs: Int64 = 0

    /// The state the agent holds: always the fold of the log it writes.
    public var state: AgentState { log?.state ?? AgentState() }

    /// - Parameter configFile: the file `config` was read from, read again on
    ///   SIGHUP (nil: nothing to reload).
    public init(config: AgentConfig, paths: AgentPaths, configFile: String? = nil, logger: Logger) throws {
        self.config = config
        self.paths = paths
        self.configFile = configFile
        self.logger = logger
        notifier = BackgroundNoticePoster(DesktopNotifier(logger: logger, inbox: paths.inbox))
        curl = try CurlMulti()
        syncer = try DataSyncer()
        assembler = try HLSAssembler()
        preparer = try PartialPreparer()
        held = HeldFiles(inbox: paths.inbox)
    }

    /// Runs until SIGTERM/SIGINT (exit 0) or, with `exitWhenIdle`, until the
    /// inbox is empty and nothing is queued or running (0, or 4 if a task failed).
    public func run(exitWhenIdle: Bool) throws -> Int32 {
        try StrictModes.makeTrustedStateDir(paths.stateDir)
        let lock = try StateLock(path: paths.lockFile, stateDir: paths.stateDir)
        let inboxLock = try InboxLock(inbox: paths.inbox, stateDir: paths.stateDir)
        // Made last (by the intake), checked now: a refusal comes before anything is recorded.
        try StrictModes.checkOwnFolderIfThere(Intake.rejectedDirectory(of: paths.inbox), what: Intake.rejectedWords)
        defer { withExtendedLifetime((lock, inboxLock)) {} }
        // Blocked before anything slow, so a stop signal during start-up is not lost.
        let signalFd = try Posix.stopSignals()
        defer { Posix.close(signalFd) }

        runStartedAtMs = Posix.nowMs
        log = try EventLog(store: EventStore(writingTo: paths.eventLog))
        defer { log.close() }
        held.hold("the event log", at: paths.eventLog, identity: try FileSystem.identity(of: paths.eventLog),
                  trusted: ("file in the state dir", false))
        held.hold("the state dir", at: paths.stateDir, identity: try FileSystem.identity(of: paths.stateDir),
                  trusted: ("state dir", true))
        var snapshotSeq = try log.store.newestSnapshotSeq()
        // A snapshot the last run was killed while writing: its parts, with no row, go now, not at the next snapshot.
        let unnamedParts = try log.store.removeUnnamedSnapshotParts()
        if unnamedParts > 0 { logger.info("removed the parts of a snapshot cut short", metadata: ["parts": "\(unnamedParts)"]) }
        let longLog = Compaction.isDue(lastSeq: log.state.lastSeq, snapshotSeq: snapshotSeq)
        if longLog {
            // A long log with no recent snapshot: the state just folded is stored now, before the
            // loop starts, so the compaction that follows (in the background) reads it instead of
            // folding the whole log again.
            try log.store.writeSnapshot(log.state, nowMs: Posix.nowMs, olderThanS: config.keepEndedS)
            snapshotSeq = log.state.lastSeq
        }
        // A compaction cut short (a crash, a stop, or the snapshot just written) is finished at once, with its cutoff.
        let unfinishedCompaction = try log.store.unfinishedCompaction()
        try FileSystem.makeDirectory(paths.downloadDir, mode: 0o755)
        let root = try DownloadRoot(path: paths.downloadDir, more: paths.moreDirs)
        for folder in try root.identities() {
            held.hold(PathRules.isSame(folder.path, paths.downloadDir) ? "download_dir" : "more_dirs folder", at: folder.path,
                      identity: folder.identity)
        }
        try makeEngine(root: root, snapshotSeq: snapshotSeq)

        log.record(.agentStarted(AgentStarted(pid: Posix.processID, version: SyncAgentVersion.current, hooks: config.hooks)))
        Recovery.resumeInterruptedTasks(in: context)
        announcements.recordHooksLeftUnended()
        announcements.announceOwedBatches()
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
        announcements.committed()
        // A long log is compacted at once, not at the first commit of new work (an idle agent may make none).
        if let olderThanS = unfinishedCompaction {
            compaction.start(olderThanS: olderThanS, trigger: longLog ? "log_size" : "interrupted")
        }
        compaction.startIfDue(intakeIsIdle: false)

        let watcher = try InboxWatcher(directory: paths.inbox)
        // (Looked up after the watch: a folder replaced in between is caught at the first check.)
        held.hold("the inbox", at: paths.inbox, identity: try FileSystem.identity(of: paths.inbox), trusted: ("inbox", true))
        intake = try Intake(inbox: paths.inbox, parser: context.rules, log: log, logger: logger,
                            exists: { [unowned self] path in context.publishing.existsOnceRenamed(path) })
        intake.applyControl = { [unowned self] job, source in control.apply(job, source: source) }
        // Its lock (see InboxLock): `.taken/` deleted or replaced would let a second agent take the inbox.
        // (The one locked, looked up as the lock was taken: one put in its place since is caught at the first check.)
        held.hold("the inbox's .taken folder", at: intake.takenDirectory, identity: inboxLock.identity, trusted: (Intake.takenWords, true))
        // Jobs a previous agent had moved out of the inbox but not yet recorded.
        intake.takeLeftovers()
        if config.rpc { rpc = try startRPC() }
        defer { rpc?.stop() }
        logger.info("agent started", metadata: [
            "state_dir": "\(paths.stateDir)", "inbox": "\(paths.inbox)", "tasks": "\(log.state.tasks.count)"])
        intake.startBacklog(scan: watcher.scan)
        inboxPoller = makeInboxPoller()
        // A stop leaves the rest of a backlog for the next start, and no taken file whose task is recorded.
        defer {
            intake.endBacklog()
            intake.finishRemovals()
        }

        let stopSignal = try loop(watcher: watcher, signalFd: signalFd, exitWhenIdle: exitWhenIdle)
        return try stop(after: stopSignal)
    }

    /// The parts the runners work with, around the log and download_dir just opened.
    private func makeEngine(root: DownloadRoot, snapshotSeq: Int64) throws {
        let cookies = try CookieJar.make(mode: config.cookies, stateDir: paths.stateDir)
        let exchanges = ExchangePool(curl: curl, cookies: cookies, overallCap: config.maxOverallSpeed, logger: logger)
        let publishing = PublishQueue(root: root, log: log, logger: logger)
        context = RunnerContext(log: log, root: root, exchanges: exchanges, syncer: syncer, preparer: preparer, assembler: assembler,
                                publishing: publishing, logger: logger, config: config, rules: jobParser(),
                                commit: { [unowned self] in try commit() })
        exchanges.deadlineWords = { [unowned self] exchange in
            "\(context.totalTimeoutWords) (\(Redaction.url(log.state[exchange.taskID]?.currentURL ?? "")))"
        }
        runners = Runners(context: context)
        context.runners = runners
        network = NetworkWatch(context: context)
        context.network = network
        compaction = try CompactionScheduler(eventLog: paths.eventLog, snapshotSeq: snapshotSeq, context: context)
        announcements = Announcements(context: context, notifier: notifier, hooks: try HookRunner(stateDir: paths.stateDir))
        control = ControlDesk(context: context, compaction: compaction)
    }

    /// A scan of the inbox on an interval, where inotify cannot see every change (or `inbox_poll` asks).
    private func makeInboxPoller() -> InboxPoller? {
        let poller = InboxPoller.make(inbox: paths.inbox, configuredS: config.inboxPollS, nowMs: Posix.monotonicMs)
        if let poller {
            logger.info("the inbox is also scanned on an interval: \(poller.reason)",
                        metadata: ["inbox": "\(paths.inbox)", "every": "\(poller.intervalMs / 1000)s"])
        }
        return poller
    }

    /// Wake, drain, decide, commit — until a stop signal, or idle when asked to stop then.
    private func loop(watcher: InboxWatcher, signalFd: Int32, exitWhenIdle: Bool) throws -> Int32? {
        let hooks = announcements.hooks
        while true {
            if held.isDue {
                try held.checked()
                context.publishing.publishAgain()
            }
            // Tasks start once the backlog is all taken, in priority order across all of it.
            if context.needsScheduling, !intake.isTakingBacklog {
                context.needsScheduling = false
                try runners.settleParents()
                // A transfer writes files named by its `created` event: that event must be on disk
                // first, or a crash could leave a partial file no log knows (and a second name).
                if log.hasPendingCreations { try commit() }
                try startReadyTasks()
                try announcements.announceDrainedBatches()
                try announcements.startOwedHooks()
            }
            announcements.tellFailures()
            // Group commit across wake-ups: one WAL fsync per interval at most,
            // however many events the wake-ups in between recorded.
            if log.hasUncommitted, !log.commitInFlight, Posix.monotonicMs - lastCommitMs >= Self.commitIntervalMs {
                try beginGroupCommit()
            } else if !log.hasPending {
                // An intake's last commit came while it was still going: its snapshot is due once it is over.
                compaction.startIfDue(intakeIsIdle: intake.isIdle)
            }
            if exitWhenIdle && isIdle(watcher) { return nil }
            intake.mayRemoveTakenFiles(runners.areIdle)

            let extraFds = [watcher.fd, signalFd, syncer.fd, preparer.fd, assembler.fd, compaction.fd] + hooks.fds + network.fds
                + (rpc.map { [$0.fd] } ?? []) + (log.commitFd.map { [$0] } ?? [])
            let ready = try context.exchanges.poll(extraFds: extraFds, timeoutMs: pollTimeoutMs())
            if let done = log.commitFd, ready.contains(done) { try log.finishCommitInFlight() }
            network.refresh(ready: ready)
            network.check()
            if ready.contains(syncer.fd) { runners.synced(syncer.drain()) }
            if ready.contains(preparer.fd) { runners.prepared(preparer.drain()) }
            if ready.contains(assembler.fd) { runners.assembled(assembler.drain()) }
            if ready.contains(compaction.fd) { compaction.drain() }
            if let rpc, ready.contains(rpc.fd) { rpc.drain() }
            if ready.contains(signalFd), let signal = try Posix.nextSignal(signalFd) {
                if signal == SIGHUP {
                    reloadConfig()
                } else {
                    return signal
                }
            }
            if ready.contains(watcher.fd) { takeJobs(watcher) }
            if let poller = inboxPoller, poller.isDue(nowMs: Posix.monotonicMs) {
                intake.take(polled: poller.poll(watcher, nowMs: Posix.monotonicMs))
                context.needsScheduling = true
            }
            if intake.isTakingBacklog {
                try intake.takeBacklogSlice { try commit() }
                context.needsScheduling = true
            }
            if let due = intake.nextRetryMs, due <= Posix.monotonicMs {
                intake.takeDueRetries(nowMs: Posix.monotonicMs)
                context.needsScheduling = true
            }
            if let wake = nextTimedWakeMs, wake <= Posix.nowMs { context.needsScheduling = true }
            // (Output alone wakes it too: a hook's output pipe left readable would spin the loop.)
            if hooks.fds.contains(where: ready.contains) || hooks.nextWakeMs.map({ $0 <= Posix.monotonicMs }) == true {
                announcements.reapHooks()
            }
            try context.exchanges.perform()
            context.exchanges.checkClocks()
            runners.wake()
        }
    }

    /// What inotify saw in the inbox: jobs closed or moved in are taken.
    private func takeJobs(_ watcher: InboxWatcher) {
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
        context.needsScheduling = true
    }

    /// Bodies already complete are published, not paused. A video being
    /// assembled is not waited for (a join can take longer than a stop
    /// may): its parent is paused with its children and assembled again.
    private func stop(after signal: Int32?) throws -> Int32 {
        intake.endBacklog()
        context.stopping = true
        // A cancelled upload's DELETE still out is given up: the server expires it.
        context.exchanges.dropDetached()
        syncer.waitForAll()
        runners.synced(syncer.drain())
        // Tasks whose file is still being made are paused below, like those that ran, without waiting
        // for a stalled disk: the log says so first (the preparer waits for its worker when it goes).
        compaction.stop()
        if let signal {
            runners.pauseAllForStop()
            // Within the 5 s a stop may take: hooks get 2 s to finish, then are killed.
            announcements.stopHooks(graceMs: 2000)
            log.record(.agentStopped(AgentStopped(reason: signal == SIGINT ? "SIGINT" : "SIGTERM")))
            try commit()
            intake.mayRemoveTakenFiles(true)
            announcements.finish(within: 1)
            logger.info("agent stopped", metadata: ["signal": "\(signal)"])
            return Self.exitAllFinished
        }
        log.record(.agentStopped(AgentStopped(reason: "idle")))
        try commit()
        intake.mayRemoveTakenFiles(true)
        // The last batch's notice is on its way: a desktop session answers in milliseconds.
        announcements.finish(within: 5)
        let tasks = log.state.orderedTasks
        let failed = tasks.indices.count { tasks[$0].phase == .failed && (tasks[$0].endedAtMs ?? 0) >= runStartedAtMs }
        logger.info("agent idle, exiting", metadata: ["failed": "\(failed)"])
        context.publishing.publishAgain()
        for rename in context.publishing.unpublished {
            // Finished in the log, not where the user looks: this run did not do all it was asked.
            logger.error("a finished file is not in place; the next start moves it there",
                         metadata: ["task.id": "\(rename.task)", "dest": "\(rename.dest)", "part": "\(rename.part)"])
        }
        return failed > 0 || !context.publishing.unpublished.isEmpty ? Self.exitSomeFailed : Self.exitAllFinished
    }

    /// Group commit, then the file-system effects that must follow it:
    /// taken jobs leave the inbox, finished files take their final name.
    func commit() throws {
        // The group commit in flight first: what follows this one follows it too.
        try log.finishCommitInFlight()
        let tookJobs = intake?.hasTakenFiles ?? false
        let publishes = context.publishing.hasRenamesDue
        // Before a taken job's file goes or a file is published: the events that
        // vouch for them must go into the log someone reads, naming the folder there is.
        if tookJobs || publishes { try held.check() }
        if tookJobs { try intake.makeMovesDurable() }
        try log.commit()
        lastCommitMs = Posix.monotonicMs
        announcements.committed()
        if tookJobs { CrashPoint.intakeCommitted.reached() }
        intake?.removeTakenFiles()
        if publishes { CrashPoint.finishedCommitted.reached() }
        context.publishing.committed()
        compaction.startIfDue(intakeIsIdle: intake?.isIdle ?? false)
    }

    /// The loop's group commit, written on the commit thread while the loop
    /// goes on; there too, once it is written, the renames it vouches for
    /// are made. What must follow it on the loop (lines, notices, answers,
    /// the bookkeeping of those renames) waits for `finishCommitInFlight`.
    /// A batch that took jobs commits on the loop: the moves out of the
    /// inbox are made durable before it, the files removed after.
    private func beginGroupCommit() throws {
        guard !(intake?.hasTakenFiles ?? false) else { return try commit() }
        try log.finishCommitInFlight()
        let publishing = context.publishing
        if publishing.hasRenamesDue { try held.check() }
        let renames = publishing.handOver(), root = publishing.root
        let failures = RenameFailures()
        let through = log.state.lastSeq
        lastCommitMs = Posix.monotonicMs
        try log.beginCommit(thenOnThread: {
            guard !renames.isEmpty else { return }
            CrashPoint.finishedCommitted.reached()
            failures.list = PublishQueue.renamedOffLoop(renames, root: root)
        }, thenOnLoop: { [unowned self] in
            announcements.committed(through: through)
            publishing.finishedOffLoop(failed: failures.list)
            compaction.startIfDue(intakeIsIdle: intake?.isIdle ?? false)
        })
    }

    /// What the commit thread's renames came to, read on the loop once it is done.
    private final class RenameFailures: @unchecked Sendable {
        var list: [(rename: PublishQueue.Rename, error: Error)] = []
    }

    // MARK: - Scheduling

    private func startReadyTasks() throws {
        runners.dropEnded()
        let now = Posix.nowMs
        for id in SchedulerPolicy.tasksToStart(in: log.state, nowMs: now, limits: config.limits, completing: runners.completing,
                                               extraConnections: runners.extraConnectionsByHost) {
            // (One whose last attempt still has something in flight, a file being made, goes once it is done.)
            guard runners[id]?.isBusy != true else { continue }
            // Its job, let go while it waited, is read back: every step from here on reads it.
            try log.holdJob(of: id)
            guard let task = log.state[id] else { continue }
            if context.failIfRefused(task) {
                // It ended without taking its slot: another pass gives the slot to the next task.
                context.needsScheduling = true
                continue
            }
            runners.start(task)
        }
        nextTimedWakeMs = SchedulerPolicy.nextWakeMs(in: log.state, nowMs: now)
    }

    private func isIdle(_ watcher: InboxWatcher) -> Bool {
        // needsScheduling: a pass (which also announces drained batches) is still due.
        // (A cancelled upload's DELETE is waited for too: the server should hear of it.)
        guard !context.needsScheduling, log.state.activeCount == 0, context.exchanges.isEmpty, runners.areIdle, intake.isIdle,
              !compaction.hasWork, announcements.areDone else { return false }
        // Waiting for the network is work this agent will resume (within total_timeout).
        if network.hasWaitingTasks { return false }
        let leftovers = watcher.scan().filter { !intake.isStuck($0) }
        if leftovers.isEmpty { return true }
        // Files whose inotify events are still queued: take them now.
        for name in leftovers { intake.take(name, closedAfterWriting: false) }
        context.needsScheduling = true
        return false
    }

    private func pollTimeoutMs() -> Int32 {
        // A scheduling pass or the next slice of a backlog is due: look at the sockets, but do not sleep.
        if context.needsScheduling || intake.isTakingBacklog { return 0 }
        let monotonic = Posix.monotonicMs
        var timeout: Int64 = 1000
        if log.hasUncommitted, !log.commitInFlight { timeout = min(timeout, lastCommitMs + Self.commitIntervalMs - monotonic) }
        if let due = intake.nextRetryMs { timeout = min(timeout, due - monotonic) }
        if let wake = nextTimedWakeMs { timeout = min(timeout, wake - Posix.nowMs) }
        if let wake = runners.nextWakeMs { timeout = min(timeout, wake - monotonic) }
        if let hook = announcements.hooks.nextWakeMs { timeout = min(timeout, hook - monotonic) }
        if let notice = announcements.nextFailureNoticeMs { timeout = min(timeout, notice - monotonic) }
        if let poller = inboxPoller { timeout = min(timeout, poller.nextDueMs - monotonic) }
        return Int32(max(0, timeout))
    }

    // MARK: - Configuration

    /// SIGHUP: read the config file again. Settings that transfers use take
    /// effect for the next attempts (and `max_speed` for running ones);
    /// paths need a restart. A file that no longer parses is reported and the
    /// running settings kept.
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
            next.inbox = config.inbox; next.stateDir = config.stateDir; next.downloadDir = config.downloadDir; next.moreDirs = config.moreDirs
            next.cookies = config.cookies
            config = next
            context.config = next
            context.settings = TransferSettings(config: next)
            context.rules = jobParser()
            intake.parser = context.rules
            log.record(.configReloaded(ConfigReloaded(file: file, applied: applied, needRestart: needRestart, hooks: next.hooks)))
            let capsChanged = applied.contains("max_speed")
            if capsChanged { context.exchanges.followConfigSpeed(next.maxSpeed) }
            context.exchanges.overallCap = next.maxOverallSpeed
            context.exchanges.shareOverallSpeed(capsChanged: capsChanged)
            logger.notice("config reloaded", metadata: ["file": "\(file)", "applied": "\(applied)", "need_restart": "\(needRestart)"])
            // allow_metered may now hold back, or let go, tasks the link had no say over before.
            if applied.contains("allow_metered") { network.applyPolicy() }
            if applied.contains("inbox_poll") { inboxPoller = makeInboxPoller() }
        } catch {
            log.record(.configReloaded(ConfigReloaded(file: file, applied: [], needRestart: [], error: "\(error)")))
            logger.error("config not reloaded; keeping the running settings", metadata: ["file": "\(file)", "error": "\(error)"])
        }
        context.needsScheduling = true
    }

    // MARK: - RPC

    /// Listens for aria2's JSON-RPC on `rpc_listen`, with `rpc_secret` or the
    /// secret the agent keeps in its state dir (made on the first start).
    private func startRPC() throws -> RPCDesk {
        let secret = try RPCSecretFile.secret(configured: config.rpcSecret, stateDir: paths.stateDir, logger: logger)
        let methods = RPCMethods(secret: RPCSecret(secret), sessionID: String(RPCSecret.random().prefix(40)),
                                 version: SyncAgentVersion.current)
        let server = try RPCServer(listen: config.rpcListen, gate: try RPCGate(methods: methods, logger: logger))
        logger.info("aria2 JSON-RPC listening", metadata: ["rpc.listen": "\(server.address)"])
        return RPCDesk(server: server, log: log, context: context, intake: intake, control: control, downloadDir: paths.downloadDir,
                       parser: { [unowned self] in jobParser() },
                       changeSettings: { [unowned self] in changeSettings(maxActive: $0, maxOverallSpeed: $1, maxSpeed: $2) })
    }

    /// `aria2.changeGlobalOption`: these settings change for the running
    /// agent, as a SIGHUP applies them, until the next start or reload.
    /// Returns the config keys that changed.
    private func changeSettings(maxActive: Int?, maxOverallSpeed: Int64??, maxSpeed: Int64??) -> [String] {
        var next = config
        var applied: [String] = []
        if let maxActive, maxActive != next.maxActive { next.maxActive = maxActive; applied.append("max_active") }
        if let maxOverallSpeed, maxOverallSpeed != next.maxOverallSpeed { next.maxOverallSpeed = maxOverallSpeed; applied.append("max_overall_speed") }
        if let maxSpeed, maxSpeed != next.maxSpeed { next.maxSpeed = maxSpeed; applied.append("max_speed") }
        guard !applied.isEmpty else { return [] }
        config = next
        context.config = next
        context.settings = TransferSettings(config: next)
        let capsChanged = applied.contains("max_speed")
        if capsChanged { context.exchanges.followConfigSpeed(next.maxSpeed) }
        context.exchanges.overallCap = next.maxOverallSpeed
        context.exchanges.shareOverallSpeed(capsChanged: capsChanged)
        return applied
    }

    private func jobParser() -> JobParser { JobParser.agents(paths: paths, config: config) }
}

extension JobParser {
    /// The rules the agent holds jobs to under `paths` and `config` (`submit` checks its jobs by the same).
    public static func agents(paths: AgentPaths, config: AgentConfig) -> JobParser {
        JobParser(downloadDir: paths.downloadDir, moreDirs: paths.moreDirs, defaultNotify: config.notify,
                  forbiddenDirs: ([paths.downloadDir] + paths.moreDirs).flatMap {
                      FileSystem.spellingsBeneath($0, of: [paths.stateDir, paths.inbox])
                  },
                  nameFromServer: config.nameFromServer)
    }
}

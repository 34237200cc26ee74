import Logging
import SyncAgentCore

/// What every runner works with, owned by the loop's thread: the log it
/// records in, the files beneath download_dir, the exchanges in flight, the
/// workers off the loop, the publishing that follows a commit, and the
/// settings in force. The rules every kind shares for how an attempt ends
/// are in `TaskEnds.swift`.
final class RunnerContext {
    let log: EventLog
    let root: DownloadRoot
    let exchanges: ExchangePool
    let syncer: DataSyncer
    let preparer: PartialPreparer
    let assembler: HLSAssembler
    let publishing: PublishQueue
    let logger: Logger
    /// The runners, by task: a parent reaches its children's through them.
    unowned var runners: Runners!
    /// The network as the agent follows it (see `NetworkWatch`).
    unowned var network: NetworkWatch!
    /// config.toml as last read (SIGHUP reads it again).
    var config: AgentConfig
    /// The rules a job's destination and body file are held to at intake,
    /// with this run's download_dir and the agent's own folders: those read
    /// from the log are held to them too, before anything is written.
    var rules: JobParser
    var settings: TransferSettings
    /// Set whenever something could let a queued task start or a batch drain.
    var needsScheduling = true
    /// The agent is stopping: nothing new is started.
    var stopping = false
    /// "task finished" and "task failed", said once the commit has made them
    /// true: an agent stopping before that commit must not have said them.
    /// Each with the seq of the last event recorded before it was said.
    var linesAfterCommit: [(seq: Int64, level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata)] = []
    /// Top-level tasks that failed in a way only the user can mend, and
    /// when (monotonic ms): told as it happened, not when their batch ends
    /// (`Announcements`).
    var failuresToTell: [(id: String, atMs: Int64)] = []
    /// Commits the log and carries out what follows a commit. A resumable
    /// upload makes its URL durable this way before the first byte goes.
    private let commitNow: () throws -> Void

    init(log: EventLog, root: DownloadRoot, exchanges: ExchangePool, syncer: DataSyncer, preparer: PartialPreparer,
         assembler: HLSAssembler, publishing: PublishQueue, logger: Logger, config: AgentConfig, rules: JobParser,
         commit: @escaping () throws -> Void) {
        self.log = log
        self.root = root
        self.exchanges = exchanges
        self.syncer = syncer
        self.preparer = preparer
        self.assembler = assembler
        self.publishing = publishing
        self.logger = logger
        self.config = config
        self.rules = rules
        settings = TransferSettings(config: config)
        commitNow = commit
    }

    var state: AgentState { log.state }

    func record(_ body: EventBody, task: String? = nil) {
        log.record(body, task: task)
        if case .failed(let failure) = body, let task, let failed = state[task], Notices.tellsAtOnce(failed, code: failure.code) {
            failuresToTell.append((task, Posix.monotonicMs))
        }
    }

    func commit() throws { try commitNow() }

    /// A finished task whose rename is left to do (a crash after its commit)
    /// with `file` where the rules do not reach (outside download_dir, say):
    /// said at each start, and left where it is.
    func sayUnreachable(_ task: TaskState, file: String) {
        guard !root.holds(file), Posix.exists(file), let refusal = rules.refusal(ofRecorded: task.spec, serverNamed: task.namedDest)
        else { return }
        logger.error("a finished file is left where it is, not moved where the log says",
                     metadata: ["task.id": "\(task.id)", "file": "\(file)", "reason": "\(refusal.reason)"])
    }

    /// A task about to run or resume whose destination or body file, as the
    /// log gives them, the rules refuse (SPEC §6 rule 3: a log is input too;
    /// it may come from another build, a copy, or someone else's hand) fails
    /// now, saying why, before any file is opened: true when it did. Its bytes
    /// stay counted and its files untouched, so a task made under another
    /// download_dir runs again (`resume`) once that folder is download_dir again.
    func failIfRefused(_ task: TaskState) -> Bool {
        guard let refusal = rules.refusal(ofRecorded: task.spec, serverNamed: task.namedDest) else { return false }
        let reason = "\(refusal.reason); nothing is written there"
        record(.failed(Failed(reason: reason, code: refusal.code, bytes: task.bytes)), task: task.id)
        logger.error("a task read from the log is refused", metadata: ["task.id": "\(task.id)", "reason": "\(reason)"])
        return true
    }

    /// Said once the next commit is done.
    func sayAfterCommit(_ level: Logger.Level, _ message: Logger.Message, _ metadata: Logger.Metadata) {
        linesAfterCommit.append((state.lastSeq, level, message, metadata))
    }

    /// `total_timeout` (timeoutIntervalForResource) runs from the task's first
    /// start, across attempts, pauses and restarts.
    func deadlineMs(of task: TaskState) -> Int64 {
        (task.firstStartedAtMs ?? Posix.nowMs) + Int64(config.totalTimeout) * 1000
    }

    var totalTimeoutWords: String { "did not finish within total_timeout (\(config.totalTimeout) s) of its first start" }

    /// The exchange of `task`'s request (or of one step of its protocol),
    /// with the config's headers and its job's speed cap; not yet in flight.
    func makeExchange(_ task: TaskState, offset: Int64 = 0, rangeEnd: Int64? = nil, ifRange: String? = nil,
                      ifChanged: PublishedValidators? = nil, protocolRequest: ProtocolRequest? = nil,
                      sink: Exchange.Sink) throws -> Exchange {
        // A child's credentials are its parent's, for its parent's host.
        let origin = task.spec.parent.flatMap { state[$0]?.spec.url }
        let plan = try RequestPlan.of(task, sharedHeaders: settings.headers, origin: origin, offset: offset, rangeEnd: rangeEnd,
                                      ifRange: ifRange, ifChanged: ifChanged, protocolRequest: protocolRequest)
        return try Exchange(for: task.id, plan: plan, sink: sink, settings: settings(of: task), speedCap: task.spec.maxSpeed,
                            deadlineMs: deadlineMs(of: task), cookies: exchanges.cookies, bodyRules: bodyFileCheck(of: task))
    }

    /// Where `task`'s body file may be read from.
    func bodyFileCheck(of task: TaskState) -> BodyFileCheck {
        BodyFileCheck(rules: rules.bodyFileRules, fromRPC: task.spec.source?.isRPC ?? false)
    }

    /// The settings an exchange of `task` runs under: the config's, with
    /// what its job sets over them (`min_speed`, 0 turning the check off; `min_speed_time`).
    func settings(of task: TaskState) -> TransferSettings {
        let spec = task.spec
        guard spec.minSpeed != nil || spec.minSpeedTimeS != nil else { return settings }
        var own = settings
        if let speed = spec.minSpeed { own.minSpeed = speed > 0 ? speed : nil }
        if let seconds = spec.minSpeedTimeS { own.minSpeedTimeS = seconds }
        return own
    }
}

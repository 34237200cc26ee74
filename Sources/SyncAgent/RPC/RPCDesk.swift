import Logging
import SyncAgentCore

/// The RPC's side of the agent's loop: it drains the requests the server
/// handed over, answers them from the fold, and turns the calls that change
/// something into what a job file or a control job becomes (a `created`
/// task, a `controlled` pause …). Every answer goes out once the events
/// the state it was read from holds are committed: a client is never told
/// of a download a crash could still lose. Notifications go out the same way.
final class RPCDesk {
    private let server: RPCServer
    private let log: EventLog
    private unowned let context: RunnerContext
    private unowned let intake: Intake
    private unowned let control: ControlDesk
    private let parser: () -> JobParser
    private let downloadDir: String
    /// Applies `aria2.changeGlobalOption` to the running agent; returns the config keys it changed.
    private let changeSettings: (Int?, Int64??, Int64??) -> [String]
    private var view: RPCView
    private var notifier = RPCNotifier()
    /// Answers computed from state not yet all committed, with the seq of the last event they saw.
    private var answersAfterCommit: [(seq: Int64, answer: () -> Void)] = []

    init(server: RPCServer, log: EventLog, context: RunnerContext, intake: Intake, control: ControlDesk, downloadDir: String,
         parser: @escaping () -> JobParser, changeSettings: @escaping (Int?, Int64??, Int64??) -> [String]) {
        self.server = server
        self.log = log
        self.context = context
        self.intake = intake
        self.control = control
        self.downloadDir = downloadDir
        self.parser = parser
        self.changeSettings = changeSettings
        view = RPCView(state: log.state)
        log.recorded = { [unowned self] event in view.note(event, in: log.state) }
        log.committed = { [unowned self] events in committed(events) }
    }

    /// Readable when requests wait: polled beside the loop's other descriptors.
    var fd: Int32 { server.gate.mailbox.fd }

    /// Every request handed over since the last call.
    func drain() {
        for job in server.gate.mailbox.drain() { handle(job) }
    }

    private func handle(_ job: RPCJob) {
        var calls = RPCMethods.Context(state: log.state, view: view, settings: settings, parser: parser())
        var responses: [RPCResponse] = []
        for element in job.request.calls {
            switch element {
            case .failure(let failed):
                responses.append(RPCResponse(id: failed.id, .failure(failed.error)))
            case .success(let call):
                responses.append(RPCResponse(id: call.id, answer(call, in: &calls, peer: job.peer)))
            }
        }
        if log.hasPending {
            answersAfterCommit.append((log.state.lastSeq, { job.reply(responses) }))
            // Given time, an answer sent now would reach its client before the crash.
            CrashPoint.rpcRecorded.reached(beforeDying: { Posix.sleep(ms: 300) })
        } else {
            job.reply(responses)
        }
    }

    private var settings: RPCSettings {
        RPCSettings(downloadDir: downloadDir, config: context.config, userAgent: context.settings.userAgent)
    }

    /// Takes a call, carries out what it comes to, and says what it then gets.
    /// Each call sees what the one before it did.
    private func answer(_ call: RPCCall, in calls: inout RPCMethods.Context, peer: String) -> Result<JSONValue, RPCError> {
        let action = server.gate.methods.action(for: call, in: &calls)
        // The view kept its stopped list tidy while answering; the state is the log's own.
        view = calls.view
        let outcome = perform(action, in: &calls, peer: peer)
        calls.state = log.state
        calls.view = view
        return outcome
    }

    /// Carries out what a call comes to; the answer it then gets.
    private func perform(_ action: RPCAction, in calls: inout RPCMethods.Context, peer: String) -> Result<JSONValue, RPCError> {
        switch action {
        case .answer(let outcome):
            if case .failure(let error) = outcome, error == .unauthorized { server.gate.refused(peer: peer, nowMs: Posix.monotonicMs) }
            return outcome
        case .add(let id, let spec, let startsPaused):
            return add(id: id, spec: spec, startsPaused: startsPaused)
        case .control(let action, let ids, let target, let answer):
            let tasks = ids.compactMap { log.state[$0] }
            if !tasks.isEmpty { control.apply(action, to: tasks, target: target, file: "rpc") }
            return .success(answer)
        case .retarget(let id, let url, let answer):
            guard let task = log.state[id] else { return .success(answer) }
            // Refused (a resumable upload, a finished task): the log says why; the call says it too.
            let outcome = control.retarget(task, to: url, file: "rpc")
            return outcome.changed ? .success(answer) : .failure(RPCError("GID#\(RPCGID.of(taskID: id)): \(Redaction.text(outcome.words))"))
        case .changeSettings(let maxActive, let overall, let perTask):
            let applied = changeSettings(maxActive, overall, perTask)
            if !applied.isEmpty {
                log.record(.configReloaded(ConfigReloaded(file: "rpc (aria2.changeGlobalOption)", applied: applied, needRestart: [],
                                                          hooks: context.config.hooks)))
                context.needsScheduling = true
            }
            return .success("OK")
        case .multicall(let entries):
            // aria2's shape: each result in an array of one, each failure as its struct.
            var results: [JSONValue] = []
            for entry in entries {
                switch entry.flatMap({ answer($0, in: &calls, peer: peer) }) {
                case .success(let value): results.append(.array([value]))
                case .failure(let error): results.append(error.json)
                }
            }
            return .success(.array(results))
        }
    }

    /// A download, recorded as a job file taken from the inbox would be.
    private func add(id: String, spec: TaskSpec, startsPaused: Bool) -> Result<JSONValue, RPCError> {
        if let refusal = RPCMethods.gidRefusal(id, in: log.state) { return .failure(refusal) }
        if let problem = Intake.unreadableBody(spec, rules: parser().bodyFileRules) { return .failure(RPCError("option \(RPCJobOptions.jobKey): \(problem)")) }
        intake.create(spec, id: id)
        if startsPaused, let task = log.state[id], task.phase.isActive {
            control.apply(.pause, to: [task], target: id, file: "rpc")
        }
        context.needsScheduling = true
        return .success(.string(RPCGID.of(taskID: id)))
    }

    /// A commit is done: the answers waiting for it go, and the notifications its events make.
    private func committed(_ events: [Event]) {
        let through = events.last?.seq ?? log.state.lastSeq
        let answers = answersAfterCommit.prefix { $0.seq <= through }
        answersAfterCommit.removeFirst(answers.count)
        for (_, answer) in answers { answer() }
        server.broadcast(notifier.notifications(for: events, view: view))
    }
}

extension RPCDesk {
    /// Stops listening; requests not yet answered are dropped with their connections.
    func stop() { server.stop() }
}

/// aria2's methods, in the order `system.listMethods` names them.
public enum RPCMethod: String, CaseIterable, Sendable {
    case addUri = "aria2.addUri"
    case addTorrent = "aria2.addTorrent"
    case getPeers = "aria2.getPeers"
    case addMetalink = "aria2.addMetalink"
    case remove = "aria2.remove"
    case pause = "aria2.pause"
    case forcePause = "aria2.forcePause"
    case pauseAll = "aria2.pauseAll"
    case forcePauseAll = "aria2.forcePauseAll"
    case unpause = "aria2.unpause"
    case unpauseAll = "aria2.unpauseAll"
    case forceRemove = "aria2.forceRemove"
    case changePosition = "aria2.changePosition"
    case tellStatus = "aria2.tellStatus"
    case getUris = "aria2.getUris"
    case getFiles = "aria2.getFiles"
    case getServers = "aria2.getServers"
    case tellActive = "aria2.tellActive"
    case tellWaiting = "aria2.tellWaiting"
    case tellStopped = "aria2.tellStopped"
    case getOption = "aria2.getOption"
    case changeUri = "aria2.changeUri"
    case changeOption = "aria2.changeOption"
    case getGlobalOption = "aria2.getGlobalOption"
    case changeGlobalOption = "aria2.changeGlobalOption"
    case purgeDownloadResult = "aria2.purgeDownloadResult"
    case removeDownloadResult = "aria2.removeDownloadResult"
    case getVersion = "aria2.getVersion"
    case getSessionInfo = "aria2.getSessionInfo"
    case shutdown = "aria2.shutdown"
    case forceShutdown = "aria2.forceShutdown"
    case getGlobalStat = "aria2.getGlobalStat"
    case saveSession = "aria2.saveSession"
    case multicall = "system.multicall"
    case listMethods = "system.listMethods"
    case listNotifications = "system.listNotifications"

    /// Answered without the token, as aria2 answers them: they only name what exists.
    public var needsToken: Bool { self != .listMethods && self != .listNotifications && self != .multicall }

    /// Its answer grows with the downloads (or a download's job) it describes: counted in a request's answer budget.
    public var readsDownloads: Bool {
        switch self {
        case .tellStatus, .getUris, .getFiles, .getServers, .getOption, .tellActive, .tellWaiting, .tellStopped: true
        default: false
        }
    }

    /// Answered from nothing the agent holds: no need to wait for its loop.
    public var isStateless: Bool {
        switch self {
        case .addTorrent, .addMetalink, .getPeers, .changePosition, .shutdown, .forceShutdown,
             .getVersion, .getSessionInfo, .saveSession, .listMethods, .listNotifications:
            true
        default:
            false
        }
    }
}

/// What a call comes to: an answer now, or a change the agent's loop
/// records in the log before it answers (`answer` is what it then says).
public enum RPCAction: Equatable, Sendable {
    case answer(Result<JSONValue, RPCError>)
    /// `aria2.addUri`: a transfer job, as a dropped job file would be.
    case add(id: String, spec: TaskSpec, startsPaused: Bool)
    /// Pause, resume, cancel or forget these tasks, as a control job for
    /// `target` (a task id, or `*`) would; then answer.
    case control(ControlJob.Action, tasks: [String], target: String, answer: JSONValue)
    /// `aria2.changeUri`: the task goes on from another URL, as a `retarget` control job for it would; then answer.
    case retarget(task: String, url: String, answer: JSONValue)
    /// `aria2.changeGlobalOption`: the running agent's settings until the next start.
    case changeSettings(maxActive: Int?, maxOverallSpeed: Int64??, maxSpeed: Int64??)
    /// `system.multicall`: its calls, each taken (`action(for:in:)`) once the one before is carried
    /// out, as aria2 runs them one after the other; or why one cannot be read.
    case multicall([Result<RPCCall, RPCError>])

    public static func fail(_ error: RPCError) -> RPCAction { .answer(.failure(error)) }
    public static func ok(_ value: JSONValue) -> RPCAction { .answer(.success(value)) }
}

/// The agent's answers to aria2's methods. Pure: it reads the fold and the
/// view and returns what to say, or what to record first.
public struct RPCMethods: Sendable {
    public var secret: RPCSecret
    /// aria2's `sessionId`: made once per run of the agent.
    public var sessionID: String
    public var version: String

    public init(secret: RPCSecret, sessionID: String, version: String) {
        self.secret = secret
        self.sessionID = sessionID
        self.version = version
    }

    /// What the agent holds, for the calls that read it.
    public struct Context {
        public var state: AgentState
        public var view: RPCView
        public var settings: RPCSettings
        public var parser: JobParser
        /// The answer bytes the request's calls that read may still write: a
        /// batch or multicall of list calls over a long log, or of `getOption`
        /// on a job with many headers, must not keep the loop (or the memory)
        /// for seconds. Counted as each call is answered; once it is spent,
        /// the calls that read are refused.
        public var answerBudget = RPCMethods.answerBudget
        /// `tellWaiting`'s order, made once a request for the state it was made from.
        var waitingOrder: (seq: Int64, ids: [String])?

        public init(state: AgentState, view: RPCView, settings: RPCSettings, parser: JobParser) {
            self.state = state; self.view = view; self.settings = settings; self.parser = parser
        }
    }

    // MARK: - Authorisation

    /// The call with its `token:` parameter taken off, or why it is refused.
    /// aria2 takes a first parameter starting with `token:` off even from
    /// calls that need none; so does this.
    public func authorize(_ call: RPCCall) -> Result<(RPCMethod?, [JSONValue]), RPCError> {
        let method = RPCMethod(rawValue: call.method)
        var params = call.params
        var token: String?
        if let first = params.first?.string, first.hasPrefix("token:") {
            token = String(first.dropFirst("token:".count))
            params.removeFirst()
        }
        // A method that does not exist is refused the same as a wrong token: a guess learns nothing.
        guard method?.needsToken == false || (token.map(secret.matches) ?? false) else { return .failure(.unauthorized) }
        return .success((method, params))
    }

    /// How the RPC's rates count a request's calls: a multicall's by the calls in it.
    public func admission(of request: RPCRequest) -> RPCAdmission {
        var counted = RPCAdmission()
        func count(_ call: RPCCall) {
            let method = RPCMethod(rawValue: call.method)
            if let first = call.params.first?.string, first.hasPrefix("token:"),
               secret.matches(String(first.dropFirst("token:".count))) {
                counted.trusted += 1
            } else if method?.needsToken == false {
                counted.open += 1
            } else {
                counted.untrusted += 1
            }
        }
        for element in request.calls {
            guard case .success(let call) = element else {
                counted.untrusted += 1
                continue
            }
            guard call.method == RPCMethod.multicall.rawValue else {
                count(call)
                continue
            }
            let entries = call.params.first?.array ?? []
            if entries.isEmpty { counted.untrusted += 1 }
            for entry in entries {
                count(RPCCall(id: .null, method: entry["methodName"]?.string ?? "", params: entry["params"]?.array ?? []))
            }
        }
        return counted
    }

    /// The answer to a call that needs nothing of the agent's state, or nil
    /// when it does. A multicall needs it when one of its calls does: one
    /// whose calls all lack the token is answered without the agent's loop.
    public func statelessAnswer(_ call: RPCCall) -> Result<JSONValue, RPCError>? {
        if call.method == RPCMethod.multicall.rawValue {
            switch multicall(call.params) {
            case .multicall(let entries):
                var results: [JSONValue] = []
                for entry in entries {
                    switch entry.flatMap({ statelessAnswer($0) ?? .failure(.needsState) }) {
                    case .success(let value): results.append(.array([value]))
                    case .failure(let error) where error == .needsState: return nil
                    case .failure(let error): results.append(error.json)
                    }
                }
                return .success(.array(results))
            case .answer(let outcome):
                return outcome
            default:
                return nil
            }
        }
        switch authorize(call) {
        case .failure(let error): return .failure(error)
        case .success((nil, _)): return .failure(.noSuchMethod(call.method))
        case .success((let method?, let params)):
            guard method.isStateless else { return nil }
            return stateless(method, params)
        }
    }

    private func stateless(_ method: RPCMethod, _ params: [JSONValue]) -> Result<JSONValue, RPCError> {
        switch method {
        case .listMethods: return .success(.array(RPCMethod.allCases.map { .string($0.rawValue) }))
        case .listNotifications: return .success(.array(RPCNotification.Method.allCases.map { .string($0.rawValue) }))
        case .getVersion:
            return .success(["version": .string(version), "enabledFeatures": ["Async DNS", "HTTPS", "Message Digest"]])
        case .getSessionInfo: return .success(["sessionId": .string(sessionID)])
        // Every change is in the event log before it is answered: there is never anything to save.
        case .saveSession: return .success("OK")
        case .addTorrent, .getPeers:
            return .failure(RPCError("BitTorrent is not supported: syncagent transfers over HTTP and HTTPS only."))
        case .addMetalink: return .failure(RPCError("Metalink is not supported: syncagent transfers over HTTP and HTTPS only."))
        case .changePosition:
            return .failure(RPCError("Changing a download's place in the queue is not supported; set its priority when adding it."))
        case .shutdown, .forceShutdown:
            return .failure(RPCError("The agent is stopped by its service manager (SIGTERM), not over RPC."))
        default:
            return .failure(.noSuchMethod(method.rawValue))
        }
    }

    // MARK: - Calls

    /// `aria2.changeUri(gid, fileIndex, delUris, addUris[, position])`: a
    /// download has one URL, so this is `syncagent retarget` (a link that
    /// expired, a mirror): one URI to add, held to the rules of a job's `url`;
    /// `delUris` may name the URL it leaves. Answers `[deleted, added]`.
    private func changeUri(_ params: Parameters, in context: Context) throws -> RPCAction {
        let task = try params.task(0, in: context)
        let gid = RPCGID.of(taskID: task.id)
        guard try params.integer(1) == 1 else { throw RPCError("fileIndex is out of range: a download has one file, index 1") }
        let deleting = try params.strings(2), adding = try params.strings(3)
        if params.values.count > 4 { _ = try params.integer(4) }
        if adding.isEmpty {
            guard !deleting.contains(task.currentURL) && !deleting.contains(task.spec.url) else {
                throw RPCError("A download keeps one URL: give the URI that replaces it in addUris")
            }
            return .ok(.array([.int(0), .int(0)]))
        }
        guard adding.count == 1 else { throw RPCError("A download has one URL: give one URI to add, not \(adding.count)") }
        do { try URLRules.checkTransferURL(adding[0], key: "addUris") } catch let error as KeyError { throw RPCError(error.description) }
        guard !task.phase.isEnded || task.phase == .failed else { throw RPCError("GID#\(gid) has ended: there is nothing to fetch from another URL") }
        let deleted = deleting.contains(task.currentURL) || deleting.contains(task.spec.url) ? 1 : 0
        return .retarget(task: task.id, url: adding[0], answer: .array([.int(Int64(deleted)), .int(1)]))
    }

    /// What `call` comes to, given what the agent holds.
    public func action(for call: RPCCall, in context: inout Context) -> RPCAction {
        if call.method == RPCMethod.multicall.rawValue { return multicall(call.params) }
        switch authorize(call) {
        case .failure(let error): return .fail(error)
        case .success((nil, _)): return .fail(.noSuchMethod(call.method))
        case .success((let method?, let params)):
            if method.isStateless { return .answer(stateless(method, params)) }
            do {
                return try action(method, Parameters(params), in: &context)
            } catch let error as RPCError {
                return .fail(error)
            } catch {
                return .fail(RPCError("\(error)"))
            }
        }
    }

    /// `system.multicall([{methodName, params}, …])`: each call with its own token.
    private func multicall(_ params: [JSONValue]) -> RPCAction {
        guard let first = params.first else { return .fail(.missing(0)) }
        guard let calls = first.array else { return .fail(.wrongType(0)) }
        guard calls.count <= RPCRequest.maximumCalls else {
            return .fail(RPCError("A multicall may hold at most \(RPCRequest.maximumCalls) calls."))
        }
        return .multicall(calls.map { entry in
            guard entry.object != nil else { return .failure(RPCError("system.multicall expected struct.")) }
            guard let name = entry["methodName"]?.string else { return .failure(RPCError("Missing methodName.")) }
            guard name != RPCMethod.multicall.rawValue else { return .failure(RPCError("Recursive system.multicall forbidden.")) }
            return .success(RPCCall(id: .null, method: name, params: entry["params"]?.array ?? []))
        })
    }

    private func action(_ method: RPCMethod, _ params: Parameters, in context: inout Context) throws -> RPCAction {
        guard method.readsDownloads else { return try change(method, params, in: &context) }
        guard context.answerBudget > 0 else {
            throw RPCError("This request's answer is over \(Self.answerBudget >> 20) MiB already; "
                           + "ask for fewer downloads, fewer keys or fewer calls at a time.")
        }
        let action = try read(method, params, in: &context)
        if case .answer(.success(let value)) = action { context.answerBudget -= value.estimatedSize }
        return action
    }

    /// A call that reads downloads: its answer.
    private func read(_ method: RPCMethod, _ params: Parameters, in context: inout Context) throws -> RPCAction {
        switch method {
        case .tellStatus:
            let task = try params.task(0, in: context)
            let keys = try params.keys(1)
            return .ok(RPCTaskStatus.object(task, in: context.state, settings: context.settings, keys: keys))
        case .getUris: return .ok(RPCTaskStatus.uris(of: try params.task(0, in: context)))
        case .getFiles: return .ok(RPCTaskStatus.files(of: try params.task(0, in: context), in: context.state))
        case .getServers:
            let task = try params.task(0, in: context)
            guard task.phase == .running else { throw RPCError("No active download for GID#\(RPCGID.of(taskID: task.id))") }
            return .ok(RPCTaskStatus.servers(of: task, in: context.state))
        case .getOption: return .ok(RPCOptionView.options(of: try params.task(0, in: context), settings: context.settings))
        case .tellActive:
            let keys = try params.keys(0)
            let tasks = context.view.active.compactMap { context.state[$0] }.sorted { $0.createdSeq < $1.createdSeq }
            return .ok(.array(tasks.map { RPCTaskStatus.object($0, in: context.state, settings: context.settings, keys: keys) }))
        case .tellWaiting, .tellStopped:
            let offset = try params.integer(0), count = min(try params.count(1), Self.pageLimit), keys = try params.keys(2)
            let page = method == .tellWaiting ? Self.page(waitingOrder(in: &context), offset: offset, count: count)
                : Self.page(context.view.stopped(), offset: offset, count: count)
            return .ok(.array(page.compactMap { context.state[$0] }.map {
                RPCTaskStatus.object($0, in: context.state, settings: context.settings, keys: keys)
            }))
        default:
            return .answer(stateless(method, params.values))
        }
    }

    /// Any other call: its answer, or the change it comes to.
    private func change(_ method: RPCMethod, _ params: Parameters, in context: inout Context) throws -> RPCAction {
        switch method {
        case .addUri: return try add(params, in: context)
        case .getGlobalStat: return .ok(globalStat(in: &context))
        case .getGlobalOption: return .ok(RPCOptionView.globalOptions(context.settings))
        case .pause, .forcePause:
            let task = try params.task(0, in: context)
            let gid = RPCGID.of(taskID: task.id)
            guard task.phase.isActive || (task.phase == .paused && task.pauseReason != .user) else {
                throw RPCError("GID#\(gid) cannot be paused now")
            }
            return .control(.pause, tasks: [task.id], target: task.id, answer: .string(gid))
        case .unpause:
            let task = try params.task(0, in: context)
            let gid = RPCGID.of(taskID: task.id)
            guard task.phase == .paused, task.pauseReason == .user else { throw RPCError("GID#\(gid) cannot be unpaused now") }
            return .control(.resume, tasks: [task.id], target: task.id, answer: .string(gid))
        case .remove, .forceRemove:
            let task = try params.task(0, in: context)
            let gid = RPCGID.of(taskID: task.id)
            guard !task.phase.isEnded else { throw RPCError("Active Download not found for GID#\(gid)") }
            return .control(.cancel, tasks: [task.id], target: task.id, answer: .string(gid))
        case .changeUri: return try changeUri(params, in: context)
        case .removeDownloadResult:
            let task = try params.task(0, in: context)
            guard task.phase.isEnded else { throw RPCError("Could not remove download result of GID#\(RPCGID.of(taskID: task.id))") }
            return .control(.forget, tasks: [task.id], target: task.id, answer: "OK")
        case .pauseAll, .forcePauseAll:
            let tasks = context.view.active.union(context.view.waiting).compactMap { context.state[$0] }
                .filter { $0.phase.isActive || ($0.phase == .paused && $0.pauseReason != .user) }
            return .control(.pause, tasks: tasks.sorted { $0.createdSeq < $1.createdSeq }.map(\.id), target: "*", answer: "OK")
        case .unpauseAll:
            let tasks = context.view.waiting.compactMap { context.state[$0] }.filter { $0.phase == .paused && $0.pauseReason == .user }
            return .control(.resume, tasks: tasks.sorted { $0.createdSeq < $1.createdSeq }.map(\.id), target: "*", answer: "OK")
        case .purgeDownloadResult:
            return .control(.forget, tasks: Array(context.view.stopped()), target: "*", answer: "OK")
        case .changeOption:
            let task = try params.task(0, in: context)
            let options = try params.object(1)
            try RPCOptionView.checkUnchanged(options, of: task, settings: context.settings)
            return .ok("OK")
        case .changeGlobalOption: return try RPCOptionView.changeGlobal(try params.object(0))
        default:
            return .answer(stateless(method, params.values))
        }
    }

    private func add(_ params: Parameters, in context: Context) throws -> RPCAction {
        guard params.values.count > 0 else { throw RPCError.missing(0) }
        // A job file's limit: 100,000 headers took seconds of the loop and stayed in the log and every `status`.
        let size = JSONValue.array(params.values).serialized.count
        guard size <= JobParser.maximumSize else {
            throw RPCError("The URIs and options of this addUri come to \(size) bytes, over the 64 KiB a job may have.")
        }
        guard let uris = params.values[0].array else { throw RPCError.wrongType(0) }
        let options = params.values.count > 1 ? try params.object(1) : [:]
        if params.values.count > 2 { _ = try params.integer(2) }
        let addition = try RPCJobOptions.addition(uris: uris, options: options)
        let id: String
        if let chosen = addition.taskID {
            if let refusal = Self.gidRefusal(chosen, in: context.state) { throw refusal }
            id = chosen
        } else {
            id = IDRules.random { context.state.conflict(ofNewTaskID: $0) != nil }
        }
        let job: Job
        do {
            job = try context.parser.parse(table: addition.table, source: JobSource(file: "rpc", identity: JobSource.rpcIdentityPrefix + RPCGID.of(taskID: id)))
        } catch let error as KeyError {
            throw RPCError(RPCJobOptions.describe(error, origins: addition.origins))
        }
        guard case .transfer(_, let spec) = job else { throw RPCError("URI is not provided.") }
        return .add(id: id, spec: spec, startsPaused: addition.startsPaused)
    }

    /// Why a new download may not have the task id `id` (its GID), or nil. aria2 lets a
    /// purged download's GID be used again; the log keeps every task's id for good
    /// (events name tasks by it), so that is refused too, saying whose it was.
    public static func gidRefusal(_ id: String, in state: AgentState) -> RPCError? {
        let owner: String
        switch state.conflict(ofNewTaskID: id) {
        case nil: return nil
        case .taken?: owner = id
        case .sharesGID(_, let with)?: owner = with
        }
        let gid = RPCGID.of(taskID: id)
        guard state[owner]?.forgotten == true else { return RPCError("GID \(gid) is already used by another download") }
        return RPCError("GID \(gid) belonged to a download since removed and forgotten; the log keeps every GID it gave, choose another")
    }

    /// aria2's waiting list: queued tasks in the order they will start, then paused ones in the order they were added.
    /// Made once a request (a multicall of a thousand `tellWaiting`s walked the queue a thousand times),
    /// again only when a call before changed the state.
    private func waitingOrder(in context: inout Context) -> [String] {
        if let made = context.waitingOrder, made.seq == context.state.lastSeq { return made.ids }
        let waiting = context.view.waiting
        var ordered: [String] = []
        ordered.reserveCapacity(waiting.count)
        for entry in context.state.runQueue.entries {
            let id = context.state.tasks[entry.position].id
            if waiting.contains(id) { ordered.append(id) }
        }
        let queued = Set(ordered)
        let paused = waiting.subtracting(queued).compactMap { context.state[$0] }.sorted { $0.createdSeq < $1.createdSeq }
        let ids = ordered + paused.map(\.id)
        context.waitingOrder = (context.state.lastSeq, ids)
        return ids
    }

    /// The most downloads one `tellWaiting` or `tellStopped` lists (AriaNg asks for 1,000).
    public static let pageLimit: Int64 = 1000
    /// The answer bytes a request's calls that read downloads may write in all; the call
    /// that crosses it is answered whole, the ones after it refused. webui-aria2's poll
    /// (every key of its active, 1,000 waiting and 1,000 stopped downloads) comes to about
    /// 0.9 MB, AriaNg's (nine keys) to less; 1,000 `getOption`s of a job with 60 KB of
    /// headers would be 61 MB. Describing 1 MiB keeps the loop for about a second in a
    /// debug build.
    public static let answerBudget = 1 << 20

    /// aria2's paging: from `offset` onwards, or, for a negative offset,
    /// from that far before the end backwards (in reverse order).
    public static func page<IDs: RandomAccessCollection<String>>(_ ids: IDs, offset: Int64, count: Int64) -> [String] where IDs.Index == Int {
        guard count > 0, !ids.isEmpty else { return [] }
        let total = Int64(ids.count)
        let first = Int64(ids.startIndex)
        if offset >= 0 {
            guard offset < total else { return [] }
            return (offset..<min(total, offset + min(count, total))).map { ids[Int(first + $0)] }
        }
        let start = total + offset
        guard start >= 0 else { return [] }
        let end = max(-1, start - min(count, total))
        return stride(from: start, to: end, by: -1).map { ids[Int(first + $0)] }
    }

    private func globalStat(in context: inout Context) -> JSONValue {
        var down: Int64 = 0, up: Int64 = 0
        for id in context.view.active {
            guard let task = context.state[id] else { continue }
            let speed = context.state.figures(of: task).speed
            if task.spec.behaviour.countsSent { up &+= speed } else { down &+= speed }
        }
        return ["downloadSpeed": .string(String(down)), "uploadSpeed": .string(String(up)),
                "numActive": .string(String(context.view.active.count)), "numWaiting": .string(String(context.view.waiting.count)),
                "numStopped": .string(String(context.view.stoppedCount)), "numStoppedTotal": .string(String(context.view.stoppedTotal))]
    }
}

/// A call's parameters after the token, read as aria2 reads them (errors name the position).
struct Parameters {
    let values: [JSONValue]
    init(_ values: [JSONValue]) { self.values = values }

    func value(_ position: Int) throws -> JSONValue {
        guard position < values.count else { throw RPCError.missing(position) }
        return values[position]
    }

    func task(_ position: Int, in context: RPCMethods.Context) throws -> TaskState {
        guard let query = try value(position).string else { throw RPCError.wrongType(position) }
        guard RPCGID.normalizedQuery(query) != nil else { throw RPCError("Invalid GID \(query)") }
        switch context.view.lookup(query) {
        case .found(let id):
            guard let task = context.state[id] else { throw RPCError.gidNotFound(query) }
            return task
        case .notFound: throw RPCError.gidNotFound(query)
        case .notUnique: throw RPCError("GID \(query) is not unique")
        }
    }

    func integer(_ position: Int) throws -> Int64 {
        guard case .int(let number) = try value(position) else { throw RPCError.wrongType(position) }
        return number
    }

    /// A count: a whole number from 0 (aria2's words when it is not).
    func count(_ position: Int) throws -> Int64 {
        let number = try integer(position)
        guard number >= 0 else {
            throw RPCError("The integer parameter at \(position) has invalid value: the value must be greater than or equal to 0.")
        }
        return number
    }

    /// Optional: the keys of a status to send (none: all of them). What is
    /// not a string names no key and is passed over, as aria2 passes it over.
    func keys(_ position: Int) throws -> [String] {
        guard position < values.count else { return [] }
        guard let items = values[position].array else { throw RPCError.wrongType(position) }
        return items.compactMap(\.string)
    }

    func strings(_ position: Int) throws -> [String] {
        guard let items = try value(position).array else { throw RPCError.wrongType(position) }
        return try items.map { item in
            guard let text = item.string else { throw RPCError.wrongType(position) }
            return text
        }
    }

    func object(_ position: Int) throws -> [String: JSONValue] {
        guard let members = try value(position).object else { throw RPCError.wrongType(position) }
        return members
    }
}

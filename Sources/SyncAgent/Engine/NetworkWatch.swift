import Logging
import SyncAgentCore

/// What the agent does with the network (NSURLSession's
/// `waitsForConnectivity` and `allowsExpensiveNetworkAccess`): an attempt
/// that failed because no route led to its server waits, spending no
/// retry, until one does; on a metered link, tasks that may not use it
/// pause. The readings are `NetworkMonitor`'s; the decisions `NetworkPolicy`'s.
final class NetworkWatch {
    let monitor: NetworkMonitor
    private unowned let context: RunnerContext
    /// What each task waiting for the network could not reach: its server's address, or none (its name did
    /// not resolve, or its connect failed before curl chose an address). No entry: it waits since before
    /// this agent started, and any route out will do.
    private var waitingFor: [String: (address: String?, nameUnresolved: Bool)] = [:]
    /// Said once: `allow_metered = false` means nothing without NetworkManager.
    private var warnedMeteredUnknown = false
    /// When tasks waiting for the network are looked at again (monotonic ms).
    private var nextCheckMs: Int64 = 0

    init(context: RunnerContext) {
        self.context = context
        monitor = NetworkMonitor(logger: context.logger)
    }

    var fds: [Int32] { monitor.fds }

    /// After a poll: the network read again if it said something.
    func refresh(ready: Set<Int32>) {
        if let before = monitor.refresh(ready: ready) { changed(from: before) }
    }

    /// What a failed attempt means: the network is missing (wait for it),
    /// it changed while the attempt ran (again at once), or neither (retry).
    func verdict(on exchange: Exchange, task: TaskState, metrics: AttemptMetrics) -> NetworkPolicy.Verdict {
        let address = NetworkPolicy.connectAddress(reported: metrics.remoteAddress, url: task.currentURL,
                                                   viaProxy: exchange.goesThroughProxy)
        let verdict = NetworkPolicy.verdict(failedOnTheWire: exchange.failedOnTheWire, url: task.currentURL,
                                            reachable: monitor.reaches(address, nameUnresolved: exchange.nameUnresolved),
                                            attemptStartedMs: exchange.startedMs, routesChangedMs: monitor.routesChangedMs)
        if verdict == .waitForNetwork { waitingFor[task.id] = (address, exchange.nameUnresolved) }
        return verdict
    }

    private func changed(from before: NetworkMonitor.Reading) {
        let now = monitor.reading
        context.logger.info("network changed", metadata: [
            "online": "\(now.online)", "metered": "\(now.metered.map { "\($0)" } ?? "unknown")",
            "network_manager": "\(now.networkManager)"])
        applyPolicy()
    }

    /// Pauses what a metered link forbids and resumes what waited for a
    /// network it now has (also after a reload changed `allow_metered`).
    func applyPolicy() {
        let now = monitor.reading
        let state = context.state
        if now.metered == true {
            for id in NetworkPolicy.pauseForMetered(in: state, configDefault: context.config.allowMetered) {
                context.runners.pause(id, reason: .metered, bytesIfIdle: state[id]?.bytes ?? 0)
            }
        }
        let resumable = NetworkPolicy.resumable(in: context.state, reachable: { [unowned self] task in
            let waiting = waitingFor[task.id]
            return monitor.reaches(waiting?.address, nameUnresolved: waiting?.nameUnresolved ?? true)
        }, metered: now.metered, configDefault: context.config.allowMetered)
        for task in resumable {
            let words = task.pauseReason == .offline ? "the network is back" : "the link is no longer metered"
            waitingFor[task.id] = nil
            context.record(.resumed(Resumed(bytes: task.bytes, reason: words)), task: task.id)
        }
        context.needsScheduling = true
    }

    /// Every few seconds: the network is read again (an event may have been
    /// missed; a system bus that went away may be back), and a task whose
    /// `total_timeout` ran out while it waited for the network fails, as it would running.
    func check() {
        let now = Posix.monotonicMs
        guard now >= nextCheckMs else { return }
        nextCheckMs = now + 5000
        if let before = monitor.probe() { changed(from: before) }
        let waiting = context.state.orderedTasks.filter { $0.phase == .paused && $0.pauseReason == .offline }
        guard !waiting.isEmpty else { return }
        for task in waiting where context.deadlineMs(of: task) <= Posix.nowMs {
            waitingFor[task.id] = nil
            context.fail(task, reason: context.totalTimeoutWords + " (waiting for the network)", code: .totalTimeout,
                         keeping: task.bytes)
        }
        // Routes a missed event brought back count too.
        applyPolicy()
    }

    /// `allow_metered = false` on a metered link: the task may not start.
    /// Without NetworkManager nothing is known of metering: said once.
    func forbids(_ task: TaskState) -> Bool {
        let allowed = NetworkPolicy.allowsMetered(task, in: context.state, configDefault: context.config.allowMetered)
        if !allowed, !monitor.reading.networkManager, !warnedMeteredUnknown {
            warnedMeteredUnknown = true
            context.logger.warning("allow_metered = false has no effect: NetworkManager does not run, so nothing says whether the link is metered",
                                   metadata: ["task.id": "\(task.id)"])
        }
        return !allowed && monitor.reading.metered == true
    }

    /// Tasks paused for the network are work this agent will resume (within `total_timeout`).
    var hasWaitingTasks: Bool {
        context.state.orderedTasks.contains { $0.phase == .paused && $0.pauseReason?.waitsForNetwork == true }
    }
}

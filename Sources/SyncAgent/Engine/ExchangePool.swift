import CCurlShims
import Logging
import SyncAgentCore

/// The exchanges in flight, on the agent's one curl multi handle: handed
/// to curl and taken back here only, matched to their completions, held to
/// their clocks (`idle_timeout`, `total_timeout`, the progress interval),
/// and given their shares of `max_overall_speed`. An exchange ends through
/// its `onEnded`, whoever set it; the pool knows nothing of tasks but their ids.
final class ExchangePool {
    private let multi: CurlMulti
    private var inFlight: [UnsafeMutableRawPointer: Exchange] = [:]
    /// Exchanges no task waits for (a cancelled upload's `DELETE`): given up
    /// after `idle_timeout` without a word, and when the agent stops.
    private var detached: Set<UnsafeMutableRawPointer> = []
    /// The session's cookies; nil for `cookies = "off"`.
    let cookies: CookieJar?
    private let logger: Logger
    /// `max_overall_speed` now (SIGHUP may change it).
    var overallCap: Int64?
    /// A cap was shared: removing it on SIGHUP gives each exchange its own back.
    private var sharingSpeed = false
    /// Exchanges in flight by task (detached ones left out), kept as they
    /// come and go: while no task has two and no cap is shared, a start or
    /// an end has nothing to share, and costs no pass over the others.
    private var connectionsByTask: [String: Int] = [:]
    private var tasksWithSeveralConnections = 0
    /// The words of a `total_timeout` that ran out during this exchange.
    var deadlineWords: (Exchange) -> String = { _ in "total_timeout ran out" }

    init(curl multi: CurlMulti, cookies: CookieJar?, overallCap: Int64?, logger: Logger) {
        self.multi = multi
        self.cookies = cookies
        self.overallCap = overallCap
        self.logger = logger
    }

    var isEmpty: Bool { inFlight.isEmpty }

    func contains(_ exchange: Exchange) -> Bool { inFlight[exchange.easy] === exchange }

    /// Hands `exchange` to curl. `detached`: nobody waits for its answer.
    func add(_ exchange: Exchange, detached: Bool = false) throws {
        try multi.add(exchange.easy)
        inFlight[exchange.easy] = exchange
        if detached {
            self.detached.insert(exchange.easy)
        } else {
            countConnection(of: exchange.taskID, by: 1)
            shareOverallSpeed()
        }
    }

    private func countConnection(of taskID: String, by change: Int) {
        let before = connectionsByTask[taskID] ?? 0
        let after = before + change
        connectionsByTask[taskID] = after > 0 ? after : nil
        if before < 2, after >= 2 { tasksWithSeveralConnections += 1 }
        if before >= 2, after < 2 { tasksWithSeveralConnections -= 1 }
    }

    /// Takes `exchange` back from curl (if it is still in flight): its
    /// partial file keeps what was written; its cookies are saved.
    func remove(_ exchange: Exchange) {
        guard inFlight[exchange.easy] === exchange else { return }
        inFlight[exchange.easy] = nil
        let wasDetached = detached.remove(exchange.easy) != nil
        do { try multi.remove(exchange.easy) } catch {
            logger.error("curl would not give a transfer back", metadata: ["task.id": "\(exchange.taskID)", "error": "\(error)"])
        }
        if exchange.sawSetCookie { saveCookies() }
        if !wasDetached {
            countConnection(of: exchange.taskID, by: -1)
            shareOverallSpeed()
        }
    }

    /// Gives up every exchange nobody waits for (the agent stops): the server expires what they asked.
    func dropDetached() {
        for easy in detached { if let exchange = inFlight[easy] { remove(exchange) } }
    }

    func saveCookies() {
        do { try cookies?.save() } catch {
            logger.error("cannot save cookies", metadata: ["file": "\(cookies?.file ?? "")", "error": "\(error)"])
        }
    }

    /// Sleeps until a socket or one of `extraFds` is ready, or the timeout.
    func poll(extraFds: [Int32], timeoutMs: Int32) throws -> Set<Int32> {
        try multi.poll(extraFds: extraFds, timeoutMs: timeoutMs)
    }

    /// Moves every transfer forward, then ends the exchanges curl finished.
    func perform() throws {
        try multi.perform()
        // Each completion is matched to its exchange first: ending one (a segmented download's
        // last connection) frees others, whose handles curl_easy_init may reuse.
        let done = multi.completed().compactMap { easy, result in inFlight[easy].map { ($0, result) } }
        for (exchange, result) in done where inFlight[exchange.easy] === exchange {
            let outcome = exchange.outcome(result)
            end(exchange, outcome)
        }
    }

    /// The pool's clocks: `total_timeout` per task, `idle_timeout` per
    /// exchange, and the progress interval for bytes no later write will sync.
    func checkClocks() {
        let now = Posix.monotonicMs
        let wallNow = Posix.nowMs
        for exchange in Array(inFlight.values) where inFlight[exchange.easy] === exchange {
            // (One ended by an earlier one in this pass, as connections of one download are, is skipped.)
            if detached.contains(exchange.easy) {
                if exchange.isStalled(nowMs: now) { end(exchange, exchange.stalledOutcome()) }
            } else if exchange.deadlineMs <= wallNow {
                // No flush: failing removes the partial file.
                end(exchange, .permanent(reason: deadlineWords(exchange), code: .totalTimeout))
            } else if exchange.isStalled(nowMs: now) {
                end(exchange, exchange.stalledOutcome())
            } else if let speed = exchange.crawlingSpeed(nowMs: now) {
                end(exchange, exchange.crawlingOutcome(speed: speed))
            } else {
                exchange.syncIfOverdue(nowMs: now)
            }
        }
    }

    private func end(_ exchange: Exchange, _ outcome: AttemptOutcome) {
        remove(exchange)
        exchange.onEnded(exchange, outcome)
    }

    /// Gives each running task its share of `max_overall_speed`, again
    /// whenever an exchange starts or stops (and on SIGHUP), split among its
    /// connections. `capsChanged`: their own caps changed (SIGHUP's
    /// `max_speed`), so each is set even with nothing shared.
    func shareOverallSpeed(capsChanged: Bool = false) {
        let someShareTheirTask = tasksWithSeveralConnections > 0
        guard capsChanged || overallCap != nil || sharingSpeed || someShareTheirTask else { return }
        sharingSpeed = overallCap != nil || someShareTheirTask
        var own: [String: Int64?] = [:]
        for (easy, exchange) in inFlight where !detached.contains(easy) { own[exchange.taskID] = exchange.ownSpeedCap }
        let shares = SpeedShares.split(overall: overallCap, own: own)
        for (easy, exchange) in inFlight where !detached.contains(easy) {
            let cap = (shares[exchange.taskID] ?? nil).map { max(1, $0 / Int64(max(1, connectionsByTask[exchange.taskID] ?? 1))) }
            if !exchange.limitSpeed(to: cap) {
                logger.warning("curl refused a new speed limit", metadata: ["task.id": "\(exchange.taskID)"])
            }
        }
    }

    /// SIGHUP changed `max_speed`: running exchanges follow it.
    func followConfigSpeed(_ cap: Int64?) {
        for exchange in inFlight.values { exchange.speedCapOfConfig = cap }
    }
}

import Foundation

public struct SchedulerLimits: Equatable, Sendable {
    public var maxActive: Int
    public var maxPerHost: Int
    public init(maxActive: Int, maxPerHost: Int) { self.maxActive = maxActive; self.maxPerHost = maxPerHost }
}

/// (state, now) → which queued tasks start now. Higher `priority` first,
/// first-created first within a priority; bounded overall and per host.
public enum SchedulerPolicy {
    /// Walks the run queue from the front (it is kept in start order by the
    /// fold), skipping tasks that must wait or whose host is full.
    /// - Parameter completing: running tasks whose transfer is over and which
    ///   only wait to be recorded as finished; they hold no connection, so no slot.
    /// - Parameter extraConnections: connections beyond one that running
    ///   segmented downloads hold, by host: they count against `maxPerHost`.
    public static func tasksToStart(in state: AgentState, nowMs: Int64, limits: SchedulerLimits,
                                    completing: [String] = [], extraConnections: [String: Int] = [:]) -> [String] {
        var free = limits.maxActive - state.runningCount + completing.count
        guard free > 0 else { return [] }
        var perHost = state.runningByHost.merging(extraConnections, uniquingKeysWith: +)
        for id in completing { if let host = state[id]?.hostKey { perHost[host, default: 1] -= 1 } }
        var chosen: [String] = []
        for entry in state.runQueue.entries where !entry.waits(at: nowMs) {
            // Read in place: a pass may walk every queued task while their hosts are full.
            let host = state.tasks[entry.position].hostKey
            if perHost[host, default: 0] >= limits.maxPerHost { continue }
            perHost[host, default: 0] += 1
            chosen.append(state.tasks[entry.position].id)
            free -= 1
            if free == 0 { break }
        }
        return chosen
    }

    /// When a queued task that waits (not_before, backoff) becomes startable.
    public static func nextWakeMs(in state: AgentState, nowMs: Int64) -> Int64? {
        guard state.runQueue.timedCount > 0 else { return nil }
        var earliest: Int64?
        for entry in state.runQueue.entries {
            if let wait = entry.notBeforeMs, wait > nowMs, wait < (earliest ?? .max) { earliest = wait }
        }
        return earliest
    }

    /// Exponential backoff with jitter: 1 s, 4 s, 16 s, 64 s, 256 s, then
    /// 5 min each, every wait cut by up to a quarter at random. The default
    /// 5 retries then wait 4 min 16 s to 5 min 41 s in all: a server down for
    /// a few minutes (a restart, a deploy) is waited out, where doubling from
    /// 1 s gave up after 20 s. A blip still costs only a second. Tasks that
    /// failed together spread over the last quarter of each wait, and a
    /// server's `Retry-After` wins when it asks for longer.
    public static func retryDelayMs(attempt: Int, retryAfterMs: Int64?, jitter: Double) -> Int64 {
        let exponent = min(max(attempt - 1, 0), 8)
        let base = min(Int64(1000) << (2 * exponent), maximumRetryDelayMs)
        let jittered = Int64(Double(base) * (0.75 + 0.25 * min(max(jitter, 0), 1)))
        return max(jittered, retryAfterMs ?? 0)
    }

    /// The longest wait between two attempts the agent chooses itself.
    public static let maximumRetryDelayMs: Int64 = 300_000
}

/// Retry or fail, after a transient failure: a pure decision the agent
/// carries out.
public enum RetryDecision: Equatable, Sendable {
    case retry(delayMs: Int64)
    case fail(reason: String, code: FailureCode)

    /// - Parameters:
    ///   - attemptsUsed: attempts since the task was created or last run again by the user.
    ///   - retryAfterMs: what the server's `Retry-After` asked for, if anything (any size).
    ///   - deadlineMs: when `total_timeout` runs out for the task.
    public static func decide(reason: String, attemptsUsed: Int, retriesAllowed: Int, retryAfterMs: Int64?,
                              nowMs: Int64, deadlineMs: Int64, totalTimeoutS: Int, jitter: Double) -> RetryDecision {
        let totalTimeoutWords = "did not finish within total_timeout (\(totalTimeoutS) s) of its first start"
        guard attemptsUsed <= retriesAllowed else {
            return .fail(reason: "gave up after \(attemptsUsed) attempt\(attemptsUsed == 1 ? "" : "s"): \(reason)", code: .retriesExhausted)
        }
        let delay = SchedulerPolicy.retryDelayMs(attempt: attemptsUsed, retryAfterMs: retryAfterMs, jitter: jitter)
        let (wakeMs, overflow) = nowMs.addingReportingOverflow(delay)
        guard !overflow, wakeMs < deadlineMs else {
            if let asked = retryAfterMs, asked == delay {
                let left = Durations.words(ms: max(0, deadlineMs &- nowMs))
                return .fail(reason: "server asked to wait \(Durations.words(ms: asked)) before trying again (Retry-After), "
                             + "more than the \(left) left of total_timeout (\(totalTimeoutS) s); last attempt: \(reason)",
                             code: .totalTimeout)
            }
            return .fail(reason: "\(totalTimeoutWords); last attempt: \(reason)", code: .totalTimeout)
        }
        return .retry(delayMs: delay)
    }
}

public enum Durations {
    /// 90_000 → "90 s"; 7_200_000 → "2 h"; absurd values stay readable.
    public static func words(ms: Int64) -> String {
        let seconds = ms / 1000
        if seconds < 600 { return "\(seconds) s" }
        if seconds < 2 * 86_400 { return "\(seconds / 3600) h \(seconds % 3600 / 60) min" }
        if seconds < 3_650 * 86_400 { return "\(seconds / 86_400) days" }
        return "more than ten years"
    }
}

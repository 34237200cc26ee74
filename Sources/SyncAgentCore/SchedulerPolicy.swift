import Foundation

public struct SchedulerLimits: Equatable, Sendable {
    public var maxActive: Int
    public var maxPerHost: Int
    public init(maxActive: Int, maxPerHost: Int) { self.maxActive = maxActive; self.maxPerHost = maxPerHost }
}

/// (state, now) → which queued tasks start now. Higher `priority` first,
/// first-created first within a priority; bounded overall and per host.
public enum SchedulerPolicy {
    public static func tasksToStart(in state: AgentState, nowMs: Int64, limits: SchedulerLimits) -> [String] {
        var running = 0
        var perHost: [String: Int] = [:]
        var ready: [TaskState] = []
        for task in state.tasks.values {
            switch task.phase {
            case .running:
                running += 1
                perHost[task.hostKey, default: 0] += 1
            case .queued where (task.notBeforeMs ?? 0) <= nowMs:
                ready.append(task)
            default:
                break
            }
        }
        guard running < limits.maxActive, !ready.isEmpty else { return [] }
        ready.sort { ($0.spec.priority, -$0.createdSeq) > ($1.spec.priority, -$1.createdSeq) }

        var chosen: [String] = []
        for task in ready {
            if running + chosen.count >= limits.maxActive { break }
            let host = task.hostKey
            if perHost[host, default: 0] >= limits.maxPerHost { continue }
            perHost[host, default: 0] += 1
            chosen.append(task.id)
        }
        return chosen
    }

    /// When a queued task that waits (not_before, backoff) becomes startable.
    public static func nextWakeMs(in state: AgentState, nowMs: Int64) -> Int64? {
        state.tasks.values
            .filter { $0.phase == .queued }
            .compactMap(\.notBeforeMs)
            .filter { $0 > nowMs }
            .min()
    }

    /// Exponential backoff with jitter (1 s, 2 s, 4 s … capped at 5 min);
    /// a server's `Retry-After` wins when it asks for longer.
    public static func retryDelayMs(attempt: Int, retryAfterMs: Int64?, jitter: Double) -> Int64 {
        let exponent = min(max(attempt - 1, 0), 16)
        let base = min(Int64(1000) << exponent, 300_000)
        let jittered = Int64(Double(base) * (0.5 + 0.5 * min(max(jitter, 0), 1)))
        return max(jittered, retryAfterMs ?? 0)
    }
}

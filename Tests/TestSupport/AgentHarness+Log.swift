import Foundation

/// What a test asks the log while an agent runs: reads that cannot fail
/// (a log not made yet holds nothing), and bounded waits on them.
extension AgentHarness {
    /// The logged events of `type` (of `task`, when given) that `condition` accepts; none while the log cannot be read.
    public func events(_ type: String, task: String? = nil,
                       where condition: (LoggedEvent) -> Bool = { _ in true }) -> [LoggedEvent] {
        ((try? events()) ?? []).filter { $0.type == type && (task == nil || $0.task == task) && condition($0) }
    }

    /// Whether the log holds an event of `type` (of `task`, when given) that `condition` accepts.
    public func hasEvent(_ type: String, task: String? = nil, where condition: (LoggedEvent) -> Bool = { _ in true }) -> Bool {
        !events(type, task: task, where: condition).isEmpty
    }

    /// Waits (at most `seconds`) until the log holds an event of `type` (of `task`, when given) that `condition` accepts.
    public func waitForEvent(_ type: String, task: String? = nil, within seconds: Double = 10,
                             where condition: (LoggedEvent) -> Bool = { _ in true }) -> Bool {
        eventually(within: seconds) { hasEvent(type, task: task, where: condition) }
    }

    /// `task`'s state as `status --json` says it now; nil while it is not listed (or the log cannot be read).
    public func state(of task: String) -> String? {
        (try? tasksByID())?[task]?["state"] as? String
    }
}

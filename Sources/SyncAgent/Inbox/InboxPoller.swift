import SyncAgentCore

/// Scans an inbox inotify cannot fully see (`InboxPolling`) on an interval,
/// handing on the job files that stood still between two scans. Intake
/// takes them as it takes a start-up scan's: moved into `.taken/` first, so
/// a name inotify also reported, or one a scan finds twice, is one task.
final class InboxPoller {
    let intervalMs: Int64
    let reason: String
    private(set) var nextDueMs: Int64
    private var settling = PollSettling<InboxName>()

    init(intervalS: Int64, reason: String, nowMs: Int64) {
        intervalMs = intervalS * 1000
        self.reason = reason
        nextDueMs = nowMs + intervalMs
    }

    /// The inbox's poller under `inbox_poll` (nil: none needed). A file
    /// system that cannot be asked counts as a local one: inotify still
    /// sees what this machine writes.
    static func make(inbox: String, configuredS: Int64?, nowMs: Int64) -> InboxPoller? {
        let type = (try? Posix.fileSystemType(of: inbox)) ?? 0
        guard let plan = InboxPolling.plan(configuredS: configuredS, fileSystemType: type) else { return nil }
        return InboxPoller(intervalS: plan.intervalS, reason: plan.reason, nowMs: nowMs)
    }

    func isDue(nowMs: Int64) -> Bool { nowMs >= nextDueMs }

    /// The settled job files of a scan now; the next one is due an interval later.
    func poll(_ watcher: InboxWatcher, nowMs: Int64) -> [InboxName] {
        nextDueMs = nowMs + intervalMs
        return settling.settled(watcher.scanJobs())
    }
}

/// Which of aria2's notifications committed events make, as aria2 sends
/// them: `onDownloadStart` when a download begins to run (once, however
/// many attempts its retries make), `onDownloadPause` when the user pauses
/// it while it runs, `onDownloadComplete` and `onDownloadError` when it
/// ends, `onDownloadStop` when it is removed while it runs. Fed only events already in
/// the log, so a notification never tells of something a crash could undo.
public struct RPCNotifier: Equatable, Sendable {
    /// Downloads whose start was told and whose pause or end was not yet.
    private var running: Set<String> = []

    public init() {}

    /// The notifications `events` (just committed) make; `view` says which tasks are downloads.
    public mutating func notifications(for events: [Event], view: RPCView) -> [RPCNotification] {
        var out: [RPCNotification] = []
        for event in events {
            guard let id = event.task, view.list(of: id) != nil || running.contains(id) else { continue }
            let method: RPCNotification.Method?
            switch event.body {
            case .started:
                method = running.insert(id).inserted ? .start : nil
            case .paused(let paused):
                // aria2 tells of a pause, or a removal, only of a download that was running; a pause of
                // the agent's own (it stops, the network is gone) is no user's, and the next start is told again.
                method = running.remove(id) != nil && paused.reason == .user ? .pause : nil
            case .finished:
                running.remove(id)
                method = .complete
            case .failed:
                running.remove(id)
                method = .error
            case .cancelled:
                method = running.remove(id) != nil ? .stop : nil
            default:
                method = nil
            }
            if let method { out.append(RPCNotification(method, gid: RPCGID.of(taskID: id))) }
        }
        return out
    }
}

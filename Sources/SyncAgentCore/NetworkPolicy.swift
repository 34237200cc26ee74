import Foundation

/// What the network's state means for tasks (issue 14 §3): which wait for
/// the network instead of spending a retry, which may not run on a metered
/// link, and which go on when the network comes back. Pure: the engine's
/// `NetworkMonitor` says what the network is, this says what to do.
public enum NetworkPolicy {
    /// Whether a failed attempt waits for the network rather than retrying:
    /// the machine is offline, the attempt failed on the wire (no
    /// connection, no name, a stall), and its server is not this machine
    /// (a refused or silent loopback server is not a network problem).
    public static func waitsForNetwork(online: Bool, failedOnTheWire: Bool, url: String) -> Bool {
        !online && failedOnTheWire && !isLoopback(url)
    }

    /// `localhost`, 127.0.0.0/8 or ::1.
    public static func isLoopback(_ url: String) -> Bool {
        guard let host = URLComponents(string: url)?.host?.lowercased() else { return false }
        let bare = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return bare == "localhost" || bare.hasSuffix(".localhost") || bare.hasPrefix("127.") || bare == "::1"
    }

    /// Whether `task` may transfer over a metered link: its job's key (a
    /// child's is its parent's, the video's job), else the config's.
    public static func allowsMetered(_ task: TaskState, in state: AgentState, configDefault: Bool) -> Bool {
        (task.parentID.flatMap { state[$0] } ?? task).spec.allowMetered ?? configDefault
    }

    /// Tasks to pause now that the link is metered: queued or running ones
    /// that may not use it (an HLS parent's children go with their own job's key).
    public static func pauseForMetered(in state: AgentState, configDefault: Bool) -> [String] {
        state.orderedTasks.filter { $0.phase.isActive && !allowsMetered($0, in: state, configDefault: configDefault) }.map(\.id)
    }

    /// Tasks that waited for the network and may go on with it as it now is.
    public static func resumable(in state: AgentState, online: Bool, metered: Bool?) -> [TaskState] {
        state.orderedTasks.filter { task in
            guard task.phase == .paused, let reason = task.pauseReason else { return false }
            switch reason {
            case .offline: return online
            case .metered: return metered != true
            case .user, .agentStopping: return false
            }
        }
    }

    /// The words `status` shows for a task that waits for the network.
    public static func waitingWords(_ reason: PauseReason) -> String? {
        switch reason {
        case .offline: "waiting for the network"
        case .metered: "waiting: the link is metered (allow_metered = false)"
        case .user, .agentStopping: nil
        }
    }
}

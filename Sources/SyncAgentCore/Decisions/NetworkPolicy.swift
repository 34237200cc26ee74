import Foundation

/// What the network's state means for tasks (issue 14 §3): which wait for
/// the network instead of spending a retry, which may not run on a metered
/// link, and which go on when the network comes back. Pure: the engine's
/// `NetworkMonitor` says what the network is, this says what to do.
public enum NetworkPolicy {
    /// What a failed attempt means for its task.
    public enum Verdict: Equatable, Sendable {
        /// The server's doing (an answer, a refusal) or not known: a retry, counted.
        case retry
        /// No route leads to the server now: wait for one, spending no retry.
        case waitForNetwork
        /// The routes changed while it ran (a link that went and came back):
        /// again at once, spending no retry.
        case retryAtOnce
    }

    /// - Parameters:
    ///   - failedOnTheWire: no connection, no name, a reset or a stall — not an answer, not a refusal.
    ///   - reachable: a route leads to the server now (or out at all, when its address is not known).
    ///   - attemptStartedMs, routesChangedMs: when the attempt began and the routes last changed
    ///     (one monotonic clock). Changed during the attempt: it goes again at once. Changed just
    ///     before it (a link that came up a moment ago may not carry traffic yet): it waits for
    ///     the next look at the network.
    public static func verdict(failedOnTheWire: Bool, url: String, reachable: Bool, attemptStartedMs: Int64,
                               routesChangedMs: Int64) -> Verdict {
        // A server on this machine is never across the network.
        guard failedOnTheWire, !isLoopback(url) else { return .retry }
        if !reachable { return .waitForNetwork }
        if routesChangedMs >= attemptStartedMs { return .retryAtOnce }
        return routesChangedMs >= attemptStartedMs - settlingMs ? .waitForNetwork : .retry
    }

    /// The address an attempt went for: as curl reports it, else the URL's
    /// host when that is an address and no proxy stands between (a connect
    /// that failed at once for want of a route leaves curl none to report).
    public static func connectAddress(reported: String?, url: String, viaProxy: Bool) -> String? {
        if let reported { return reported }
        guard !viaProxy, let host = URLRules.host(of: url), addressBytes(host) != nil else { return nil }
        return host
    }

    /// 4 or 16 bytes of a numeric address; nil for a name.
    public static func addressBytes(_ address: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 { return withUnsafeBytes(of: v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, address, &v6) == 1 { return withUnsafeBytes(of: v6) { Array($0) } }
        return nil
    }

    /// How long after a change of routes a failure on the wire is still put down to it.
    public static let settlingMs: Int64 = 3000

    /// `localhost`, 127.0.0.0/8 or ::1.
    public static func isLoopback(_ url: String) -> Bool {
        guard let bare = URLRules.host(of: url) else { return false }
        return bare == "localhost" || bare.hasSuffix(".localhost") || bare.hasPrefix("127.") || bare == "::1"
    }

    /// Whether `task` may transfer over a metered link: its job's key (a
    /// child's is its parent's, the video's job), else the config's.
    public static func allowsMetered(_ task: TaskState, in state: AgentState, configDefault: Bool) -> Bool {
        (task.parentID.flatMap { state[$0] } ?? task).jobAllowsMetered ?? configDefault
    }

    /// Tasks to pause now that the link is metered: queued or running ones
    /// that may not use it (an HLS parent's children go with their own job's key).
    public static func pauseForMetered(in state: AgentState, configDefault: Bool) -> [String] {
        state.orderedTasks.filter { $0.phase.isActive && !allowsMetered($0, in: state, configDefault: configDefault) }.map(\.id)
    }

    /// Tasks that waited for the network and may go on with it as it now is:
    /// a route leads to their server again, or the link is not metered (or
    /// they may use a metered one now, after a reload) — and not one that a
    /// metered link would stop again at once.
    public static func resumable(in state: AgentState, reachable: (TaskState) -> Bool, metered: Bool?,
                                 configDefault: Bool) -> [TaskState] {
        state.orderedTasks.filter { task in
            guard task.phase == .paused, let reason = task.pauseReason, reason.waitsForNetwork else { return false }
            let meteredAllows = metered != true || allowsMetered(task, in: state, configDefault: configDefault)
            return meteredAllows && (reason == .metered || reachable(task))
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

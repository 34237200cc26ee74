import CLinuxShims
import Foundation
import Logging
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Whether this machine has a network, and whether its link is metered:
/// what NSURLSession's `waitsForConnectivity` and
/// `allowsExpensiveNetworkAccess` ask. Offline is no route out of the
/// machine; the kernel's routing events (rtnetlink) say when to look again.
/// NetworkManager, when it runs, says whether the link is metered, and its
/// signals are a reason to look again too. Its own state is not taken for
/// the network's: it may not manage the link a machine uses, and a
/// "disconnected" that is not true would hold tasks back for good.
final class NetworkMonitor {
    struct Reading: Equatable {
        /// A route leaves this machine.
        var online = true
        /// NetworkManager's `Metered`: nil when unknown or no NetworkManager runs.
        var metered: Bool?
        var networkManager = false
    }

    private(set) var reading = Reading()
    private var netlink: Int32 = -1
    private var bus: Int32 = -1
    private let logger: Logger

    /// The descriptors to poll for readability.
    var fds: [Int32] { [netlink, bus].filter { $0 >= 0 } }

    init(logger: Logger) {
        self.logger = logger
        netlink = sa_netlink_route_socket()
        if netlink < 0 {
            logger.warning("no routing events (rtnetlink): the network is taken to be up", metadata: ["error": "\(String(cString: strerror(errno)))"])
        }
        let opened = sa_nm_open()
        if opened >= 0 {
            bus = opened
        } else {
            logger.debug("no system bus for NetworkManager", metadata: ["error": "\(String(cString: strerror(-opened)))"])
        }
        reading = read()
        // Signals that came during the first read wait in sd-bus's queue, not on the fd.
        if bus >= 0 { _ = sa_nm_process() }
    }

    /// Reads again whatever the events said (a missed event must not hold
    /// tasks back): returns the reading before, when it changed.
    func probe() -> Reading? {
        let fresh = read()
        guard fresh != reading else { return nil }
        defer { reading = fresh }
        return reading
    }

    deinit {
        if netlink >= 0 { close(netlink) }
        // The bus connection lives as long as the process (sd-bus, one per process).
    }

    /// After a poll: reads again if a routing event or a NetworkManager
    /// signal arrived. Returns the reading before, when it changed.
    func refresh(ready: Set<Int32>) -> Reading? {
        var look = false
        if netlink >= 0, ready.contains(netlink) {
            // Lost events (ENOBUFS) only mean: look again, as we do anyway.
            _ = sa_netlink_drain(netlink)
            look = true
        }
        if bus >= 0, ready.contains(bus) {
            let processed = sa_nm_process()
            if processed < 0 {
                logger.warning("lost the system bus: NetworkManager is no longer followed",
                               metadata: ["error": "\(String(cString: strerror(-processed)))"])
                bus = -1
            }
            look = look || processed != 0
        }
        guard look else { return nil }
        var fresh = read()
        // A read is a method call: signals that came meanwhile wait in sd-bus's queue, not on the fd.
        while bus >= 0, sa_nm_process() == 1 { fresh = read() }
        guard fresh != reading else { return nil }
        let before = reading
        reading = fresh
        return before
    }

    private func read() -> Reading {
        // Without routing events nothing would say the network came back: it is taken to be up.
        var result = Reading(online: netlink < 0 || Self.hasRouteOut())
        var state: UInt32 = 0, metered: UInt32 = 0
        if bus >= 0, sa_nm_read(&state, &metered) == 0 {
            result.networkManager = true
            // NMMetered: 1 yes, 3 guess-yes; 2 no, 4 guess-no; 0 unknown.
            result.metered = [1, 3].contains(metered) ? true : [2, 4].contains(metered) ? false : nil
        }
        return result
    }

    /// Whether a route leaves this machine through an interface other than
    /// loopback: IPv4 from /proc/net/route, IPv6 (link-local and multicast
    /// aside) from /proc/net/ipv6_route. An interface taken down loses its routes.
    static func hasRouteOut() -> Bool {
        let rtfUp = 0x1
        if let table = try? String(contentsOfFile: "/proc/net/route", encoding: .utf8) {
            for line in table.split(separator: "\n").dropFirst() {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard fields.count > 3, fields[0] != "lo", let flags = Int(fields[3], radix: 16) else { continue }
                if flags & rtfUp != 0 { return true }
            }
        }
        if let table = try? String(contentsOfFile: "/proc/net/ipv6_route", encoding: .utf8) {
            for line in table.split(separator: "\n") {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count >= 10, fields[9] != "lo", let flags = Int(fields[8], radix: 16), flags & rtfUp != 0 else { continue }
                let destination = fields[0].lowercased()
                if destination.hasPrefix("fe80") || destination.hasPrefix("ff") { continue }
                return true
            }
        }
        return false
    }
}

// MARK: - The agent's side

extension Agent {
    /// The network changed: tasks that waited for it go on; on a metered
    /// link, those that may not use it pause.
    func networkChanged(from before: NetworkMonitor.Reading) {
        let now = network.reading
        logger.info("network changed", metadata: [
            "online": "\(now.online)", "metered": "\(now.metered.map { "\($0)" } ?? "unknown")",
            "network_manager": "\(now.networkManager)"])
        if now.metered == true {
            for id in NetworkPolicy.pauseForMetered(in: log.state, configDefault: config.allowMetered) {
                pause(id, reason: .metered, bytesIfIdle: log.state[id]?.bytes ?? 0)
            }
        }
        for task in NetworkPolicy.resumable(in: log.state, online: now.online, metered: now.metered) {
            let words = task.pauseReason == .offline ? "the network is back" : "the link is no longer metered"
            log.record(.resumed(Resumed(bytes: task.bytes, reason: words)), task: task.id)
        }
        needsScheduling = true
    }

    /// Every few seconds while tasks wait for the network: the network is
    /// read again (an event may have been missed), and a task whose
    /// `total_timeout` ran out while it waited fails, as it would running.
    func checkTasksWaitingForNetwork() {
        let now = FileSystem.monotonicMs
        guard now >= nextNetworkCheckMs else { return }
        nextNetworkCheckMs = now + 5000
        let waiting = log.state.orderedTasks.filter { $0.phase == .paused && $0.pauseReason == .offline }
        guard !waiting.isEmpty else { return }
        for task in waiting where deadlineMs(of: task) <= FileSystem.nowMs {
            fail(task, reason: totalTimeoutWords + " (waiting for the network)", code: "total_timeout", keeping: task.bytes)
        }
        if let before = network.probe() { networkChanged(from: before) }
        needsScheduling = true
    }

    /// `allow_metered = false` on a metered link: the task may not start.
    /// Without NetworkManager nothing is known of metering: said once.
    func meteredLinkForbids(_ task: TaskState) -> Bool {
        let allowed = NetworkPolicy.allowsMetered(task, in: log.state, configDefault: config.allowMetered)
        if !allowed, !network.reading.networkManager, !warnedMeteredUnknown {
            warnedMeteredUnknown = true
            logger.warning("allow_metered = false has no effect: NetworkManager does not run, so nothing says whether the link is metered",
                           metadata: ["task.id": "\(task.id)"])
        }
        return !allowed && network.reading.metered == true
    }
}

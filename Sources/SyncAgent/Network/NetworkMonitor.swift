import CLinuxShims
import Foundation
import Logging
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Whether this machine has a network, and whether its link is metered:
/// what NSURLSession's `waitsForConnectivity` and
/// `allowsExpensiveNetworkAccess` ask. The routes that lead out
/// (`RouteTable`) say which servers can be reached; the kernel's routing
/// events (rtnetlink) say when to read them again. NetworkManager, when it
/// runs, says whether the link is metered, and its signals are a reason to
/// look again too. Its own state is not taken for the network's: it may not
/// manage the link a machine uses, and a "disconnected" that is not true
/// would hold tasks back for good.
final class NetworkMonitor {
    struct Reading: Equatable {
        /// Some route leads out of this machine.
        var online = true
        /// NetworkManager's `Metered`: nil when unknown or no NetworkManager runs.
        var metered: Bool?
        var networkManager = false
    }

    private(set) var reading = Reading()
    /// The usable routes, as last read.
    private(set) var routes = RouteTable()
    /// When the routes last changed (monotonic ms): an attempt that failed
    /// across such a change failed because of the network.
    private(set) var routesChangedMs: Int64 = .min
    private var netlink: Int32 = -1
    private var bus: Int32 = -1
    /// When to try the system bus again, after it was missing or lost (monotonic ms).
    private var nextBusAttemptMs: Int64 = 0
    private static let busRetryMs: Int64 = 10_000
    private let logger: Logger

    /// The descriptors to poll for readability.
    var fds: [Int32] { [netlink, bus].filter { $0 >= 0 } }

    init(logger: Logger) {
        self.logger = logger
        netlink = sa_netlink_route_socket()
        if netlink < 0 {
            logger.warning("no routing events (rtnetlink): the network is taken to be up", metadata: ["error": "\(String(cString: strerror(errno)))"])
        }
        connectBus(quiet: false)
        reading = read()
        // The first reading is no change: an attempt in the agent's first seconds is not "settling".
        routesChangedMs = .min
    }

    deinit {
        if netlink >= 0 { close(netlink) }
        if bus >= 0 { sa_nm_close() }
    }

    private func connectBus(quiet: Bool) {
        nextBusAttemptMs = FileSystem.monotonicMs + Self.busRetryMs
        let opened = sa_nm_open()
        guard opened >= 0 else {
            if !quiet { logger.debug("no system bus for NetworkManager", metadata: ["error": "\(String(cString: strerror(-opened)))"]) }
            return
        }
        bus = opened
        // Signals that come during the first read wait in sd-bus's queue, not on the fd.
        _ = sa_nm_process()
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
                logger.warning("lost the system bus: NetworkManager is followed again when it comes back",
                               metadata: ["error": "\(String(cString: strerror(-processed)))"])
                sa_nm_close()
                bus = -1
            }
            look = true
        }
        return look ? probe() : nil
    }

    /// Reads everything again (a missed event must not hold tasks back), and
    /// tries the system bus again when it was missing: returns the reading
    /// before, when it changed.
    func probe() -> Reading? {
        if bus < 0, FileSystem.monotonicMs >= nextBusAttemptMs { connectBus(quiet: true) }
        var fresh = read()
        // A read is a method call: signals that came meanwhile wait in sd-bus's queue, not on the fd.
        while bus >= 0, sa_nm_process() == 1 { fresh = read() }
        guard fresh != reading else { return nil }
        defer { reading = fresh }
        return reading
    }

    /// Whether a connection to `address` could leave this machine now: a
    /// route covers it, or it is one of the machine's own addresses. Without
    /// an address: for a name that did not resolve, whether any route leads
    /// out (its name server may be a neighbour); for a connect that failed
    /// before curl chose an address, whether a default route does.
    func reaches(_ address: String?, nameUnresolved: Bool) -> Bool {
        guard netlink >= 0 else { return true }
        guard let address, let bytes = NetworkPolicy.addressBytes(address) else { return nameUnresolved ? reading.online : routes.hasDefaultRoute }
        return routes.reaches(bytes) || Self.localAddresses().contains(bytes)
    }

    private func read() -> Reading {
        let fresh = RouteTable.parse(ipv4: (try? String(contentsOfFile: "/proc/net/route", encoding: .utf8)) ?? "",
                                     ipv6: (try? String(contentsOfFile: "/proc/net/ipv6_route", encoding: .utf8)) ?? "",
                                     linkIsUp: Self.linkIsUp)
        // Only a change of the routes that lead out counts (link-local ones settle for a while after a link comes up).
        if fresh.outward != routes.outward { routesChangedMs = FileSystem.monotonicMs }
        routes = fresh
        // Without routing events nothing would say the network came back: it is taken to be up.
        var result = Reading(online: netlink < 0 || routes.online)
        var state: UInt32 = 0, metered: UInt32 = 0
        if bus >= 0, sa_nm_read(&state, &metered) == 0 {
            result.networkManager = true
            // NMMetered: 1 yes, 3 guess-yes; 2 no, 4 guess-no; 0 unknown.
            result.metered = [1, 3].contains(metered) ? true : [2, 4].contains(metered) ? false : nil
        }
        return result
    }

    /// An interface carries traffic unless its operstate says it cannot
    /// (down, no carrier, dormant); "unknown" is what many virtual links say.
    private static func linkIsUp(_ device: String) -> Bool {
        guard !device.contains("/"), let state = try? String(contentsOfFile: "/sys/class/net/\(device)/operstate", encoding: .utf8)
        else { return true }
        let word = state.trimmingCharacters(in: .whitespacesAndNewlines)
        return word == "up" || word == "unknown"
    }

    /// This machine's own addresses (a server on one of them is not across the network).
    private static func localAddresses() -> [[UInt8]] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [] }
        defer { freeifaddrs(list) }
        var found: [[UInt8]] = []
        var entry = list
        while let current = entry {
            if let address = current.pointee.ifa_addr {
                switch Int32(address.pointee.sa_family) {
                case AF_INET:
                    address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { found.append(withUnsafeBytes(of: $0.pointee.sin_addr) { Array($0) }) }
                case AF_INET6:
                    address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { found.append(withUnsafeBytes(of: $0.pointee.sin6_addr) { Array($0) }) }
                default: break
                }
            }
            entry = current.pointee.ifa_next
        }
        return found
    }
}

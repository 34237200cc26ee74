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
        do {
            netlink = try Posix.routeEvents()
        } catch {
            logger.warning("no routing events (rtnetlink): the network is taken to be up", metadata: ["error": "\(Self.words(error))"])
        }
        connectBus(quiet: false)
        reading = read()
        // The first reading is no change: an attempt in the agent's first seconds is not "settling".
        routesChangedMs = .min
    }

    deinit {
        Posix.close(netlink)
        if bus >= 0 { Posix.disconnectNetworkManager() }
    }

    private static func words(_ error: Error) -> String { Posix.words((error as? SystemError)?.errno ?? EIO) }

    private func connectBus(quiet: Bool) {
        nextBusAttemptMs = FileSystem.monotonicMs + Self.busRetryMs
        do {
            bus = try Posix.connectNetworkManager()
        } catch {
            if !quiet { logger.debug("no system bus for NetworkManager", metadata: ["error": "\(Self.words(error))"]) }
            return
        }
        // Signals that come during the first read wait in sd-bus's queue, not
        // on the fd: processed now (whether one came does not matter, the
        // first read follows), so that the fd polls readable for the next.
        _ = busSignalled()
    }

    /// Whether NetworkManager signalled something since the last call. A
    /// bus that fails is let go (logged), and connected again later.
    private func busSignalled() -> Bool {
        do {
            return try Posix.networkManagerSignalled()
        } catch {
            logger.warning("lost the system bus: NetworkManager is followed again when it comes back",
                           metadata: ["error": "\(Self.words(error))"])
            Posix.disconnectNetworkManager()
            bus = -1
            return false
        }
    }

    /// After a poll: reads again if a routing event or a NetworkManager
    /// signal arrived. Returns the reading before, when it changed.
    func refresh(ready: Set<Int32>) -> Reading? {
        var look = false
        if netlink >= 0, ready.contains(netlink) {
            do {
                try Posix.drainRouteEvents(netlink)
            } catch let error as SystemError where error.errno == ENOBUFS {
                // Lost events only mean: look again, as we do anyway.
            } catch {
                // A socket that fails would poll readable for ever: let go, as
                // if there had never been one (the network is taken to be up).
                logger.warning("routing events (rtnetlink) failed: the network is taken to be up", metadata: ["error": "\(Self.words(error))"])
                Posix.close(netlink)
                netlink = -1
            }
            look = true
        }
        if bus >= 0, ready.contains(bus) {
            _ = busSignalled()
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
        while bus >= 0, busSignalled() { fresh = read() }
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
        // State that cannot be read: no NetworkManager runs (the bus answers for it), and nothing is known of metering.
        if bus >= 0, let networkManager = try? Posix.networkManagerState() {
            result.networkManager = true
            // NMMetered: 1 yes, 3 guess-yes; 2 no, 4 guess-no; 0 unknown.
            let metered = networkManager.metered
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

    /// This machine's own addresses (a server on one of them is not across
    /// the network). None when they cannot be listed: a server is then
    /// judged by the routes alone.
    private static func localAddresses() -> [[UInt8]] {
        (try? Posix.interfaceAddresses()) ?? []
    }
}

import Foundation

/// The kernel's routes that can carry traffic out of this machine, read
/// from the text of `/proc/net/route` and `/proc/net/ipv6_route`: which
/// addresses a connection could reach now, and whether any route leads
/// out at all. A route is usable when it is up, not a reject route
/// (`unreachable`, `blackhole`, `prohibit`), and its interface is not
/// loopback and has its link (an unplugged cable keeps the route, marked
/// linkdown, but carries nothing).
public struct RouteTable: Equatable, Sendable {
    public struct Route: Equatable, Sendable {
        /// 4 bytes (IPv4) or 16 (IPv6).
        public var destination: [UInt8]
        public var prefixLength: Int
        public var device: String
    }

    public private(set) var routes: [Route] = []

    public init(routes: [Route] = []) { self.routes = routes }

    private static let up = 0x0001, reject = 0x0200

    /// - Parameter linkIsUp: whether an interface has its link (operstate).
    public static func parse(ipv4: String, ipv6: String, linkIsUp: (String) -> Bool) -> RouteTable {
        var table = RouteTable()
        // Iface Destination Gateway Flags RefCnt Use Metric Mask …, numbers in hex, the
        // addresses as the little-endian machine prints a network-order word.
        for line in ipv4.split(separator: "\n").dropFirst() {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count >= 8, let flags = Int(fields[3], radix: 16), let destination = UInt32(fields[1], radix: 16),
                  let mask = UInt32(fields[7], radix: 16) else { continue }
            let device = String(fields[0])
            guard usable(flags: flags, device: device, linkIsUp: linkIsUp) else { continue }
            let bytes = (0..<4).map { UInt8(truncatingIfNeeded: destination >> (8 * $0)) }
            table.routes.append(Route(destination: bytes, prefixLength: mask.nonzeroBitCount, device: device))
        }
        // destination prefix source prefix next-hop metric refcnt use flags device
        for line in ipv6.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 10, fields[0].count == 32, let prefix = Int(fields[1], radix: 16),
                  let flags = Int(fields[8], radix: 16) else { continue }
            let device = String(fields[9])
            guard usable(flags: flags, device: device, linkIsUp: linkIsUp) else { continue }
            let hex = Array(fields[0].utf8)
            var bytes: [UInt8] = []
            for index in stride(from: 0, to: 32, by: 2) {
                guard let byte = UInt8(String(decoding: hex[index..<index + 2], as: UTF8.self), radix: 16) else { break }
                bytes.append(byte)
            }
            guard bytes.count == 16 else { continue }
            table.routes.append(Route(destination: bytes, prefixLength: min(prefix, 128), device: device))
        }
        return table
    }

    private static func usable(flags: Int, device: String, linkIsUp: (String) -> Bool) -> Bool {
        flags & up != 0 && flags & reject == 0 && device != "lo" && device != "*" && linkIsUp(device)
    }

    /// The routes that lead out: IPv6 link-local and multicast routes aside,
    /// which every interface has and which come and go as links settle.
    public var outward: [Route] {
        routes.filter { route in
            route.destination.count == 4 || !(route.destination[0] == 0xFE && route.destination[1] & 0xC0 == 0x80)
                && route.destination[0] != 0xFF
        }
    }

    /// Some route leads out.
    public var online: Bool { !outward.isEmpty }

    /// A default route leads out: any address may be reached. (A subnet
    /// route alone, with the default route gone or not yet set by DHCP,
    /// reaches only its neighbours.) A VPN's `0/1` and `128/1` pair counts.
    public var hasDefaultRoute: Bool { outward.contains { $0.prefixLength <= 1 } }

    /// Whether a route covers `address` (4 or 16 bytes).
    public func reaches(_ address: [UInt8]) -> Bool {
        routes.contains { $0.destination.count == address.count && Self.covers($0, address) }
    }

    private static func covers(_ route: Route, _ address: [UInt8]) -> Bool {
        var left = route.prefixLength
        for (index, byte) in address.enumerated() where left > 0 {
            let bits = min(8, left)
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
            if byte & mask != route.destination[index] & mask { return false }
            left -= bits
        }
        return true
    }
}

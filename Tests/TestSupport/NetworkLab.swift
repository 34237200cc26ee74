import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A network namespace of the test's own, joined to this one by a veth
/// pair: 10.213.N.1 here (where a server listens), 10.213.N.2 inside
/// (where the agent runs). Taking the inner end down is a machine going
/// offline: its routes go, its connections stall. Needs root (CAP_NET_ADMIN);
/// `init` throws `Unavailable` where the machine cannot make one.
public final class NetworkLab {
    public struct Unavailable: Error, CustomStringConvertible {
        public var description: String
    }

    public let namespace: String
    public let hostAddress: String
    public let innerAddress: String
    /// An address of ours on another subnet: inside, reached only through
    /// the default route (which `setDefaultRoute` takes away and gives back).
    public let remoteAddress: String
    private let inner: String
    private let outer: String
    private let claim: SubnetClaim

    public init() throws {
        claim = try SubnetClaim()
        let number = claim.number
        namespace = "sa-test-\(number)"
        inner = "sai\(number)"
        outer = "sao\(number)"
        hostAddress = "10.213.\(number).1"
        innerAddress = "10.213.\(number).2"
        remoteAddress = "10.214.\(number).1"
        // Left by a run that was killed: the number is ours now, so is what bears it.
        _ = try? Self.ip(["netns", "del", namespace])
        _ = try? Self.ip(["link", "del", outer])
        do {
            try Self.ip(["netns", "add", namespace])
        } catch {
            throw Unavailable(description: "cannot make a network namespace (root and CAP_NET_ADMIN needed): \(error)")
        }
        do {
            try Self.ip(["link", "add", outer, "type", "veth", "peer", "name", inner])
            try Self.ip(["link", "set", inner, "netns", namespace])
            try Self.ip(["addr", "add", "\(hostAddress)/24", "dev", outer])
            try Self.ip(["link", "set", outer, "up"])
            try inside(["ip", "addr", "add", "\(innerAddress)/24", "dev", inner])
            try inside(["ip", "link", "set", inner, "up"])
            try inside(["ip", "link", "set", "lo", "up"])
            try Self.ip(["addr", "add", "\(remoteAddress)/32", "dev", outer])
            try inside(["ip", "route", "add", "default", "via", hostAddress])
        } catch {
            _ = try? Self.ip(["netns", "del", namespace])
            _ = try? Self.ip(["link", "del", outer])
            throw Unavailable(description: "cannot wire a veth pair into a namespace: \(error)")
        }
    }

    /// The inner link down (the machine offline) or up again.
    public func setLink(up: Bool) throws {
        try inside(["ip", "link", "set", inner, up ? "up" : "down"])
    }

    /// Inside, the default route gone (link and subnet still up: DHCP not
    /// done yet, a VPN's kill switch) or back.
    public func setDefaultRoute(present: Bool) throws {
        try inside(["ip", "route", present ? "add" : "del", "default", "via", hostAddress])
    }

    /// Our end of the pair down or up: inside, the link loses its carrier
    /// (a cable pulled out) but keeps its address and routes.
    public func setCarrier(up: Bool) throws {
        try Self.ip(["link", "set", outer, up ? "up" : "down"])
    }

    /// `ip netns exec NAMESPACE` + a command, for a ChildProcess that runs inside.
    public func command(_ arguments: [String]) -> (executable: String, arguments: [String]) {
        ("/usr/sbin/ip", ["netns", "exec", namespace] + arguments)
    }

    private func inside(_ arguments: [String]) throws {
        try Self.ip(["netns", "exec", namespace] + arguments)
    }

    private static func ip(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            let words = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            throw TestFailure("ip \(arguments.joined(separator: " ")): \(words)")
        }
    }

    deinit {
        // Deleting the namespace deletes its end of the pair, and with it ours.
        _ = try? Self.ip(["netns", "del", namespace])
        _ = try? Self.ip(["link", "del", outer])
    }
}

/// A subnet number (1…249) no other lab on this machine holds, whichever
/// test process made it: a lock on a file of that number, which the kernel
/// lets go when the process ends however it ends.
private final class SubnetClaim {
    let number: Int
    private let descriptor: Int32

    init() throws {
        let folder = "/tmp/syncagent-test-subnets"
        mkdir(folder, 0o700)
        for number in 1...249 {
            let descriptor = open("\(folder)/\(number)", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw TestFailure("open \(folder)/\(number): errno \(errno)") }
            if flock(descriptor, LOCK_EX | LOCK_NB) == 0 {
                self.number = number
                self.descriptor = descriptor
                return
            }
            close(descriptor)
        }
        throw TestFailure("all 249 test subnets are in use")
    }

    deinit { close(descriptor) }
}

/// A private bus standing in for the system bus, with python-dbusmock's
/// NetworkManager on it: `Metered` and the state as a test sets them.
public final class NetworkManagerMock {
    public var busAddress: String { bus.address }
    /// This process's environment, with the private bus as the system bus.
    public let environment: [String: String]
    private let bus: PrivateBus
    private let mock: ChildProcess
    private let directory: TempDirectory

    public init(in directory: TempDirectory, metered: UInt32) throws {
        self.directory = directory
        bus = try PrivateBus(in: directory, named: "system-bus")
        environment = ProcessInfo.processInfo.environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": bus.address]) { $1 }
        mock = try ChildProcess("/usr/bin/python3", ["-m", "dbusmock", "--system", "--template", "networkmanager"],
                                environment: environment, outputIn: directory.path, name: "nm-mock")
        let up = eventually(within: 20) {
            (try? self.send(["org.freedesktop.DBus.Mock.AddProperty", "string:org.freedesktop.NetworkManager", "string:Metered",
                             "variant:uint32:\(metered)"])) != nil
        }
        guard up else { throw TestFailure("the NetworkManager mock did not come up: \(mock.stderr)") }
    }

    /// NMMetered: 1 yes, 2 no. Emits PropertiesChanged, as NetworkManager does.
    public func setMetered(_ value: UInt32) throws {
        try send(["org.freedesktop.DBus.Mock.SetProperty", "string:/org/freedesktop/NetworkManager",
                  "string:org.freedesktop.NetworkManager", "string:Metered", "variant:uint32:\(value)"])
    }

    private func send(_ call: [String]) throws {
        let child = try ChildProcess("/usr/bin/dbus-send", ["--system", "--print-reply", "--dest=org.freedesktop.NetworkManager",
                                                            "/org/freedesktop/NetworkManager"] + call,
                                     environment: environment, outputIn: directory.path, name: "dbus-send")
        guard child.wait(seconds: 10) == 0 else { throw TestFailure("dbus-send \(call[0]): \(child.stderr)") }
    }

    deinit {
        mock.signal(SIGKILL)
        mock.wait(seconds: 5)
    }
}

import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A private D-Bus session bus with python-dbusmock's notification daemon on
/// it, logging every Notify call: the real libnotify path, observable.
public final class NotificationDaemon {
    public var busAddress: String { bus.address }
    public let callLog: String
    private let bus: PrivateBus
    private let mock: ChildProcess

    /// - Parameter answerAfter: seconds each Notify call takes to be answered (a slow or hung server).
    public init(in directory: TempDirectory, answerAfter: Int = 0) throws {
        callLog = directory.file("notify.log")
        bus = try PrivateBus(in: directory, named: "bus")
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        // Debian's python3, where python3-dbusmock is installed.
        mock = try ChildProcess("/usr/bin/python3", ["-m", "dbusmock", "--template", "notification_daemon", "-l", callLog],
                                environment: environment, outputIn: directory.path, name: "dbusmock")
        let owned = eventually(within: 20) {
            let check = try? ChildProcess("/usr/bin/dbus-send", [
                "--session", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.Notifications",
            ], environment: environment, outputIn: directory.path, name: "dbus-send")
            check?.wait(seconds: 5)
            return check?.stdout.contains("boolean true") ?? false
        }
        guard owned else { throw TestFailure("dbusmock did not come up: \(mock.stderr)") }
        if answerAfter > 0 {
            // Notify made again through dbusmock's own interface, sleeping before it answers.
            let slow = try ChildProcess("/usr/bin/dbus-send", [
                "--session", "--print-reply", "--dest=org.freedesktop.Notifications", "/org/freedesktop/Notifications",
                "org.freedesktop.DBus.Mock.AddMethod", "string:org.freedesktop.Notifications", "string:Notify",
                "string:susssasa{sv}i", "string:u", "string:import time; time.sleep(\(answerAfter)); ret = 1",
            ], environment: environment, outputIn: directory.path, name: "dbus-send-slow")
            guard slow.wait(seconds: 10) == 0 else { throw TestFailure("cannot slow dbusmock's Notify down: \(slow.stderr)") }
        }
    }

    /// One entry per Notify call: the line dbusmock logged (app name, summary, body…).
    public var notifyCalls: [String] {
        let text = (try? String(contentsOfFile: callLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init).filter { line in
            guard let space = line.firstIndex(of: " ") else { return false }
            return Double(line[..<space]) != nil && line[line.index(after: space)...].hasPrefix("Notify ")
        }
    }

    deinit {
        // SIGKILL: children of the test runner may inherit a blocked SIGTERM.
        mock.signal(SIGKILL)
        mock.wait(seconds: 5)
    }
}

/// A dbus-daemon of the test's own, on a socket in its folder: a session bus
/// for notifications, or one standing in for the system bus.
public final class PrivateBus {
    public let address: String
    private let daemon: ChildProcess

    public init(in directory: TempDirectory, named name: String) throws {
        let socket = directory.file(name)
        address = "unix:path=\(socket)"
        daemon = try ChildProcess("/usr/bin/dbus-daemon", ["--session", "--nofork", "--address=\(address)"],
                                  environment: ProcessInfo.processInfo.environment, outputIn: directory.path, name: name)
        guard eventually(within: 10, { FileManager.default.fileExists(atPath: socket) }) else {
            throw TestFailure("dbus-daemon did not start: \(daemon.stderr)")
        }
    }

    deinit {
        // SIGKILL: children of the test runner may inherit a blocked SIGTERM.
        daemon.signal(SIGKILL)
        daemon.wait(seconds: 5)
    }
}

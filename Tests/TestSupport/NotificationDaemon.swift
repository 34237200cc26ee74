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
    private let directory: TempDirectory
    private let environment: [String: String]
    /// A file manager (`org.freedesktop.FileManager1`) on the same bus, once `startFileManager` made one.
    private var fileManager: ChildProcess?

    /// - Parameters:
    ///   - answerAfter: seconds each Notify call takes to be answered (a slow or hung server).
    ///   - capabilities: what `GetCapabilities` answers; nil: dbusmock's defaults (no "actions").
    public init(in directory: TempDirectory, answerAfter: Int = 0, capabilities: [String]? = nil) throws {
        self.directory = directory
        callLog = directory.file("notify.log")
        bus = try PrivateBus(in: directory, named: "bus")
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        self.environment = environment
        var arguments = ["-m", "dbusmock", "--template", "notification_daemon", "-l", callLog]
        if let capabilities {
            let parameters = try JSONSerialization.data(withJSONObject: ["capabilities": capabilities.joined(separator: " ")])
            arguments += ["-p", String(decoding: parameters, as: UTF8.self)]
        }
        // Debian's python3, where python3-dbusmock is installed.
        mock = try ChildProcess("/usr/bin/python3", arguments, environment: environment, outputIn: directory.path, name: "dbusmock")
        guard Self.owned("org.freedesktop.Notifications", environment: environment, in: directory) else {
            throw TestFailure("dbusmock did not come up: \(mock.stderr)")
        }
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

    private static func owned(_ name: String, environment: [String: String], in directory: TempDirectory) -> Bool {
        eventually(within: 20) {
            let check = try? ChildProcess("/usr/bin/dbus-send", [
                "--session", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                "org.freedesktop.DBus.NameHasOwner", "string:\(name)",
            ], environment: environment, outputIn: directory.path, name: "dbus-send")
            check?.wait(seconds: 5)
            return check?.stdout.contains("boolean true") ?? false
        }
    }

    /// Runs `arguments` of `gdbus call` on the mock's bus; fails the test's step unless it answers.
    private func gdbus(_ arguments: [String], seconds: Double = 30) throws {
        let call = try ChildProcess("/usr/bin/gdbus", ["call", "--session"] + arguments, environment: environment,
                                    outputIn: directory.path, name: "gdbus-\(UUID().uuidString)")
        guard call.wait(seconds: seconds) == 0 else { throw TestFailure("gdbus \(arguments) failed: \(call.stderr)") }
    }

    /// The server says `action` of notification `id` was clicked, as a
    /// desktop would: `ActionInvoked` from the server's own connection
    /// (libnotify hears only the server). dbusmock numbers notifications
    /// 1, 2, … in the order of the Notify calls.
    public func invoke(action: String, of id: UInt32) throws {
        try gdbus(["--dest", "org.freedesktop.Notifications", "--object-path", "/org/freedesktop/Notifications",
                   "--method", "org.freedesktop.DBus.Mock.EmitSignal", "org.freedesktop.Notifications", "ActionInvoked", "us",
                   "[<uint32 \(id)>, <\(Self.gvariantString(action))>]"])
    }

    /// `count` `ActionInvoked` signals for `id` and `action` at once, sent by the server itself.
    public func flood(action: String, of id: UInt32, count: Int) throws {
        try gdbus(["--dest", "org.freedesktop.Notifications", "--object-path", "/org/freedesktop/Notifications",
                   "--method", "org.freedesktop.DBus.Mock.AddMethod", "org.freedesktop.Notifications", "Flood", "usu", "",
                   "for _ in range(args[2]): self.EmitSignal('', 'ActionInvoked', 'us', [args[0], args[1]])"])
        try gdbus(["--dest", "org.freedesktop.Notifications", "--object-path", "/org/freedesktop/Notifications",
                   "--method", "org.freedesktop.Notifications.Flood", "uint32 \(id)", Self.gvariantString(action),
                   "uint32 \(count)"], seconds: 120)
    }

    /// A file manager on the session bus: python-dbusmock owning
    /// `org.freedesktop.FileManager1`, logging each `ShowItems` call into the file returned.
    public func startFileManager() throws -> String {
        let log = directory.file("filemanager.log")
        fileManager = try ChildProcess("/usr/bin/python3", ["-m", "dbusmock", "-l", log, "org.freedesktop.FileManager1",
                                                            "/org/freedesktop/FileManager1", "org.freedesktop.FileManager1"],
                                       environment: environment, outputIn: directory.path, name: "filemanager")
        guard Self.owned("org.freedesktop.FileManager1", environment: environment, in: directory) else {
            throw TestFailure("the file manager's dbusmock did not come up: \(fileManager?.stderr ?? "")")
        }
        try gdbus(["--dest", "org.freedesktop.FileManager1", "--object-path", "/org/freedesktop/FileManager1",
                   "--method", "org.freedesktop.DBus.Mock.AddMethod", "org.freedesktop.FileManager1", "ShowItems", "ass", "", ""])
        return log
    }

    /// A GVariant text string literal.
    private static func gvariantString(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'"
    }

    /// Everything dbusmock logged so far: each call whole (a notice's body spans lines).
    public var calls: String { (try? String(contentsOfFile: callLog, encoding: .utf8)) ?? "" }

    /// The id dbusmock gave the first notice whose Notify call mentions
    /// `words` (it numbers notices 1, 2, … in the order of the calls).
    public func noticeID(saying words: String) -> UInt32? {
        let notices = calls.components(separatedBy: " Notify \"syncagent\"").dropFirst()
        return notices.firstIndex { $0.contains(words) }.map { UInt32($0 - notices.startIndex + 1) }
    }

    /// Waits for a notice whose Notify call mentions `words`: its id, or a failure showing the calls logged.
    public func awaitNotice(saying words: String, within seconds: Double = 20) throws -> UInt32 {
        guard eventually(within: seconds, { noticeID(saying: words) != nil }), let id = noticeID(saying: words) else {
            throw TestFailure("no notice saying \"\(words)\" within \(seconds) s: \(calls)")
        }
        return id
    }

    /// One entry per Notify call: the line dbusmock logged (app name, summary, body…).
    public var notifyCalls: [String] {
        calls.split(separator: "\n").map(String.init).filter { line in
            guard let space = line.firstIndex(of: " ") else { return false }
            return Double(line[..<space]) != nil && line[line.index(after: space)...].hasPrefix("Notify ")
        }
    }

    deinit {
        // SIGKILL: children of the test runner may inherit a blocked SIGTERM.
        mock.signal(SIGKILL)
        mock.wait(seconds: 5)
        fileManager?.signal(SIGKILL)
        fileManager?.wait(seconds: 5)
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

/// Where every notification test starts: an agent whose session bus has
/// dbusmock's notification daemon on it, and nginx to download from.
public struct NotificationWorld {
    public let harness: AgentHarness
    public let daemon: NotificationDaemon
    public let nginx: Nginx

    public init(config: String = "", capabilities: [String]? = nil, answerAfter: Int = 0) throws {
        harness = try AgentHarness(config: config)
        daemon = try NotificationDaemon(in: harness.directory, answerAfter: answerAfter, capabilities: capabilities)
        harness.busAddress = daemon.busAddress
        nginx = try Nginx(in: harness.directory)
    }

    /// One download that finishes (`ok.bin`) and one that fails with a 404 (`gone.bin`), dropped as jobs.
    public func dropOneGoodAndOneMissing() throws {
        try nginx.serve("ok.bin", size: 1000)
        try harness.drop("ok.job", "url = \"\(nginx.url("ok.bin"))\"\n")
        try harness.drop("gone.job", "url = \"\(nginx.url("gone.bin"))\"\n")
    }
}

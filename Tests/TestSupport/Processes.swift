import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The built `syncagent`, next to the test bundle in the build folder.
public let syncagentBinary: String = {
    if let override = ProcessInfo.processInfo.environment["SYNCAGENT_BINARY"] { return override }
    let me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    return ((me as NSString).deletingLastPathComponent as NSString).appendingPathComponent("syncagent")
}()

public struct CommandResult {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// A child process whose output goes to files (no pipe can fill and block it).
public final class ChildProcess {
    public let process = Process()
    public let stdoutPath: String
    public let stderrPath: String

    public init(_ executable: String, _ arguments: [String], environment: [String: String], outputIn directory: String,
         name: String = UUID().uuidString) throws {
        stdoutPath = "\(directory)/\(name).out"
        stderrPath = "\(directory)/\(name).err"
        try Data().write(to: URL(fileURLWithPath: stdoutPath))
        try Data().write(to: URL(fileURLWithPath: stderrPath))
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        process.standardOutput = FileHandle(forWritingAtPath: stdoutPath)
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    public var pid: Int32 { process.processIdentifier }
    public var isRunning: Bool { process.isRunning }

    public func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits at most `seconds`; nil if it is still running then.
    @discardableResult
    public func wait(seconds: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { return nil }
        return process.terminationStatus
    }

    public var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    public var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    deinit {
        if process.isRunning {
            signal(SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// Polls `condition` every 20 ms for at most `seconds`: bounded, never a bare sleep-and-hope.
public func eventually(within seconds: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}

/// A TCP port nothing listens on right now, on 127.0.0.1.
public func freePort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            _ = bind(fd, $0, length)
            _ = getsockname(fd, $0, &length)
        }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

public func canConnect(port: Int, host: String = "127.0.0.1") -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr(host)
    address.sin_port = UInt16(port).bigEndian
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
        }
    }
}

public final class TempDirectory: Sendable {
    public let path: String

    public init() {
        let base = NSTemporaryDirectory().hasSuffix("/") ? String(NSTemporaryDirectory().dropLast()) : NSTemporaryDirectory()
        var template = Array("\(base)/syncagent-test-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    public func file(_ name: String) -> String { path + "/" + name }
}

/// SHA-256 in hex, computed by coreutils so the tests do not share the agent's code.
public func sha256Hex(_ data: Data) -> String {
    let path = NSTemporaryDirectory() + "/sha-\(UUID().uuidString)"
    defer { try? FileManager.default.removeItem(atPath: path) }
    try? data.write(to: URL(fileURLWithPath: path))
    return sha256Hex(ofFile: path)
}

/// sha256sum's digest of a file, read by the tool (large files never enter the test's memory).
public func sha256Hex(ofFile path: String) -> String {
    let process = Process()
    let pipe = Pipe()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
    process.arguments = [path]
    process.standardOutput = pipe
    try? process.run()
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: output, as: UTF8.self).split(separator: " ").first.map(String.init) ?? ""
}

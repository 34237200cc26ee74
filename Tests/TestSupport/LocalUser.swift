import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Another local user of the machine, made with `useradd` for one test and
/// removed with `userdel` after it: the user whose files and folders the
/// agent (run by the tests as root) must not act on. What she does herself
/// runs as her (`setpriv`), with her rights and no others.
public final class LocalUser {
    public let name: String
    public let uid: uid_t
    public let gid: gid_t

    /// - Parameter prefix: the start of its name, which ends in a random word.
    public init(prefix: String = "sa-test-") throws {
        name = prefix + String(UInt64.random(in: 0..<(1 << 40)), radix: 36)
        try Self.administer("/usr/sbin/useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", name])
        guard let entry = getpwnam(name) else { throw TestFailure("useradd made no user \(name)") }
        uid = entry.pointee.pw_uid
        gid = entry.pointee.pw_gid
    }

    deinit { try? Self.administer("/usr/sbin/userdel", [name]) }

    /// Runs `executable` as this user, in `directory` (where its output files go too).
    @discardableResult
    public func run(_ executable: String, _ arguments: [String], in directory: String) throws -> CommandResult {
        let child = try ChildProcess("/usr/bin/setpriv", ["--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "--", executable]
                                     + arguments, environment: ["PATH": "/usr/bin:/bin"], outputIn: directory)
        guard let status = child.wait(seconds: 30) else { throw TestFailure("\(executable) as \(name) still running after 30 s") }
        return CommandResult(status: status, stdout: child.stdout, stderr: child.stderr)
    }

    /// A shell command run as this user; throws unless it succeeds.
    public func shell(_ command: String, in directory: String) throws {
        let result = try run("/bin/sh", ["-c", command], in: directory)
        guard result.status == 0 else { throw TestFailure("as \(name): \(command): \(result.stderr)") }
    }

    /// Gives this user a password (`chpasswd`, read from its standard input: never in an argument list).
    public func setPassword(_ password: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/chpasswd")
        process.environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"]
        let input = Pipe()
        let errors = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        try process.run()
        input.fileHandleForWriting.write(Data("\(name):\(password)\n".utf8))
        try input.fileHandleForWriting.close()
        let words = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw TestFailure("chpasswd for \(name): \(words)") }
    }

    /// Gives `path` (a link itself, not what it names) to this user.
    public func own(_ path: String) throws {
        guard lchown(path, uid, gid) == 0 else { throw TestFailure("chown \(path) to \(name): \(String(cString: strerror(errno)))") }
    }

    /// useradd and userdel take /etc/passwd's lock, which another process
    /// may hold for a moment (a parallel test, another test run): tried again then.
    private static func administer(_ tool: String, _ arguments: [String]) throws {
        let scratch = TempDirectory()
        var stderr = ""
        for _ in 0..<100 {
            let child = try ChildProcess(tool, arguments, environment: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], outputIn: scratch.path)
            guard let status = child.wait(seconds: 30) else { throw TestFailure("\(tool) still running after 30 s") }
            if status == 0 { return }
            stderr = child.stderr
            guard stderr.contains("lock") else { break }
            usleep(50_000)
        }
        throw TestFailure("\(tool) \(arguments.joined(separator: " ")): \(stderr)")
    }
}

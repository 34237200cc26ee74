import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An agent whose state dir, inbox and download_dir are on forgetfs: the
/// world of the power-cut tests (issue 41). The folders are made durably
/// first (mkdir, fsync, fsync of the parent), as an installer would; the
/// agent runs with forgetfs's syncfs library preloaded.
public final class PowerCutWorld {
    public let directory: TempDirectory
    public let fs: ForgetFS
    public let harness: AgentHarness

    /// - Parameter stateDirMade: false leaves `state/` for the agent to make.
    public init?(config: String = "", stateDirMade: Bool = true) throws {
        let directory = TempDirectory()
        guard let fs = try ForgetFS(in: directory) else { return nil }
        self.directory = directory
        self.fs = fs
        try Durably.makeDirectory(fs.path + "/inbox")
        try Durably.makeDirectory(fs.path + "/downloads", mode: 0o755)
        if stateDirMade { try Durably.makeDirectory(fs.path + "/state") }
        harness = try AgentHarness(config: config, directory: directory, root: fs.path)
        harness.extraEnvironment["LD_PRELOAD"] = ForgetFS.preloadLibrary
    }

    /// A job dropped as a careful script does: after this it is durable.
    public func drop(_ name: String, _ text: String) throws {
        try Durably.dropJob(text, named: name, in: harness.inbox)
    }

    /// kill -9 and the power cut at once, then the boot after it.
    public func cut(_ agent: ChildProcess?) throws {
        if let agent {
            agent.signal(SIGKILL)
            guard agent.wait(seconds: 10) != nil else { throw TestFailure("the agent outlived SIGKILL") }
        }
        let before = device
        try fs.powerCycle()
        if device != before { deviceChanges += 1 }
    }

    /// Cuts after which the mount had another st_dev: a job's identity
    /// (`st_dev:st_ino:ctime`) would change with it, as after a reboot of
    /// btrfs or a FUSE mount.
    public private(set) var deviceChanges = 0

    private var device: UInt64 {
        var info = stat()
        return stat(fs.path, &info) == 0 ? UInt64(info.st_dev) : 0
    }

    /// Runs the agent until idle (at most `seconds`); its exit status.
    @discardableResult
    public func runUntilIdle(seconds: Double = 60) throws -> Int32 {
        let agent = try harness.startAgent(exitWhenIdle: true)
        guard let status = agent.wait(seconds: seconds) else {
            throw TestFailure("the agent did not get idle within \(seconds) s: \(agent.stderr.suffix(2000))")
        }
        return status
    }

    /// The `created` events whose job file had this name.
    public func created(from job: String) throws -> [AgentHarness.LoggedEvent] {
        try harness.events().filter { $0.type == "created" && Self.source(of: $0) == job }
    }

    public static func source(of event: AgentHarness.LoggedEvent) -> String? {
        (event.data["source"] as? [String: Any])?["file"] as? String
    }

    /// Size of a file, 0 when it is not there.
    public func size(_ path: String) -> Int {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : 0
    }
}

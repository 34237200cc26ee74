import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One hermetic syncagent world: its own HOME, state dir, inbox, downloads
/// and config, and the real binary run against them.
public final class AgentHarness {
    public let directory: TempDirectory
    public let stateDir: String
    public let inbox: String
    public let downloads: String
    public var configFile: String { directory.file("config.toml") }
    /// Set to a private bus to let the agent reach a notification daemon.
    public var busAddress: String?
    /// Added to the agent's environment (e.g. SYNCAGENT_CRASHPOINT).
    public var extraEnvironment: [String: String] = [:]

    /// - Parameter root: where `state/`, `inbox/` and `downloads/` go (a test
    ///   file system mounted in `directory`); by default in `directory` itself.
    public init(config: String = "", directory: TempDirectory = TempDirectory(), root: String? = nil) throws {
        self.directory = directory
        let root = root ?? directory.path
        stateDir = root + "/state"
        inbox = root + "/inbox"
        downloads = root + "/downloads"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        try "download_dir = \"\(downloads)\"\n\(config)".write(toFile: configFile, atomically: true, encoding: .utf8)
    }

    public var environment: [String: String] {
        var environment = [
            "HOME": directory.file("home"),
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            "XDG_CONFIG_HOME": directory.file("home/.config"),
            "XDG_STATE_HOME": directory.file("home/.local/state"),
            "XDG_DATA_HOME": directory.file("home/.local/share"),
            "SYNCAGENT_LOG_LEVEL": "debug",
        ]
        if let busAddress { environment["DBUS_SESSION_BUS_ADDRESS"] = busAddress }
        environment.merge(extraEnvironment) { $1 }
        return environment
    }

    public var globalFlags: [String] { ["--config", configFile, "--state-dir", stateDir, "--inbox", inbox] }

    /// Runs a command to completion (at most `seconds`), with the global flags.
    public func run(_ arguments: [String], seconds: Double = 60, flags: Bool = true) throws -> CommandResult {
        let args = arguments.isEmpty || !flags ? arguments : [arguments[0]] + globalFlags + arguments.dropFirst()
        let child = try ChildProcess(syncagentBinary, args, environment: environment, outputIn: directory.path)
        guard let status = child.wait(seconds: seconds) else {
            throw TestFailure("syncagent \(arguments.joined(separator: " ")) still running after \(seconds) s")
        }
        return CommandResult(status: status, stdout: child.stdout, stderr: child.stderr)
    }

    public func startAgent(exitWhenIdle: Bool = false) throws -> ChildProcess {
        var args = ["run"] + globalFlags
        if exitWhenIdle { args.append("--exit-when-idle") }
        return try ChildProcess(syncagentBinary, args, environment: environment, outputIn: directory.path)
    }

    /// Writes a job under a temp name and renames it in, as a careful script would.
    public func drop(_ name: String, _ text: String) throws {
        let temp = inbox + "/." + name + ".tmp"
        try text.write(toFile: temp, atomically: false, encoding: .utf8)
        guard rename(temp, inbox + "/" + name) == 0 else { throw TestFailure("cannot rename \(temp)") }
    }

    /// Writes a job in place (open, write, close), as an editor might.
    public func write(_ name: String, _ text: String) throws {
        try text.write(toFile: inbox + "/" + name, atomically: false, encoding: .utf8)
    }

    public func jobFiles() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: inbox)) ?? []).filter { $0.hasSuffix(".job") }.sorted()
    }

    /// Waits until `agent` is past its start-up: it says "agent started" once
    /// its own folders are made and checked (`rejected/` last, then `.taken/`
    /// again). A test that moves or replaces those folders must wait for this:
    /// one moved while start-up still made them stops the agent there, with
    /// another error. (`status` says it runs as soon as it holds the lock.)
    public func pastStartUp(_ agent: ChildProcess) -> Bool {
        eventually(within: 10) { agent.stderr.contains("agent started") }
    }

    /// Whether `status` says an agent runs on this state dir (it has taken its lock).
    public var statusSaysAgentRuns: Bool {
        (try? run(["status"]).stdout.hasPrefix("agent: running")) ?? false
    }

    /// `status --json` → the task objects.
    public func statusTasks(_ extra: [String] = []) throws -> [[String: Any]] {
        try tasks(fromJSON: run(["status", "--json"] + extra))
    }

    /// `status --json` → the task objects by id.
    public func tasksByID() throws -> [String: [String: Any]] {
        Dictionary(uniqueKeysWithValues: try statusTasks().map { ($0["id"] as? String ?? "", $0) })
    }

    public func replayTasks(_ extra: [String] = []) throws -> [[String: Any]] {
        try tasks(fromJSON: run(["replay", "--json"] + extra))
    }

    private func tasks(fromJSON result: CommandResult) throws -> [[String: Any]] {
        guard result.status == 0,
              let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any],
              let tasks = object["tasks"] as? [[String: Any]] else {
            throw TestFailure("no {\"tasks\": …} from syncagent: \(result.stderr)")
        }
        return tasks
    }

    public struct LoggedEvent {
        public var seq: Int
        public var atMs: Int
        public var task: String?
        public var type: String
        public var data: [String: Any]
    }

    /// `events --json`, one object per line; `readingConfig: false` reads it with the state dir
    /// alone, as a test must once the config file no longer parses.
    public func events(readingConfig: Bool = true) throws -> [LoggedEvent] {
        let result = try run(["events", "--json"] + (readingConfig ? [] : ["--state-dir", stateDir]), flags: readingConfig)
        guard result.status == 0 else { throw TestFailure("events failed: \(result.stderr)") }
        return try result.stdout.split(separator: "\n").map { line in
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw TestFailure("not a JSON object: \(line)")
            }
            return LoggedEvent(seq: object["seq"] as? Int ?? 0, atMs: object["at_ms"] as? Int ?? 0, task: object["task"] as? String,
                               type: object["type"] as? String ?? "", data: object["data"] as? [String: Any] ?? [:])
        }
    }
}

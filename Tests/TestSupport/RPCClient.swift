import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// rpc_client.py beside this file, run by the virtualenv's python (`make
/// test-deps` puts aria2p, and with it websocket-client, there): the
/// tests' client of aria2's JSON-RPC, for syncagent and for aria2c alike.
public enum RPCClient {
    static let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()

    /// Runs one command of rpc_client.py; its JSON answer.
    public static func run(_ arguments: [String], in directory: TempDirectory, seconds: Double = 120) throws -> Any {
        // Not resolved: the venv's python is a symlink, and only by its own path does it find the venv.
        let python = here.deletingLastPathComponent().deletingLastPathComponent().path + "/.venv/bin/python"
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw TestFailure("no \(python): run make test-deps, which installs aria2p in that virtualenv")
        }
        let child = try ChildProcess(python, [here.appendingPathComponent("rpc_client.py").path] + arguments,
                                     environment: ["HOME": directory.path, "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"],
                                     outputIn: directory.path, name: "rpc-client-\(arguments[0])")
        guard let status = child.wait(seconds: seconds) else {
            child.signal(SIGKILL)
            throw TestFailure("rpc_client.py \(arguments[0]) still running after \(seconds) s: \(child.stderr)")
        }
        guard status == 0 else { throw TestFailure("rpc_client.py \(arguments[0]) exited \(status): \(child.stderr)") }
        return try JSONSerialization.jsonObject(with: Data(child.stdout.utf8), options: [.fragmentsAllowed])
    }
}

/// An agent with its RPC on: `rpc = true` on a port of its own, with a secret.
public final class RPCAgent {
    public let harness: AgentHarness
    public let port: Int
    public let secret: String
    public private(set) var process: ChildProcess?

    /// - Parameter secret: nil leaves `rpc_secret` out of the config (the agent makes one).
    public init(secret: String? = "test-secret-\(UInt32.random(in: 0...UInt32.max))", config: String = "") throws {
        port = freePort()
        let secretLine = secret.map { "rpc_secret = \"\($0)\"\n" } ?? ""
        harness = try AgentHarness(config: "rpc = true\nrpc_listen = \"127.0.0.1:\(port)\"\n\(secretLine)\(config)")
        self.secret = secret ?? ""
    }

    public var url: String { "http://127.0.0.1:\(port)/jsonrpc" }

    /// Starts the agent and waits until it listens.
    @discardableResult
    public func start() throws -> ChildProcess {
        let agent = try harness.startAgent()
        process = agent
        guard eventually(within: 20, { canConnect(port: port) }) else {
            throw TestFailure("the agent's RPC did not listen on \(port): \(agent.stderr)")
        }
        return agent
    }

    /// kill -9: no stop, no last commit.
    public func kill9() {
        process?.signal(SIGKILL)
        _ = process?.wait(seconds: 10)
    }

    /// Each [method, param…] with the token: the answers (`result` or `error`), in order.
    public func call(_ calls: [[Any]], secret: String? = nil) throws -> [[String: Any]] {
        let text = String(decoding: try JSONSerialization.data(withJSONObject: calls), as: UTF8.self)
        let answers = try RPCClient.run(["calls", url, secret ?? self.secret, text], in: harness.directory) as? [[String: Any]] ?? []
        return answers.compactMap { $0["answer"] as? [String: Any] }
    }

    /// One call's result (nil with an error).
    public func result(_ method: String, _ params: Any...) throws -> Any? {
        try call([[method] + params]).first?["result"]
    }

    /// Waits until the download's status is one of `statuses`.
    public func wait(for gid: String, _ statuses: Set<String>, within seconds: Double = 20) -> Bool {
        eventually(within: seconds) {
            let status = (try? result("aria2.tellStatus", gid, ["status"])) as? [String: Any]
            return statuses.contains(status?["status"] as? String ?? "")
        }
    }

    deinit {
        process?.signal(SIGKILL)
        _ = process?.wait(seconds: 5)
    }
}

/// aria2c itself, with its RPC on: the oracle.
public final class Aria2c {
    public let port: Int
    public let directory: String
    private let process: ChildProcess

    public init(secret: String, in temp: TempDirectory) throws {
        port = freePort()
        directory = temp.file("aria2c-downloads")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/aria2c") else {
            throw TestFailure("no /usr/bin/aria2c: run make test-deps, which installs Debian's aria2")
        }
        // As web UIs ask aria2 to be run: CORS for every origin, a session file to save to.
        process = try ChildProcess("/usr/bin/aria2c", ["--enable-rpc", "--rpc-listen-port=\(port)", "--rpc-secret=\(secret)",
                                                       "--rpc-allow-origin-all", "--save-session=\(temp.file("aria2c.session"))",
                                                       "--dir=\(directory)", "--no-conf", "--quiet"],
                                   environment: ["HOME": temp.path], outputIn: temp.path, name: "aria2c")
        guard eventually(within: 20, { canConnect(port: port) }) else {
            throw TestFailure("aria2c did not listen on \(port): \(process.stderr)")
        }
    }

    public var url: String { "http://127.0.0.1:\(port)/jsonrpc" }

    deinit {
        process.signal(SIGKILL)
        _ = process.wait(seconds: 5)
    }
}

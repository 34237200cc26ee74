import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A real, third-party tus 1.0.0 server: the `aiohttp-tus` package from
/// PyPI, run by tus_server.py beside this file in the virtualenv `make
/// test-deps` makes (`.venv` at the top of the package).
public final class TusServer {
    public let port: Int
    /// Finished uploads land here, under the `filename` of their metadata.
    public let uploadDir: String
    public let requestLog: String
    private let server: ChildProcess

    public init(in directory: TempDirectory) throws {
        let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        // Not resolved: the venv's python is a symlink, and only by its own path does it find the venv.
        let python = here.deletingLastPathComponent().deletingLastPathComponent().path + "/.venv/bin/python"
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw TestFailure("no \(python): run make test-deps, which installs aiohttp-tus in that virtualenv")
        }
        uploadDir = directory.file("tus-uploads")
        requestLog = directory.file("tus-requests.log")
        try FileManager.default.createDirectory(atPath: uploadDir, withIntermediateDirectories: true)
        try Data().write(to: URL(fileURLWithPath: requestLog))
        port = freePort()
        server = try ChildProcess(python, [here.appendingPathComponent("tus_server.py").path, "--host", "127.0.0.1", "--port", "\(port)",
                                           "--dir", uploadDir, "--log", requestLog, "--allow-overwrite"],
                                  environment: [:], outputIn: directory.path, name: "tus-server")
        guard eventually(within: 20, { canConnect(port: port) }) else {
            throw TestFailure("aiohttp-tus did not start: \(server.stderr)")
        }
    }

    /// The creation endpoint.
    public var url: String { "http://127.0.0.1:\(port)/uploads/" }

    public struct Request: Equatable {
        public var method: String
        public var path: String
        public var status: Int
        /// Request body bytes that arrived.
        public var bodyBytes: Int
    }

    public var requests: [Request] {
        let text = (try? String(contentsOfFile: requestLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count == 4, let status = Int(fields[2]), let bytes = Int(fields[3]) else { return nil }
            return Request(method: fields[0], path: fields[1], status: status, bodyBytes: bytes)
        }
    }

    deinit {
        server.signal(SIGKILL)
        server.wait(seconds: 5)
    }
}

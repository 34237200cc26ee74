import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The project's own misbehaving HTTP server (fault_server.py beside this
/// file): drops, stalls, ignored or wrong ranges, changing ETags, 416, 5xx.
public final class FaultServer {
    public let root: String
    public let port: Int
    /// The address it listens on: 127.0.0.1, or one a test gave a veth of its own.
    public let host: String
    public let requestLog: String
    /// One JSON object per request body received (see fault_server.py).
    public let receivedLog: String
    private let server: ChildProcess

    public init(in directory: TempDirectory, host: String = "127.0.0.1") throws {
        self.host = host
        root = directory.file("fault-www")
        requestLog = directory.file("fault-requests.log")
        receivedLog = directory.file("fault-received.jsonl")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try Data().write(to: URL(fileURLWithPath: requestLog))
        port = freePort()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("fault_server.py").path
        server = try ChildProcess("/usr/bin/python3", [script, "--host", host, "--port", "\(port)", "--root", root, "--log", requestLog,
                                                       "--received", receivedLog],
                                  environment: [:], outputIn: directory.path, name: "fault-server")
        guard eventually(within: 10, { canConnect(port: port, host: host) }) else {
            throw TestFailure("fault server did not start: \(server.stderr)")
        }
    }

    /// `name` with faults as query parameters, e.g. `url("f.bin", "drop_after=1000")`.
    public func url(_ name: String, _ faults: String = "") -> String {
        "http://\(host):\(port)/\(name)" + (faults.isEmpty ? "" : "?" + faults)
    }

    @discardableResult
    public func serve(_ name: String, size: Int, seed: UInt64 = 7) throws -> Data {
        var generator = SplitMix64(seed: seed &+ UInt64(size))
        let data = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        try data.write(to: URL(fileURLWithPath: root + "/" + name))
        return data
    }

    public struct Request: Equatable {
        public var method: String
        public var path: String
        public var status: Int
        public var range: String?
        public var bytesSent: Int
    }

    /// Every request answered so far, in order.
    public var requests: [Request] {
        let text = (try? String(contentsOfFile: requestLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count >= 5, let status = Int(fields[2]), let sent = Int(fields[fields.count - 1]) else { return nil }
            let range = fields[3...(fields.count - 2)].joined(separator: " ")
            return Request(method: fields[0], path: fields[1], status: status, range: range == "-" ? nil : range, bytesSent: sent)
        }
    }

    /// A GET or HEAD with a `Range`, and the `If-Range` that guarded it (nil: none).
    public struct RangedRequest: Equatable {
        public var path: String
        public var range: String
        public var ifRange: String?
    }

    /// Every request with a `Range` answered so far, in order.
    public var rangedRequests: [RangedRequest] {
        let text = (try? String(contentsOfFile: requestLog + ".if-range", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any],
                  let path = object["path"] as? String, let range = object["range"] as? String else { return nil }
            return RangedRequest(path: path, range: range, ifRange: object["if_range"] as? String)
        }
    }

    /// What the server read from every request body so far, in order.
    public var received: [[String: Any]] {
        let text = (try? String(contentsOfFile: receivedLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
    }

    deinit {
        server.signal(SIGKILL)
        server.wait(seconds: 5)
    }
}

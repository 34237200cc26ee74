import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A real nginx on 127.0.0.1 serving files the test writes into `root`.
public final class Nginx {
    public let root: String
    public let port: Int
    public let accessLog: String
    private let server: ChildProcess

    public init(in directory: TempDirectory) throws {
        let prefix = directory.file("nginx")
        root = prefix + "/www"
        accessLog = prefix + "/access.log"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        port = freePort()
        let config = """
            worker_processes 1;
            daemon off;
            master_process off;
            pid \(prefix)/nginx.pid;
            error_log \(prefix)/error.log;
            events { worker_connections 1024; }
            http {
              log_format bytes '$request_uri $status $body_bytes_sent "$http_range" "$http_if_range"';
              access_log \(accessLog) bytes;
              client_body_temp_path \(prefix)/body;
              proxy_temp_path \(prefix)/proxy;
              fastcgi_temp_path \(prefix)/fastcgi;
              uwsgi_temp_path \(prefix)/uwsgi;
              scgi_temp_path \(prefix)/scgi;
              server {
                listen 127.0.0.1:\(port);
                root \(root);
                # /hop/X → 302 → /X, and /hop2/X → 301 → /hop/X: redirect chains.
                location /hop/ { rewrite ^/hop/(.*)$ /$1 redirect; }
                location /hop2/ { rewrite ^/hop2/(.*)$ /hop/$1 permanent; }
                location = /to-file { return 302 file:///etc/passwd; }
                # /slow/X serves X at 8 MB/s per connection: transfers long enough to kill.
                location /slow/ { alias \(root)/; limit_rate 8m; }
              }
            }
            """
        try config.write(toFile: prefix + "/nginx.conf", atomically: true, encoding: .utf8)
        server = try ChildProcess("/usr/sbin/nginx", ["-p", prefix, "-c", prefix + "/nginx.conf"],
                                  environment: [:], outputIn: prefix, name: "nginx")
        guard eventually(within: 10, { canConnect(port: port) }) else {
            throw TestFailure("nginx did not start on port \(port): \(server.stderr)")
        }
    }

    public func url(_ name: String) -> String { "http://127.0.0.1:\(port)/\(name)" }

    public struct Request {
        public var uri: String
        public var status: Int
        public var bytesSent: Int
        public var range: String
        public var ifRange: String
    }

    /// The access log, one entry per answered request.
    public var requests: [Request] {
        let text = (try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            // nginx writes a quote inside a logged header as \x22.
            let quoted = line.split(separator: "\"", omittingEmptySubsequences: false)
                .map { $0.replacingOccurrences(of: "\\x22", with: "\"") }
            let fields = quoted[0].split(separator: " ").map(String.init)
            guard fields.count >= 3, quoted.count >= 4, let status = Int(fields[1]), let sent = Int(fields[2]) else { return nil }
            return Request(uri: fields[0], status: status, bytesSent: sent,
                           range: quoted[1] == "-" ? "" : quoted[1], ifRange: quoted[3] == "-" ? "" : quoted[3])
        }
    }

    /// Writes a file of `size` pseudo-random bytes (seeded: reproducible) to serve.
    @discardableResult
    public func serve(_ name: String, size: Int, seed: UInt64 = 1) throws -> Data {
        var generator = SplitMix64(seed: seed &+ UInt64(size))
        var bytes = [UInt8](repeating: 0, count: size)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: generator.next()) }
        let data = Data(bytes)
        let path = root + "/" + name
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try data.write(to: URL(fileURLWithPath: path))
        return data
    }

    deinit {
        // Children of the test runner may inherit a blocked SIGTERM; a test
        // server holds nothing worth a graceful stop.
        server.signal(SIGKILL)
        server.wait(seconds: 5)
    }
}

public struct SplitMix64: RandomNumberGenerator {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

public struct TestFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

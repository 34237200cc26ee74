import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A real SOCKS5 server: Debian's dante (`danted`, package dante-server),
/// listening on one address with a config the test writes, run in the
/// foreground as a child of the test and stopped when the test ends. Its
/// log (debug level 1) says which requests it passed, for whom, and how
/// each named the server it asked for.
public final class SocksProxy {
    public struct Unavailable: Error, CustomStringConvertible {
        public var description: String
    }

    public let host: String
    public let port: Int
    public let logFile: String
    private let server: SpawnedDaemon

    /// - Parameters:
    ///   - host: where it listens (127.0.0.1, or a lab's host address); it connects out from 127.0.0.1.
    ///   - login: true: SOCKS5 user name and password (RFC 1929), checked by dante against the
    ///     system's users (`socksmethod: username`); false: no authentication.
    public init(in directory: TempDirectory, host: String = "127.0.0.1", login: Bool) throws {
        let danted = "/usr/sbin/danted"
        guard FileManager.default.isExecutableFile(atPath: danted) else {
            throw Unavailable(description: "no \(danted): run make test-deps, which installs dante-server")
        }
        self.host = host
        let folder = directory.file("dante")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        logFile = folder + "/danted.log"
        port = freePort()
        // Its own config and pid file: nothing of the system's /etc/danted.conf or /run is used.
        let config = """
            logoutput: \(logFile)
            internal: \(host) port = \(port)
            external: 127.0.0.1
            clientmethod: none
            socksmethod: \(login ? "username" : "none")
            user.privileged: root
            user.unprivileged: nobody
            client pass {
              from: 0.0.0.0/0 to: 0.0.0.0/0
              log: connect error
            }
            socks pass {
              from: 0.0.0.0/0 to: 0.0.0.0/0
              command: connect
              log: connect error
            }

            """
        try config.write(toFile: folder + "/danted.conf", atomically: true, encoding: .utf8)
        // In the foreground (no -D): a child of the test, in a process group of its own.
        server = try SpawnedDaemon(danted, ["-d", "1", "-N", "1", "-f", folder + "/danted.conf", "-p", folder + "/danted.pid"],
                                   output: folder + "/danted.out")
        guard eventually(within: 10, { canConnect(port: port, host: host) }) else {
            let log = (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
            let output = (try? String(contentsOfFile: folder + "/danted.out", encoding: .utf8)) ?? ""
            server.stop()
            throw TestFailure("danted did not listen on \(host):\(port): \(output) \(log.suffix(1000))")
        }
    }

    /// `socks5h://[user:password@]host:port`, the credentials percent-encoded.
    public func url(user: String? = nil, password: String? = nil) -> String {
        let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
        let login = user.map { user in
            user.addingPercentEncoding(withAllowedCharacters: allowed)! + ":"
                + (password ?? "").addingPercentEncoding(withAllowedCharacters: allowed)! + "@"
        } ?? ""
        return "socks5h://\(login)\(host):\(port)"
    }

    /// The log, as dante wrote it so far.
    public var log: String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }

    /// One line per connection it made to a server for a client (`pass(1): tcp/connect [: …`):
    /// `username%NAME@CLIENT PROXY -> OUT SERVER`, the user named where one logged in.
    public var connectionsPassed: [String] {
        log.split(separator: "\n").filter { $0.contains(": pass(") && $0.contains("tcp/connect [:") }.map(String.init)
    }

    /// The servers clients asked it for by name (SOCKS5 address type 3: the client left the
    /// name to the proxy, as `socks5h` does), as `NAME.PORT`.
    public var namesAskedFor: [String] {
        log.split(separator: "\n").compactMap { line in
            guard line.contains("reqhostisok(): host ") else { return nil }
            return line.components(separatedBy: "reqhostisok(): host ").last?.split(separator: ",").first.map(String.init)
        }
    }

    deinit {
        // The mother stops its children on SIGTERM; what still runs after 5 s is killed.
        server.stop()
    }
}

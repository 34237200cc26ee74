import Foundation

/// What one attempt cost, from curl's timing info (NSURLSessionTaskMetrics).
/// Times are microseconds from the start of the attempt, as curl measures
/// them: each phase's time includes the phases before it.
public struct AttemptMetrics: Codable, Equatable, Sendable {
    public var dnsUs: Int64
    public var connectUs: Int64
    /// 0 for plain HTTP, or when a reused connection needed no handshake.
    public var tlsUs: Int64
    /// Time to the first response byte.
    public var ttfbUs: Int64
    public var totalUs: Int64
    /// "1.0", "1.1", "2", "3"; nil when no response came.
    public var httpVersion: String?
    /// The final response's status; 0 when none came.
    public var status: Int
    public var remoteAddress: String?
    public var remotePort: Int
    /// The connection came from curl's cache instead of a new connect.
    public var reused: Bool
    public var redirects: Int
    public var bytesReceived: Int64
    public var bytesSent: Int64

    public init(dnsUs: Int64 = 0, connectUs: Int64 = 0, tlsUs: Int64 = 0, ttfbUs: Int64 = 0, totalUs: Int64 = 0,
                httpVersion: String? = nil, status: Int = 0, remoteAddress: String? = nil, remotePort: Int = 0,
                reused: Bool = false, redirects: Int = 0, bytesReceived: Int64 = 0, bytesSent: Int64 = 0) {
        self.dnsUs = dnsUs; self.connectUs = connectUs; self.tlsUs = tlsUs; self.ttfbUs = ttfbUs
        self.totalUs = totalUs; self.httpVersion = httpVersion; self.status = status
        self.remoteAddress = remoteAddress; self.remotePort = remotePort; self.reused = reused
        self.redirects = redirects; self.bytesReceived = bytesReceived; self.bytesSent = bytesSent
    }

    /// One line for `status --task`: `HTTP/1.1 200 127.0.0.1:8080 new connection, dns 0.1 ms …`.
    public var words: String {
        func ms(_ us: Int64) -> String {
            let tenths = (us + 50) / 100
            return "\(tenths / 10).\(tenths % 10) ms"
        }
        let version = httpVersion.map { "HTTP/\($0)" } ?? "no response"
        let address = remoteAddress.map { $0.contains(":") ? "[\($0)]:\(remotePort)" : "\($0):\(remotePort)" } ?? "-"
        var parts = ["\(version) \(status) \(address) \(reused ? "reused connection" : "new connection")"]
        parts.append("dns \(ms(dnsUs)), connect \(ms(connectUs))" + (tlsUs > 0 ? ", tls \(ms(tlsUs))" : "")
                     + ", first byte \(ms(ttfbUs)), total \(ms(totalUs))")
        if redirects > 0 { parts.append("\(redirects) redirect\(redirects == 1 ? "" : "s")") }
        parts.append("\(bytesReceived) bytes in, \(bytesSent) out")
        return parts.joined(separator: "; ")
    }
}

/// One attempt of a task as its events tell it, for `status --task`.
public struct AttemptRecord: Codable, Equatable, Sendable {
    public var attempt: Int
    public var startedAtMs: Int64
    public var offset: Int64
    /// The event that ended it (`finished`, `retrying`, …); nil while it runs
    /// or when the agent died during it.
    public var endedBy: String?
    public var metrics: AttemptMetrics?

    /// Pairs each `started` with the event that ended that attempt.
    public static func history(of events: [Event]) -> [AttemptRecord] {
        var records: [AttemptRecord] = []
        for event in events {
            if case .started(let started) = event.body {
                records.append(AttemptRecord(attempt: started.attempt, startedAtMs: event.atMs, offset: started.offset))
                continue
            }
            guard let last = records.indices.last, records[last].endedBy == nil else { continue }
            switch event.body {
            case .finished, .failed, .retrying, .paused, .cancelled, .resumed:
                // `resumed` with no ending before it: the agent died mid-attempt.
                records[last].endedBy = event.type == "resumed" ? "agent restart" : event.type
                records[last].metrics = event.body.attemptMetrics
            default:
                continue
            }
        }
        return records
    }
}

extension EventBody {
    /// The metrics carried by an event that ends an attempt.
    public var attemptMetrics: AttemptMetrics? {
        switch self {
        case .finished(let p): p.metrics
        case .failed(let p): p.metrics
        case .retrying(let p): p.metrics
        case .paused(let p): p.metrics
        case .cancelled(let p): p.metrics
        default: nil
        }
    }
}

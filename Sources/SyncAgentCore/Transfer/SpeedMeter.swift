import DequeModule

/// A connection's recent speed: bytes over the last few seconds. A
/// segmented download weighs its ranges by it (which one finishes last,
/// where to split it) and asks it whether the other connections crawl too.
public struct SpeedMeter: Sendable {
    /// How far back the speed looks.
    public static let spanMs: Int64 = 3000
    /// No speed is told from less than this (the first answer's wait would dominate it).
    public static let minimumMs: Int64 = 500
    /// Samples are kept at most this often: a fast connection writes thousands of times a second.
    static let stepMs: Int64 = 100
    /// From the first byte on: the wait for an answer is the server's latency, not the connection's speed.
    private var samples: Deque<(ms: Int64, bytes: Int64)> = []

    public init() {}

    /// `bytes` moved in all by `nowMs` (after the first of them arrived).
    public mutating func record(nowMs: Int64, bytes: Int64) {
        if let last = samples.last, nowMs - last.ms < Self.stepMs { return }
        samples.append((nowMs, bytes))
        while samples.count >= 2, nowMs - samples[1].ms >= Self.spanMs { samples.removeFirst() }
    }

    /// Bytes a second over about the last `spanMs`, with `bytes` moved by
    /// `nowMs` (a connection that went quiet gets slower as time passes);
    /// nil before `minimumMs` have passed since its first byte.
    public func bytesPerS(nowMs: Int64, bytes: Int64) -> Int64? {
        guard let first = samples.first, let last = samples.last, nowMs - first.ms >= Self.minimumMs else { return nil }
        // The oldest sample within the span; else the newest, older than the span (a long silence).
        let base = samples.first { nowMs - $0.ms <= Self.spanMs } ?? last
        let elapsed = nowMs - base.ms
        guard elapsed > 0 else { return nil }
        return max(0, bytes - base.bytes) * 1000 / elapsed
    }
}

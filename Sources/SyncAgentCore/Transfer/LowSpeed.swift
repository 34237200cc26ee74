import DequeModule

/// A transfer that crawls is not a transfer (aria2's `--lowest-speed-limit`,
/// curl's `-Y`/`-y`): any byte resets the idle clock, so a server sending a
/// few bytes a minute would hold a slot until `total_timeout`. Over the
/// last `min_speed_time` seconds an exchange must have moved (received or
/// sent) at least `min_speed` bytes per second on average, else its attempt
/// ends and is retried from its durable bytes like any transient failure.
public struct LowSpeedWatch: Sendable {
    public let minBytesPerS: Int64
    public let windowMs: Int64
    /// Bytes moved so far, about once a second: the oldest is the window's start.
    private var samples: Deque<(ms: Int64, bytes: Int64)>

    public static let defaultMinBytesPerS: Int64 = 1024
    public static let defaultWindowS = 120

    public init(minBytesPerS: Int64, windowS: Int, startMs: Int64) {
        self.minBytesPerS = minBytesPerS
        windowMs = Int64(windowS) * 1000
        samples = [(startMs, 0)]
    }

    /// The speed the bar is held at: `min_speed`, or half a cap set lower
    /// than it (a transfer held to 600 B/s by `max_speed` or its share of
    /// `max_overall_speed` is slow by the user's choice, not the server's).
    public func threshold(cap: Int64?) -> Int64 {
        guard let cap, cap > 0 else { return minBytesPerS }
        return min(minBytesPerS, cap / 2)
    }

    /// Records `bytes` moved by `nowMs`. The average speed over the last
    /// whole window when it is below the threshold; nil while fast enough,
    /// and until the exchange has run for a whole window.
    public mutating func observe(nowMs: Int64, bytes: Int64, cap: Int64?) -> Int64? {
        if let last = samples.last, nowMs - last.ms >= 1000 { samples.append((nowMs, bytes)) }
        // Keep one sample at least a window old: the base the speed is measured from.
        while samples.count >= 2, nowMs - samples[1].ms >= windowMs { samples.removeFirst() }
        guard let base = samples.first, nowMs - base.ms >= windowMs else { return nil }
        let speed = (bytes - base.bytes) * 1000 / max(1, nowMs - base.ms)
        return speed < threshold(cap: cap) ? speed : nil
    }
}

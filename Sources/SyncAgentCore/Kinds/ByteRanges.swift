import Foundation

/// Bytes `start ..< end` of a file.
public struct ByteSpan: Equatable, Hashable, Sendable, CustomStringConvertible {
    public var start: Int64
    public var end: Int64
    public init(_ start: Int64, _ end: Int64) { self.start = start; self.end = end }
    public var length: Int64 { end - start }
    public var description: String { "\(start)-\(end)" }
}

/// `[start, end]` in the log, as the hand-written reader expects (EventCoding).
extension ByteSpan: Codable {
    public init(from decoder: Decoder) throws {
        var pair = try decoder.unkeyedContainer()
        let start = try pair.decode(Int64.self), end = try pair.decode(Int64.self)
        guard start >= 0, start <= end else {
            throw DecodingError.dataCorruptedError(in: pair, debugDescription: "a byte range is [start, end] with 0 <= start <= end")
        }
        self.init(start, end)
    }

    public func encode(to encoder: Encoder) throws {
        var pair = encoder.unkeyedContainer()
        try pair.encode(start)
        try pair.encode(end)
    }
}

/// A set of byte spans, kept sorted, disjoint and merged: the parts of a
/// segmented download (SPEC issue 14 §1) the log vouches for.
public struct ByteRanges: Equatable, Sendable {
    public private(set) var spans: [ByteSpan] = []

    public init() {}

    /// Any spans, in any order, overlapping or not; empty ones are dropped.
    public init(_ spans: [ByteSpan]) {
        for span in spans { insert(span) }
    }

    /// Bytes covered.
    public var covered: Int64 { spans.reduce(0) { $0 + $1.length } }

    /// Just `0 ..< n`: what a download of one connection holds.
    public var isPrefix: Bool { spans.isEmpty || (spans.count == 1 && spans[0].start == 0) }

    public mutating func insert(_ span: ByteSpan) {
        guard span.start < span.end else { return }
        var merged = span
        var kept: [ByteSpan] = []
        kept.reserveCapacity(spans.count + 1)
        for existing in spans {
            if existing.end < merged.start || existing.start > merged.end {
                kept.append(existing)
            } else {
                merged = ByteSpan(min(existing.start, merged.start), max(existing.end, merged.end))
            }
        }
        let index = kept.firstIndex { $0.start > merged.start } ?? kept.endIndex
        kept.insert(merged, at: index)
        spans = kept
    }

    /// The spans of `0 ..< total` not covered, in order.
    public func missing(upTo total: Int64) -> [ByteSpan] {
        var gaps: [ByteSpan] = []
        var position: Int64 = 0
        for span in spans where span.start < total {
            if span.start > position { gaps.append(ByteSpan(position, span.start)) }
            position = max(position, span.end)
        }
        if position < total { gaps.append(ByteSpan(position, total)) }
        return gaps
    }

    /// Whether every span lies within `0 ..< total`.
    public func fits(in total: Int64) -> Bool { spans.allSatisfy { $0.start >= 0 && $0.end <= total } }
}

/// How a segmented download shares its file among connections: pure
/// decisions the engine (`Kinds/SegmentedDownload.swift`) carries out.
public enum SegmentPlan {
    /// No connection is opened for less than this, and no range split below twice it.
    public static let minimumPiece: Int64 = 1 << 20
    /// Split points fall on this boundary (page-aligned writes).
    static let alignment: Int64 = 64 << 10
    public static let maximumConnections = 16

    /// The ranges to fetch first: the missing spans, the largest split in
    /// halves until there are `connections` of them or none is worth splitting.
    public static func initialRanges(missing: [ByteSpan], connections: Int) -> [ByteSpan] {
        var ranges = missing.filter { $0.length > 0 }
        while ranges.count < connections, let index = indexOfLargest(ranges), let halves = split(ranges[index]) {
            ranges.replaceSubrange(index...index, with: [halves.0, halves.1])
        }
        return ranges
    }

    /// What the first answer of a fresh download keeps of the first range
    /// (the rest goes to a ranged request): an answer that runs on to the
    /// file's end does not end where the range does. The bytes that come
    /// with the answer's first packets, about; the whole range when it is small.
    public static func firstPiece(of range: ByteSpan) -> ByteSpan {
        range.length >= 2 * firstPieceBytes ? ByteSpan(range.start, range.start + firstPieceBytes) : range
    }

    public static let firstPieceBytes: Int64 = 64 << 10

    /// A running range: its remaining bytes `position ..< end`, and the speed
    /// its connection has been getting lately (nil: not known yet).
    public struct Running: Equatable, Sendable {
        public var position: Int64
        public var end: Int64
        public var bytesPerS: Int64?
        public init(position: Int64, end: Int64, bytesPerS: Int64? = nil) {
            self.position = position; self.end = end; self.bytesPerS = bytesPerS
        }
        var remaining: Int64 { max(0, end - position) }
    }

    /// What an idle connection does for the running ranges (aria2 hands a lagging range's rest to an idle connection).
    public enum Relief: Equatable, Sendable {
        /// The range at `index` stops at `at`; `at ..< end` waits for a connection.
        case split(index: Int, at: Int64)
        /// The range at `index` is so far behind that another connection takes
        /// all of its rest: its connection stops (what it wrote is kept).
        case takeOver(index: Int)
    }

    /// No piece is given to a connection for less than this much of its time: less does not pay for a new request.
    public static let worthRequestMs: Int64 = 100
    /// Nor for fewer bytes than this, however slow the connections.
    public static let smallestPiece: Int64 = 256 << 10

    /// A connection fell idle (its recent speed `idleBytesPerS`, nil: not
    /// known) while others still work: which running range to relieve, and how.
    ///
    /// With the speeds known, the range expected to finish last (bytes left
    /// ÷ its speed) is split where both connections finish together: the
    /// idle one fetching at its own speed. It is left whole when the piece
    /// for the idle connection is smaller than `smallestPiece` or than
    /// `worthRequestMs` of its time; a range so slow that its connection
    /// would keep less than one aligned block is taken over. Without speeds,
    /// the largest remainder is halved (each half at least `minimumPiece`).
    public static func relieve(running: [Running], idleBytesPerS: Int64?) -> Relief? {
        let known = running.compactMap(\.bytesPerS).filter { $0 > 0 }
        let fresh = (idleBytesPerS.flatMap { $0 > 0 ? $0 : nil }) ?? median(known)
        guard let fresh, !running.isEmpty else { return halveLargest(running) }
        // A connection whose speed is not known yet is taken to get what a fresh one would.
        func finishMs(_ range: Running) -> Int64 {
            guard range.remaining > 0 else { return 0 }
            let speed = range.bytesPerS ?? fresh
            return speed > 0 ? range.remaining * 1000 / speed : .max
        }
        guard let index = running.indices.max(by: { finishMs(running[$0]) < finishMs(running[$1]) }) else { return nil }
        let range = running[index]
        let speed = max(0, range.bytesPerS ?? fresh)
        let least = max(smallestPiece, fresh * worthRequestMs / 1000)
        guard range.remaining >= least else { return nil }
        // Kept by its connection: remaining × its speed ÷ both speeds (equal finish times).
        let kept = Int64((Double(range.remaining) * Double(speed) / Double(speed + fresh)).rounded(.down))
        var at = range.position + kept
        at -= at % alignment
        guard at > range.position else { return .takeOver(index: index) }
        guard range.end - at >= least else { return nil }
        return .split(index: index, at: at)
    }

    /// Today's rule when speeds are unknown: half of the largest remainder.
    private static func halveLargest(_ running: [Running]) -> Relief? {
        let remaining = running.map { ByteSpan($0.position, $0.end) }
        guard let index = indexOfLargest(remaining), let halves = split(remaining[index]) else { return nil }
        return .split(index: index, at: halves.0.end)
    }

    private static func median(_ values: [Int64]) -> Int64? {
        guard !values.isEmpty else { return nil }
        return values.sorted()[values.count / 2]
    }

    /// A connection of a segmented download fell below `min_speed` over
    /// `min_speed_time` (`LowSpeedWatch`): whether its range's rest moves to
    /// a fresh connection or the attempt ends with the low-speed failure.
    public enum Crawl: Equatable, Sendable {
        case move
        case endAttempt
    }

    /// - Parameters:
    ///   - others: the recent speeds of the download's other running
    ///     connections (nil: one not measured yet).
    ///   - threshold: the bar, in bytes a second.
    ///   - moves: ranges moved for crawling so far this attempt; `maximumMoves`: the bound.
    public static func crawl(others: [Int64?], threshold: Int64, moves: Int, maximumMoves: Int) -> Crawl {
        // A server slow on every connection would have its ranges moved forever.
        guard moves < maximumMoves else { return .endAttempt }
        // Every other connection crawls too: the server is slow, not this connection.
        let known = others.compactMap { $0 }
        if !others.isEmpty, known.count == others.count, known.allSatisfy({ $0 < threshold }) { return .endAttempt }
        return .move
    }

    private static func indexOfLargest(_ spans: [ByteSpan]) -> Int? {
        spans.indices.max { spans[$0].length < spans[$1].length }
    }

    /// Halves of `span` on an aligned boundary, each at least `minimumPiece`; nil if too small.
    static func split(_ span: ByteSpan) -> (ByteSpan, ByteSpan)? {
        guard span.length >= 2 * minimumPiece else { return nil }
        var middle = span.start + span.length / 2
        middle -= middle % alignment
        guard middle - span.start >= minimumPiece, span.end - middle >= minimumPiece else { return nil }
        return (ByteSpan(span.start, middle), ByteSpan(middle, span.end))
    }
}

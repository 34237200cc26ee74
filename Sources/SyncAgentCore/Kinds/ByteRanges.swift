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

    /// A connection fell idle while others still work: which running range
    /// to split (its remaining bytes are `position ..< end`), and where.
    /// Nil when no remainder is worth a new connection.
    public static func splitLargest(running: [(position: Int64, end: Int64)]) -> (index: Int, at: Int64)? {
        let remaining = running.map { ByteSpan($0.position, $0.end) }
        guard let index = indexOfLargest(remaining), let halves = split(remaining[index]) else { return nil }
        return (index, halves.0.end)
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

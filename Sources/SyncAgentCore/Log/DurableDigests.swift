import Foundation

/// A SHA-256 value held inline: four words, no array per digest in a fold
/// that may keep thousands of them for one large download.
public struct SHA256Value: Hashable, Sendable, CustomStringConvertible {
    private var w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

    /// Nil unless exactly 32 bytes. (No array in between: every file's digest is made here.)
    public init?<Bytes: Sequence>(bytes: Bytes) where Bytes.Element == UInt8 {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var count = 0
        for byte in bytes {
            switch count >> 3 {
            case 0: words.0 = words.0 << 8 | UInt64(byte)
            case 1: words.1 = words.1 << 8 | UInt64(byte)
            case 2: words.2 = words.2 << 8 | UInt64(byte)
            case 3: words.3 = words.3 << 8 | UInt64(byte)
            default: return nil
            }
            count += 1
        }
        guard count == 32 else { return nil }
        (w0, w1, w2, w3) = words
    }

    /// Nil unless 64 hex digits.
    public init?(hex: String) {
        guard hex.utf8.count == 64, let bytes = Hex.decode(hex) else { return nil }
        self.init(bytes: bytes)
    }

    public var bytes: [UInt8] {
        [w0, w1, w2, w3].flatMap { word in (0..<8).reversed().map { UInt8(truncatingIfNeeded: word >> (8 * $0)) } }
    }

    /// Lowercase hex, as `sha256sum` prints it: written straight from the
    /// words (every `progressed` and `finished` event carries some).
    public var hex: String {
        String(unsafeUninitializedCapacity: 64) { out in
            func put(_ word: UInt64, at start: Int) {
                for nibble in 0..<16 {
                    out[start + nibble] = Hex.digit(UInt8(truncatingIfNeeded: word >> (60 - 4 * nibble)) & 0x0F)
                }
            }
            put(w0, at: 0); put(w1, at: 16); put(w2, at: 32); put(w3, at: 48)
            return 64
        }
    }
    public var description: String { hex }
}

/// The SHA-256 of bytes `from ..< to` of a partial file, recorded with the
/// claim that made them durable (SPEC §6 rule 3). The records of one
/// `from` make a chain: each is the digest of everything from `from` to
/// its end, so one SHA-256 pass over a download yields them all, and the
/// chain that starts at 0 and reaches the last byte is the file's digest.
/// In the log: `[from, to, "hex"]`.
public struct SpanDigest: Equatable, Hashable, Sendable {
    public var from: Int64
    public var to: Int64
    public var sha256: SHA256Value
    public init(from: Int64, to: Int64, sha256: SHA256Value) {
        self.from = from; self.to = to; self.sha256 = sha256
    }

    public var span: ByteSpan { ByteSpan(from, to) }
}

extension SpanDigest: Codable {
    public init(from decoder: Decoder) throws {
        var triple = try decoder.unkeyedContainer()
        let from = try triple.decode(Int64.self), to = try triple.decode(Int64.self), hex = try triple.decode(String.self)
        guard from >= 0, from <= to, let digest = SHA256Value(hex: hex) else {
            throw DecodingError.dataCorruptedError(in: triple, debugDescription: "a digest is [from, to, sha256 hex] with 0 <= from <= to")
        }
        self.init(from: from, to: to, sha256: digest)
    }

    public func encode(to encoder: Encoder) throws {
        var triple = encoder.unkeyedContainer()
        try triple.encode(from)
        try triple.encode(to)
        try triple.encode(sha256.hex)
    }
}

/// What the log vouches for a task's durable bytes with: the digests its
/// progress recorded, at most one per chunk of each chain (the last one
/// that ended in it). A resume checks them before it trusts the bytes, and
/// `replay --verify` the same way.
///
/// Why chains of one pass rather than a digest per chunk on its own: the
/// agent hashes every byte it makes durable, and the file's own SHA-256
/// (recorded with `finished`) is then the end of the chain from 0, not a
/// second pass over the file. The price is paid only when bytes were
/// damaged: a chunk that does not match takes the rest of its chain with
/// it (every later digest of the chain hashed through it), so a resume
/// fetches from that chunk to the end of its chain's range again.
public struct DigestBook: Equatable, Sendable {
    /// Records are kept at most one per chunk of this size per chain: a
    /// 64 GiB download holds at most 8,192 (about 400 KB in the fold and
    /// the snapshot), a slow one as few as a fast one. The progress
    /// interval (8 MiB) makes about one record per event at full speed.
    public static let chunkSize: Int64 = 8 << 20

    /// Sorted by `from`, then `to`.
    public private(set) var records: [SpanDigest] = []
    /// The largest `to` of any record (0 when empty).
    public private(set) var end: Int64 = 0

    public init() {}
    public init(_ records: [SpanDigest]) { for record in records { self.record(record) } }

    public var isEmpty: Bool { records.isEmpty }

    /// The chunk a record ending at `to` counts in (`to` itself excluded).
    static func chunk(ending to: Int64) -> Int64 { (to - 1) / chunkSize }

    /// Where the records of hashing bytes `position ..< to` end: at each
    /// chunk boundary past `position`, and at `to`. A claim records them
    /// all, so a check can say chunk by chunk where bytes were damaged,
    /// however seldom progress was claimed.
    public static func recordEnds(after position: Int64, upTo to: Int64) -> [Int64] {
        guard to > position else { return [] }
        var ends: [Int64] = []
        var boundary = (position / chunkSize + 1) * chunkSize
        while boundary < to {
            ends.append(boundary)
            boundary += chunkSize
        }
        ends.append(to)
        return ends
    }

    /// Adds a record of a claim: it supersedes the record of its chain
    /// that ended in the same chunk, and any that ended after it (a chain
    /// that was cut back and goes on).
    public mutating func record(_ digest: SpanDigest) {
        guard digest.to > digest.from else { return }
        let chunk = Self.chunk(ending: digest.to)
        // The first record at or after the new one's place: of a later chain, or of its own chain ending in its chunk or after.
        var low = records.startIndex, high = records.endIndex
        while low < high {
            let middle = (low + high) / 2
            let other = records[middle]
            if other.from > digest.from || (other.from == digest.from && Self.chunk(ending: other.to) >= chunk) {
                high = middle
            } else {
                low = middle + 1
            }
        }
        var replaceEnd = low
        var removedEnd: Int64 = 0
        while replaceEnd < records.endIndex, records[replaceEnd].from == digest.from {
            removedEnd = max(removedEnd, records[replaceEnd].to)
            replaceEnd += 1
        }
        // (A record replaced by one of its chunk is mostly the common case: replaced in place, nothing moves.)
        records.replaceSubrange(low..<replaceEnd, with: CollectionOfOne(digest))
        end = removedEnd <= digest.to ? max(end, digest.to) : records.reduce(0) { max($0, $1.to) }
    }

    /// Keeps only records of bytes the log still vouches for.
    public mutating func restrict(to durable: ByteRanges) {
        if durable.isPrefix, end <= durable.covered { return }
        records.removeAll { !durable.contains($0.span) }
        end = records.reduce(0) { max($0, $1.to) }
    }

    /// The bytes the records vouch for: each chain from its start to its last record's end.
    public var coverage: ByteRanges {
        var ranges = ByteRanges()
        var index = records.startIndex
        while index < records.endIndex {
            let from = records[index].from
            var to = records[index].to
            while index < records.endIndex, records[index].from == from {
                to = max(to, records[index].to)
                index += 1
            }
            ranges.insert(ByteSpan(from, to))
        }
        return ranges
    }

    /// What to read to check `durable`: each chain with its records in
    /// order, then each durable span no record covers (bytes an earlier
    /// syncagent claimed without digests: trusted as before, and hashed so
    /// that from now on they are checked too).
    public func checks(of durable: ByteRanges) -> [ChainCheck] {
        var checks: [ChainCheck] = []
        var index = records.startIndex
        while index < records.endIndex {
            let from = records[index].from
            var chain: [SpanDigest] = []
            while index < records.endIndex, records[index].from == from {
                chain.append(records[index])
                index += 1
            }
            checks.append(ChainCheck(from: from, records: chain))
        }
        for span in durable.subtracting(coverage).spans { checks.append(ChainCheck(adopting: span)) }
        return checks
    }

    /// What a check leaves the log able to vouch for: bytes of `durable`
    /// that a matching digest (or an adopted span) covers. A chain that
    /// failed keeps what it vouched for before its first record that did
    /// not match. With `keepingGaps` false (a download that cannot fetch
    /// ranges), only the prefix before the first byte dropped.
    public static func kept(of durable: ByteRanges, after results: [(check: ChainCheck, goodUpTo: Int64)],
                            keepingGaps: Bool) -> ByteRanges {
        var vouched = ByteRanges()
        for (check, goodUpTo) in results { vouched.insert(ByteSpan(check.from, min(goodUpTo, check.to))) }
        var kept = ByteRanges(durable.spans.flatMap { span in vouched.spans.compactMap { $0.intersection(span) } })
        guard !keepingGaps else { return kept }
        if let first = kept.spans.first, first.start == 0 {
            kept = ByteRanges([first])
        } else {
            kept = ByteRanges()
        }
        return kept
    }

    /// Why bytes were dropped, for the log and `status`: where each failed
    /// chain stopped matching (between its last matching record and its
    /// first that did not), and how much is fetched again.
    public static func mismatchWords(file: String, damaged: [ByteSpan], kept: ByteRanges, durable: ByteRanges) -> String {
        let named = damaged.prefix(4).map(\.description).joined(separator: ", ")
        let more = damaged.count > 4 ? " and \(damaged.count - 4) more" : ""
        return "bytes \(named)\(more) of \(file) do not match the sha256 logged for them: "
            + "\(durable.covered - kept.covered) of the \(durable.covered) bytes held are fetched again"
    }
}

/// One chain to check (its records, in order), or a span without records to hash.
public struct ChainCheck: Equatable, Sendable {
    public var from: Int64
    /// Where the chain's last record (or the adopted span) ends.
    public var to: Int64
    /// Compared in order as the chain is hashed; empty for an adopted span.
    public var records: [SpanDigest]

    public init(from: Int64, records: [SpanDigest]) {
        self.from = from
        self.records = records
        to = records.last?.to ?? from
    }

    public init(adopting span: ByteSpan) {
        from = span.start
        to = span.end
        records = []
    }

    public var adopts: Bool { records.isEmpty }

    /// Where an adopted span's records end: at each chunk boundary within it, and at its end.
    public var adoptedEnds: [Int64] { DigestBook.recordEnds(after: from, upTo: to) }
}

extension ByteSpan {
    /// The bytes both hold, if any.
    public func intersection(_ other: ByteSpan) -> ByteSpan? {
        let start = max(self.start, other.start), end = min(self.end, other.end)
        return start < end ? ByteSpan(start, end) : nil
    }
}

extension ByteRanges {
    /// Whether one span holds all of `span` (an empty span is held by any set).
    public func contains(_ span: ByteSpan) -> Bool {
        guard span.start < span.end else { return true }
        // The last span starting at or before `span.start`.
        var low = 0, high = spans.count
        while low < high {
            let middle = (low + high) / 2
            if spans[middle].start <= span.start { low = middle + 1 } else { high = middle }
        }
        return low > 0 && spans[low - 1].end >= span.end
    }

    /// These bytes without `other`'s.
    public func subtracting(_ other: ByteRanges) -> ByteRanges {
        var result: [ByteSpan] = []
        for span in spans {
            var start = span.start
            for cut in other.spans where cut.end > start && cut.start < span.end {
                if cut.start > start { result.append(ByteSpan(start, cut.start)) }
                start = max(start, cut.end)
            }
            if start < span.end { result.append(ByteSpan(start, span.end)) }
        }
        return ByteRanges(result)
    }
}

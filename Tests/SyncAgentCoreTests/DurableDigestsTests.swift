import Foundation
import Testing
@testable import SyncAgentCore

/// The digests of durable bytes (issue 42, SPEC §6 rule 3) in the pure core:
/// which records a claim keeps, what a check of them reads, what a
/// mismatch takes with it, and how the fold carries them.
@Suite("Durable bytes' digests: chains, checks, fold")
struct DurableDigestsTests {
    static let mib: Int64 = 1 << 20
    static let chunk = DigestBook.chunkSize

    /// A distinct made-up digest per number.
    static func digest(_ number: UInt8) -> SHA256Value { SHA256Value(bytes: [UInt8](repeating: number, count: 32))! }
    static func record(_ from: Int64, _ to: Int64, _ number: UInt8 = 1) -> SpanDigest {
        SpanDigest(from: from, to: to, sha256: digest(number))
    }

    @Test func aDigestIsThirtyTwoBytesAndItsHex() {
        let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        let value = SHA256Value(hex: hex)
        #expect(value?.hex == hex)
        #expect(value?.bytes.count == 32)
        #expect(SHA256Value(hex: String(hex.dropLast(2))) == nil)
        #expect(SHA256Value(hex: String(hex.dropLast()) + "g") == nil)
        #expect(SHA256Value(bytes: [UInt8](repeating: 0, count: 33)) == nil)
    }

    /// A claim's record replaces its chain's record in the same chunk: a
    /// slow download keeps as few as a fast one, one per chunk.
    @Test func aChainKeepsOneRecordPerChunk() {
        let mib = Self.mib, chunk = Self.chunk
        var book = DigestBook()
        book.record(Self.record(0, 3 * mib))
        book.record(Self.record(0, 7 * mib))
        #expect(book.records.map(\.to) == [7 * mib])
        // Ending on the boundary, it is still the first chunk's.
        book.record(Self.record(0, chunk))
        #expect(book.records.map(\.to) == [chunk])
        book.record(Self.record(0, chunk + mib))
        book.record(Self.record(0, 2 * chunk + mib))
        #expect(book.records.map(\.to) == [chunk, chunk + mib, 2 * chunk + mib])
        book.record(Self.record(0, 2 * chunk + 2 * mib))
        #expect(book.records.map(\.to) == [chunk, chunk + mib, 2 * chunk + 2 * mib])
        #expect(book.end == 2 * chunk + 2 * mib)
        #expect(book.coverage.spans == [ByteSpan(0, 2 * chunk + 2 * mib)])
        // Cut back and going on: the records past the new one go.
        book.record(Self.record(0, chunk + 3 * mib))
        #expect(book.records.map(\.to) == [chunk, chunk + 3 * mib])
        #expect(book.end == chunk + 3 * mib)
        // An empty record says nothing.
        book.record(Self.record(5, 5))
        #expect(book.records.count == 2)
    }

    /// Which records a claim makes: one at each chunk boundary it crosses,
    /// and one at its end, so a check can say chunk by chunk where bytes
    /// differ even when the whole file was claimed at once.
    @Test func aClaimRecordsEachChunkBoundaryItCrosses() {
        let chunk = Self.chunk
        #expect(DigestBook.recordEnds(after: 0, upTo: 100) == [100])
        #expect(DigestBook.recordEnds(after: 100, upTo: 2 * chunk + 5) == [chunk, 2 * chunk, 2 * chunk + 5])
        #expect(DigestBook.recordEnds(after: chunk, upTo: 2 * chunk) == [2 * chunk])
        #expect(DigestBook.recordEnds(after: 5, upTo: 5).isEmpty)
        // A chain's records, kept one per chunk, cover it chunk by chunk.
        let book = DigestBook(DigestBook.recordEnds(after: 0, upTo: 3 * chunk + 1).map { Self.record(0, $0) })
        #expect(book.records.map(\.to) == [chunk, 2 * chunk, 3 * chunk, 3 * chunk + 1])
    }

    /// Chains of a segmented download are kept apart, each in order.
    @Test func chainsOfRangesAreKeptApart() {
        let chunk = Self.chunk
        var book = DigestBook()
        book.record(Self.record(4 * chunk, 4 * chunk + 100))
        book.record(Self.record(0, 100))
        book.record(Self.record(4 * chunk, 5 * chunk + 100))
        book.record(Self.record(0, chunk + 100))
        #expect(book.records.map(\.span) == [ByteSpan(0, 100), ByteSpan(0, chunk + 100),
                                             ByteSpan(4 * chunk, 4 * chunk + 100), ByteSpan(4 * chunk, 5 * chunk + 100)])
        #expect(book.coverage.spans == [ByteSpan(0, chunk + 100), ByteSpan(4 * chunk, 5 * chunk + 100)])
    }

    /// Only what the log still vouches for keeps its records.
    @Test func recordsGoWithTheBytesTheyVouchFor() {
        let chunk = Self.chunk
        var book = DigestBook([Self.record(0, chunk), Self.record(0, 2 * chunk), Self.record(3 * chunk, 3 * chunk + 10)])
        var prefix = book
        prefix.restrict(to: ByteRanges([ByteSpan(0, 2 * chunk)]))
        #expect(prefix.records.map(\.to) == [chunk, 2 * chunk])
        prefix.restrict(to: ByteRanges([ByteSpan(0, chunk + 1)]))
        #expect(prefix.records.map(\.to) == [chunk])
        #expect(prefix.end == chunk)
        // A gap through a chain takes its records across the gap, not those before it.
        book.restrict(to: ByteRanges([ByteSpan(0, chunk + 5), ByteSpan(chunk + 9, 4 * chunk)]))
        #expect(book.records.map(\.span) == [ByteSpan(0, chunk), ByteSpan(3 * chunk, 3 * chunk + 10)])
    }

    /// What a check reads: every chain with its records, and the durable
    /// bytes no record covers (an older syncagent's), hashed into records
    /// that end at each chunk boundary and at their end.
    @Test func aCheckReadsEveryChainAndAdoptsWhatNoRecordCovers() {
        let chunk = Self.chunk
        let book = DigestBook([Self.record(0, chunk), Self.record(0, chunk + 50), Self.record(5 * chunk, 5 * chunk + 7)])
        let durable = ByteRanges([ByteSpan(0, 3 * chunk + 10), ByteSpan(5 * chunk, 5 * chunk + 7)])
        let checks = book.checks(of: durable)
        #expect(checks.map(\.from) == [0, 5 * chunk, chunk + 50])
        #expect(checks[0].records.map(\.to) == [chunk, chunk + 50] && checks[0].to == chunk + 50)
        #expect(checks[1].records.map(\.to) == [5 * chunk + 7])
        #expect(checks[2].adopts && checks[2].to == 3 * chunk + 10)
        #expect(checks[2].adoptedEnds == [2 * chunk, 3 * chunk, 3 * chunk + 10])
        // A log without digests: everything it vouches for is adopted.
        let old = DigestBook().checks(of: ByteRanges([ByteSpan(0, 10)]))
        #expect(old == [ChainCheck(adopting: ByteSpan(0, 10))])
        #expect(old[0].adoptedEnds == [10])
    }

    /// A chain that stops matching keeps what it vouched for before its
    /// first bad record; the rest of its chain goes (its later records
    /// hashed through the damage). Another chain is not touched.
    @Test func aMismatchTakesTheRestOfItsChain() {
        let chunk = Self.chunk
        let first = ChainCheck(from: 0, records: [Self.record(0, chunk), Self.record(0, 2 * chunk), Self.record(0, 3 * chunk)])
        let second = ChainCheck(from: 4 * chunk, records: [Self.record(4 * chunk, 5 * chunk)])
        let durable = ByteRanges([ByteSpan(0, 3 * chunk), ByteSpan(4 * chunk, 5 * chunk)])
        // The first chain fails at its second record: it vouches up to its first.
        let failedFirst = [(check: first, goodUpTo: chunk), (check: second, goodUpTo: 5 * chunk)]
        #expect(DigestBook.kept(of: durable, after: failedFirst, keepingGaps: true).spans == [ByteSpan(0, chunk), ByteSpan(4 * chunk, 5 * chunk)])
        // One connection, no ranges: only the prefix before the first byte dropped.
        #expect(DigestBook.kept(of: durable, after: failedFirst, keepingGaps: false).spans == [ByteSpan(0, chunk)])
        // The second fails at its only record: its range goes whole.
        let failedSecond = [(check: first, goodUpTo: 3 * chunk), (check: second, goodUpTo: 4 * chunk)]
        #expect(DigestBook.kept(of: durable, after: failedSecond, keepingGaps: true).spans == [ByteSpan(0, 3 * chunk)])
        // The very first record fails: nothing from 0 is kept, so a download of one connection starts over.
        let failedAtOnce = [(check: first, goodUpTo: Int64(0)), (check: second, goodUpTo: 5 * chunk)]
        #expect(DigestBook.kept(of: durable, after: failedAtOnce, keepingGaps: false).spans.isEmpty)
        #expect(DigestBook.kept(of: durable, after: failedAtOnce, keepingGaps: true).spans == [ByteSpan(4 * chunk, 5 * chunk)])
        // Adopted spans are kept whole; a chain nested in a longer one that failed still vouches for its bytes.
        let whole = ChainCheck(from: 0, records: [Self.record(0, 3 * chunk)])
        let nested = ChainCheck(from: chunk, records: [Self.record(chunk, 2 * chunk)])
        let adopted = ChainCheck(adopting: ByteSpan(4 * chunk, 5 * chunk))
        let kept = DigestBook.kept(of: durable, after: [(whole, 0), (nested, 2 * chunk), (adopted, 5 * chunk)], keepingGaps: true)
        #expect(kept.spans == [ByteSpan(chunk, 2 * chunk), ByteSpan(4 * chunk, 5 * chunk)])
        let words = DigestBook.mismatchWords(file: "/d/x.part", damaged: [ByteSpan(chunk, 2 * chunk)], kept: kept, durable: durable)
        #expect(words.contains("bytes \(chunk)-\(2 * chunk) of /d/x.part do not match"))
        #expect(words.contains("\(durable.covered - kept.covered) of the \(durable.covered) bytes held are fetched again"))
    }

    /// The fold keeps the records of what the log vouches for, thinned,
    /// and lets them go with the bytes (a restart from 0, a finish, a
    /// cancel). A mismatch is said as the restart reason; the validators stay.
    @Test func theFoldCarriesTheDigestsOfTheDurableBytes() {
        let chunk = Self.chunk
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 100, total: 3 * chunk, etag: "\"v\"", digests: [Self.record(0, 100)])), task: "t")
        _ = log.add(.progressed(Progressed(bytes: chunk + 5, digests: [Self.record(0, chunk + 5)])), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 2 * chunk + 5, digests: [Self.record(0, 2 * chunk + 5)])), task: "t")
        #expect(log.state["t"]?.digests?.records.map(\.to) == [100, chunk + 5, 2 * chunk + 5])
        _ = log.add(.paused(Paused(bytes: chunk + 5, reason: .user)), task: "t")
        #expect(log.state["t"]?.digests?.records.map(\.to) == [100, chunk + 5])
        _ = log.add(.resumed(Resumed(bytes: chunk + 5, reason: "r")), task: "t")
        _ = log.add(.started(Started(attempt: 2, offset: chunk + 5, url: "http://h/x")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 100, mismatch: "bytes 100-\(chunk + 5) of x.part do not match")), task: "t")
        var task = log.state["t"]!
        #expect(task.digests?.records.map(\.to) == [100])
        #expect(task.restartReason?.contains("do not match") == true)
        #expect(task.etag == "\"v\"", "the same file on the server: its validator still guards a resume")
        _ = log.add(.progressed(Progressed(bytes: 3 * chunk, digests: [Self.record(0, 3 * chunk, 9)])), task: "t")
        _ = log.add(.finished(Finished(bytes: 3 * chunk, dest: "/downloads/t.bin", sha256: Self.digest(9).hex)), task: "t")
        task = log.state["t"]!
        #expect(task.digests == nil, "a finished file's digest is its finished event's")
        #expect(log.state.published["/downloads/t.bin"]?.sha256 == Self.digest(9).hex)
        // A restart from 0 lets them go; so does a cancel.
        log.create("u")
        _ = log.add(.progressed(Progressed(bytes: 10, digests: [Self.record(0, 10)])), task: "u")
        #expect(log.state["u"]?.digests != nil)
        _ = log.add(.progressed(Progressed(bytes: 0, restartReason: "the server ignored Range")), task: "u")
        #expect(log.state["u"]?.digests == nil)
        _ = log.add(.progressed(Progressed(bytes: 10, digests: [Self.record(0, 10)])), task: "u")
        _ = log.add(.cancelled(Cancelled(bytes: 10)), task: "u")
        #expect(log.state["u"]?.digests == nil)
        // Ranges keep the records inside them.
        log.create("r")
        _ = log.add(.progressed(Progressed(bytes: 20, total: 100, ranges: [ByteSpan(0, 10), ByteSpan(50, 60)],
                                           digests: [Self.record(0, 10), Self.record(50, 60), Self.record(60, 70)])), task: "r")
        #expect(log.state["r"]?.digests?.records.map(\.span) == [ByteSpan(0, 10), ByteSpan(50, 60)])
    }

    /// The log's form of a record is checked as it is read: a damaged one
    /// is an error naming the event, never a digest of other bytes.
    @Test(arguments: [#"{"bytes":1,"digests":[[5,4,"\#(String(repeating: "a", count: 64))"]]}"#,
                      #"{"bytes":1,"digests":[[0,4,"abc"]]}"#,
                      #"{"bytes":1,"digests":[[0,4]]}"#,
                      #"{"bytes":1,"digests":[[0,4,"\#(String(repeating: "a", count: 64))",7]]}"#,
                      #"{"bytes":1,"digests":[[-1,4,"\#(String(repeating: "a", count: 64))"]]}"#])
    func aDamagedRecordIsRefused(_ data: String) {
        #expect(throws: EventCoding.DecodingFailure.self) { try EventCoding.body(type: "progressed", data: data, seq: 3) }
    }

    /// Old events (no digests) fold as before: no book at all.
    @Test func eventsWithoutDigestsFoldAsBefore() {
        var log = LogBuilder()
        log.create("t")
        log.runToEnd("t")
        log.create("p")
        _ = log.add(.progressed(Progressed(bytes: 10, total: 20, etag: "\"e\"")), task: "p")
        #expect(log.state.tasks.allSatisfy { $0.digests == nil })
        #expect(log.state.published["/downloads/t.bin"]?.sha256 == "ab")
    }
}

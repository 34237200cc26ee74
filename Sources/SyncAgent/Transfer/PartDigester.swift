import Crypto
import Foundation
import Synchronization
import SyncAgentCore

/// One chain of a partial file's digests (`SpanDigest`): SHA-256 running
/// from `anchor` over the bytes claimed so far, read back from the page
/// cache by a worker (off the loop) while their fdatasync runs or after it.
/// The bytes hashed are the file's, not the ones curl handed over: what the
/// log vouches for is what a restart will find.
///
/// Its lock is taken by the worker that hashes it and, briefly, by the loop
/// (a stop's flush, a new connection asking where it stands).
final class DigestChain: Sendable {
    let anchor: Int64
    // swift-crypto's SHA256 is a value whose state is copied on write but is
    // not marked Sendable: it is only ever touched under the lock.
    private struct Hashing: @unchecked Sendable {
        var hasher: SHA256
        var position: Int64
    }
    private let state: Mutex<Hashing>

    init(anchor: Int64) {
        self.anchor = anchor
        state = Mutex(Hashing(hasher: SHA256(), position: anchor))
    }

    /// A chain a check left verified up to `position`.
    fileprivate init(anchor: Int64, hasher: SHA256, position: Int64) {
        self.anchor = anchor
        state = Mutex(Hashing(hasher: hasher, position: position))
    }

    /// Where its hashed bytes end.
    var position: Int64 { state.withLock { $0.position } }

    /// The file went back to `anchor` (a server that would not resume): the chain starts over.
    func reset() {
        state.withLock { $0 = Hashing(hasher: SHA256(), position: anchor) }
    }

    /// Hashes the bytes from where it stands up to `to`, read through
    /// `descriptor`, and returns the records of `anchor ..< to` and of each
    /// chunk boundary on the way (`DigestBook.recordEnds`). Nil when it
    /// already went past `to`: it cannot vouch for less (a late sync whose
    /// claim a later one overtook).
    func extend(_ descriptor: Int32, to: Int64, shown: String) throws -> [SpanDigest]? {
        try state.withLock { hashing in
            guard to >= hashing.position else { return nil }
            var records: [SpanDigest] = []
            for end in DigestBook.recordEnds(after: hashing.position, upTo: to) {
                try DurableHashing.feed(&hashing.hasher, from: descriptor, hashing.position..<end, shown: shown)
                hashing.position = end
                records.append(SpanDigest(from: anchor, to: end, sha256: DurableHashing.value(hashing.hasher)))
            }
            if records.isEmpty { records.append(SpanDigest(from: anchor, to: to, sha256: DurableHashing.value(hashing.hasher))) }
            return records
        }
    }
}

/// A task's chains while its runner lives (touched by the loop only; the
/// chains themselves go to the workers that hash them).
final class PartDigester {
    private(set) var chains: [DigestChain] = []

    /// The chain a transfer starting at `offset` continues: one whose
    /// hashed bytes end there, else a new one anchored at `offset`.
    func chain(startingAt offset: Int64) -> DigestChain {
        if let going = chains.first(where: { $0.position == offset }) { return going }
        chains.removeAll { $0.anchor == offset }
        let chain = DigestChain(anchor: offset)
        chains.append(chain)
        return chain
    }

    /// The chain from byte 0, whose end at the last byte is the file's SHA-256.
    var fileChain: DigestChain {
        if let chain = chains.first(where: { $0.anchor == 0 }) { return chain }
        let chain = DigestChain(anchor: 0)
        chains.append(chain)
        return chain
    }

    /// The partial file starts over (from 0, or from nothing at all).
    func reset() { chains.removeAll() }

    /// The chains a check left verified, in place of any held before.
    func adopt(_ verified: [DigestChain]) { chains = verified }
}

/// What a check of a partial file against its digests found.
struct DigestCheckReport: Sendable {
    /// Each check and where it stops vouching (its end when everything matched).
    var results: [(check: ChainCheck, goodUpTo: Int64)]
    /// Where each failed chain stopped matching: between its last matching record and its first that did not.
    var damaged: [ByteSpan]
    /// Records of spans that had none (an earlier syncagent's claims), hashed now.
    var adopted: [SpanDigest]
    /// The chains, verified up to where they match: an attempt goes on hashing from there.
    var chains: [DigestChain]
}

enum DurableHashing {
    /// Reads in pieces of this size: the page cache holds the bytes, and a
    /// piece fits the cache of a core.
    private static let pieceBytes = 256 << 10

    static func value(_ hasher: SHA256) -> SHA256Value {
        // A SHA-256 digest has 32 bytes: `SHA256Value` takes exactly those.
        hasher.finalize().withUnsafeBytes { SHA256Value(bytes: $0)! }
    }

    /// Feeds bytes `range` of the file into `hasher`. A file shorter than
    /// the range is an error (EIO): the bytes the log vouches for are gone.
    static func feed(_ hasher: inout SHA256, from descriptor: Int32, _ range: Range<Int64>, shown: String) throws {
        guard !range.isEmpty else { return }
        // No bigger than the range: a 256 KiB block is mapped afresh and given
        // back on free, page faults and madvise for every small file hashed.
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: min(pieceBytes, range.count), alignment: 64)
        defer { buffer.deallocate() }
        var position = range.lowerBound
        while position < range.upperBound {
            let want = Int(min(Int64(pieceBytes), range.upperBound - position))
            let count = try Posix.read(descriptor, into: UnsafeMutableRawBufferPointer(rebasing: buffer[..<want]), at: position, shown: shown)
            guard count > 0 else {
                throw SystemError(operation: "read \(shown): it ends at byte \(position), before byte \(range.upperBound)", errno: EIO)
            }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            position += Int64(count)
        }
    }

    /// Reads the file through `descriptor` and compares it with each check's
    /// records (SPEC §6 rule 3: every resume checks the digests it trusts).
    /// A chain is read until its first record that does not match: every
    /// later one hashed through the damage. A span without records is
    /// hashed into new ones.
    static func check(_ descriptor: Int32, _ checks: [ChainCheck], shown: String) throws -> DigestCheckReport {
        var report = DigestCheckReport(results: [], damaged: [], adopted: [], chains: [])
        for check in checks {
            var hasher = SHA256()
            var position = check.from
            var goodUpTo = check.from
            var verified = hasher
            if check.adopts {
                for end in check.adoptedEnds {
                    try feed(&hasher, from: descriptor, position..<end, shown: shown)
                    position = end
                    report.adopted.append(SpanDigest(from: check.from, to: end, sha256: value(hasher)))
                }
                goodUpTo = check.to
                verified = hasher
            } else {
                for record in check.records {
                    try feed(&hasher, from: descriptor, position..<record.to, shown: shown)
                    position = record.to
                    guard value(hasher) == record.sha256 else {
                        report.damaged.append(ByteSpan(goodUpTo, record.to))
                        break
                    }
                    goodUpTo = record.to
                    verified = hasher
                }
            }
            report.results.append((check, goodUpTo))
            report.chains.append(DigestChain(anchor: check.from, hasher: verified, position: goodUpTo))
        }
        return report
    }
}

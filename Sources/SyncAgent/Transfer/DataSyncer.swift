import Dispatch
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Makes completed bodies durable off the event loop. `fdatasync` blocks for
/// a disk flush; run one at a time on the loop, 2,000 small files wait for
/// 2,000 flushes in a row. Run concurrently, the file system's journal
/// merges them and transfers go on meanwhile.
///
/// Progress syncs (every 1 s or 8 MiB of a transfer) go the same way, so a
/// large download never stops to wait for the disk.
///
/// Only file descriptors cross threads. The worker reports a finished sync
/// by appending it under a lock and writing a byte to a pipe the loop polls;
/// the loop alone touches agent state.
final class DataSyncer: Sendable {
    /// What a finished sync makes true.
    struct Done {
        var taskID: String
        /// The attempt that asked: a later attempt of the same task must not claim it.
        var attempt: UInt64
        /// Every byte before this offset is durable.
        var offset: Int64
        /// The whole body (publish it), or progress along the way (claim it).
        var complete: Bool
        /// Set when the sync failed (errno): nothing may be claimed.
        var error: Int32? = nil
        /// The digests of what it made durable (see `Hashing`).
        var digests: [SpanDigest] = []
        /// A chain had already gone past its claim (a later sync overtook
        /// this one): this claim cannot carry its digest, so it is not made.
        var unvouched = false
        /// A complete body: the whole file's SHA-256.
        var fileDigest: SHA256Value? = nil

        /// What this sync made durable: every byte before it, or nothing at
        /// all when it failed (a failed sync never becomes claimed progress).
        var durableOffset: Int64? { error == nil ? offset : nil }
    }

    /// What to hash for a claim: each chain up to its claim, and for a
    /// complete body the chain from 0 up to the file's end.
    struct Hashing: Sendable {
        var claims: [(chain: DigestChain, to: Int64)]
        var file: (chain: DigestChain, size: Int64)? = nil

        /// At most this many bytes to hash (each chain from its anchor; its
        /// position is under a lock a worker may hold).
        var extent: Int64 { max(claims.map { $0.to - $0.chain.anchor }.max() ?? 0, file?.size ?? 0) }
    }

    /// Readable when syncs have finished: poll it beside curl's sockets.
    var fd: Int32 { finished.fd }
    private let finished: WorkerResults<Done>
    private let group = DispatchGroup()
    private let threads = FlushThreads(name: "syncagent.sync", limit: 16)
    /// New parts made side by side share their folder's sync.
    private let folderSyncs = SharedSyncs()

    init() throws {
        finished = try WorkerResults()
    }

    deinit {
        group.wait()
        threads.stop()
        finished.close()
    }

    /// Flushes the file behind `descriptor` in the background. The worker
    /// syncs its own duplicate, so the caller may close `descriptor` meanwhile.
    /// A complete body gets a full fsync: its modification time, which
    /// `finished` records and a restart compares, is durable with it.
    /// - Parameter name: the file's name, made durable too (its directory
    ///   synced beneath `root`): a new file's bytes are nothing without it.
    /// - Parameter hashing: the digests the claim will carry (SPEC §6 rule 3),
    ///   read back from the page cache: the bytes a claim covers were all
    ///   written before the sync was asked, and nothing writes them again, so
    ///   they are the bytes the flush makes durable, and the claim waits for
    ///   both. Many bytes are hashed on a thread of their own while the flush
    ///   runs: one after the other, a large download's hashing fell behind its
    ///   flushes and was all left for its end. A few are hashed after the
    ///   flush, on its thread: a second thread would cost more than they do.
    func sync(_ descriptor: Int32, _ done: Done, naming name: (path: String, root: DownloadRoot)? = nil, hashing: Hashing? = nil) {
        group.enter()
        let shown = "the file of task \(done.taskID)"
        let duplicate: Int32
        do {
            duplicate = try Posix.duplicate(descriptor, shown: shown)
        } catch {
            // Reported like a failed sync: a task must never wait for one that never ran.
            report(done, error: Self.errno(of: error))
            return
        }
        let hashApart = hashing.map { $0.extent >= Self.bytesHashedApart } ?? false
        let halves = Halves(done, descriptor: duplicate, count: hashApart ? 2 : 1)
        threads.run { [self] in
            var error: Int32?
            do {
                if done.complete { try Posix.sync(duplicate, shown: shown) } else { try Posix.dataSync(duplicate, shown: shown) }
                if let name {
                    let folder = PathRules.folder(of: name.path)
                    try folderSyncs.sync(folder) { try name.root.syncDirectory(of: name.path) }
                }
            } catch let failure {
                // Never tried again: after a failed fdatasync the kernel may
                // have dropped the dirty pages, and a second one would succeed
                // over data that is gone.
                error = Self.errno(of: failure)
            }
            if error == nil, !hashApart, let hashing {
                let (result, readError) = Self.hashed(hashing, into: done, through: duplicate, shown: shown)
                if let ended = halves.hashed(result, error: readError) { report(ended.done, error: ended.error) }
            } else if let ended = halves.flushed(error: error) {
                report(ended.done, error: ended.error)
            }
        }
        guard hashApart, let hashing else { return }
        threads.run { [self] in
            let (result, readError) = Self.hashed(hashing, into: done, through: duplicate, shown: shown)
            if let ended = halves.hashed(result, error: readError) { report(ended.done, error: ended.error) }
        }
    }

    /// A claim that may cover this much is hashed on a thread of its own, beside its flush.
    static let bytesHashedApart: Int64 = 1 << 20

    /// The flush and the hash of one sync: the last to finish closes the
    /// duplicate and says what the sync came to. A failed flush claims
    /// nothing, whatever the hash found.
    private final class Halves: @unchecked Sendable {
        private let lock = NSLock()
        private let descriptor: Int32
        private var remaining: Int
        private var done: Done
        private var flushError: Int32?
        private var hashError: Int32?

        init(_ done: Done, descriptor: Int32, count: Int) {
            self.done = done
            self.descriptor = descriptor
            remaining = count
        }

        func flushed(error: Int32?) -> (done: Done, error: Int32?)? {
            finish { flushError = error }
        }

        func hashed(_ result: Done, error: Int32?) -> (done: Done, error: Int32?)? {
            finish {
                done = result
                hashError = error
            }
        }

        private func finish(_ note: () -> Void) -> (done: Done, error: Int32?)? {
            lock.lock()
            note()
            remaining -= 1
            let last = remaining == 0
            lock.unlock()
            guard last else { return nil }
            Posix.close(descriptor)
            return (done, flushError ?? hashError)
        }
    }

    /// `done` with the digests `hashing` asks for, and the errno of a read that failed (which claims nothing).
    private static func hashed(_ hashing: Hashing, into done: Done, through descriptor: Int32, shown: String) -> (Done, Int32?) {
        var result = done
        do {
            try hash(hashing, through: descriptor, into: &result, shown: shown)
            return (result, nil)
        } catch {
            return (result, errno(of: error))
        }
    }

    /// The digests a claim carries, hashed from the durable bytes (a read that fails claims nothing).
    private static func hash(_ hashing: Hashing, through descriptor: Int32, into done: inout Done, shown: String) throws {
        for claim in hashing.claims {
            if let records = try claim.chain.extend(descriptor, to: claim.to, shown: shown) {
                done.digests += records
            } else {
                done.unvouched = true
            }
        }
        if let file = hashing.file {
            guard let records = try file.chain.extend(descriptor, to: file.size, shown: shown), let last = records.last else {
                done.unvouched = true
                return
            }
            done.digests += records.filter { !done.digests.contains($0) }
            done.fileDigest = last.sha256
        }
    }

    private static func errno(of error: Error) -> Int32 { (error as? SystemError)?.errno ?? EIO }

    private func report(_ done: Done, error: Int32?) {
        var result = done
        result.error = error
        finished.post(result)
        group.leave()
    }

    /// Syncs finished since the last call.
    func drain() -> [Done] { finished.drain() }

    /// Blocks until every sync handed over so far is done (on stop).
    func waitForAll() { group.wait() }
}

import Dispatch
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Makes new partial files off the event loop. Creating a file is the
/// costly step of starting a small download: ext4 without a journal walks
/// past every inode freed in the last half minute to pick a new one
/// (`recently_deleted`), so after a folder of files was deleted each
/// creation costs a scan — run on the loop, in series with every other
/// file's work. Here it overlaps with them, on the other core.
///
/// The worker only makes the file exist (with the folders above it),
/// never truncating it. The loop then locks and opens it exactly as before,
/// so every error is met and reported where it always was, and no
/// descriptor or lock crosses threads.
///
/// An attempt that goes on from durable bytes has them checked here first,
/// against the digests the log recorded for them (SPEC §6 rule 3): reading
/// them back costs about a second per GiB, on the other core.
final class PartialPreparer {
    /// A file made (or found made), or checked, for the attempt that asked.
    struct Prepared {
        var taskID: String
        var attempt: Int
        /// Set for a check: what the file's bytes said against their digests, or why they could not be read.
        var checked: Result<DigestCheckReport, SystemError>? = nil
    }

    /// Readable when files have been made: poll it beside curl's sockets.
    var fd: Int32 { finished.fd }
    private let finished: WorkerResults<Prepared>
    private let group = DispatchGroup()
    /// One at a time: creations in one folder take its lock in turn, and
    /// two creators spin on it, burning the core the loop needs.
    private let queue = DispatchQueue(label: "syncagent.partial-files")
    /// Checks read whole files: never in the way of a creation.
    private let checking = DispatchQueue(label: "syncagent.partial-checks", attributes: .concurrent)
    /// Tasks whose file is being made, with the attempt it is for (touched by the loop only).
    private(set) var preparing: [String: Int] = [:]

    init() throws {
        finished = try WorkerResults()
    }

    deinit {
        group.wait()
        finished.close()
    }

    func prepare(_ part: String, mode: mode_t, for id: String, attempt: Int, root: DownloadRoot) {
        preparing[id] = attempt
        group.enter()
        queue.async { [finished, group] in
            // An error here is met again by the loop's own open, which reports it.
            _ = try? root.makeFile(part, mode: mode)
            finished.post(Prepared(taskID: id, attempt: attempt))
            group.leave()
        }
    }

    /// Reads `part` against `checks` (see `DurableHashing.check`).
    func check(_ part: String, _ checks: [ChainCheck], for id: String, attempt: Int, root: DownloadRoot) {
        group.enter()
        checking.async { [finished, group] in
            let report: Result<DigestCheckReport, SystemError>
            do {
                let descriptor = try root.openForReading(part)
                defer { Posix.close(descriptor) }
                report = .success(try DurableHashing.check(descriptor, checks, shown: part))
            } catch {
                report = .failure(error as? SystemError ?? SystemError(operation: "read \(part)", errno: EIO))
            }
            finished.post(Prepared(taskID: id, attempt: attempt, checked: report))
            group.leave()
        }
    }

    /// Files made (and checked) since the last call.
    func drain() -> [Prepared] {
        let done = finished.drain()
        for prepared in done where preparing[prepared.taskID] == prepared.attempt { preparing[prepared.taskID] = nil }
        return done
    }
}

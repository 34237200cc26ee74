import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Crash injection for the durability tests: with `SYNCAGENT_CRASHPOINT=NAME`
/// the agent dies (`_exit`, no cleanup — as under `kill -9`) the moment it
/// reaches that point, so a test can hit each narrow window on purpose
/// instead of hoping a random kill lands there.
enum CrashPoint: String {
    /// New tasks are committed; their job files are still in the inbox.
    case intakeCommitted = "intake-committed"
    /// A bad job's `rejected` event is recorded and its `.error` written; neither is committed, the job is in `.taken/`.
    case rejectedRecorded = "rejected-recorded"
    /// A body is complete, flushed and logged; `finished` is not recorded yet.
    case downloadComplete = "download-complete"
    /// `batch_finished` is committed; the notification is not posted yet.
    case batchFinishedCommitted = "batch-finished-committed"
    /// `finished` is committed; `DEST.part` is not renamed yet.
    case finishedCommitted = "finished-committed"
    /// `hook_started` is committed; the hook's process is not spawned yet.
    case hookStartCommitted = "hook-start-committed"
    /// `compact` stored its snapshot; no raw event is deleted yet.
    case compactSnapshotWritten = "compact-snapshot-written"
    /// `compact` deleted its first chunk of raw events; the rest remain.
    case compactDeleting = "compact-deleting"
    /// A resumable upload's `upload_created` is committed; nothing more is sent
    /// (for a split parent: its final upload exists, `finished` is not recorded).
    case uploadCreated = "upload-created"
    /// An RPC call's events (an addUri's `created`) are recorded, none is committed, nothing is answered.
    case rpcRecorded = "rpc-recorded"

    private static let armed = ProcessInfo.processInfo.environment["SYNCAGENT_CRASHPOINT"].flatMap(CrashPoint.init(rawValue:))

    /// `beforeDying` runs only when armed: e.g. a commit, to land exactly in
    /// the window after it.
    func reached(beforeDying: () -> Void = {}) {
        guard Self.armed == self else { return }
        beforeDying()
        Posix.exitImmediately(137)
    }
}

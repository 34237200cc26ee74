import Foundation
import Logging
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// `didFinishDownloadingToURL`, after the commit: a finished file is
/// recorded with its final path first, and renamed to it once that record
/// is durable (SPEC §6). Renames that fail are tried again while the agent
/// runs and at the next start; work folders of published videos go once
/// their video's rename is done.
final class PublishQueue {
    /// A finished file's rename, made once `finished` is committed.
    struct Rename: Equatable, Sendable {
        var task: String
        var part: String
        var dest: String
        var replacing: Bool
        /// The work folder the file was made in (a video's), removed once the file has its name.
        var thenRemoving: String? = nil
    }

    let root: DownloadRoot
    private unowned let log: EventLog
    private let logger: Logger
    /// `finished` is recorded with its final path; the rename waits for the commit.
    private(set) var afterCommit: [Rename] = []
    /// Finished files whose rename failed after their commit (a folder made immutable, a file
    /// system remounted read-only): tried again with each check of the held files, and at the next start.
    private(set) var unpublished: [Rename] = []
    init(root: DownloadRoot, log: EventLog, logger: Logger) {
        self.root = root
        self.log = log
        self.logger = logger
    }

    /// Renames handed to the commit thread with the commit that vouches for them.
    private var inFlight: [Rename] = []

    var hasRenamesDue: Bool { !afterCommit.isEmpty || !inFlight.isEmpty }

    /// `part` becomes `dest` once the next commit is done.
    func rename(_ rename: Rename) { afterCommit.append(rename) }

    /// Whether `path` is there as the next commit leaves it: that commit
    /// renames finished bodies before any task it records can start, so a
    /// finished body's partial file is as good as gone, and its destination
    /// as good as there. (Without this, a job for the same destination taken
    /// in those few milliseconds was refused: the agent's own finished body
    /// looked like a stranger's partial file.)
    func existsOnceRenamed(_ path: String) -> Bool {
        for renames in [afterCommit, inFlight] {
            if renames.contains(where: { $0.dest == path }) { return true }
            if renames.contains(where: { $0.part == path }) { return false }
        }
        return root.exists(path)
    }

    /// The log is committed: the renames it vouches for are made, and the
    /// work folders of the files that took their names go. (A folder holding
    /// a file whose rename failed stays with it, until it is published.)
    /// The same steps as a commit written on the commit thread, all on the loop.
    func committed() {
        finishedOffLoop(failed: Self.renamedOffLoop(handOver(), root: root))
    }

    /// The renames due, handed to the commit thread with the commit that
    /// vouches for them (`renamedOffLoop` makes them there); until
    /// `finishedOffLoop`, they count as made.
    func handOver() -> [Rename] {
        inFlight = afterCommit
        afterCommit.removeAll()
        return inFlight
    }

    /// On the commit thread, once the commit is written: the renames, and
    /// their folders synced. Returns those that failed, with why.
    static func renamedOffLoop(_ renames: [Rename], root: DownloadRoot) -> [(rename: Rename, error: Error)] {
        var synced = Set<String>()
        var failed: [(rename: Rename, error: Error)] = []
        for rename in renames {
            do { try publish(rename, root: root, synced: &synced) } catch { failed.append((rename, error)) }
        }
        return failed
    }

    /// Back on the loop: the renames handed over are made, but those that
    /// failed; the work folders of the files that took their names go.
    func finishedOffLoop(failed: [(rename: Rename, error: Error)]) {
        for rename in inFlight {
            if let failure = failed.first(where: { $0.rename == rename }) {
                cannotPublish(rename, failure.error)
            } else if let folder = rename.thenRemoving {
                removeWorkFolder(folder)
            }
        }
        inFlight.removeAll()
    }

    /// Died between committing `finished` and the rename: the rename the
    /// log vouches for is done now. False (and logged) if it cannot be.
    @discardableResult
    func completeRename(of task: TaskState, from source: String, to dest: String, thenRemoving folder: String? = nil) -> Bool {
        let rename = Rename(task: task.id, part: source, dest: dest, replacing: task.spec.overwrite.replacesFiles,
                            thenRemoving: folder)
        var synced = Set<String>()
        do {
            try publish(rename, synced: &synced)
            if let folder { removeWorkFolder(folder) }
            return true
        } catch {
            cannotPublish(rename, error)
            return false
        }
    }

    /// The rename that publishes a finished file, then its directory synced: the rename is
    /// durable once that is, and one sync serves every file published there (`synced`).
    private func publish(_ rename: Rename, synced: inout Set<String>) throws {
        try Self.publish(rename, root: root, synced: &synced)
    }

    private static func publish(_ rename: Rename, root: DownloadRoot, synced: inout Set<String>) throws {
        try Publisher.complete(part: rename.part, to: rename.dest, replacing: rename.replacing, root: root)
        if synced.insert(PathRules.folder(of: rename.dest)).inserted { try root.syncDirectory(of: rename.dest) }
    }

    /// The renames a commit could not make, tried again. One whose
    /// destination another live task now holds, or whose file is gone, is
    /// left to the next start's recovery, which checks more than this can.
    func publishAgain() {
        guard !unpublished.isEmpty else { return }
        unpublished.removeAll { rename in
            guard Destinations.holder(of: rename.dest, in: log.state, except: rename.task) == nil, root.exists(rename.part) else {
                logger.warning("a finished file could not be moved into place and is no longer waiting to be",
                               metadata: ["task.id": "\(rename.task)", "dest": "\(rename.dest)", "part": "\(rename.part)"])
                return true
            }
            var synced = Set<String>()
            do {
                try publish(rename, synced: &synced)
                logger.notice("published after all", metadata: ["task.id": "\(rename.task)", "dest": "\(rename.dest)"])
                if let folder = rename.thenRemoving { removeWorkFolder(folder) }
                return true
            } catch {
                return false
            }
        }
    }

    /// A rename the log vouches for did not happen. Something that appeared
    /// at `dest` meanwhile, under a mode that replaces nothing, is left as
    /// it is, and so is the download beside it: each start tries again. Any
    /// other refusal (a folder made immutable, a read-only remount) is tried
    /// again while the agent runs (`publishAgain`), and an idle exit says it is left.
    private func cannotPublish(_ rename: Rename, _ error: Error) {
        let metadata: Logger.Metadata = ["task.id": "\(rename.task)", "dest": "\(rename.dest)", "error": "\(error)"]
        if let error = error as? SystemError, error.errno == EEXIST {
            logger.error("something appeared where a finished task publishes; it is left alone, the download stays beside it",
                         metadata: metadata.merging(["part": "\(rename.part)"]) { $1 })
        } else {
            logger.error("cannot publish", metadata: metadata)
            unpublished.append(rename)
        }
    }

    func removeWorkFolder(_ folder: String) {
        do { try root.removeTree(folder) } catch {
            logger.error("cannot remove a work folder", metadata: ["folder": "\(folder)", "error": "\(error)"])
        }
    }
}

import SyncAgentCore

/// `name_from_server`: a download created without `dest` keeps its partial
/// file beside the name its URL gave it (reserved as any destination),
/// and learns its real name with its server's first answer. The name is
/// decided then, against every other live task's destination and the files
/// on disk (`Destinations.decide(serverNamed:)`), and recorded at once: the
/// fold reserves it as the event is applied, before another answer or job
/// is looked at, and the event is committed before any of the answer's
/// bytes are claimed, so before the file is published. A restart resumes
/// into the name the log holds; a later answer never renames the file.
extension RunnerContext {
    /// The first accepted answer of `id`, while it waits for its name:
    /// records the name and goes on (nil), or ends the attempt as `overwrite` says.
    func nameFromServer(_ id: String, contentDisposition: [UInt8]?, url: String) -> AttemptOutcome? {
        guard let task = state[id], task.phase == .running, task.awaitsServerName, let own = task.spec.dest else { return nil }
        let chosen = ServerFileName.choose(contentDisposition: contentDisposition, finalURL: url)
        // A name the rules of a job's dest refuse here (the agent's own folder) keeps the name the URL gave.
        let path = rules.serverNamedPath(chosen.name, beside: own) ?? own
        switch Destinations.decide(serverNamed: path, for: task, in: state, exists: root.exists) {
        case .use(let dest):
            // What the log vouches for is left as it is: only the name is news.
            record(.progressed(Progressed(bytes: task.bytes, ranges: task.doneRanges?.spans, dest: dest)), task: id)
            logger.info("file named by its server", metadata: ["task.id": "\(id)", "dest": "\(dest)", "from": "\(chosen.source.rawValue)"])
            return nil
        case .skip(let reason, let existing):
            return .skipped(reason: reason, existing: existing)
        case .fail(let reason, let code):
            return .permanent(reason: reason, code: code)
        }
    }

    /// An attempt that ended `skipped`: its partial file goes, and the task finishes without its transfer.
    func finishSkipped(_ task: TaskState, reason: String, existing: String?, metrics: AttemptMetrics) {
        if let part = task.partPath { removePartial(part, of: task.id) }
        record(.finished(Finished(bytes: existing.flatMap(root.size) ?? 0, dest: existing, metrics: metrics, skipped: reason)),
               task: task.id)
        sayAfterCommit(.info, "task skipped", ["task.id": "\(task.id)", "reason": "\(reason)"])
        needsScheduling = true
    }
}

import Foundation

extension AgentState {
    /// Replay: the state a log describes.
    public static func replay<S: Sequence>(_ events: S) -> AgentState where S.Element == Event {
        var state = AgentState()
        for event in events { state.apply(event) }
        return state
    }

    /// The fold. The running agent, `status` and `replay` all compute state
    /// with this one function, so what they show cannot drift apart.
    public mutating func apply(_ event: Event) {
        lastSeq = max(lastSeq, event.seq)
        switch event.body {
        case .created(let spec):
            guard let id = event.task, tasks[id] == nil else { orphanEvents.append(event.seq); return }
            let position = tasks.count
            guard tasks.append(TaskState(id: id, spec: spec, seq: event.seq, atMs: event.atMs)) else {
                orphanEvents.append(event.seq)
                return
            }
            indexSourceOfTask(at: position)
            indexGIDOfTask(at: position)
            reserve(spec.dest, at: position)
            countActive(id, was: nil, now: .queued)
            if let parent = spec.parent {
                children[parent, default: []].append(id)
                families[parent, default: Family()].total += 1
                settle(parent)
            }
        case .rejected(let rejection):
            rejected.append(rejection)
            if let identity = rejection.identity { rejectedSources.insert(identity) }
        case .controlled(let control):
            if let identity = control.identity { controlSources.insert(identity) }
        case .configReloaded(let reload):
            if let hooks = reload.hooks { arm(hooks) }
        case .agentStarted(let started):
            runningAgentPid = started.pid
            arm(started.hooks ?? [])
        case .agentStopped:
            runningAgentPid = nil
        case .batchFinished(let batch):
            let key = BatchKey(batch.batch)
            if batch.finishedCount != nil {
                // Counted from everything that had ended in the batch (its ids may be cut): all of it is announced.
                endedSinceNotice[key] = nil
            } else {
                // An older event lists every id it announced.
                let announced = Set(batch.finished + batch.failed)
                endedSinceNotice[key]?.removeAll { announced.contains($0) }
                if endedSinceNotice[key]?.isEmpty == true { endedSinceNotice[key] = nil }
            }
            owedNotices[key] = batch
            if armedHooks.contains(.batchEnd) { owedBatchHooks[event.seq] = batch }
        case .hookStarted(let hook):
            let key = HookRunKey(hook: hook.hook, task: event.task, batchSeq: hook.batchSeq)
            let batch = hook.batchSeq.flatMap { owedBatchHooks[$0]?.batch }
            switch hook.hook {
            case .taskEnd: if let id = event.task { owedTaskHooks.remove(id) }
            case .batchEnd: if let seq = hook.batchSeq { owedBatchHooks[seq] = nil }
            }
            hooksInFlight[key] = HookRun(key: key, batch: batch, startedSeq: event.seq)
            hooksMayNotHaveRun[key] = nil
        case .hookEnded(let ended):
            let key = HookRunKey(hook: ended.hook, task: event.task, batchSeq: ended.batchSeq)
            let run = hooksInFlight.removeValue(forKey: key)
            if ended.mayNotHaveRun == true {
                var lost = run ?? HookRun(key: key, startedSeq: event.seq)
                lost.endUnknownSinceMs = event.atMs
                hooksMayNotHaveRun[key] = lost
            }
        case .compacted:
            break
        case .notified(let notice):
            if let id = event.task {
                if let index = tasks.index(forKey: id) { tasks[index].owesOwnNotice = false }
                owedOwnNotices.remove(id)
            } else {
                owedNotices[BatchKey(notice.batch)] = nil
            }
        default:
            applyToTask(event)
        }
    }

    private mutating func applyToTask(_ event: Event) {
        guard let id = event.task, let index = tasks.index(forKey: id) else { orphanEvents.append(event.seq); return }
        // Mutated in place through the index: no copy of the task, one hash lookup.
        let change = tasks[index].apply(event)
        // An ended task's events may be compacted away: its job, if let go, is read back while they are there.
        if change.after.isEnded, !tasks[index].holdsSpec { tasks[index].holdSpec() }
        if change.fannedOut, change.after == .running {
            // From now on the parent's work is its children's: its slot goes to them.
            runningCount -= 1
            runningByHost[change.hostAfter, default: 1] -= 1
            if runningByHost[change.hostAfter] == 0 { runningByHost[change.hostAfter] = nil }
        }
        if change.before != change.after {
            if change.before.isEnded != change.after.isEnded {
                let dest = tasks[index].spec.dest, named = tasks[index].namedDest
                if change.after.isEnded {
                    release(dest, at: index)
                    releaseNamed(named, at: index)
                } else {
                    reserve(dest, at: index)
                    reserveNamed(named, at: index)
                }
            }
            countActive(id, was: change.before, now: change.after, hostBefore: change.hostBefore)
            if change.after.isEnded, !change.before.isEnded, armedHooks.contains(.taskEnd), change.parent == nil {
                owedTaskHooks.insert(id)
            } else if !change.after.isEnded {
                owedTaskHooks.remove(id)
            }
        } else if change.after == .queued {
            // Still queued, but its start time or host may have changed.
            countActive(id, was: .queued, now: .queued)
        }
        if change.named, !change.after.isEnded { reserveNamed(tasks[index].namedDest, at: index) }
        if change.before == .running, change.after == .running, change.hostBefore != change.hostAfter,
           !tasks[index].isFannedOut {
            // A running transfer moved host (a redirect): its max_per_host slot moves with it.
            runningByHost[change.hostBefore, default: 1] -= 1
            if runningByHost[change.hostBefore] == 0 { runningByHost[change.hostBefore] = nil }
            runningByHost[change.hostAfter, default: 0] += 1
        }
        if let parent = change.parent, change.before != change.after || change.bytesBefore != change.bytesAfter {
            var family = families[parent, default: Family()]
            family.finished += (change.after == .finished ? 1 : 0) - (change.before == .finished ? 1 : 0)
            let isLost = { (phase: TaskPhase) in phase == .failed || phase == .cancelled }
            family.lost += (isLost(change.after) ? 1 : 0) - (isLost(change.before) ? 1 : 0)
            family.bytes = family.bytes &+ (change.bytesAfter &- change.bytesBefore)
            families[parent] = family
            settle(parent)
        }
        // Phases compared first: the payload is looked at only on a finish, not on every progress event.
        if change.after == .finished, change.before != .finished, case .finished(let finished) = event.body,
           finished.skipped == nil, finished.unchanged != true, let dest = finished.dest {
            let task = tasks[index]
            published[dest] = PublishedFile(task: id, url: task.spec.url, sha256: finished.sha256, etag: task.etag, lastModified: task.lastModified, size: finished.bytes,
                                            modifiedNs: finished.modifiedNs)
        }
        // A parent settles when its own phase changes, or its playlist grows or ends.
        if change.before != change.after || change.expanded, !families.isEmpty, families[id] != nil { settle(id) }
    }

    /// The hooks the config now sets. Runs owed to a hook no longer set are
    /// dropped: there is no command left to run for them.
    private mutating func arm(_ hooks: [String]) {
        armedHooks = Set(hooks.compactMap(HookKind.init(rawValue:)))
        if !armedHooks.contains(.taskEnd) { owedTaskHooks.removeAll() }
        if !armedHooks.contains(.batchEnd) { owedBatchHooks.removeAll() }
    }

    /// Keeps `settledParents` current for `parent`.
    private mutating func settle(_ parent: String) {
        guard let task = tasks[parent], task.phase == .running, task.isFannedOut, let family = families[parent] else {
            settledParents.remove(parent)
            return
        }
        if family.lost > 0 || (task.hasAllChildren && family.finished == family.total) {
            settledParents.insert(parent)
        } else {
            settledParents.remove(parent)
        }
    }

    /// A destination and its partial file belong to the first live task
    /// that claims them. (Logs written before reservations existed may name
    /// one file twice; the later claim then holds nothing, so an ended task
    /// never frees a name another still uses.)
    /// (Only the destination is stored: its partial name follows from it,
    /// and `Destinations.holder` checks both.)
    private mutating func reserve(_ dest: String?, at position: Int) {
        guard let dest else { return }
        reservations.insert(dest, position: position, in: tasks, keyOf: \.spec.dest)
    }

    private mutating func release(_ dest: String?, at position: Int) {
        guard let dest else { return }
        reservations.remove(dest, position: position)
    }

    /// The destination a server's answer named (`name_from_server`): held
    /// beside the job's own (where its partial file is) until the task ends,
    /// unless another live task holds that path already (only a log written
    /// by hand or by another build can say so: the agent names a file free).
    private mutating func reserveNamed(_ dest: String?, at position: Int) {
        guard let dest, holder(ofDestination: dest) == nil else { return }
        namedReservations.insert(dest, position: position, in: tasks, keyOf: \.namedDest)
    }

    private mutating func releaseNamed(_ dest: String?, at position: Int) {
        guard let dest else { return }
        namedReservations.remove(dest, position: position)
    }

    /// Keeps the derived indexes current on every phase change — the run
    /// queue, running counts, per-batch active counts, "ended since notice"
    /// — so scheduling and announcing never scan every task.
    /// - Parameter hostBefore: the host a task that was running held its slot on, if it moved (a retarget).
    private mutating func countActive(_ id: String, was old: TaskPhase?, now new: TaskPhase, hostBefore: String? = nil) {
        guard let index = tasks.index(forKey: id) else { return }
        let task = tasks[index]
        let key = BatchKey(task.spec.batch)
        let wasActive = old?.isActive ?? false
        if wasActive != new.isActive {
            let delta = new.isActive ? 1 : -1
            activeCount += delta
            activeByBatch[key, default: 0] += delta
            if activeByBatch[key] == 0 { activeByBatch[key] = nil }
        }
        if old == .queued { runQueue.remove(priority: task.spec.priority, seq: task.createdSeq) }
        if old == .queued && new == .queued {
            runQueue.insert(RunQueue.Entry(priority: task.spec.priority, seq: task.createdSeq, position: index,
                                           notBeforeMs: task.notBeforeMs))
            return
        }
        if new == .queued {
            runQueue.insert(RunQueue.Entry(priority: task.spec.priority, seq: task.createdSeq, position: index,
                                           notBeforeMs: task.notBeforeMs))
        }
        // A fanned-out parent holds no slot: its children do the transfers.
        if old == .running, !task.isFannedOut {
            let host = hostBefore ?? task.hostKey
            runningCount -= 1
            runningByHost[host, default: 1] -= 1
            if runningByHost[host] == 0 { runningByHost[host] = nil }
        }
        if new == .running, !task.isFannedOut {
            runningCount += 1
            runningByHost[task.hostKey, default: 0] += 1
        }
        let endsCounted = new == .finished || new == .failed
        // A batch is what a notice or `on_batch_end` is about: a task with `notify = "none"` is in
        // it only for the hook (the agent then shows no notice for a batch of such tasks alone).
        // A child never is: its parent stands for it.
        let inBatch = task.spec.notify != .none || (task.spec.parent == nil && armedHooks.contains(.batchEnd))
        if endsCounted, inBatch, !(old == .finished || old == .failed) {
            endedSinceNotice[key, default: []].append(id)
        }
        if endsCounted, task.owesOwnNotice { owedOwnNotices.insert(id) }
    }
}

extension TaskState {
    struct Change {
        var before: TaskPhase, after: TaskPhase
        var hostBefore: String, hostAfter: String
        var bytesBefore: Int64, bytesAfter: Int64
        /// An HLS parent read its playlist (`expanded`) …
        var expanded = false
        /// … for the first time: its transfer slot goes to its children.
        var fannedOut = false
        /// The task's parent, if it is a child: read here, so the fold never
        /// copies the task out of its dictionary (on every event of a replay).
        var parent: String?
        /// Its server's answer named it (`Progressed.dest`) just now.
        var named = false
    }

    /// Returns what changed, so the caller never has to copy the task out of
    /// its dictionary to compare.
    mutating func apply(_ event: Event) -> Change {
        let before = phase
        let hostBefore = hostKey
        let bytesBefore = bytes
        var expanded = false, fannedOut = false, named = false
        defer {
            let (createdSeq, createdAtMs) = (self.createdSeq, self.createdAtMs)
            // One change to the activity, not two: replay passes here on every event.
            activity.modify { activity in
                activity.seqsSinceCreated = event.seq &- createdSeq
                activity.msSinceCreated = event.atMs &- createdAtMs
            }
            // Any event that names another byte count than the ranges hold
            // (a restart, a failure that kept nothing) ends the ranges. (Read in
            // place: replay passes here on every event of every task.)
            if hasDoneRanges, doneRanges?.covered != bytes { doneRanges = nil }
            // Bytes gone, nothing is left for a retarget's check to confirm.
            // (A video's own bytes are none: its check is its playlist's, read again.)
            if bytes == 0, details.box?.fields.retargetCheck == true, !isFannedOut { details.modify { $0.retargetCheck = false } }
            // Digests of bytes the log no longer vouches for go with them; a
            // finished file's digest is its `finished` event's.
            if hasDigests {
                if phase == .finished || phase == .cancelled || bytes == 0 {
                    details.modify { $0.digests = nil }
                } else {
                    let durable = durableRanges
                    details.modify { details in
                        details.digests?.restrict(to: durable)
                        if details.digests?.isEmpty == true { details.digests = nil }
                    }
                }
            }
        }
        switch event.body {
        case .started(let started):
            phase = .running
            attempts = started.attempt
            bytes = started.offset
            if firstStartedAtMs == nil { firstStartedAtMs = event.atMs }
            currentURL = started.url
            error = nil
            errorCode = nil
            pauseReason = nil
            notBeforeMs = nil
        case .progressed(let progress):
            let (elapsedMs, overflow) = event.atMs.subtractingReportingOverflow(updatedAtMs)
            if progress.bytes > bytes, elapsedMs > 0, !overflow {
                // In Double: a damaged or hostile log must not overflow the fold.
                speed = Int64(min((Double(progress.bytes) - Double(bytes)) * 1000 / Double(elapsedMs), 1e15))
            }
            if let spans = progress.ranges {
                let ranges = ByteRanges(spans)
                // Counted, not believed: the byte count is what the spans cover.
                bytes = ranges.covered
                doneRanges = ranges.isPrefix ? nil : ranges
            } else {
                bytes = progress.bytes
                if hasDoneRanges { doneRanges = nil }
            }
            if let total = progress.total { self.total = total }
            if let reason = progress.fallback { singleConnectionReason = reason }
            if let chunk = progress.chunk { chunkSize = chunk }
            if let etag = progress.etag { self.etag = etag }
            if let lastModified = progress.lastModified { self.lastModified = lastModified }
            // An answer from where a retarget led was judged and taken: what it kept, it confirmed.
            if details.box?.fields.retargetCheck == true { details.modify { $0.retargetCheck = false } }
            if let reason = progress.restartReason {
                restartReason = reason
                // Validators belonged to the old representation.
                if progress.etag == nil { etag = nil }
                if progress.lastModified == nil { lastModified = nil }
            }
            // (The same file, damaged on disk: its validators still hold.)
            if let reason = progress.mismatch { restartReason = reason }
            // The first name holds: the destination other tasks were kept from.
            if let dest = progress.dest, namedDest == nil, spec.nameFromServer == true {
                namedDest = dest
                named = true
            }
            if let records = progress.digests, !records.isEmpty {
                // In place: a large download's book is not copied on each of its events.
                details.modify { details in
                    if details.digests == nil { details.digests = DigestBook() }
                    for record in records { details.digests!.record(record) }
                }
            }
        case .paused(let paused):
            // The attempt that found no network ends here; it is not one of the task's tries.
            if paused.reason == .offline, phase == .running { attemptsNotCounted += 1 }
            phase = .paused
            bytes = paused.bytes
            pauseReason = paused.reason
            speed = 0
        case .resumed(let resumed):
            if phase == .failed {
                // Run again by the user: a fresh budget of retries and of total_timeout.
                attemptsBeforeRerun = attempts
                attemptsNotCounted = 0
                firstStartedAtMs = nil
                endedAtMs = nil
            }
            phase = .queued
            bytes = resumed.bytes
            pauseReason = nil
            speed = 0
            // Running again: back on the list, or a live transfer would be invisible.
            forgotten = false
        case .redirected(let redirect):
            currentURL = redirect.to
            redirects += 1
        case .retargeted(let retarget):
            currentURL = retarget.to
            // The new URL's own redirects count from none.
            redirects = 0
            if phase == .failed {
                // Run again, as `resume` of a failed task does: a fresh budget of retries and of total_timeout.
                attemptsBeforeRerun = attempts
                attemptsNotCounted = 0
                firstStartedAtMs = nil
                endedAtMs = nil
                forgotten = false
            }
            // A paused task waits where it was; any other goes back to the queue, to start at once.
            if phase != .paused { phase = .queued }
            notBeforeMs = nil
            speed = 0
            // Ranges and digests of bytes not kept go with them (below).
            bytes = retarget.bytes
            if let reason = retarget.reason {
                restartReason = reason
                // Validators and size belonged to the file whose bytes were let go.
                etag = nil
                lastModified = nil
                total = nil
            }
            // A video that fanned out reads its playlist at the new URL before its segments go on.
            if bytes > 0 || isFannedOut { awaitsRetargetCheck = true }
        case .retrying(let retry):
            if retry.free == true { attemptsNotCounted += 1 }
            phase = .queued
            bytes = retry.bytes
            error = retry.reason
            notBeforeMs = event.atMs.addingReportingOverflow(retry.delayMs).overflow ? .max : event.atMs + retry.delayMs
            speed = 0
        case .finished(let finished):
            phase = .finished
            bytes = finished.bytes
            total = finished.bytes
            publishedPath = finished.dest
            responseStatus = finished.status
            skipReason = finished.skipped
            unchanged = finished.unchanged ?? false
            error = nil
            errorCode = nil
            endedAtMs = event.atMs
            speed = 0
            owesOwnNotice = spec.notify == .each
        case .failed(let failure):
            phase = .failed
            bytes = failure.bytes
            error = failure.reason
            errorCode = failure.code
            endedAtMs = event.atMs
            speed = 0
            owesOwnNotice = spec.notify == .each
        case .cancelled(let cancelled):
            phase = .cancelled
            bytes = cancelled.bytes
            endedAtMs = event.atMs
            speed = 0
        case .expanded(let expansion):
            expanded = true
            // Its playlist was read (at the URL a retarget gave, if one did): its segments know where they are.
            if details.box?.fields.retargetCheck == true { details.modify { $0.retargetCheck = false } }
            fannedOut = hls == nil
            var progress = hls ?? HLSProgress(playlist: expansion.playlist, targetDurationMs: expansion.targetDurationMs,
                                               ended: false, entries: [], mediaMs: 0, lastSequence: nil)
            progress.playlist = expansion.playlist
            progress.targetDurationMs = expansion.targetDurationMs
            progress.ended = progress.ended || expansion.ended
            progress.entries += expansion.entries
            if let renditions = expansion.renditions { progress.renditions = renditions }
            for entry in expansion.entries {
                progress.mediaMs = progress.mediaMs &+ entry.durationMs
                progress.lastSequence = max(progress.lastSequence ?? entry.sequence, entry.sequence)
            }
            hls = progress
        case .uploadCreated(let created):
            // A new resource on the server holds nothing yet.
            upload = UploadSession(url: created.url, extensions: created.extensions)
            if let changed = created.changedNs { bodyChangedNs = changed }
            bytes = 0
            if let reason = created.reason { restartReason = reason }
        case .split(let split):
            expanded = true
            fannedOut = !isFannedOut
            splitInto = split.parts.count
            if let changed = split.changedNs { bodyChangedNs = changed }
        case .forgotten:
            forgotten = true
        case .created, .rejected, .agentStarted, .agentStopped, .batchFinished, .notified, .controlled, .configReloaded,
             .hookStarted, .hookEnded, .compacted:
            break
        }
        return Change(before: before, after: phase, hostBefore: hostBefore, hostAfter: hostKey,
                      bytesBefore: bytesBefore, bytesAfter: bytes, expanded: expanded, fannedOut: fannedOut, parent: parentID,
                      named: named)
    }
}

import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// The HLS parent's behaviour in the agent (SPEC §10): read the playlist
/// (through the master's chosen variant), fan out one child download per
/// segment, key and init segment, read a live playlist again every target
/// duration, and fan in — assemble and publish — once every child has
/// finished. The decisions are the core's (`HLSPlaylist`, `HLSFanOut`,
/// the fold's `settledParents`); this file carries them out.
extension Agent {
    /// Variants an error names when none matches `variant`, at most.
    static let variantsNamed = 8

    /// A playlist arrived for a parent's own attempt.
    func playlistArrived(_ task: TaskState, _ attempt: Exchange) {
        let url = attempt.currentURL
        let playlist: HLSPlaylist
        do {
            playlist = try HLSPlaylist.parse(attempt.memoryBody, base: url)
        } catch {
            fail(task, reason: "\(Redaction.url(url)): \(error)", code: .badPlaylist, metrics: attempt.metrics)
            return
        }
        switch playlist {
        case .master(let variants):
            let rule = task.spec.hls?.variant ?? "best"
            guard let variant = HLSVariant.pick(variants, rule: rule) else {
                // A few are named: a master of 2,000 variants made an error of every one.
                let names = variants.compactMap { $0.resolution ?? $0.bandwidth.map(String.init) }
                let offered = names.prefix(Self.variantsNamed).joined(separator: ", ")
                    + (names.count > Self.variantsNamed ? " and \(names.count - Self.variantsNamed) more" : "")
                fail(task, reason: "no variant of \(Redaction.url(url)) matches variant = \"\(rule)\" (it offers \(offered))",
                     code: .noVariant, metrics: attempt.metrics)
                return
            }
            // Its sound in a playlist of its own (a CMAF layout): the video alone would be published
            // as the whole. Said, not done, until alternate renditions are fetched too.
            if let group = variant.separateAudio {
                fail(task, reason: "the chosen variant of \(Redaction.url(url)) takes its audio from a rendition of its own "
                     + "(#EXT-X-MEDIA TYPE=AUDIO, GROUP-ID=\"\(Printable.escaping(group))\"), which syncagent does not fetch: "
                     + "the video would be silent", code: .separateAudio, metrics: attempt.metrics)
                return
            }
            // A master that leads to masters forever is refused like a redirect loop.
            guard task.redirects < settings.maxRedirects else {
                fail(task, reason: "more than \(settings.maxRedirects) master playlists in a row from \(Redaction.url(url))",
                     code: .badPlaylist, metrics: attempt.metrics)
                return
            }
            // The choice is a hop like a redirect: a restart reads the variant's playlist directly.
            hop(task, to: variant.uri, status: 300)
        case .media(let media):
            expand(task, with: media, url: url)
        }
    }

    /// Records the children a media playlist adds, and when to read it again.
    func expand(_ task: TaskState, with media: HLSMediaPlaylist, url: String) {
        let plan: HLSFanOut.Plan
        do {
            plan = try HLSFanOut.plan(parent: task, playlist: media, url: url, in: log.state)
        } catch let refusal as HLSFanOut.Refusal {
            fail(task, reason: refusal.description, code: refusal.code)
            return
        } catch {
            fail(task, reason: "\(error)", code: .badPlaylist)
            return
        }
        if !task.isFannedOut, plan.expanded.entries.isEmpty, plan.expanded.ended {
            fail(task, reason: "the playlist \(Redaction.url(url)) has no segments", code: .badPlaylist)
            return
        }
        // The file a joined video would be published as is known now: one that exists
        // ends a `skip` or `fail` task here, before any segment is fetched.
        if !task.isFannedOut, HLSPublisher.joinsIntoOneFile(task.spec), let dest = task.spec.dest,
           endedByExistingDest(task, HLSPublisher.joinedPath(dest, isFMP4: HLSPublisher.isFMP4(plan.expanded.entries))) {
            return
        }
        if let change = plan.endedBecause {
            logger.notice("live playlist is another video now; publishing what was taken before the change",
                          metadata: ["task.id": "\(task.id)", "reason": "\(change)"])
        }
        if !plan.expanded.entries.isEmpty || !task.isFannedOut || plan.expanded.ended != task.hls?.ended {
            for child in plan.children { log.record(.created(child.spec), task: child.id) }
            log.record(.expanded(plan.expanded), task: task.id)
            logger.info("playlist read", metadata: ["task.id": "\(task.id)", "segments": "\(plan.expanded.entries.count)",
                                                    "ended": "\(plan.expanded.ended)"])
        }
        // A live playlist that stops growing (or goes backwards) ends after this many reads:
        // what it gave is published, instead of waiting for total_timeout.
        let staleReads = plan.expanded.entries.isEmpty ? (staleRefreshes[task.id] ?? 0) + 1 : 0
        staleRefreshes[task.id] = staleReads
        if !plan.expanded.ended, task.isFannedOut, staleReads >= Self.staleReadsBeforeEnding {
            log.record(.expanded(Expanded(playlist: url, targetDurationMs: media.targetDurationMs, ended: true, entries: [])), task: task.id)
            logger.notice("live playlist stopped growing; publishing what it gave",
                          metadata: ["task.id": "\(task.id)", "reads": "\(staleReads)"])
            refreshAt[task.id] = nil
            staleRefreshes[task.id] = nil
            needsScheduling = true
            return
        }
        if plan.expanded.ended {
            refreshAt[task.id] = nil
        } else {
            // RFC 8216 §6.3.4: again after a target duration, or half of one when nothing changed.
            let wait = plan.expanded.entries.isEmpty ? media.targetDurationMs / 2 : media.targetDurationMs
            refreshAt[task.id] = FileSystem.monotonicMs + max(1000, wait)
        }
        needsScheduling = true
    }

    /// A fanned-out parent taken from the queue (a restart, a resume): its
    /// children do the work; a live one reads its playlist again at once.
    func resumeParent(_ task: TaskState) {
        log.record(.started(Started(attempt: task.attempts, offset: 0, url: task.currentURL)), task: task.id)
        if task.hls?.ended == false { refreshAt[task.id] = FileSystem.monotonicMs }
        needsScheduling = true
    }

    /// Starts the playlist reads that are due (live parents only).
    func refreshDuePlaylists() {
        let now = FileSystem.monotonicMs
        for (id, due) in refreshAt where due <= now {
            refreshAt[id] = nil
            guard let task = log.state[id], task.phase == .running, attemptByTask[id] == nil else { continue }
            do {
                let attempt = try makeExchange(task, sink: .memory(limit: Self.playlistLimit, overflow: Self.playlistTooLarge))
                refreshes.insert(attempt.serial)
                register(attempt)
            } catch {
                refreshFailed(task, "cannot start: \(error)")
            }
        }
    }

    /// A live playlist read again: new segments become children; failures
    /// are tried again next interval, up to a point.
    func refreshed(_ task: TaskState, _ attempt: Exchange, _ outcome: AttemptOutcome) {
        guard task.phase == .running else { return }
        switch outcome {
        case .complete:
            do {
                guard case .media(let media) = try HLSPlaylist.parse(attempt.memoryBody, base: attempt.currentURL) else {
                    refreshFailed(task, "the live playlist became a master playlist")
                    return
                }
                refreshFailures[task.id] = nil
                expand(task, with: media, url: attempt.currentURL)
            } catch {
                refreshFailed(task, "\(error)")
            }
        case .transient(let reason, _, _), .permanent(let reason, _), .localFailure(let reason, _), .rangeRefused(let reason),
             .fallBack(let reason):
            refreshFailed(task, reason)
        case .redirect(let target, _):
            refreshFailed(task, "the live playlist moved to \(Redaction.url(target))")
        case .notModified:
            // A playlist read is never conditional; a server that says 304 anyway said nothing new.
            refreshFailed(task, "the server answered 304 Not Modified to a request that asked no condition")
        }
    }

    private func refreshFailed(_ task: TaskState, _ reason: String) {
        let failures = (refreshFailures[task.id] ?? 0) + 1
        refreshFailures[task.id] = failures
        let allowed = max(task.spec.retries ?? config.retries, 1)
        guard failures <= allowed else {
            refreshFailures[task.id] = nil
            fail(task, reason: "the live playlist could not be read \(failures) times in a row: \(reason)", code: .playlistUnavailable)
            return
        }
        logger.notice("live playlist not read; trying again", metadata: ["task.id": "\(task.id)", "reason": "\(reason)"])
        refreshAt[task.id] = FileSystem.monotonicMs + max(1000, task.hls?.targetDurationMs ?? 1000)
    }

    /// Parents whose children all finished are published (a video) or
    /// concatenated (a split upload); a parent one of whose children failed
    /// fails, its other children waiting paused for `resume`.
    func settleParents() throws {
        guard !log.state.settledParents.isEmpty else { return }
        // The last segments' files take their names at the commit: assemble after it.
        if !renamesAfterCommit.isEmpty { try commit() }
        for id in log.state.settledParents.sorted() {
            guard let parent = log.state[id], parent.phase == .running, let family = log.state.families[id] else { continue }
            let children = log.state.children[id] ?? []
            if family.lost > 0 {
                let lost = children.compactMap { log.state[$0] }.first { $0.phase == .failed || $0.phase == .cancelled }
                let why = lost.map { "\($0.id) \($0.phase.rawValue)" + ($0.error.map { ": \($0)" } ?? "") } ?? "a segment was lost"
                for child in children.compactMap({ log.state[$0] }) where child.phase.isActive {
                    pause(child.id, reason: .user, bytesIfIdle: child.bytes)
                }
                if parent.spec.upload != nil {
                    fail(parent, reason: "part \(why)", code: .partFailed, keeping: parent.bytes)
                } else {
                    fail(parent, reason: "segment \(why)", code: .segmentFailed)
                }
                continue
            }
            if parent.spec.upload != nil {
                concatenate(parent)
            } else if !assembler.busy.contains(id) {
                assembler.assemble(parent, in: log.state, root: root)
            }
        }
    }

    /// What the assembler made of a video: published once `finished` is
    /// committed, or the reason it failed. A parent paused or cancelled
    /// meanwhile takes no result (a resume assembles it again).
    func assembled(_ results: [(id: String, outcome: HLSAssembler.Outcome)]) {
        for (id, outcome) in results {
            guard let parent = log.state[id], parent.phase == .running else { continue }
            do {
                let prepared = try outcome.get()
                log.record(.finished(Finished(bytes: prepared.bytes, dest: prepared.dest)), task: id)
                renamesAfterCommit.append(Rename(task: id, part: prepared.staging, dest: prepared.dest,
                                                 replacing: parent.spec.overwrite.replacesFiles))
                if let work = HLSFanOut.workDirectory(of: parent) { cleanupsAfterCommit.append(work) }
                logger.info("video published", metadata: ["task.id": "\(id)", "dest": "\(prepared.dest)",
                                                          "segments": "\(log.state.families[id]?.total ?? 0)"])
            } catch let failure as HLSPublisher.HLSFailure {
                if let child = failure.child.flatMap({ log.state[$0] }) {
                    fail(child, reason: failure.reason, code: failure.code)
                }
                dropUnfinishedJoin(parent)
                fail(parent, reason: failure.reason, code: failure.code)
            } catch let error as SystemError {
                dropUnfinishedJoin(parent)
                let failure = DiskFailure(operation: "assemble", path: HLSPublisher.staging(of: parent) ?? "", errno: error.errno)
                fail(parent, reason: "\(failure.description) (\(error.operation))", code: failure.code)
            } catch {
                fail(parent, reason: "cannot assemble the video: \(error)", code: .localError)
            }
        }
        needsScheduling = true
    }

    /// A joined file that could not be finished takes room for nothing: it
    /// is written whole again next time. (A folder's staging keeps the
    /// segments already moved there, so it stays.)
    private func dropUnfinishedJoin(_ parent: TaskState) {
        guard parent.spec.hls?.output == .file, let staging = HLSPublisher.staging(of: parent) else { return }
        do { try root.remove(staging) } catch {
            logger.error("cannot remove a half-joined video", metadata: ["file": "\(staging)", "error": "\(error)"])
        }
    }

    /// Start-up: a finished video whose rename the log vouches for is
    /// renamed; its work folder is removed.
    func completeHLSPublishing(_ task: TaskState) {
        guard task.phase == .finished || task.phase == .cancelled, let work = HLSFanOut.workDirectory(of: task) else { return }
        if task.phase == .finished, let staging = HLSPublisher.staging(of: task), let dest = task.dest, root.exists(staging),
           !completeRename(of: task, from: staging, to: dest) {
            return
        }
        if root.exists(work) { removeWorkFolder(work) }
    }

    func removeWorkFolder(_ folder: String) {
        do { try root.removeTree(folder) } catch {
            logger.error("cannot remove a work folder", metadata: ["folder": "\(folder)", "error": "\(error)"])
        }
    }

    /// Control of a parent applies to its children first (SPEC §4.3), as it
    /// would to each of them; then the parent stops reading its playlist, and
    /// a cancelled video's work folder goes.
    func carryOutOnChildren(_ action: ControlJob.Action, of parent: TaskState) {
        for id in log.state.children[parent.id] ?? [] {
            guard let child = log.state[id] else { continue }
            _ = carryOut(action, on: child)
        }
        refreshAt[parent.id] = nil
        if action == .cancel, let work = HLSFanOut.workDirectory(of: parent) { removeWorkFolder(work) }
    }
}

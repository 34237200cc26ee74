import Foundation
import SyncAgentCore

/// An HLS video (SPEC §10): read the playlist (through the master's chosen
/// variant), fan out one child download per segment, key and init segment,
/// read a live playlist again every target duration, and fan in — assemble
/// and publish — once every child has finished. The decisions are the
/// core's (`HLSPlaylist`, `HLSFanOut`, the fold's `settledParents`); this
/// runner carries them out.
final class HLSVideoRunner: TaskRunner {
    let taskID: String
    private unowned let context: RunnerContext
    /// The playlist read in flight: the task's own attempt, a live playlist read again, or one
    /// of the playlists a master's variant takes with it.
    private var exchange: Exchange?
    private var exchangeRead = PlaylistRead.attempt
    enum PlaylistRead { case attempt, refresh, gathering }
    /// A master's chosen variant whose renditions have playlists of their own: read one after
    /// another in the task's attempt (its media playlist first), then fanned out together.
    private var gathering: Gathering?
    struct Gathering {
        var variant: HLSVariant
        /// Renditions still to read, in order.
        var pending: [HLSRendition]
        /// The one being read; nil: the variant's own playlist.
        var current: HLSRendition?
        var video: (playlist: HLSMediaPlaylist, url: String)?
        var read: [HLSFanOut.RenditionPlaylist] = []
        /// Redirects followed for the playlist being read.
        var hops = 0
    }
    /// A live video: when its playlist is read again (monotonic ms).
    private var refreshAt: Int64?
    /// Reads in a row that failed.
    private var refreshFailures = 0
    /// Reads in a row that brought no new segment.
    private var staleRefreshes = 0
    static let staleReadsBeforeEnding = 30
    /// Variants an error names when none matches `variant`, at most.
    static let variantsNamed = 8
    /// A playlist is kept in memory, at most this many bytes.
    static let playlistLimit = 16 << 20

    init(taskID: String, context: RunnerContext) {
        self.taskID = taskID
        self.context = context
    }

    var isBusy: Bool { exchange != nil || context.assembler.busy.contains(taskID) }
    var nextWakeMs: Int64? { refreshAt }

    /// A video joined into one file is named once its playlist tells its format (see `expand`).
    static func destinationIsKnownAtStart(_ spec: TaskSpec) -> Bool { !HLSPublisher.joinsIntoOneFile(spec) }

    // MARK: - Reading the playlist

    func start(_ task: TaskState) {
        // Retargeted, a video reads its playlist at the new URL before its segments go on (`rebase`).
        guard !task.isFannedOut || task.awaitsRetargetCheck else { return resumeFannedOut(task) }
        gathering = nil
        guard let exchange = makePlaylistRead(task) else { return }
        context.record(.started(Started(attempt: task.nextAttempt, offset: 0, url: task.currentURL)), task: taskID)
        read(exchange, as: .attempt)
    }

    /// A fanned-out video taken from the queue (a restart, a resume): its
    /// children do the work; a live one reads its playlist again at once.
    private func resumeFannedOut(_ task: TaskState) {
        context.record(.started(Started(attempt: task.attempts, offset: 0, url: task.currentURL)), task: taskID)
        if task.hls?.ended == false { refreshAt = Posix.monotonicMs }
        context.needsScheduling = true
    }

    private func makePlaylistRead(_ task: TaskState) -> Exchange? {
        do {
            return try context.makeExchange(task, sink: .memory(limit: Self.playlistLimit, overflow: { url in
                .permanent(reason: "the playlist at \(Redaction.url(url)) is over \(Self.playlistLimit >> 20) MiB", code: .badPlaylist)
            }))
        } catch {
            context.refuseStart(task, error)
            return nil
        }
    }

    private func read(_ exchange: Exchange, as purpose: PlaylistRead) {
        let id = taskID
        exchange.onRedirected = { [unowned self] hop in
            // Only the task's own URL moves: a read again, or of a rendition, records nothing.
            if purpose == .attempt { context.record(.redirected(hop), task: id) }
        }
        exchange.onEnded = { [unowned self] exchange, outcome in ended(exchange, outcome) }
        do {
            try context.exchanges.add(exchange)
        } catch {
            guard let task = context.state[taskID] else { return }
            if purpose == .refresh { refreshFailed(task, "\(error)") } else { context.refuseStart(task, error) }
            return
        }
        self.exchange = exchange
        exchangeRead = purpose
    }

    private func ended(_ exchange: Exchange, _ outcome: AttemptOutcome) {
        self.exchange = nil
        context.needsScheduling = true
        guard let task = context.state[taskID] else { return }
        if exchangeRead == .refresh { return refreshed(task, exchange, outcome) }
        if exchangeRead == .gathering { return gathered(task, exchange, outcome) }
        guard case .complete = outcome else {
            return context.attemptEnded(task, outcome, on: exchange, metrics: exchange.metrics, durable: exchange.durable)
        }
        playlistArrived(task, exchange)
    }

    /// A playlist arrived for the task's own attempt.
    private func playlistArrived(_ task: TaskState, _ exchange: Exchange) {
        let url = exchange.currentURL
        let playlist: HLSPlaylist
        do {
            playlist = try HLSPlaylist.parse(exchange.memoryBody, base: url)
        } catch {
            context.fail(task, reason: "\(Redaction.url(url)): \(error)", code: .badPlaylist, metrics: exchange.metrics)
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
                context.fail(task, reason: "no variant of \(Redaction.url(url)) matches variant = \"\(rule)\" (it offers \(offered))",
                             code: .noVariant, metrics: exchange.metrics)
                return
            }
            // Its sound (or the subtitles asked for) in playlists of their own: read with the variant's.
            let renditions: [HLSRendition]
            do {
                renditions = try HLSRenditionChoice.choose(for: variant, options: task.spec.hls ?? HLSOptions())
            } catch let refusal as HLSRenditionChoice.Refusal {
                // The URL last: a redacted one runs to the next space when the words are shown.
                context.fail(task, reason: "\(refusal.description); the master playlist is \(Redaction.url(url))", code: refusal.code,
                             metrics: exchange.metrics)
                return
            } catch {
                context.fail(task, reason: "\(error)", code: .badPlaylist, metrics: exchange.metrics)
                return
            }
            if !renditions.isEmpty {
                gathering = Gathering(variant: variant, pending: renditions)
                return gather(task, url: variant.uri)
            }
            // A master that leads to masters forever is refused like a redirect loop.
            guard task.redirects < context.settings.maxRedirects else {
                context.fail(task, reason: "more than \(context.settings.maxRedirects) master playlists in a row from \(Redaction.url(url))",
                             code: .badPlaylist, metrics: exchange.metrics)
                return
            }
            // The choice is a hop like a redirect: a restart reads the variant's playlist directly.
            context.hop(task, to: variant.uri, status: 300)
        case .media(let media):
            if task.isFannedOut, task.awaitsRetargetCheck { return rebase(task, on: media, url: url) }
            expand(task, with: media, url: url)
        }
    }

    // MARK: - A variant's renditions

    /// Reads one playlist of the variant being gathered, at `url`, in the task's attempt.
    private func gather(_ task: TaskState, url: String) {
        var target = task
        target.currentURL = url
        guard let exchange = makePlaylistRead(target) else { return }
        read(exchange, as: .gathering)
    }

    /// A playlist of the variant being gathered arrived (or did not): the next is read, and
    /// once all are, the video fans out with them. A failure is the attempt's, retried from
    /// the master as any failed attempt is.
    private func gathered(_ task: TaskState, _ exchange: Exchange, _ outcome: AttemptOutcome) {
        guard var gathering, task.phase == .running else {
            gathering = nil
            return
        }
        switch outcome {
        case .complete:
            let url = exchange.currentURL
            let what = gathering.current.map { $0.kind == .audio ? "the sound playlist" : "the subtitles playlist" } ?? "the variant's playlist"
            let media: HLSMediaPlaylist
            do {
                guard case .media(let parsed) = try HLSPlaylist.parse(exchange.memoryBody, base: url) else {
                    self.gathering = nil
                    context.fail(task, reason: "\(what) \(Redaction.url(url)) is a master playlist, not a media playlist",
                                 code: .badPlaylist, metrics: exchange.metrics)
                    return
                }
                media = parsed
            } catch {
                self.gathering = nil
                context.fail(task, reason: "\(what) \(Redaction.url(url)): \(error)", code: .badPlaylist, metrics: exchange.metrics)
                return
            }
            if let rendition = gathering.current {
                gathering.read.append(HLSFanOut.RenditionPlaylist(rendition: rendition, playlist: media, url: url))
            } else {
                gathering.video = (media, url)
            }
            gathering.hops = 0
            guard let next = gathering.pending.first, let uri = next.uri else {
                self.gathering = nil
                return gatheredAll(task, gathering, metrics: exchange.metrics)
            }
            gathering.pending.removeFirst()
            gathering.current = next
            self.gathering = gathering
            gather(task, url: uri)
        case .redirect(let target, _):
            gathering.hops += 1
            self.gathering = gathering
            guard gathering.hops <= context.settings.maxRedirects else {
                self.gathering = nil
                context.fail(task, reason: "more than \(context.settings.maxRedirects) redirects from \(Redaction.url(exchange.currentURL))",
                             code: .badPlaylist, metrics: exchange.metrics)
                return
            }
            gather(task, url: target)
        default:
            self.gathering = nil
            context.attemptEnded(task, outcome, on: exchange, metrics: exchange.metrics, durable: exchange.durable)
        }
    }

    /// Every playlist of the variant is read: a VOD fans out with its renditions. A live one
    /// is refused: its renditions would have to be read again in step with it.
    private func gatheredAll(_ task: TaskState, _ gathering: Gathering, metrics: AttemptMetrics?) {
        guard let video = gathering.video else { return }
        let live = [video.url] + gathering.read.filter { !$0.playlist.ended }.map(\.url)
        guard video.playlist.ended, live.count == 1 else {
            context.fail(task, reason: "\(Redaction.url(live[video.playlist.ended ? 1 : 0])) is a live playlist: syncagent takes "
                         + "separate sound and subtitles renditions from VOD playlists only (audio = \"none\", without "
                         + "subtitles, takes the live video alone)", code: .separateAudio, metrics: metrics)
            return
        }
        expand(task, with: video.playlist, url: video.url, renditions: gathering.read, variant: gathering.variant)
    }

    /// A retargeted video read its playlist at the new URL: its segments
    /// not taken yet (and the keys and init segments they need) move to the
    /// new playlist's URLs, matched as `HLSRetarget` says; the taken ones
    /// stay. A playlist that is not this video's fails it, saying why.
    private func rebase(_ task: TaskState, on media: HLSMediaPlaylist, url: String) {
        switch HLSRetarget.plan(parent: task, playlist: media, url: url, in: context.state) {
        case .refused(let reason):
            context.fail(task, reason: reason, code: .badPlaylist)
            return
        case .moves(let moves):
            for move in moves {
                guard let child = context.state[move.child] else { continue }
                _ = context.retarget(child, to: move.url)
            }
        }
        // No new segment: the playlist it reads from now on, and the end of its check.
        context.record(.expanded(Expanded(playlist: url, targetDurationMs: media.targetDurationMs, ended: task.hls?.ended ?? media.ended,
                                          entries: [])), task: taskID)
        // Segments held back while it read (`Runners.start`), or paused when one was lost, go on.
        for id in context.state.children[taskID] ?? [] {
            guard let child = context.state[id], child.phase == .paused, child.pauseReason == .user else { continue }
            context.record(.resumed(Resumed(bytes: child.bytes, reason: "its video moved to \(Redaction.url(url))")), task: id)
        }
        context.logger.info("video retargeted", metadata: ["task.id": "\(taskID)", "playlist": "\(Redaction.url(url))"])
        if task.hls?.ended == false { refreshAt = Posix.monotonicMs + max(1000, media.targetDurationMs) }
        context.needsScheduling = true
    }

    /// Records the children a media playlist adds, and when to read it again.
    private func expand(_ task: TaskState, with media: HLSMediaPlaylist, url: String,
                        renditions: [HLSFanOut.RenditionPlaylist] = [], variant: HLSVariant? = nil) {
        let plan: HLSFanOut.Plan
        do {
            plan = try HLSFanOut.plan(parent: task, playlist: media, url: url, renditions: renditions, variant: variant,
                                      in: context.state)
        } catch let refusal as HLSFanOut.Refusal {
            context.fail(task, reason: refusal.description, code: refusal.code)
            return
        } catch {
            context.fail(task, reason: "\(error)", code: .badPlaylist)
            return
        }
        if !task.isFannedOut, plan.expanded.entries.isEmpty, plan.expanded.ended {
            context.fail(task, reason: "the playlist \(Redaction.url(url)) has no segments", code: .badPlaylist)
            return
        }
        // The file a joined video would be published as is known now: one that exists
        // ends a `skip` or `fail` task here, before any segment is fetched.
        if !task.isFannedOut, HLSPublisher.joinsIntoOneFile(task.spec), let dest = task.spec.dest,
           context.endedByExistingDest(task, HLSPublisher.joinedPath(dest, isMP4: HLSPublisher.joinsIntoMP4(plan.expanded.entries,
                                                                                                          plan.expanded.renditions))) {
            return
        }
        if let change = plan.endedBecause {
            context.logger.notice("live playlist is another video now; publishing what was taken before the change",
                                  metadata: ["task.id": "\(taskID)", "reason": "\(change)"])
        }
        if !plan.expanded.entries.isEmpty || !task.isFannedOut || plan.expanded.ended != task.hls?.ended {
            for child in plan.children { context.record(.created(child.spec), task: child.id) }
            context.record(.expanded(plan.expanded), task: taskID)
            context.logger.info("playlist read", metadata: ["task.id": "\(taskID)", "segments": "\(plan.expanded.entries.count)",
                                                            "ended": "\(plan.expanded.ended)"])
        }
        // A live playlist that stops growing (or goes backwards) ends after this many reads:
        // what it gave is published, instead of waiting for total_timeout.
        staleRefreshes = plan.expanded.entries.isEmpty ? staleRefreshes + 1 : 0
        if !plan.expanded.ended, task.isFannedOut, staleRefreshes >= Self.staleReadsBeforeEnding {
            context.record(.expanded(Expanded(playlist: url, targetDurationMs: media.targetDurationMs, ended: true, entries: [])),
                           task: taskID)
            context.logger.notice("live playlist stopped growing; publishing what it gave",
                                  metadata: ["task.id": "\(taskID)", "reads": "\(staleRefreshes)"])
            refreshAt = nil
            staleRefreshes = 0
            context.needsScheduling = true
            return
        }
        if plan.expanded.ended {
            refreshAt = nil
        } else {
            // RFC 8216 §6.3.4: again after a target duration, or half of one when nothing changed.
            let wait = plan.expanded.entries.isEmpty ? media.targetDurationMs / 2 : media.targetDurationMs
            refreshAt = Posix.monotonicMs + max(1000, wait)
        }
        context.needsScheduling = true
    }

    // MARK: - A live playlist, read again

    /// Starts the playlist read that is due (a live video, while it runs).
    func wake(nowMs: Int64) {
        guard let due = refreshAt, due <= nowMs else { return }
        refreshAt = nil
        guard let task = context.state[taskID], task.phase == .running, exchange == nil else { return }
        do {
            let exchange = try context.makeExchange(task, sink: .memory(limit: Self.playlistLimit, overflow: { url in
                .permanent(reason: "the playlist at \(Redaction.url(url)) is over \(Self.playlistLimit >> 20) MiB", code: .badPlaylist)
            }))
            read(exchange, as: .refresh)
        } catch {
            refreshFailed(task, "cannot start: \(error)")
        }
    }

    /// A live playlist read again: new segments become children; failures
    /// are tried again next interval, up to a point.
    private func refreshed(_ task: TaskState, _ exchange: Exchange, _ outcome: AttemptOutcome) {
        guard task.phase == .running else { return }
        switch outcome {
        case .complete:
            do {
                guard case .media(let media) = try HLSPlaylist.parse(exchange.memoryBody, base: exchange.currentURL) else {
                    refreshFailed(task, "the live playlist became a master playlist")
                    return
                }
                refreshFailures = 0
                expand(task, with: media, url: exchange.currentURL)
            } catch {
                refreshFailed(task, "\(error)")
            }
        case .transient(let reason, _, _), .permanent(let reason, _), .localFailure(let reason, _), .rangeRefused(let reason),
             .fallBack(let reason), .skipped(let reason, _):
            refreshFailed(task, reason)
        case .redirect(let target, _):
            refreshFailed(task, "the live playlist moved to \(Redaction.url(target))")
        case .notModified:
            // A playlist read is never conditional; a server that says 304 anyway said nothing new.
            refreshFailed(task, "the server answered 304 Not Modified to a request that asked no condition")
        }
    }

    private func refreshFailed(_ task: TaskState, _ reason: String) {
        refreshFailures += 1
        let allowed = max(task.spec.retries ?? context.config.retries, 1)
        guard refreshFailures <= allowed else {
            let failures = refreshFailures
            refreshFailures = 0
            context.fail(task, reason: "the live playlist could not be read \(failures) times in a row: \(reason)",
                         code: .playlistUnavailable)
            return
        }
        context.logger.notice("live playlist not read; trying again", metadata: ["task.id": "\(taskID)", "reason": "\(reason)"])
        refreshAt = Posix.monotonicMs + max(1000, task.hls?.targetDurationMs ?? 1000)
    }

    // MARK: - Fan-in

    /// Every segment finished: the video is assembled off the loop. A
    /// segment lost (failed or cancelled) fails the video, its other
    /// segments waiting, paused, for `resume`.
    func childrenSettled(_ parent: TaskState) throws {
        // A segment lost to an expired link is what a retarget mends: judged once the new playlist is read.
        guard let family = context.state.families[parent.id], !parent.awaitsRetargetCheck else { return }
        if family.lost > 0 {
            let lost = (context.state.children[parent.id] ?? []).compactMap { context.state[$0] }
                .first { $0.phase == .failed || $0.phase == .cancelled }
            let why = lost.map { "\($0.id) \($0.phase.rawValue)" + ($0.error.map { ": \($0)" } ?? "") } ?? "a segment was lost"
            context.runners.pauseActiveChildren(of: parent)
            context.fail(parent, reason: "segment \(why)", code: .segmentFailed)
            return
        }
        if !context.assembler.busy.contains(taskID) { context.assembler.assemble(parent, in: context.state, root: context.root) }
    }

    /// What the assembler made of the video: published once `finished` is
    /// committed, or the reason it failed. A video paused or cancelled
    /// meanwhile takes no result (a resume assembles it again).
    func assembled(_ outcome: HLSAssembler.Outcome) {
        guard let parent = context.state[taskID], parent.phase == .running else { return }
        do {
            let prepared = try outcome.get()
            context.record(.finished(Finished(bytes: prepared.bytes, dest: prepared.dest)), task: taskID)
            context.publishing.rename(.init(task: taskID, part: prepared.staging, dest: prepared.dest,
                                            replacing: parent.spec.overwrite.replacesFiles, thenRemoving: HLSFanOut.workDirectory(of: parent)))
            context.logger.info("video published", metadata: ["task.id": "\(taskID)", "dest": "\(prepared.dest)",
                                                              "segments": "\(context.state.families[taskID]?.total ?? 0)"])
        } catch let failure as HLSPublisher.HLSFailure {
            if let child = failure.child.flatMap({ context.state[$0] }) {
                context.fail(child, reason: failure.reason, code: failure.code)
            }
            dropUnfinishedJoin(parent)
            context.fail(parent, reason: failure.reason, code: failure.code)
        } catch let error as SystemError {
            dropUnfinishedJoin(parent)
            let failure = DiskFailure(operation: "assemble", path: HLSPublisher.staging(of: parent) ?? "", errno: error.errno)
            context.fail(parent, reason: "\(failure.description) (\(error.operation))", code: failure.code)
        } catch {
            context.fail(parent, reason: "cannot assemble the video: \(error)", code: .localError)
        }
    }

    /// A joined file that could not be finished takes room for nothing: it
    /// is written whole again next time. (A folder's staging keeps the
    /// segments already moved there, so it stays.)
    private func dropUnfinishedJoin(_ parent: TaskState) {
        guard parent.spec.hls?.output == .file, let staging = HLSPublisher.staging(of: parent) else { return }
        do { try context.root.remove(staging) } catch {
            context.logger.error("cannot remove a half-joined video", metadata: ["file": "\(staging)", "error": "\(error)"])
        }
    }

    // MARK: - Stopping and control

    func stop(flushing: Bool) -> Stopped? {
        refreshAt = nil
        gathering = nil
        guard let exchange else { return nil }
        context.exchanges.remove(exchange)
        self.exchange = nil
        return (0, exchange.metrics)
    }

    /// Control of the video reached its segments: it stops reading its
    /// playlist, and a cancelled video's work folder goes.
    func childrenControlled(_ action: ControlJob.Action, of parent: TaskState) {
        refreshAt = nil
        if action == .cancel, let work = HLSFanOut.workDirectory(of: parent) { context.publishing.removeWorkFolder(work) }
    }

    /// A video with renditions is not moved: `HLSRetarget` matches the video's segments only.
    static func retargetRefusal(_ task: TaskState, in state: AgentState) -> String? {
        guard task.hls?.renditions != nil else { return nil }
        return "its sound or subtitles come from playlists of their own, which a retarget does not move; "
            + "cancel it and submit the playlist at its new URL"
    }

    /// Start-up: a finished video whose rename the log vouches for is
    /// renamed; the work folder of an ended video is removed.
    static func tidyAfterRestart(_ task: TaskState, in context: RunnerContext) {
        guard task.phase == .finished || task.phase == .cancelled, let work = HLSFanOut.workDirectory(of: task) else { return }
        if task.phase == .finished, let staging = HLSPublisher.staging(of: task), let dest = task.dest {
            if !context.root.exists(staging) {
                context.sayUnreachable(task, file: staging)
            } else if !context.publishing.completeRename(of: task, from: staging, to: dest) {
                return
            }
        }
        if context.root.exists(work) { context.publishing.removeWorkFolder(work) }
    }
}

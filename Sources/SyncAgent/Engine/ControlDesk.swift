import SyncAgentCore

/// Control jobs (SPEC §4.3): pause, resume, cancel, forget one task or all
/// of them, and compact the log. Each records what came of it for each
/// target task, in words a person reads ("paused at byte 1048576",
/// "nothing to do: task already finished").
final class ControlDesk {
    private unowned let context: RunnerContext
    private unowned let compaction: CompactionScheduler

    init(context: RunnerContext, compaction: CompactionScheduler) {
        self.context = context
        self.compaction = compaction
    }

    /// Carries out a control job. Returns an error sentence for the job file
    /// when it names no task.
    func apply(_ control: ControlJob, source: JobSource) -> String? {
        let state = context.state
        if control.action == .compact {
            let olderThanS = control.olderThanS ?? context.config.keepEndedS
            let outcome = compaction.request(olderThanS: olderThanS, from: source.file)
            context.record(.controlled(Controlled(action: control.action.rawValue, target: "*", outcome: outcome,
                                                  file: source.file, identity: source.identity)))
            return nil
        }
        if control.action == .retarget, let url = control.url {
            guard let task = state[control.task] else { return "key \"task\": no task has the id \"\(control.task)\"" }
            retarget(task, to: url, file: source.file, identity: source.identity)
            return nil
        }
        let targets: [TaskState]
        if control.task == "*" {
            // A forgotten task is out of the user's sight: "all" does not include it.
            targets = state.orderedTasks.filter { !$0.forgotten }
        } else if let task = state[control.task] {
            targets = [task]
        } else {
            return "key \"task\": no task has the id \"\(control.task)\""
        }
        apply(control.action, to: targets, target: control.task, file: source.file, identity: source.identity)
        return nil
    }

    /// Carries out `action` on `targets` as a control job for `target` (a
    /// task id, or `*`) would, and records its outcome: how an RPC call
    /// pauses, resumes, removes or forgets downloads.
    func apply(_ action: ControlJob.Action, to targets: [TaskState], target: String, file: String?, identity: String? = nil) {
        var outcomes: [String] = []
        var changed = 0
        for task in targets {
            let outcome = carryOut(action, on: task)
            if outcome.changed { changed += 1 }
            // One line per task for a single target; for "*", only what changed.
            if target != "*" || !outcome.words.hasPrefix("nothing to do") { outcomes.append("\(task.id): \(outcome.words)") }
        }
        let words = outcomes.isEmpty ? "nothing to do: no task to \(action.rawValue)" : Controlled.outcome(of: outcomes)
        context.record(.controlled(Controlled(action: action.rawValue, target: target, outcome: words, file: file, identity: identity,
                                              changed: changed)),
                       task: target == "*" ? nil : target)
        context.needsScheduling = true
    }

    /// What a control did to one task, in words, and whether it changed it.
    private struct Outcome {
        var words: String
        var changed: Bool
        static func done(_ words: String) -> Outcome { Outcome(words: words, changed: true) }
        static func refused(_ words: String) -> Outcome { Outcome(words: words, changed: false) }
    }

    private func carryOut(_ action: ControlJob.Action, on task: TaskState) -> Outcome {
        if action == .forget { return forget(task) }
        let state = context.state
        if action == .resume, task.phase == .failed,
           let cancelled = (state.children[task.id] ?? []).first(where: { state[$0]?.phase == .cancelled }) {
            let words = task.spec.behaviour.family
            return .refused("cannot run again: its \(words.child) \(cancelled) was cancelled; cancel the \(words.whole) and submit it again")
        }
        // On a parent, control applies to its children too, whenever it applies to the parent.
        let applies = switch action {
        case .pause: task.phase.isActive
        case .resume: task.phase == .paused || task.phase == .failed
        case .cancel: !task.phase.isEnded || task.phase == .failed
        case .forget, .compact, .retarget: false
        }
        if applies, state.families[task.id] != nil {
            for id in state.children[task.id] ?? [] {
                guard let child = context.state[id] else { continue }
                _ = carryOut(action, on: child)
            }
            context.runners.runner(for: task).childrenControlled(action, of: task)
        }
        switch (action, task.phase) {
        case (.pause, .queued), (.pause, .running):
            return .done("paused at byte \(context.runners.pause(task.id, reason: .user, bytesIfIdle: task.bytes))")
        case (.pause, .paused) where task.pauseReason != .user:
            // It waited for the network; now it waits for the user, whatever the network does.
            return .done("paused at byte \(context.runners.pause(task.id, reason: .user, bytesIfIdle: task.bytes))")
        case (.resume, .paused):
            context.record(.resumed(Resumed(bytes: task.bytes, reason: "resumed by the user")), task: task.id)
            return .done("resumed at byte \(task.bytes)")
        case (.resume, .failed):
            return runAgain(task)
        case (.cancel, .queued), (.cancel, .running), (.cancel, .paused), (.cancel, .failed):
            context.runners.cancel(task)
            return .done("cancelled")
        case (.pause, let phase), (.resume, let phase), (.cancel, let phase), (.forget, let phase), (.compact, let phase),
             (.retarget, let phase):
            // (A retarget names its URL: it comes through `retarget(_:to:)`, never here.)
            return .refused("nothing to do: task already \(phase.rawValue)")
        }
    }

    /// A failed task runs again: the way to recover after freeing disk space or a server outage.
    private func runAgain(_ task: TaskState) -> Outcome {
        if let refusal = whyNotRunAgain(task) { return .refused("cannot run again: \(refusal)") }
        let bytes = context.bytesKeptForRunAgain(task)
        context.record(.resumed(Resumed(bytes: bytes, reason: "run again by the user after: \(task.error ?? "a failure")")),
                       task: task.id)
        return .done("runs again from byte \(bytes)")
    }

    /// Why a failed task cannot run again (by `resume` or `retarget`), if it cannot.
    private func whyNotRunAgain(_ task: TaskState) -> String? {
        for dest in [task.spec.dest, task.namedDest].compactMap({ $0 }) {
            if let holder = Destinations.holder(of: dest, in: context.state, except: task.id) {
                return "\(dest) is now the destination of task \(holder)"
            }
        }
        // A task that failed keeping nothing left no partial file: one there now is someone else's
        // (the reason it was refused at intake, or a second agent's), and running again would truncate it.
        if task.bytes == 0, task.spec.behaviour.body == .partialFile, let part = task.partPath, context.root.exists(part) {
            return "\(part) exists and is not this task's; move it away first"
        }
        return nil
    }

    /// Carries out a retarget of `task` as a control job (or an RPC call) would, and records its outcome.
    /// - Returns: whether it changed the task, and what came of it in words.
    @discardableResult
    func retarget(_ task: TaskState, to url: String, file: String?, identity: String? = nil) -> (changed: Bool, words: String) {
        let outcome = retarget(task, to: url)
        context.record(.controlled(Controlled(action: ControlJob.Action.retarget.rawValue, target: task.id,
                                              outcome: "\(task.id): \(outcome.words)", file: file, identity: identity,
                                              changed: outcome.changed ? 1 : 0)), task: task.id)
        context.needsScheduling = true
        return (outcome.changed, outcome.words)
    }

    /// `syncagent retarget`: the task goes on from `url` (SPEC §4.3). A
    /// running attempt is stopped (its bytes made durable first); a paused
    /// task stays paused, anything else goes back to the queue, a failed one
    /// with fresh retries. The bytes held are kept for the new URL's first
    /// answer to confirm (`RetargetRules`), or let go, and the outcome says why.
    private func retarget(_ task: TaskState, to url: String) -> Outcome {
        let shown = Redaction.url(url)
        if task.phase == .finished || task.phase == .cancelled { return .refused("nothing to do: task already \(task.phase.rawValue)") }
        if let refusal = Kinds.runnerType(for: task.spec).retargetRefusal(task, in: context.state) { return .refused("cannot retarget: \(refusal)") }
        let runner = context.runners[task.id]
        // Its body is all here, being made durable and checked: there is nothing left to fetch anywhere.
        if runner?.isCompleting == true { return .refused("nothing to do: its body is complete and being published") }
        if url == task.currentURL, task.phase != .failed {
            return .refused("nothing to do: task \(task.phase.rawValue) at \(shown) already")
        }
        if task.phase == .failed, let refusal = whyNotRunAgain(task) { return .refused("cannot retarget: \(refusal)") }
        let words = context.retarget(task, to: url)
        let after = task.phase == .paused ? "; stays paused" : task.phase == .failed ? "; runs again" : ""
        // The URL comes last: a redacted URL runs to the next space, and takes any comma after it.
        return .done(words + after + "; now at " + shown)
    }

    /// An ended task leaves `status`, its children with it; a live one is
    /// refused, since forgetting must never lose a transfer.
    private func forget(_ task: TaskState) -> Outcome {
        guard task.phase.isEnded else { return .refused("nothing to do: task is \(task.phase.rawValue); cancel it first") }
        // Read afresh: forgetting a video forgets its segments, which "*" then meets again.
        guard context.state[task.id]?.forgotten == false else { return .refused("nothing to do: task already forgotten") }
        context.record(.forgotten(Forgotten()), task: task.id)
        for child in context.state.children[task.id] ?? [] where context.state[child]?.forgotten == false {
            context.record(.forgotten(Forgotten()), task: child)
        }
        return .done("forgotten")
    }
}

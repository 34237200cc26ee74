import Foundation

/// What `status` shows (SPEC §3): which tasks, their ETA, and the summary
/// line. Pure, so the rules are tested without an agent.
public enum StatusView {
    /// Ended tasks older than this leave the human view unless `--all`.
    public static let endedShownForMs: Int64 = 86_400_000

    /// Ended tasks that ended before this leave the human view unless `--all`
    /// (`select`, and `Snapshot.TableReading` for what it passes over).
    public static func hiddenEndedBeforeMs(nowMs: Int64) -> Int64 { nowMs - endedShownForMs }

    /// The human table lists this many queued tasks, and counts the rest:
    /// 100,000 rows waiting their turn say no more than their number.
    public static let queuedListed = 50

    /// The human view lists the newest few job files rejected since
    /// `hiddenEndedBeforeMs` (the same day ended tasks are shown for), and
    /// counts the rest; `--json` lists them all.
    public static let rejectionsListed = 5

    public struct Selection: Sendable {
        public var tasks: [TaskState] = []
        /// Ended tasks older than a day, not listed.
        public var hidden = 0
        /// Queued tasks past the first `queuedListed`: not listed, but in the summary all the same.
        public var notListed = Summary()
    }

    /// The tasks to list, without forgotten ones, in the given phases if
    /// any, without ended tasks older than a day unless `all`, and with the
    /// first `queuedListed` queued tasks if given. A table leaves out
    /// children (a video's segments are summed up on its row); JSON lists
    /// them with their `parent`. `passedOver` counts the tasks a snapshot
    /// read for the table did not read (`Snapshot.TableReading`).
    /// `retryingOnly`: of the queued tasks, only those waiting out a retry's backoff (`--state retrying`).
    public static func select(_ state: AgentState, phases: Set<TaskPhase>?, all: Bool, children: Bool = false,
                              queuedListed: Int? = nil, passedOver: Snapshot.PassedOver = Snapshot.PassedOver(),
                              retryingOnly: Bool = false, nowMs: Int64) -> Selection {
        var selection = Selection()
        var queued = 0
        let hiddenBefore = hiddenEndedBeforeMs(nowMs: nowMs)
        // Each task is looked at in place and copied only when listed: a copy
        // retains its every string, for each of 10,000 tasks a day old.
        let list = state.orderedTasks
        for index in list.indices where !list[index].forgotten {
            if !children, let parent = list[index].parentID, state[parent] != nil { continue }
            let phase = list[index].phase
            if let phases, !phases.contains(phase) { continue }
            if retryingOnly, phase == .queued, !isWaitingToRetry(list[index], nowMs: nowMs) { continue }
            // Compared, not subtracted from now: a damaged `ended` near Int64.min must not overflow.
            if !all, phase.isEnded, let ended = list[index].endedAtMs, ended < hiddenBefore {
                selection.hidden += 1
                continue
            }
            if phase == .queued, let queuedListed {
                queued += 1
                if queued > queuedListed {
                    selection.notListed.count(list[index], in: state, agentRunning: true)
                    continue
                }
            }
            selection.tasks.append(list[index])
        }
        for (phase, count) in passedOver.hidden where phases?.contains(phase) ?? true { selection.hidden += count }
        if passedOver.queued > 0, phases?.contains(.queued) ?? true, !retryingOnly {
            // Never started: no bytes yet, and no size known.
            selection.notListed.counts[.queued, default: 0] += passedOver.queued
            selection.notListed.sizeUnknown = true
        }
        return selection
    }

    /// A queued task waiting out the backoff after a transient failure:
    /// how long is left, and which attempt comes next of how many its
    /// retries allow.
    public struct RetryWait: Equatable, Sendable {
        public var seconds: Int64
        public var attempt: Int
        public var attempts: Int

        /// "retrying in 40s (attempt 4/6)".
        public var words: String { "retrying in \(StatusView.duration(seconds)) (attempt \(attempt)/\(attempts))" }
    }

    /// - Parameter retries: the config's `retries`, for a job that sets none.
    public static func retryWait(of task: TaskState, nowMs: Int64, retries: Int) -> RetryWait? {
        guard isWaitingToRetry(task, nowMs: nowMs), let wakeMs = task.notBeforeMs else { return nil }
        let left = (Double(wakeMs) - Double(nowMs)) / 1000
        let allowed = (task.spec.retries ?? retries).addingReportingOverflow(1)
        return RetryWait(seconds: Int64(min(left.rounded(.up), 9e15)), attempt: task.attemptsUsed + 1,
                         attempts: allowed.overflow ? .max : allowed.partialValue)
    }

    /// A retry is what leaves a task queued with an error and a start time still to come, other than its job's.
    public static func isWaitingToRetry(_ task: TaskState, nowMs: Int64) -> Bool {
        guard task.phase == .queued, task.error != nil, let wakeMs = task.notBeforeMs else { return false }
        return wakeMs > nowMs && wakeMs != task.spec.notBeforeMs
    }

    /// Seconds left at the current speed; nil when not running, the size is
    /// unknown or nothing moves.
    public static func etaSeconds(_ figures: TaskFigures, phase: TaskPhase) -> Int64? {
        guard phase == .running, let total = figures.total, figures.speed > 0 else { return nil }
        return seconds(left: max(0, total &- figures.bytes), speed: figures.speed)
    }

    /// In Double: sizes come from servers, and a sum near Int64.max must not trap.
    static func seconds(left: Int64, speed: Int64) -> Int64 {
        Int64(min((Double(left) / Double(speed)).rounded(.up), 9e15))
    }

    public struct Summary: Equatable, Sendable {
        public var counts: [TaskPhase: Int] = [:]
        /// Bytes per second of everything running.
        public var speed: Int64 = 0
        /// Bytes still to come of running and queued tasks whose size is known.
        public var bytesLeft: Int64 = 0
        /// Some running or queued task's size is not known yet: the ETA is a lower bound.
        public var sizeUnknown = false
        public var hidden = 0
        /// Queued tasks counted here but not listed (`queuedListed`).
        public var notListed = 0
        /// Left `running` by an agent that is gone (counted here, not in `counts`).
        public var interrupted = 0
        /// Queued tasks waiting out a retry's backoff: also in `counts`, said apart from the rest of the queue.
        public var retrying = 0
        /// Finished tasks a 304 left as they were (`overwrite = "update"`), also in `counts`.
        public var unchanged = 0
        /// Finished tasks `overwrite = "skip"` did not transfer (a file was there), also in `counts`.
        public var skipped = 0
        /// Job files rejected in the time the view covers (not tasks: they never became one).
        public var rejected = 0
        /// Jobs in the inbox the agent has not taken yet (not tasks yet either).
        public var waiting = 0

        public var etaSeconds: Int64? {
            guard speed > 0, bytesLeft > 0 else { return nil }
            return StatusView.seconds(left: bytesLeft, speed: speed)
        }

        /// "2 running, 5 queued, 1 failed · 3.1 MiB/s · ETA 4m10s".
        public var words: String {
            var parts: [String] = []
            // What needs an eye first.
            let order: [TaskPhase] = [.running, .queued, .paused, .failed, .finished, .cancelled]
            var named = order.flatMap { phase -> [String] in
                guard let count = counts[phase], count > 0 else { return [] }
                if phase == .queued, retrying > 0 {
                    return (retrying < count ? ["\(count - retrying) queued"] : []) + ["\(retrying) retrying"]
                }
                guard phase == .finished else { return ["\(count) \(phase.rawValue)"] }
                let notes = [(unchanged, "unchanged"), (skipped, "skipped")].filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }
                return ["\(count) \(phase.rawValue)" + (notes.isEmpty ? "" : " (" + notes.joined(separator: ", ") + ")")]
            }
            if interrupted > 0 { named.insert("\(interrupted) interrupted", at: 0) }
            if waiting > 0 { named.append("\(waiting) waiting for the agent") }
            parts.append(named.isEmpty ? "no tasks" : named.joined(separator: ", "))
            if speed > 0 { parts.append(ByteCount.format(speed) + "/s") }
            if let eta = etaSeconds { parts.append("ETA " + (sizeUnknown ? "≥ " : "") + StatusView.duration(eta)) }
            if rejected > 0 { parts.append(rejected == 1 ? "1 job rejected" : "\(rejected) jobs rejected") }
            if notListed > 0 { parts.append("\(notListed) more not listed (--all)") }
            if hidden > 0 { parts.append("\(hidden) ended over a day ago not shown (--all)") }
            return parts.joined(separator: " · ")
        }

        /// Adds one task's phase, speed and bytes left.
        mutating func count(_ task: TaskState, in state: AgentState, agentRunning: Bool) {
            if task.phase == .running && !agentRunning {
                interrupted += 1
                return
            }
            counts[task.phase, default: 0] += 1
            if task.unchanged { unchanged += 1 }
            if task.phase == .finished, task.skipReason != nil { skipped += 1 }
            guard task.phase.isActive else { return }
            let figures = state.figures(of: task)
            speed = StatusView.saturatingSum(speed, figures.speed)
            if let total = figures.total {
                bytesLeft = StatusView.saturatingSum(bytesLeft, max(0, total &- figures.bytes))
            } else {
                sizeUnknown = true
            }
        }
    }

    /// The summary of a selection: its tasks, and those it counted without listing.
    /// - Parameter nowMs: when given, queued tasks waiting out a retry's backoff are counted as retrying.
    public static func summary(of selection: Selection, in state: AgentState, agentRunning: Bool = true, nowMs: Int64? = nil) -> Summary {
        var summary = summary(of: selection.tasks, in: state, hidden: selection.hidden, agentRunning: agentRunning, nowMs: nowMs)
        let more = selection.notListed
        summary.notListed = more.counts.values.reduce(0, +)
        for (phase, count) in more.counts { summary.counts[phase, default: 0] += count }
        summary.speed = saturatingSum(summary.speed, more.speed)
        summary.bytesLeft = saturatingSum(summary.bytesLeft, more.bytesLeft)
        summary.sizeUnknown = summary.sizeUnknown || more.sizeUnknown
        return summary
    }

    /// - Parameter agentRunning: false: running tasks were left so by an
    ///   agent that is gone; they count as interrupted and move no bytes.
    public static func summary(of tasks: some Sequence<TaskState>, in state: AgentState, hidden: Int, agentRunning: Bool = true,
                               nowMs: Int64? = nil) -> Summary {
        var summary = Summary()
        summary.hidden = hidden
        for task in tasks {
            summary.count(task, in: state, agentRunning: agentRunning)
            if let nowMs, isWaitingToRetry(task, nowMs: nowMs) { summary.retrying += 1 }
        }
        return summary
    }

    fileprivate static func saturatingSum(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? .max : sum
    }

    /// 42 → "42s", 192 → "3m12s", 3900 → "1h05m", 183600 → "2d03h".
    public static func duration(_ seconds: Int64) -> String {
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        switch seconds {
        case ..<60: return "\(max(0, seconds))s"
        case ..<3600: return "\(seconds / 60)m\(two(seconds % 60))s"
        case ..<86_400: return "\(seconds / 3600)h\(two(seconds % 3600 / 60))m"
        default: return "\(seconds / 86_400)d\(two(seconds % 86_400 / 3600))h"
        }
    }

    /// Fits `text` into `width` terminal cells, keeping both its ends: a
    /// path keeps its file name whole and as many of its first folders as
    /// fit ("/home/me/…/keynote.ts"); a name too long for that keeps its start
    /// and, more of, its end ("debi…netinst.iso"), where names that differ
    /// mostly differ (a part number, an extension).
    public static func shorten(_ text: String, to width: Int) -> String {
        guard width > 0 else { return "" }
        let cells = Printable.cells(text)
        guard cells > width else { return text }
        guard width > 1 else { return "…" }
        let slash = text.lastIndex(of: "/")
        let name = slash.map { text[text.index(after: $0)...] } ?? Substring(text)
        let nameCells = Printable.cells(String(name))
        if let slash, nameCells + 2 <= width {
            // Whole folders only: "/home/me/…/keynote.ts", not "/home/m…/keynote.ts".
            let head = leading(text[..<slash], cells: width - 2 - nameCells)
            let folders = head.lastIndex(of: "/").map { head[...$0] } ?? ""
            return (folders.count > 1 ? folders : "") + "…/" + name
        }
        if nameCells + 1 <= width { return "…" + name }
        let tail = (width - 1) * 2 / 3
        return leading(name, cells: width - 1 - tail) + "…" + trailing(name, cells: tail)
    }

    /// The longest start of `text` that fits in `cells`.
    private static func leading(_ text: Substring, cells: Int) -> Substring {
        var used = 0
        var end = text.startIndex
        while end < text.endIndex {
            let next = Printable.cells(text[end])
            if used + next > cells { break }
            used += next
            end = text.index(after: end)
        }
        return text[..<end]
    }

    /// The longest end of `text` that fits in `cells`.
    private static func trailing(_ text: Substring, cells: Int) -> Substring {
        var used = 0
        var start = text.endIndex
        while start > text.startIndex {
            let previous = text.index(before: start)
            let next = Printable.cells(text[previous])
            if used + next > cells { break }
            used += next
            start = previous
        }
        return text[start...]
    }

    /// Fits `text` into `width` cells, keeping its start (a sentence reads from its beginning).
    public static func cut(_ text: String, to width: Int) -> String {
        guard Printable.cells(text) > width else { return text }
        guard width > 0 else { return "" }
        var kept = ""
        var cells = 0
        for character in text {
            let next = Printable.cells(character)
            if cells + next > width - 1 { break }
            kept.append(character)
            cells += next
        }
        return kept + "…"
    }

    /// `--watch` shows what moves first: running, then queued, paused and
    /// failed tasks, then the other ended ones, most recent first. (With
    /// thousands of finished tasks, the live one must not hide below them.)
    public static func forWatching(_ tasks: [TaskState]) -> [TaskState] {
        func rank(_ phase: TaskPhase) -> Int {
            switch phase {
            case .running: 0
            case .queued: 1
            case .paused: 2
            case .failed: 3
            case .finished, .cancelled: 4
            }
        }
        return tasks.enumerated().sorted { left, right in
            let (a, b) = (left.element, right.element)
            if rank(a.phase) != rank(b.phase) { return rank(a.phase) < rank(b.phase) }
            if a.phase.isEnded, b.phase.isEnded, a.endedAtMs != b.endedAtMs { return (a.endedAtMs ?? 0) > (b.endedAtMs ?? 0) }
            return left.offset < right.offset
        }.map(\.element)
    }
}

/// `submit --wait`: when the tasks it submitted are over, and what its
/// exit status says of them, as aria2c's does of its downloads.
public enum WaitVerdict {
    /// Every task is in the log and has ended (finished, failed or cancelled).
    public static func allEnded(_ ids: [String], in state: AgentState) -> Bool {
        ids.allSatisfy { state[$0]?.phase.isEnded == true }
    }

    /// 0 when every task finished; else aria2c's status for the failure
    /// that came last (`FailureCode.aria2ExitStatus`); 7 (aria2c's
    /// "unfinished downloads") when none failed but some were cancelled or
    /// had not ended.
    public static func exitStatus(_ ids: [String], in state: AgentState) -> Int32 {
        let tasks = ids.map { state[$0] }
        let failures = tasks.compactMap { $0 }.filter { $0.phase == .failed }
        if let last = failures.max(by: { ($0.endedAtMs ?? 0) < ($1.endedAtMs ?? 0) }) {
            return last.errorCode?.aria2ExitStatus ?? 1
        }
        return tasks.allSatisfy { $0?.phase == .finished } ? 0 : 7
    }
}

import Logging
import SyncAgentCore

/// When the log is compacted (SPEC §3): as `syncagent compact` asks, one
/// compaction per cutoff in order; by itself once the log has grown far
/// past its newest snapshot; and once a large intake is taken, storing the
/// state it made. The compaction runs off the loop (`BackgroundCompactor`);
/// its outcome is recorded, so `compact` can wait for its answer.
final class CompactionScheduler {
    private let compactor: BackgroundCompactor
    private unowned let context: RunnerContext
    private let eventLog: String
    /// The seq the newest snapshot covers: the agent compacts by itself once the log grows far past it.
    private(set) var snapshotSeq: Int64
    /// The log's last seq when this run began: an intake is what came after it.
    private let runStartedAtSeq: Int64
    /// What `syncagent compact` asked and no compaction has started on yet: a cutoff in seconds,
    /// and the request files that asked for it. One compaction each, in order, from the next commit.
    private var requests: [(olderThanS: Int64, files: [String])] = []
    /// The request files the running compaction answers (none: the agent's own): its report names them.
    private var answers: [String] = []

    init(eventLog: String, snapshotSeq: Int64, context: RunnerContext) throws {
        compactor = try BackgroundCompactor()
        self.eventLog = eventLog
        self.snapshotSeq = snapshotSeq
        self.context = context
        runStartedAtSeq = context.state.lastSeq
    }

    var fd: Int32 { compactor.fd }
    /// A compaction runs, or one asked for has not started yet.
    var hasWork: Bool { compactor.busy || !requests.isEmpty }

    /// `syncagent compact`: started at the next commit, or once the running one ends. Requests for
    /// one cutoff share a compaction; another cutoff gets its own, after. Returns what is said of it.
    func request(olderThanS: Int64, from file: String) -> String {
        let outcome = compactor.busy ? "compaction queued after the running one (ended tasks older than \(olderThanS) s)"
            : "compaction started (ended tasks older than \(olderThanS) s)"
        if let same = requests.firstIndex(where: { $0.olderThanS == olderThanS }) {
            requests[same].files.append(file)
        } else {
            requests.append((olderThanS, [file]))
        }
        return outcome
    }

    /// A requested compaction, or the agent's own once the log has grown far
    /// past its newest snapshot. None starts once the agent is stopping:
    /// nothing would record its outcome.
    /// - Parameter intakeIsIdle: no job is being taken (a snapshot after an intake waits for its end).
    func startIfDue(intakeIsIdle: Bool) {
        guard !compactor.busy, !context.stopping else { return }
        if !requests.isEmpty {
            let request = requests.removeFirst()
            answers = request.files
            start(olderThanS: request.olderThanS, trigger: "requested")
        } else if Compaction.isDue(lastSeq: context.state.lastSeq, snapshotSeq: snapshotSeq) {
            answers = []
            start(olderThanS: context.config.keepEndedS, trigger: "log_size")
        } else if intakeIsIdle, !context.log.hasPending, !context.needsScheduling,
                  Compaction.tasksCreated(in: context.state, after: max(snapshotSeq, runStartedAtSeq))
                    >= Compaction.tasksBeforeIntakeSnapshot {
            // Just committed, nothing recorded since: the state is the fold of the file, and is stored as it is.
            // (Not while a scheduling pass is due: tasks starting would copy the indexes it shares at once.)
            answers = []
            start(olderThanS: context.config.keepEndedS, trigger: "intake", given: context.state)
        }
    }

    /// Said in the agent's log, so a person (or a test) sees a compaction
    /// run before its `compacted` event reports it.
    func start(olderThanS: Int64, trigger: String, given: AgentState? = nil) {
        compactor.start(eventLog: eventLog, olderThanS: olderThanS, trigger: trigger, given: given)
        context.logger.info("compaction started", metadata: ["trigger": "\(trigger)", "older_than_s": "\(olderThanS)"])
    }

    /// What compactions came to, recorded; a failed one is tried again only
    /// once the log has grown as much again, not after every commit.
    func compacted(_ outcomes: [BackgroundCompactor.Outcome]) {
        let requestedBy = answers.isEmpty ? nil : answers
        for outcome in outcomes {
            switch outcome.result {
            case .success(var report):
                snapshotSeq = report.snapshotSeq
                report.requestedBy = requestedBy
                context.record(.compacted(report))
                // A snapshot of many live tasks can outweigh the events it covers: the
                // file may grow when no ended task was old enough to go. Said so.
                let words = report.tasks > 0 ? "log compacted"
                    : report.trigger == "requested" && report.events == 0 ? "nothing to compact: no snapshot written"
                    : "log snapshot written; no ended task was old enough to drop"
                context.logger.info("\(words)",
                                    metadata: ["snapshot_seq": "\(report.snapshotSeq)", "tasks": "\(report.tasks)",
                                               "events": "\(report.events)", "bytes_before": "\(report.bytesBefore)",
                                               "bytes_after": "\(report.bytesAfter)"])
            case .failure(let error):
                snapshotSeq = context.state.lastSeq
                // Recorded too: `syncagent compact` waits for this answer, whichever it is.
                var report = Compacted.failed("\(error)", olderThanS: outcome.olderThanS, trigger: outcome.trigger)
                report.requestedBy = requestedBy
                context.record(.compacted(report))
                context.logger.error("cannot compact the log", metadata: ["log": "\(eventLog)", "error": "\(error)"])
            }
        }
    }

    func drain() { compacted(compactor.drain()) }

    /// The agent stops: a running compaction is stopped, and what it came to recorded.
    func stop() { compacted(compactor.stop()) }
}

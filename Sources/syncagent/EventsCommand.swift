import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

struct EventsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "Print the raw event log, oldest first.",
        discussion: """
            Credentials in request and response headers (Authorization, Cookie, Set-Cookie, …) are shown as <redacted>.

            Example:
              syncagent events --task debian-13
              syncagent events --json --follow
              syncagent events -n 50
            """)

    @OptionGroup var global: GlobalOptions

    @Flag(help: "One JSON object per line.")
    var json = false

    @Option(help: "Only this task's events.", completion: TaskIDCompletion.kind)
    var task: String?

    @Flag(help: "Keep printing new events, like tail -f.")
    var follow = false

    @Option(name: [.customShort("n"), .customLong("lines")],
            help: "Start with the last N events (default: all; with --follow, the last 10, as tail -f).")
    var lines: Int?

    func validate() throws {
        if let lines, lines < 0 { throw ValidationError("-n wants a number of events, 0 or more, not \(lines)") }
    }

    func run() throws {
        var last: Int64 = 0
        warnIfStateDirIsNotTrusted(try global.resolve().paths)
        let store = try openLog(global)
        let pruned = try store.prunedThrough()
        if task == nil, pruned > 0 {
            FileHandle.standardError.write(Data("syncagent: events up to seq \(pruned) of ended tasks were compacted (syncagent compact); the snapshot keeps their state\n".utf8))
        }
        if let task {
            let record = try store.lookingUpTasks { try $0.record(of: task) }
            // As `status --task` says it; with --follow the task may be about to appear, so it is waited for, and said so.
            if record == .unknown {
                // A job still in the inbox is known to pause and cancel: not "no task", only no events yet.
                let paths = try global.resolve().paths
                let waiting = pendingJobIDs(paths).contains(task)
                if !follow && !waiting { throw fail("no task has the id \"\(task)\"") }
                let words = waiting ? "task \(task) is a job waiting in \(paths.inbox); it has no events yet"
                                    : "no task has the id \"\(task)\" yet; waiting for its events"
                FileHandle.standardError.write(Data("syncagent: \(words)\n".utf8))
                if !follow { return }
            }
            if record == .compacted {
                // Which compaction dropped them the log does not keep: only that one did.
                FileHandle.standardError.write(Data("syncagent: the first events of task \(task) were compacted (syncagent compact); its state is kept\n".utf8))
            }
        }
        if let count = lines ?? (follow ? 10 : nil) {
            last = try store.seq(beforeLast: count, task: task)
        }
        repeat {
            // Re-opened each round: the agent may create the log after we start.
            let store = try openLog(global)
            try store.forEachRow(after: last, task: task) { row in
                print(json ? EventLine.json(row) : EventLine.text(row))
                last = row.seq
            }
            // Rows of other tasks still move the cursor on.
            last = max(last, store.lastSeq)
            if follow {
                fflush(nil)  // every open stream: the only one written is stdout
                Posix.sleep(ms: 200)
            }
        } while follow
    }
}

/// How one log row is printed, with secrets redacted.
enum EventLine {
    /// `created` carries request headers and `finished` response headers
    /// (Set-Cookie): both go out with credentials redacted. Every URL in any
    /// event (the job's, a redirect's, one quoted in a reason) loses its
    /// userinfo and credential-like query values.
    static func redactedData(_ row: EventStore.Row) -> String {
        guard row.type == "created" || row.type == "finished",
              let body = try? EventCoding.body(type: row.type, data: row.data) else { return Redaction.text(row.data) }
        switch body {
        case .created(let spec): return Redaction.text(EventCoding.data(of: .created(spec.redacted)))
        case .finished(let finished): return Redaction.text(EventCoding.data(of: .finished(finished.redacted)))
        default: return Redaction.text(row.data)
        }
    }

    // A log's strings come from jobs and servers: printed, no control
    // character or bidirectional override goes out raw (`Printable`).

    static func text(_ row: EventStore.Row) -> String {
        let time = CivilTime.iso8601(ms: row.atMs)
        return "\(row.seq)\t\(time)\t\(Printable.escaping(row.task ?? "-"))\t\(Printable.escaping(row.type))\t"
            + Printable.jsonSafe(redactedData(row))
    }

    static func json(_ row: EventStore.Row) -> String {
        let task = row.task.map(JSONWriter.quoted) ?? "null"
        return Printable.jsonSafe("{\"seq\":\(row.seq),\"at_ms\":\(row.atMs),\"task\":\(task),\"type\":\(JSONWriter.quoted(row.type)),"
                                  + "\"data\":\(redactedData(row))}")
    }
}

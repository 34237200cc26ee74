import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the tasks the event log describes (read-only; safe while the agent runs).",
        discussion: """
            Example:
              syncagent status
              syncagent status --json | jq '.tasks[] | select(.state == "failed")'
              syncagent status --task debian-13
            """)

    @OptionGroup var global: GlobalOptions

    @Flag(help: "Print {\"tasks\": [...]} as JSON.")
    var json = false

    @Flag(help: "Redraw live progress until interrupted.")
    var watch = false

    @Option(help: "Show one task in full, with its events.", completion: TaskIDCompletion.kind)
    var task: String?

    func run() throws {
        let store = try openLog(global)
        if watch {
            while true {
                let state = try store.replay()
                print("\u{1B}[H\u{1B}[2J" + TaskTable.render(state.orderedTasks, in: state, bars: true), terminator: "")
                fflush(stdout)
                usleep(500_000)
            }
        }
        let state = try store.replay()
        if let id = task {
            guard let one = state[id] else { throw fail("no task has the id \"\(id)\"") }
            var events: [Event] = []
            try store.forEach(task: id) { events.append($0) }
            let history = AttemptRecord.history(of: events)
            if json {
                var report = TaskReport(one, in: state)
                report.attemptHistory = history
                print(TaskReport.json([report]))
            } else {
                print(TaskTable.detail(one))
                print("attempts:")
                for record in history {
                    let ending = record.endedBy ?? (one.phase == .running ? "running" : "no end recorded")
                    print("  #\(record.attempt) from byte \(record.offset), \(ending): " + (record.metrics?.words ?? "no metrics"))
                }
                if let headers = events.lazy.compactMap({ event -> [Header]? in
                    if case .finished(let finished) = event.body { return finished.responseHeaders } else { return nil }
                }).last {
                    print("response headers:")
                    for header in headers { print("  " + header.printable) }
                }
                print("events:")
                try store.forEachRow(task: id) { print("  " + EventLine.text($0)) }
            }
            return
        }
        if json {
            print(TaskReport.json(state.orderedTasks.map { TaskReport($0, in: state) }))
        } else {
            print(TaskTable.render(state.orderedTasks, in: state, bars: false), terminator: "")
        }
    }
}

func openLog(_ global: GlobalOptions) throws -> EventStore {
    let resolved = try global.resolve()
    do {
        return try EventStore(readingFrom: resolved.paths.eventLog)
    } catch {
        throw fail("\(error)")
    }
}

/// The human table of `status` and `replay`.
enum TaskTable {
    /// A parent's children (an HLS video's segments) are summed up on its
    /// row, not listed: `status --task PARENT` and `--json` show them.
    static func render(_ tasks: [TaskState], in state: AgentState, bars: Bool, plans: [String: String] = [:]) -> String {
        if tasks.isEmpty { return "no tasks\n" }
        var rows = [["ID", "KIND", "STATE", "BYTES", "%", "SPEED", "DEST"]]
        for task in tasks where task.spec.parent == nil || state[task.spec.parent!] == nil {
            let figures = state.figures(of: task)
            var size = figures.total.map { "\(ByteCount.format(figures.bytes))/\(ByteCount.format($0))" } ?? ByteCount.format(figures.bytes)
            if let children = figures.children { size += " (\(children.done)/\(children.total) segments)" }
            let percent = figures.percent.map { "\(Int($0.rounded()))" } ?? "-"
            var dest = task.dest ?? "\(task.spec.effectiveMethod) \(Redaction.url(task.spec.url))"
            if bars, let value = figures.percent {
                let filled = Int(value / 5)
                dest = "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: 20 - filled) + "] " + dest
            }
            let speed = task.phase == .running ? ByteCount.format(figures.speed) + "/s" : "-"
            rows.append([task.id, task.spec.kind.rawValue, task.phase.rawValue, size, percent, speed, dest])
            if let error = task.error, task.phase == .failed || task.phase == .queued {
                rows.append(["", "", "", "", "", "", "  " + Redaction.text(error)])
            }
            if let plan = plans[task.id] { rows.append(["", "", "", "", "", "", "  plan: " + plan]) }
        }
        // Names and reasons come from jobs and servers: no raw control character reaches the terminal.
        rows = rows.map { $0.map(Printable.escaping) }
        let widths = (0..<rows[0].count - 1).map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            zip(row.dropLast(), widths).map { cell, width in
                cell + String(repeating: " ", count: width - cell.count + 2)
            }.joined() + row.last!
        }.joined(separator: "\n") + "\n"
    }

    static func detail(_ task: TaskState) -> String {
        var lines = [
            "id:          \(task.id)",
            "kind:        \(task.spec.kind.rawValue)",
            "state:       \(task.phase.rawValue)",
            "url:         \(Redaction.url(task.spec.url))",
            "current url: \(Redaction.url(task.currentURL))",
            "dest:        \(task.dest ?? "- (the response body is not kept)")",
            "bytes:       \(task.bytes)" + (task.total.map { " of \($0)" } ?? ""),
            "attempts:    \(task.attempts)",
            "priority:    \(task.spec.priority)",
        ]
        if task.spec.kind != .download { lines.append("method:      \(task.spec.effectiveMethod)") }
        if let body = task.spec.bodyFile { lines.append("body file:   \(body)") }
        if let field = task.spec.formField {
            lines.append("form:        multipart, file as \"\(field)\"" + task.spec.form.map { ", \($0.name)=\($0.value)" }.joined())
        }
        if let status = task.responseStatus { lines.append("status:      \(status)") }
        if let batch = task.spec.batch { lines.append("batch:       \(batch)") }
        if let etag = task.etag { lines.append("etag:        \(etag)") }
        if let lastModified = task.lastModified { lines.append("modified:    \(lastModified)") }
        for header in task.spec.headers { lines.append("header:      \(header.printable)") }
        if let error = task.error { lines.append("error:       \(Redaction.text(error))") }
        return lines.map(Printable.escaping).joined(separator: "\n")
    }
}

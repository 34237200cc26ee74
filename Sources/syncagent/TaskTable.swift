import Foundation
import SyncAgentCore

/// The human table of `status` and `replay`.
enum TaskTable {
    struct Style {
        /// Columns to fit every line into (on a terminal); nil: no limit.
        var width: Int?
        var colour = false
        var bars = false
        /// A fitted table's errors and plans: wrapped (`status`, `replay`), or cut to one line (`--watch`).
        var wrapNotes = false
        /// A fitted table writes paths beneath this folder (`$HOME`) as `~/…`: room for the names.
        var home: String?
        /// `status`: whether an agent runs (false: `running` reads `interrupted`). nil: the log's words as they are.
        var agentRunning: Bool?
        /// `status`: now, and the config's `retries`, to say how long a task waits to retry. nil: the log's words.
        var retryClock: (nowMs: Int64, retries: Int)?
    }

    private static let header = ["ID", "KIND", "STATE", "BYTES", "%", "SPEED", "ETA", "DEST"]
    private static let stateColumn = 2
    /// A long custom id is shortened in a fitted table: the destination says more.
    private static let fittedIDWidth = 16
    private static let barWidth = 20

    /// One line per task (a parent's children are summed up on its row, not
    /// listed), each followed by its error or recovery plan when it has one;
    /// then the jobs `waiting` in the inbox for the agent.
    static func lines(_ tasks: [TaskState], in state: AgentState, style: Style = Style(),
                      plans: [String: String] = [:], waiting: [TaskState] = []) -> [String] {
        var rows: [[String]] = []
        var bars: [String] = []
        var notes: [Int: [String]] = [:]
        for (index, task) in (tasks + waiting).enumerated() {
            let figures = state.figures(of: task)
            var size = figures.total.map { "\(ByteCount.format(figures.bytes))/\(ByteCount.format($0))" } ?? ByteCount.format(figures.bytes)
            if let children = figures.children {
                size += " (\(children.done)/\(children.total) \(task.spec.behaviour.family.children))"
            }
            let percent = figures.percent.map { "\(Int($0.rounded()))" } ?? "-"
            let interrupted = task.phase == .running && style.agentRunning == false
            let skipped = task.phase == .finished && task.skipReason != nil
            let retry = style.retryClock.flatMap { StatusView.retryWait(of: task, nowMs: $0.nowMs, retries: $0.retries) }
            let phase = index >= tasks.count ? "waiting" : interrupted ? "interrupted" : retry != nil ? "retrying" : task.unchanged ? "unchanged"
                : skipped ? "skipped" : task.phase.rawValue
            let moving = task.phase == .running && !interrupted
            let speed = moving ? ByteCount.format(figures.speed) + "/s" : "-"
            let eta = moving ? StatusView.etaSeconds(figures, phase: task.phase).map(StatusView.duration) ?? "?" : "-"
            // A resumable upload's requests are its protocol's (POST, PATCH …): it is named by that protocol.
            let how = task.spec.upload.map { "\($0.protocol.rawValue) upload:" } ?? task.spec.effectiveMethod
            var dest = task.dest ?? "\(how) \(Redaction.url(task.spec.url))"
            if style.width != nil { dest = tildeHome(dest, home: style.home) }
            bars.append(figures.percent.map { value in
                let filled = min(barWidth, max(0, Int(value / 100 * Double(barWidth))))
                return "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: barWidth - filled) + "]"
            } ?? "")
            var taskNotes: [String] = []
            if let error = task.error, task.phase == .failed || task.phase == .queued {
                taskNotes.append((retry.map { $0.words + ": " } ?? "") + Redaction.text(error))
            }
            if task.phase == .paused, let words = task.pauseReason.flatMap(NetworkPolicy.waitingWords) { taskNotes.append(words) }
            if let plan = plans[task.id] { taskNotes.append("plan: " + plan) }
            if !taskNotes.isEmpty { notes[rows.count] = taskNotes }
            rows.append([task.id, task.spec.kind.rawValue, phase, size, percent, speed, eta, dest])
        }
        // Names and reasons come from jobs and servers: no raw control character reaches the terminal.
        rows = ([header] + rows).map { $0.map(Printable.escaping) }
        var columns = Array(0..<header.count - 1)
        var notesIndent: Int?
        if let width = style.width {
            for index in rows.indices { rows[index][0] = StatusView.shorten(rows[index][0], to: fittedIDWidth) }
            columns.removeAll { Self.tellsNothing(column: $0, of: rows) }
            // The bar in a column of its own, when the destination keeps its room beside it.
            if style.bars, bars.contains(where: { !$0.isEmpty }) {
                let left = columns.reduce(0) { total, column in total + (rows.map { Printable.cells($0[column]) }.max() ?? 0) + 2 }
                let longestDest = rows.dropFirst().map { Printable.cells($0.last!) }.max() ?? 0
                if left + barWidth + 4 + min(longestDest, minimumDestWidth) <= width {
                    for index in rows.indices { rows[index].insert(index == 0 ? "PROGRESS" : bars[index - 1], at: header.count - 1) }
                    columns.append(header.count - 1)
                }
            }
            // Under the second column, not the last: a reason gets most of the width.
            notesIndent = (rows.map { Printable.cells($0[0]) }.max() ?? 0) + 2
        }
        let widths = columns.map { column in rows.map { Printable.cells($0[column]) }.max() ?? 0 }
        let destColumn = widths.reduce(0) { $0 + $1 + 2 }
        var out: [String] = []
        out.reserveCapacity(rows.count)
        // Each line is put together as bytes and made a String once: appending
        // its sixteen pieces to a String cost some 400 instructions each (callgrind).
        var plain: [UInt8] = [], coloured: [UInt8] = []
        for (index, row) in rows.enumerated() {
            plain.removeAll(keepingCapacity: true)
            coloured.removeAll(keepingCapacity: true)
            for (column, width) in zip(columns, widths) {
                let cell = row[column]
                let padding = repeatElement(UInt8(ascii: " "), count: max(0, width - Printable.cells(cell)) + 2)
                plain.append(contentsOf: cell.utf8)
                plain.append(contentsOf: padding)
                if style.colour {
                    coloured.append(contentsOf: (index > 0 && column == stateColumn ? colour(cell) : cell).utf8)
                    coloured.append(contentsOf: padding)
                }
            }
            var dest = row.last!
            if let width = style.width { dest = StatusView.shorten(dest, to: width - destColumn) }
            plain.append(contentsOf: dest.utf8)
            let line = String(decoding: plain, as: UTF8.self)
            let fitted = fit(line, style: style)
            if style.colour && fitted == line {
                coloured.append(contentsOf: dest.utf8)
                out.append(String(decoding: coloured, as: UTF8.self))
            } else {
                // A line that had to be cut loses its colour: the escape codes would be cut with it.
                out.append(fitted)
            }
            for note in notes[index - 1] ?? [] {
                let text = Printable.escaping(note)
                guard let width = style.width, let notesIndent else {
                    out.append(indent(destColumn) + "  " + text)
                    continue
                }
                if style.wrapNotes {
                    out += wrap(text, to: width - notesIndent).map { fit(indent(notesIndent) + $0, style: style) }
                } else {
                    // A reason reads from its start: cut its end.
                    out.append(fit(indent(notesIndent) + StatusView.cut(text, to: width - notesIndent), style: style))
                }
            }
        }
        return out
    }

    /// A fitted table gives the destination at least this much room before it draws bars.
    private static let minimumDestWidth = 40

    /// A column a fitted table leaves out: the same value on every row (every
    /// task a download, none moving), where it tells no row from another and
    /// takes room the destination needs. With one row, only when it says
    /// nothing ("-"). The id, the state and the destination always stay.
    private static func tellsNothing(column: Int, of rows: [[String]]) -> Bool {
        guard column != 0, column != stateColumn, rows.count > 1 else { return false }
        let first = rows[1][column]
        return (rows.count > 2 || first == "-") && rows.dropFirst().allSatisfy { $0[column] == first }
    }

    /// `text` in lines of at most `width` cells, broken at spaces (a word
    /// longer than a line, a URL, is broken where it must).
    /// `path` with the home folder at its start written `~` (a shell's way, on a narrow terminal).
    static func tildeHome(_ path: String, home: String?) -> String {
        guard let home, home.count > 1, path.hasPrefix(home + "/") else { return path }
        return "~" + path.dropFirst(home.count)
    }

    static func wrap(_ text: String, to width: Int) -> [String] {
        guard width > 0 else { return [] }
        var lines: [String] = []
        var line = "", cells = 0
        for word in text.split(separator: " ", omittingEmptySubsequences: false) {
            var word = Substring(word)
            var wordCells = Printable.cells(String(word))
            if cells > 0, cells + 1 + wordCells <= width {
                line += " " + word
                cells += 1 + wordCells
                continue
            }
            if cells > 0 { lines.append(line) }
            line = ""; cells = 0
            while wordCells > width {
                var piece = "", pieceCells = 0
                while let first = word.first, pieceCells + Printable.cells(first) <= width {
                    piece.append(first); pieceCells += Printable.cells(first)
                    word = word.dropFirst()
                }
                // A character wider than the line (a wide one in one cell) is left out rather than loop.
                if piece.isEmpty { word = word.dropFirst() } else { lines.append(piece) }
                wordCells = Printable.cells(String(word))
            }
            line = String(word); cells = wordCells
        }
        if cells > 0 || lines.isEmpty { lines.append(line) }
        return lines
    }

    /// Indents, made once: `String(repeating:count:)` took thousands of
    /// instructions a call, and `replay` indents a plan under every task.
    private static let indents = (0...120).map { String(repeating: " ", count: $0) }

    private static func indent(_ count: Int) -> String {
        count < indents.count ? indents[max(count, 0)] : String(repeating: " ", count: count)
    }

    /// The table as one string, each line ended: `replay` and plain `status`.
    static func render(_ tasks: [TaskState], in state: AgentState, style: Style = Style(), plans: [String: String] = [:]) -> String {
        if tasks.isEmpty { return "no tasks\n" }
        return lines(tasks, in: state, style: style, plans: plans).joined(separator: "\n") + "\n"
    }

    /// A line wider than the terminal even without its destination (a very
    /// narrow window) is cut, never wrapped.
    private static func fit(_ line: String, style: Style) -> String {
        guard let width = style.width else { return line }
        return StatusView.cut(line, to: width)
    }

    /// SGR colours by state (no colour for finished: the eye goes to what needs it).
    static func colour(_ state: String) -> String {
        let code = switch state {
        case "running": "32"
        case "queued", "retrying": "36"
        case "paused", "interrupted", "waiting": "33"
        case "failed": "31"
        case "cancelled": "2"
        default: ""
        }
        return code.isEmpty ? state : "\u{1B}[\(code)m\(state)\u{1B}[0m"
    }

    /// `status --task` of a job still in the inbox: what it asks, and that it waits.
    static func detail(waiting job: WaitingJobs.Job, inbox: String) -> String {
        var lines = [
            "id:          \(job.id ?? "- (the agent chooses one)")",
            "kind:        \(job.spec.kind.rawValue)",
            "state:       waiting for the agent (its job is \(inbox)/\(job.file); the agent takes it when it runs)",
            "url:         \(Redaction.url(job.spec.url))",
            "dest:        \(job.spec.dest ?? "- (the response body is not kept)")",
            "priority:    \(job.spec.priority)",
        ]
        if let batch = job.spec.batch { lines.append("batch:       \(batch)") }
        for header in job.spec.headers { lines.append("header:      \(header.printable)") }
        return lines.map(Printable.escaping).joined(separator: "\n")
    }

    /// `status --task`: one task in full, sizes in words and exact bytes.
    static func detail(_ task: TaskState, in state: AgentState, agentRunning: Bool, retryClock: (nowMs: Int64, retries: Int)) -> String {
        let figures = state.figures(of: task)
        func size(_ bytes: Int64) -> String { "\(ByteCount.format(bytes)) (\(bytes) bytes)" }
        let interrupted = task.phase == .running && !agentRunning
        let retry = StatusView.retryWait(of: task, nowMs: retryClock.nowMs, retries: retryClock.retries)
        let phase = interrupted ? "interrupted (running when its agent stopped; the next start resumes it)"
            : retry.map { "queued, \($0.words)" } ?? task.phase.rawValue
        var lines = [
            "id:          \(task.id)",
            "kind:        \(task.spec.kind.rawValue)",
            "state:       \(phase)",
            "url:         \(Redaction.url(task.spec.url))",
            "current url: \(Redaction.url(task.currentURL))",
            "dest:        \(task.dest ?? "- (the response body is not kept)")",
            "bytes:       \(size(figures.bytes))" + (figures.total.map { " of \(size($0))" } ?? ""),
        ]
        if task.phase == .running && !interrupted {
            let eta = StatusView.etaSeconds(figures, phase: task.phase).map { ", ETA \(StatusView.duration($0))" } ?? ""
            lines.append("speed:       \(ByteCount.format(figures.speed))/s" + eta)
        }
        if let children = figures.children {
            lines.append((task.spec.behaviour.family.children + ":").padding(toLength: 13, withPad: " ", startingAt: 0)
                         + "\(children.done) of \(children.total) done")
        }
        lines += [
            "attempts:    \(task.attempts)",
            "priority:    \(task.spec.priority)",
        ]
        if task.spec.nameFromServer == true {
            let part = task.partPath ?? "-"
            lines.append(task.awaitsServerName
                ? "name:        to come with its server's answer (name_from_server); partial file \(part)"
                : "name:        given by its server's answer (name_from_server); partial file \(part)")
        }
        if let parent = task.spec.parent { lines.append("parent:      \(parent)") }
        if let connections = task.spec.connections { lines.append("connections: \(connections)") }
        if let reason = task.singleConnectionReason { lines.append("one connection: \(reason)") }
        if let ranges = task.doneRanges {
            let shown = ranges.spans.prefix(8).map(\.description).joined(separator: ", ")
            lines.append("ranges held: \(shown)" + (ranges.spans.count > 8 ? ", … (\(ranges.spans.count) in all)" : ""))
        }
        if let upload = task.spec.upload {
            let chunking = upload.chunkSize.map { "chunks of \(ByteCount.format($0))" } ?? "chunk size auto"
            let part = upload.part.map { ", bytes \($0) of the file" } ?? ""
            lines.append("protocol:    \(upload.protocol.rawValue), \(chunking)" + (upload.parallel > 1 ? ", \(upload.parallel) parts at once" : "") + part)
            if let chunk = task.chunkSize { lines.append("last chunk:  \(size(chunk))") }
            if let session = task.upload { lines.append("upload url:  \(Redaction.url(session.url))") }
            if let reason = task.restartReason { lines.append("restarted:   \(Redaction.text(reason))") }
        } else if task.spec.kind != .download {
            lines.append("method:      \(task.spec.effectiveMethod)")
        }
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
        if task.unchanged { lines.append("unchanged:   yes (the server answered 304 Not Modified; the file was left as it was)") }
        if task.phase == .finished, let reason = task.skipReason {
            lines.append("skipped:     \(Printable.escaping(reason)) (nothing was transferred; the file there was left as it was)")
        }
        if task.forgotten { lines.append("forgotten:   yes (not listed by status)") }
        if task.phase == .paused, let words = task.pauseReason.flatMap(NetworkPolicy.waitingWords) { lines.append("waiting:     \(words)") }
        if task.spec.allowMetered == false { lines.append("metered:     not allowed (allow_metered = false)") }
        if let speed = task.spec.minSpeed {
            lines.append(speed == 0 ? "min speed:   no check (the job's min_speed = 0)"
                         : "min speed:   \(ByteCount.format(speed))/s (the job's min_speed)"
                         + (task.spec.minSpeedTimeS.map { " over \($0) s" } ?? ""))
        } else if let seconds = task.spec.minSpeedTimeS {
            lines.append("min speed:   the config's, over \(seconds) s (the job's min_speed_time)")
        }
        return lines.map(Printable.escaping).joined(separator: "\n")
    }
}

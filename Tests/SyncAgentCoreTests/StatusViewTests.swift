import Foundation
import Testing
@testable import SyncAgentCore
import TestSupport

@Suite struct StatusViewTests {
    @Test func endedTasksOlderThanADayAreHiddenAndCounted() {
        var log = LogBuilder()
        log.create("old")
        log.runToEnd("old")
        log.nowMs += StatusView.endedShownForMs + 1
        log.create("new")
        log.runToEnd("new")
        log.create("waiting")
        let now = log.nowMs
        let shown = StatusView.select(log.state, phases: nil, all: false, nowMs: now)
        #expect(shown.tasks.map(\.id) == ["new", "waiting"])
        #expect(shown.hidden == 1)
        #expect(StatusView.select(log.state, phases: nil, all: true, nowMs: now).tasks.count == 3)
        let queued = StatusView.select(log.state, phases: [.queued], all: true, nowMs: now)
        #expect(queued.tasks.map(\.id) == ["waiting"])
    }

    @Test func etaAndSummaryComeFromSpeedAndWhatIsLeft() {
        var log = LogBuilder()
        log.create("a")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/a")), task: "a")
        _ = log.add(.progressed(Progressed(bytes: 0, total: 10_000)), task: "a", afterMs: 1000)
        _ = log.add(.progressed(Progressed(bytes: 1000, total: 10_000)), task: "a", afterMs: 1000)
        log.create("b")
        let a = log.state["a"]!
        let figures = log.state.figures(of: a)
        #expect(figures.speed == 1000)
        #expect(StatusView.etaSeconds(figures, phase: .running) == 9)
        let summary = StatusView.summary(of: log.state.orderedTasks, in: log.state, hidden: 2)
        #expect(summary.counts == [.running: 1, .queued: 1])
        #expect(summary.sizeUnknown, "b has not said its size")
        #expect(summary.words == "1 running, 1 queued · 1000 B/s · ETA ≥ 9s · 2 ended over a day ago not shown (--all)")
        // A dead agent's running task moves no bytes.
        let dead = StatusView.summary(of: log.state.orderedTasks, in: log.state, hidden: 0, agentRunning: false)
        #expect(dead.interrupted == 1 && dead.speed == 0 && dead.etaSeconds == nil)
        #expect(dead.words.hasPrefix("1 interrupted"))
    }

    @Test(arguments: [(Int64(0), "0s"), (42, "42s"), (192, "3m12s"), (3900, "1h05m"), (183_600, "2d03h")])
    func durationsReadAtAGlance(_ seconds: Int64, _ words: String) {
        #expect(StatusView.duration(seconds) == words)
    }

    /// A path keeps its file name whole and the start of its folders; a
    /// name that cannot stay whole keeps both its ends, more of the last.
    @Test(arguments: [
        ("/home/me/Downloads/talks/keynote.ts", 31, "/home/me/Downloads/…/keynote.ts"),
        ("/home/me/Downloads/talks/keynote.ts", 21, "/home/me/…/keynote.ts"),
        ("/home/me/Downloads/talks/keynote.ts", 20, "/home/…/keynote.ts"),
        ("/home/me/Downloads/talks/keynote.ts", 14, "…/keynote.ts"),
        ("~/Downloads/talks/keynote.ts", 25, "~/Downloads/…/keynote.ts"),
        ("/home/me/Downloads/talks/keynote.ts", 12, "…/keynote.ts"),
        ("/home/me/Downloads/talks/keynote.ts", 11, "…keynote.ts"),
        ("/tmp/dl/backup-2026-part01.img", 10, "bac…01.img"),
        ("debian-13.0.0-amd64-netinst.iso", 16, "debia…etinst.iso"),
        ("/日本語/動画ファイル.ts", 12, "動画…イル.ts"),
        ("short", 14, "short"),
        ("abc", 1, "…"),
        ("abc", 0, ""),
    ])
    func shorteningKeepsBothEnds(text: String, width: Int, shortened: String) {
        #expect(StatusView.shorten(text, to: width) == shortened)
        #expect(Printable.cells(StatusView.shorten(text, to: width)) <= max(width, 0))
    }
}

@Suite struct SubmitInputTests {
    @Test func urlsWithIndentedOptionsCommentsAndBlankLines() throws {
        let text = "# nightly\nhttps://h/a.iso\n  dest=isos/a.iso\n\tmax-speed = 2M\n\nhttps://h/b.iso\r\n  header=X-A: 1\n"
        let entries = try SubmitInput.parse(text)
        #expect(entries.map(\.url) == ["https://h/a.iso", "https://h/b.iso"])
        #expect(entries[0].options.map(\.key) == ["dest", "max_speed"])
        #expect(entries[0].options.map(\.value) == ["isos/a.iso", "2M"])
        #expect(entries[1].options.first?.value == "X-A: 1")
        #expect(entries[1].line == 6)
    }

    @Test func mistakesNameTheirLine() {
        #expect(throws: SubmitInput.Malformed(line: 1, problem: "an indented option \"dest=x\" comes before any URL")) {
            try SubmitInput.parse("  dest=x\n")
        }
        #expect(throws: SubmitInput.Malformed(line: 2, problem: "an option must look like key=value, not \"dest\"")) {
            try SubmitInput.parse("https://h/a\n  dest\n")
        }
        #expect((try? SubmitInput.parse("https://h/a https://m/a\n")) == nil)
    }
}

@Suite struct SpeedSharesTests {
    @Test func anOverallCapIsSplitFairlyAndNeverExceeded() {
        let shares = SpeedShares.split(overall: 900, own: ["a": nil, "b": nil, "c": nil])
        #expect(shares == ["a": 300, "b": 300, "c": 300])
        // A transfer capped lower keeps its cap; the others share what it leaves.
        let mixed = SpeedShares.split(overall: 1000, own: ["slow": 100, "x": nil, "y": 2000])
        #expect(mixed == ["slow": 100, "x": 450, "y": 450])
        #expect(mixed.values.compactMap { $0 }.reduce(0, +) <= 1000)
        // No overall cap: each keeps its own.
        #expect(SpeedShares.split(overall: nil, own: ["a": 5, "b": nil]) == ["a": 5, "b": nil])
        // More transfers than bytes per second: nobody is left unlimited.
        #expect(SpeedShares.split(overall: 2, own: ["a": nil, "b": nil, "c": nil]).values.allSatisfy { $0 != nil })
    }
}

@Suite struct StreamedJSONTests {
    /// What `status --json` printed when it encoded the whole document at once.
    private struct WholeDocument: Encodable {
        var agent: AgentReport?
        var rejected: [RejectionReport]?
        var tasks: [TaskReport]
        var waiting: [WaitingReport]?
    }

    private func whole(_ reports: [TaskReport], agent: AgentReport?, rejected: [RejectionReport]? = nil,
                       waiting: [WaitingReport]? = nil) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        encoder.keyEncodingStrategy = .convertToSnakeCase
        return String(decoding: try encoder.encode(WholeDocument(agent: agent, rejected: rejected, tasks: reports, waiting: waiting)),
                      as: UTF8.self)
    }

    /// Streamed a task at a time, the document is byte for byte the one encoded whole.
    @Test(arguments: [0, 1, 3])
    func aDocumentWrittenATaskAtATimeIsTheWholeOne(_ count: Int) throws {
        var log = LogBuilder()
        for index in 0..<count { log.create("t\(index)", batch: index == 1 ? "line\nbreak \"quoted\"" : nil) }
        if count > 0 { log.runToEnd("t0") }
        let state = log.state
        let reports = state.orderedTasks.map { TaskReport($0, in: state) }
        for agent in [nil, AgentReport(running: true, pid: 42, startedAtMs: 1_000)] {
            var pieces: [String] = []
            TaskReport.writeJSON(reports, agent: agent) { pieces.append($0) }
            #expect(pieces.joined() == (try whole(reports, agent: agent)))
            #expect(pieces.count == count + (agent == nil ? 3 : 4), "one write per task")
        }
        // `status` adds the job files rejected and those waiting in the inbox, none or some.
        let agent = AgentReport(running: false, pid: nil, startedAtMs: nil)
        let someRejected = [RejectionReport(file: "a \"b\".job", error: "key \"url\" is missing", atMs: 5, seq: 2)]
        let someWaiting = [WaitingReport(file: "submit-x.job", id: "x", spec: TaskSpec(url: "https://u:p@h/a", dest: "/d/a")),
                           WaitingReport(file: "y.job", id: nil, spec: TaskSpec(url: "https://h/b", kind: .data, dest: nil))]
        for (rejected, waiting) in [([], []), (someRejected, someWaiting)] {
            var pieces: [String] = []
            TaskReport.writeJSON(reports, agent: agent, rejected: rejected, waiting: waiting) { pieces.append($0) }
            #expect(pieces.joined() == (try whole(reports, agent: agent, rejected: rejected, waiting: waiting)))
            #expect(!pieces.joined().contains("u:p@"), "credentials in a waiting job's URL are not shown")
        }
    }

    /// Tasks are written without the encoder, keys in an order typed by hand:
    /// whatever their values (control characters, quotes, slashes, non-ASCII,
    /// nulls, the keys only some tasks have), the text is the encoder's.
    @Test func everyTaskIsWrittenAsTheEncoderWouldWriteIt() throws {
        var random = SplitMix64(seed: 20261123)
        let pieces = (0..<0x20).map { String(UnicodeScalar(UInt8($0))) }
            + ["\"", "\\", "/", "\u{7F}", "\u{85}", "é", "日本", "🎞", "\u{202E}", "\u{2028}", "a", " ", ":"]
        func text() -> String { (0..<Int.random(in: 0...6, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined() }
        func maybe<Value>(_ value: @autoclosure () -> Value) -> Value? { Bool.random(using: &random) ? value() : nil }
        func number() -> Int64 { [0, 1, -1, 42, Int64.max, Int64.min, 1 << 40].randomElement(using: &random)! }
        var log = LogBuilder()
        log.create("t")
        let base = TaskReport(log.state.orderedTasks[0], in: log.state)
        var reports: [TaskReport] = []
        for _ in 0..<300 {
            var report = base
            report.id = text(); report.kind = text(); report.state = text(); report.url = text(); report.currentURL = text()
            report.dest = maybe(text()); report.method = text(); report.status = maybe(Int(number() % 1000))
            report.bytes = number(); report.total = maybe(number())
            report.percent = maybe((Double(Int.random(in: 0...1000, using: &random)) / 10))
            report.speed = number(); report.etaS = maybe(number()); report.attempts = Int(number() % 100)
            report.redirects = Int(number() % 100); report.unchanged = Bool.random(using: &random); report.skipped = maybe(text())
            report.priority = Int(number() % 100); report.batch = maybe(text()); report.error = maybe(text())
            report.errorCode = maybe(text()); report.etag = maybe(text()); report.lastModified = maybe(text())
            report.headers = (0..<Int.random(in: 0...3, using: &random)).map { _ in text() }
            report.createdAtMs = number(); report.updatedAtMs = number(); report.lastSeq = number()
            report.plan = maybe(text()); report.parent = maybe(text()); report.pauseReason = maybe(text())
            report.children = maybe(TaskReport.Children(done: Int(number() % 100), total: Int(number() % 100)))
            reports.append(report)
        }
        for agent in [nil, AgentReport(running: false, pid: nil, startedAtMs: nil)] {
            for report in reports {
                let written = TaskReport.json([report], agent: agent), encoded = Printable.jsonSafe(try whole([report], agent: agent))
                #expect(written == encoded, "\(written.debugDescription)\n\(encoded.debugDescription)")
            }
            #expect(TaskReport.json(reports, agent: agent) == Printable.jsonSafe(try whole(reports, agent: agent)))
        }
    }
}

@Suite struct WaitVerdictTests {
    /// Over once every task has ended; 0 when all finished, else the last
    /// failure's aria2c status, or 7 for what was cancelled or never ended.
    @Test func theLastFailureSaysTheExitStatus() {
        var log = LogBuilder()
        for id in ["a", "b", "c", "d"] { log.create(id) }
        log.runToEnd("a")
        #expect(WaitVerdict.allEnded(["a"], in: log.state) && WaitVerdict.exitStatus(["a"], in: log.state) == 0)
        #expect(!WaitVerdict.allEnded(["a", "b"], in: log.state) && !WaitVerdict.allEnded(["a", "unknown"], in: log.state))
        _ = log.add(.failed(Failed(reason: "sha256 mismatch", code: .checksumMismatch, bytes: 0)), task: "b")
        _ = log.add(.failed(Failed(reason: "server answered 404", code: .http(404), bytes: 0)), task: "c", afterMs: 50)
        #expect(WaitVerdict.exitStatus(["a", "b", "c"], in: log.state) == 3, "the last to fail")
        #expect(WaitVerdict.exitStatus(["a", "b"], in: log.state) == 32)
        _ = log.add(.cancelled(Cancelled(bytes: 0)), task: "d")
        #expect(WaitVerdict.allEnded(["a", "d"], in: log.state) && WaitVerdict.exitStatus(["a", "d"], in: log.state) == 7)
    }
}

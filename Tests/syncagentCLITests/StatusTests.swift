import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `status`: whether an agent runs, a table that scales and hides old
/// ends, and `--watch` under a pseudo-terminal of any size and piped.
@Suite("status", .serialized)
struct StatusTests {
    @Test func statusTellsWhetherTheAgentRunsBeforeAndAfterKill9() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("big.bin", size: 4_000_000)
        let before = try harness.run(["status"])
        #expect(before.stdout.hasPrefix("agent: not running\n"), "\(before.stdout)")

        try harness.drop("big.job", "id = \"big\"\nurl = \"\(nginx.url("big.bin"))\"\nmax_speed = \"200K\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { harness.state(of: "big") == "running" })
        let running = try harness.run(["status"])
        #expect(running.stdout.hasPrefix("agent: running (pid \(agent.pid), since "), "\(running.stdout)")
        #expect(running.stdout.contains(" running "))
        let json = try statusDocument(harness)
        let live = json["agent"] as? [String: Any]
        #expect(live?["running"] as? Bool == true)
        #expect(live?["pid"] as? Int == Int(agent.pid))
        #expect((live?["started_at_ms"] as? Int ?? 0) > 0)

        agent.signal(SIGKILL)
        _ = agent.wait(seconds: 10)
        let dead = try harness.run(["status"])
        #expect(dead.stdout.hasPrefix("agent: not running\n"), "\(dead.stdout)")
        #expect(dead.stdout.contains(" interrupted "), "\(dead.stdout)")
        #expect(!dead.stdout.contains("/s "), "a dead agent's speed is not shown: \(dead.stdout)")
        let deadJSON = try statusDocument(harness)
        let gone = deadJSON["agent"] as? [String: Any]
        #expect(gone?["running"] as? Bool == false)
        #expect(gone?["pid"] is NSNull && gone?["started_at_ms"] is NSNull, "null keys stay present")
        // The log still says running: the JSON state is the log's, but nothing moves.
        #expect((deadJSON["tasks"] as? [[String: Any]])?.first?["state"] as? String == "running")
        #expect((deadJSON["tasks"] as? [[String: Any]])?.first?["speed"] as? Int == 0)
        #expect((deadJSON["tasks"] as? [[String: Any]])?.first?["eta_s"] is NSNull)
        #expect(((deadJSON["tasks"] as? [[String: Any]])?.first?.keys).map { $0.contains("error") } == true)
        // replay reads the same log the same way: interrupted, nothing moving.
        let replay = try harness.run(["replay"]).stdout
        let row = replay.split(separator: "\n").first { $0.hasPrefix("big ") }.map(String.init) ?? ""
        #expect(row.contains(" interrupted ") && !row.contains("/s "), "\(replay)")
        let replayed = try harness.replayTasks().first
        #expect(replayed?["state"] as? String == "running" && replayed?["speed"] as? Int == 0 && replayed?["eta_s"] is NSNull,
                "\(replayed ?? [:])")

        // Control with no agent says the request waits; a new agent starts despite status probing the lock.
        let pause = try harness.run(["pause", "big"])
        #expect(pause.status == 0)
        #expect(pause.stderr.contains("no agent is running") && pause.stderr.contains("waits"), "\(pause.stderr)")
        let again = try harness.startAgent()
        for _ in 0..<20 { _ = try harness.run(["status"]) }
        #expect(eventually(within: 20) { harness.state(of: "big") == "paused" })
        #expect(again.isRunning, "\(again.stderr)")
        again.signal(SIGTERM)
        #expect(again.wait(seconds: 10) == 0)
    }

    @Test func statusHidesOldEndsFiltersByStateAndShowsSizesInWords() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("one.bin", size: 3_000_000)
        try harness.drop("one.job", "id = \"one\"\nurl = \"\(nginx.url("one.bin"))\"\n")
        try harness.drop("bad.job", "id = \"bad\"\nurl = \"\(nginx.url("absent.bin"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)

        let detail = try harness.run(["status", "--task", "one"])
        #expect(detail.stdout.contains("bytes:       2.9 MiB (3000000 bytes) of 2.9 MiB (3000000 bytes)"), "\(detail.stdout)")
        // The count and the history each once, under names of their own.
        #expect(detail.stdout.split(separator: "\n").filter { $0.hasPrefix("attempts:") } == ["attempts:    1"], "\(detail.stdout)")
        #expect(detail.stdout.contains("attempt history:\n  #1 from byte 0, finished"), "\(detail.stdout)")
        let failed = try harness.run(["status", "--state", "failed"])
        #expect(failed.stdout.contains("bad ") && !failed.stdout.contains("one "), "\(failed.stdout)")
        #expect(failed.stdout.hasSuffix("1 failed\n"), "\(failed.stdout)")
        let both = try harness.run(["status", "--state", "failed,finished"])
        #expect(both.stdout.contains("bad ") && both.stdout.contains("one "))
        let wrong = try harness.run(["status", "--state", "done"])
        #expect(wrong.status != 0 && wrong.stderr.contains("--state \"done\" is not a state"))

        // A day later (the clock moved by faking the log's times is not possible: move the
        // ends back instead, through SQLite, as a year-old log would have them).
        let database = harness.stateDir + "/events.sqlite"
        try pythonSQLite(database, "UPDATE events SET at_ms = at_ms - 2*86400000")
        let recent = try harness.run(["status"])
        #expect(!recent.stdout.contains("one ") && recent.stdout.contains("2 ended over a day ago not shown (--all)"), "\(recent.stdout)")
        let everything = try harness.run(["status", "--all"])
        #expect(everything.stdout.contains("one ") && everything.stdout.contains("bad "))
        #expect(try harness.statusTasks().count == 2, "--json lists every task")
    }

    /// Job files the agent refused are shown where a user looks: the newest
    /// of the last day in `status` (under `--state failed` too), every one
    /// of them in `--json`, a few on the `--watch` screen; not one older.
    @Test func rejectedJobsShowInStatusJSONAndWatch() throws {
        let harness = try AgentHarness()
        let bad = [
            ("noscheme.job", "url = \"example.com/a.iso\"\n"),
            ("ftp.job", "url = \"ftp://example.com/a.iso\"\n"),
            ("typo.job", "url = \"http://127.0.0.1:9/a\"\nsha265 = \"00\"\n"),
            ("nourl.job", "dest = \"a.iso\"\n"),
            ("prio.job", "url = \"http://127.0.0.1:9/b\"\npriority = \"high\"\n"),
            ("kind.job", "url = \"http://127.0.0.1:9/c\"\nkind = \"torrent\"\n"),
            ("old.job", "url = \"gopher://example.com/\"\n"),
        ]
        for (name, text) in bad { try harness.drop(name, text) }
        try harness.runUntilIdle()
        // One of them a day and more ago, as a log kept since then would have it.
        _ = try pythonSQLite(harness.stateDir + "/events.sqlite",
                             "UPDATE events SET at_ms = at_ms - 2*86400000 WHERE type = 'rejected' AND data LIKE '%old.job%'")

        let status = try harness.run(["status"]).stdout
        let lines = status.split(separator: "\n").map(String.init)
        #expect(lines.contains("rejected job files (moved to \(harness.inbox)/rejected/, each with a .error file):"), "\(status)")
        #expect(lines.contains("  … 1 earlier (syncagent status --json lists them all)"), "\(status)")
        // The newest five, each with its reason (which five depends on the order the agent took them in).
        let taken = try #require(try statusDocument(harness)["rejected"] as? [[String: Any]])
        for job in taken.suffix(5) {
            let file = try #require(job["file"] as? String), error = try #require(job["error"] as? String)
            #expect(lines.contains { $0.contains("\(file): \(error)") }, "\(file): \(status)")
        }
        #expect(lines.filter { $0.contains(".job: ") }.count == 5, "the newest five listed: \(status)")
        #expect(!status.contains("old.job"), "\(status)")
        #expect(lines.last == "no tasks · 6 jobs rejected", "\(status)")

        let failed = try harness.run(["status", "--state", "failed"]).stdout
        // (The newest, as `--json` orders them: which it is depends on the order the agent took them in.)
        let newestFile = try #require(taken.last?["file"] as? String)
        #expect(failed.contains("\(newestFile): ") && failed.hasSuffix("no tasks · 6 jobs rejected\n"), "\(failed)")
        let finished = try harness.run(["status", "--state", "finished"]).stdout
        #expect(!finished.contains(".job") && finished.hasSuffix("no tasks\n"), "\(finished)")

        let document = try statusDocument(harness)
        let rejected = try #require(document["rejected"] as? [[String: Any]])
        #expect(Set(rejected.compactMap { $0["file"] as? String }) == Set(bad.dropLast().map(\.0)), "every one of the day")
        #expect(rejected.compactMap { $0["seq"] as? Int } == rejected.compactMap { $0["seq"] as? Int }.sorted(), "oldest first")
        #expect(rejected.allSatisfy { ($0["error"] as? String)?.isEmpty == false && ($0["at_ms"] as? Int ?? 0) > 0 })
        #expect((document["tasks"] as? [Any])?.isEmpty == true)

        let frame = try #require(try harness.underTerminal(["status", "--watch"], columns: 100, rows: 20, seconds: 1.5).last)
        #expect(frame.contains { $0.hasPrefix("rejected job files") }, "\(frame)")
        let newest = rejected.suffix(3).compactMap { $0["file"] as? String }
        #expect(frame.filter { $0.contains(".job: ") }.count == 3 && newest.allSatisfy { file in frame.contains { $0.contains(file + ": ") } },
                "\(frame)")
        #expect(frame.last == "no tasks · 6 jobs rejected", "\(frame)")

        // On a narrow terminal the heading and replay's log line are wrapped at their spaces, paths whole.
        let narrow = try harness.printedOnTerminal(["status"], columns: 80)
        #expect(narrow.allSatisfy { cells($0) <= 80 }, "\(narrow.filter { cells($0) > 80 })")
        #expect(narrow.contains { $0.hasPrefix("rejected job files (moved to") && $0.contains(harness.inbox + "/rejected/,") }, "\(narrow)")
        let replay = try harness.printedOnTerminal(["replay"], columns: 60)
        #expect(replay.allSatisfy { cells($0) <= 60 } && replay.contains { $0.contains(harness.stateDir + "/events.sqlite,") }, "\(replay)")
    }

    /// A job submitted while no agent runs is known by the id `submit`
    /// printed: `status` lists it as waiting for the agent, `status --task`
    /// shows it, `--json` lists it under "waiting".
    @Test func aJobWaitingInTheInboxShowsAsWaitingForTheAgent() throws {
        let harness = try AgentHarness()
        let submitted = try harness.run(["submit", "--id", "later", "--dir", "isos", "http://127.0.0.1:9/later.iso"])
        #expect(submitted.status == 0 && submitted.stdout == "later\n", "\(submitted.stderr)")

        let status = try harness.run(["status"]).stdout
        let row = status.split(separator: "\n").first { $0.hasPrefix("later ") }
        #expect(row?.contains(" waiting ") == true && row?.hasSuffix(" \(harness.downloads)/isos/later.iso") == true, "\(status)")
        #expect(status.hasSuffix("\n1 waiting for the agent\n"), "\(status)")

        let detail = try harness.run(["status", "--task", "later"])
        #expect(detail.status == 0, "\(detail.stderr)")
        #expect(detail.stdout.contains("state:       waiting for the agent (its job is \(harness.inbox)/submit-later-"), "\(detail.stdout)")
        #expect(detail.stdout.contains("url:         http://127.0.0.1:9/later.iso"), "\(detail.stdout)")

        let document = try statusDocument(harness)
        let waiting = try #require(document["waiting"] as? [[String: Any]])
        #expect(waiting.count == 1 && waiting.first?["id"] as? String == "later", "\(waiting)")
        #expect(waiting.first?["dest"] as? String == "\(harness.downloads)/isos/later.iso")
        #expect(try harness.run(["status", "--state", "finished"]).stdout.hasSuffix("no tasks\n"), "filtered out by state")
        #expect(try harness.run(["status", "--task", "nope"]).stderr.contains("no task has the id \"nope\""))
    }

    /// A task waiting out its backoff reads as retrying, with the time left
    /// and the attempt to come of those its retries allow, not as queued.
    @Test func aTaskWaitingToRetrySaysWhenAndWhichAttempt() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("down.bin", size: 1000)
        try harness.drop("down.job", "id = \"down\"\nurl = \"\(server.url("down.bin", "fail_status=503"))\"\n")
        let agent = try harness.startAgent()
        // The second wait is 3 to 4 s long (the first, under one): read while it lasts.
        #expect(eventually(within: 20) { ((try? harness.events()) ?? []).filter { $0.type == "retrying" }.count == 2 })
        let status = try harness.run(["status"]).stdout
        let lines = status.split(separator: "\n").map(String.init)
        let row = try #require(lines.firstIndex { $0.hasPrefix("down ") }, "\(status)")
        #expect(lines[row].contains(" retrying "), "\(status)")
        let note = lines[row + 1].trimmingCharacters(in: .whitespaces)
        #expect(note.hasPrefix("retrying in ") && note.contains("s (attempt 3/6): server answered 503 Service Unavailable"), "\(status)")
        let seconds = Int(note.dropFirst("retrying in ".count).prefix { $0.isNumber }) ?? 0
        #expect((1...4).contains(seconds), "\(note)")
        let detail = try harness.run(["status", "--task", "down"]).stdout
        #expect(detail.contains("state:       queued, retrying in ") && detail.contains("(attempt 3/6)"), "\(detail)")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// A task waiting to retry is counted apart from the queue on the
    /// summary line, and `--state retrying` selects it (as `queued` does).
    @Test func retryingTasksAreCountedAndSelectedApart() throws {
        let harness = try AgentHarness()
        let server = try FaultServer(in: harness.directory)
        try server.serve("down.bin", size: 1000)
        try server.serve("up.bin", size: 1000)
        // Told to come back in a minute: the wait outlasts the test.
        try harness.drop("down.job", "id = \"down\"\nurl = \"\(server.url("down.bin", "fail_status=503&retry_after=60"))\"\n")
        try harness.drop("later.job", "id = \"later\"\nurl = \"\(server.url("up.bin"))\"\nnot_before = 2099-01-01T00:00:00Z\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { ((try? harness.events()) ?? []).contains { $0.type == "retrying" } })
        let status = try harness.run(["status"]).stdout
        #expect(status.hasSuffix("\n1 queued, 1 retrying\n"), "\(status)")
        let retrying = try harness.run(["status", "--state", "retrying"]).stdout.split(separator: "\n")
        #expect(retrying.contains { $0.hasPrefix("down ") } && !retrying.contains { $0.hasPrefix("later ") }, "\(retrying)")
        #expect(retrying.last == "1 retrying", "\(retrying)")
        let queued = try harness.run(["status", "--state", "queued"]).stdout.split(separator: "\n")
        #expect(queued.contains { $0.hasPrefix("down ") } && queued.contains { $0.hasPrefix("later ") }, "\(queued)")
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    /// 60 queued tasks with long destinations: under an 80×24 pseudo-terminal
    /// every frame fits (no line over 80 columns, at most 24 lines) and keeps
    /// its header; piped, the snapshots carry no escape code.
    @Test func watchFitsATerminalAndPrintsPlainSnapshotsWhenPiped() throws {
        let harness = try AgentHarness()
        try logQueuedTasks(harness, 60, id: "w") { "a/rather/long/folder/name/that/goes/on/and/on/and/on/file-number-\($0).bin" }

        let frames = try harness.underTerminal(["status", "--watch"], columns: 80, rows: 24, seconds: 2.5)
        let frame = try #require(frames.last)
        #expect(frame.count <= 24, "\(frame.count) lines")
        #expect(frame.allSatisfy { $0.count <= 80 }, "\(frame.filter { $0.count > 80 })")
        #expect(frame.first == "agent: not running")
        #expect(frame.dropFirst().first?.hasPrefix("ID ") == true, "header kept: \(frame)")
        #expect(frame.contains { $0.contains("…") && $0.contains("file-number-") }, "paths shortened: \(frame)")
        #expect(frame.last?.hasPrefix("60 queued") == true, "\(frame.last ?? "")")
        #expect(frame.contains { $0.hasPrefix("… ") && $0.contains("more") }, "what does not fit is counted")

        let piped = try ChildProcess(syncagentBinary, ["status"] + harness.globalFlags + ["--watch"], environment: harness.environment,
                                     outputIn: harness.directory.path, name: "piped-watch")
        // Piped, it prints a whole snapshot a second, its last line the count: three of them.
        _ = eventually(within: 20) { piped.stdout.components(separatedBy: "60 queued · 10 more not listed (--all)").count > 3 }
        piped.signal(SIGKILL)
        _ = piped.wait(seconds: 5)
        #expect(!piped.stdout.contains("\u{1B}"), "no escape codes when piped")
        #expect(piped.stdout.contains("ID  "))
        // The head of the queue, as `status` lists it, and the rest counted.
        #expect((0..<50).allSatisfy { piped.stdout.contains("w\($0) ") }, "the first 50 queued in a plain snapshot")
        #expect(!piped.stdout.contains("w50 ") && piped.stdout.contains("60 queued · 10 more not listed (--all)"), "\(piped.stdout.suffix(300))")

        // Colour on a terminal, none with NO_COLOR.
        var colourless = harness.environment
        colourless["NO_COLOR"] = "1"
        let plain = try harness.underTerminal(["status", "--watch"], columns: 120, rows: 80, seconds: 1.5, environment: colourless,
                                      keepEscapes: true)
        #expect(!(plain.last ?? []).joined().contains("\u{1B}[3"), "NO_COLOR honoured")
        let coloured = try harness.underTerminal(["status", "--watch"], columns: 120, rows: 80, seconds: 1.5, keepEscapes: true)
        #expect((coloured.last ?? []).joined().contains("\u{1B}[36mqueued"), "queued in colour on a terminal")
    }

    /// Three downloads into one long folder and a 404: on terminals of 80,
    /// 120 and 160 columns the destination gets the room (KIND, the same on
    /// every row, is left out; the bar has a column of its own, or none) and
    /// keeps its file name; plain `status` and `replay` wrap the error and
    /// the plans under their rows instead of running past the edge.
    @Test func tablesFitEightyAndOneHundredTwentyColumns() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        for part in 1...3 {
            try nginx.serve("part0\(part).img", size: 4_000_000, seed: UInt64(part))
            try harness.drop("p\(part).job", """
                id = "p\(part)"
                url = "\(nginx.url("part0\(part).img"))"
                dest = "some/rather/long/folder/name/backup-2026-11-part0\(part).img"
                max_speed = "100K"
                """)
        }
        try harness.drop("gone.job", "id = \"gone\"\nurl = \"\(nginx.url("reports/2026/november/quarterly-summary-final-v2.pdf"))\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) {
            let tasks = (try? harness.tasksByID()) ?? [:]
            return (1...3).allSatisfy { (tasks["p\($0)"]?["bytes"] as? Int ?? 0) > 0 } && tasks["gone"]?["state"] as? String == "failed"
        })

        for (columns, rows) in [(80, 24), (120, 30), (160, 30)] {
            let frame = try #require(try harness.underTerminal(["status", "--watch"], columns: columns, rows: rows, seconds: 1.5).last)
            #expect(frame.allSatisfy { cells($0) <= columns }, "\(columns): \(frame)")
            let header = frame.first { $0.hasPrefix("ID ") } ?? ""
            #expect(!header.contains("KIND") && header.contains("STATE") && header.hasSuffix("DEST"), "\(columns): \(header)")
            for part in 1...3 {
                let row = frame.first { $0.hasPrefix("p\(part) ") } ?? ""
                #expect(row.hasSuffix("part0\(part).img"), "\(columns): the name's end is kept: \(row)")
                // The bar is never glued to the destination: in a column of its own, or not there.
                #expect(!row.contains("] ") || row.contains("]  "), "\(columns): \(row)")
            }
            if columns == 160 {
                #expect(header.range(of: "PROGRESS +DEST$", options: .regularExpression) != nil, "\(header)")
                #expect((1...3).allSatisfy { part in frame.contains { $0.hasPrefix("p\(part) ") && $0.contains("[#") } }, "\(frame)")
            }
            if columns == 80 { #expect(!header.contains("PROGRESS"), "no room for bars: \(header)") }
        }

        // Plain status and replay on a terminal: each line within it, the error and plans wrapped whole.
        for command in ["status", "replay"] {
            let lines = try harness.printedOnTerminal([command], columns: 80)
            #expect(lines.allSatisfy { cells($0) <= 80 }, "\(command): \(lines.filter { cells($0) > 80 })")
            let failed = try #require(lines.firstIndex { $0.hasPrefix("gone ") }, "\(lines)")
            let under = lines[(failed + 1)...].prefix { $0.hasPrefix(" ") }.map { $0.trimmingCharacters(in: .whitespaces) }
            let note = under.joined(separator: " ")
            #expect(note.hasPrefix("server answered 404 Not Found for ") && under.count >= 2, "\(command): \(lines)")
            #expect(note.replacingOccurrences(of: " ", with: "").contains(nginx.url("reports/2026/november/quarterly-summary-final-v2.pdf")),
                    "\(command): the whole URL, broken only at the edge: \(under)")
            #expect(!lines.contains { $0.hasPrefix("ID ") && $0.contains("KIND") }, "\(command): \(lines)")
        }
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    @Test func watchCountsWideCharactersAndTinyTerminals() throws {
        let harness = try AgentHarness()
        try logQueuedTasks(harness, 8, id: "c") { "日本語のファイル名前がとても長いフォルダ/動画ファイル📼\($0).bin" }
        for (columns, rows) in [(80, 24), (40, 6), (20, 3), (10, 2), (30, 1)] {
            let frame = try #require(try harness.underTerminal(["status", "--watch"], columns: columns, rows: rows, seconds: 1.5).last)
            #expect(frame.count <= rows, "\(columns)x\(rows): \(frame)")
            #expect(frame.allSatisfy { cells($0) <= columns }, "\(columns)x\(rows): \(frame)")
            if rows >= 3 { #expect(frame.first?.hasPrefix("agent") == true || columns < 8) }
        }
    }

    /// `count` tasks queued until 2099 (ids `ID0`, `ID1` …, a URL nobody
    /// answers), taken into the log by an agent that is then stopped.
    private func logQueuedTasks(_ harness: AgentHarness, _ count: Int, id: String, dest: (Int) -> String) throws {
        for index in 0..<count {
            try harness.drop("\(id)\(index).job", """
                id = "\(id)\(index)"
                url = "http://127.0.0.1:9/file-\(index).bin"
                dest = "\(dest(index))"
                not_before = "2099-01-01T00:00:00Z"
                """)
        }
        let agent = try harness.startAgent()
        #expect(eventually(within: 30) { ((try? harness.statusTasks()) ?? []).count == count })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
    }

    private func cells(_ line: String) -> Int {
        line.reduce(0) { total, character in
            let wide = character.unicodeScalars.contains { $0.properties.isEmojiPresentation || (0x2E80...0x9FFF).contains($0.value) }
            return total + (wide ? 2 : 1)
        }
    }

    private func statusDocument(_ harness: AgentHarness) throws -> [String: Any] {
        let result = try harness.run(["status", "--json"])
        return try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] ?? [:]
    }
}

import Foundation
import Testing
@testable import SyncAgentCore

/// `syncagent retarget` in the core: the job it is, the two decisions
/// (`RetargetRules`), the verdict on the new URL's answer, the fold of
/// `retargeted`, and its coding and snapshot.
@Suite("Retarget: rules, verdicts and the fold")
struct RetargetCoreTests {
    let parser = JobParser(downloadDir: "/home/u/Downloads")

    func rejection(_ text: String) -> String? {
        do { _ = try parser.parse(Array(text.utf8)); return nil } catch { return "\(error)" }
    }

    // MARK: The job

    @Test func aRetargetJobNamesOneTaskAndAURLHeldToTheJobsRules() throws {
        #expect(try parser.parse(Array("action = \"retarget\"\ntask = \"t\"\nurl = \"https://h/f?sig=1\"\n".utf8))
                == .control(ControlJob(action: .retarget, task: "t", url: "https://h/f?sig=1")))
        #expect(rejection("action = \"retarget\"\ntask = \"t\"\n") == #"key "url" is missing: retarget names the URL the task goes on from"#)
        #expect(rejection("action = \"retarget\"\ntask = \"*\"\nurl = \"https://h/f\"\n") == #"key "task" must name one task for retarget, not "*""#)
        // The words a transfer job's url gets, credentials redacted.
        #expect(rejection("action = \"retarget\"\ntask = \"t\"\nurl = \"ftp://bob:pw@h/f\"\n")
                == #"key "url" must be an http or https URL, not ftp: "ftp://<redacted>@h/f""#)
        #expect(rejection("action = \"retarget\"\ntask = \"t\"\nurl = \"https://h/a b\"\n")
                == #"key "url" must not contain spaces or control characters: "https://h/a b""#)
        #expect(rejection("action = \"retarget\"\ntask = \"t\"\nurl = \"https:///f\"\n")?.hasPrefix(#"key "url" "#) == true)
        // Other actions take no url: it would be silently dropped.
        #expect(rejection("action = \"pause\"\ntask = \"t\"\nurl = \"https://h/f\"\n")
                == #"key "url" belongs to action = "retarget" only (a transfer job has no action)"#)
        #expect(rejection("action = \"compact\"\nurl = \"https://h/f\"\n")?.hasPrefix(#"key "url" belongs"#) == true)
    }

    // MARK: At the retarget

    func task(bytes: Int64, total: Int64? = 1000, etag: String? = "\"v1\"", lastModified: String? = nil,
              kind: String = "download") -> TaskState {
        var log = LogBuilder()
        log.create("t", url: "http://a.test/f")
        if kind != "download" {
            // A job of another kind, as the parser makes it.
            let spec = try! parser.parse(Array("url = \"http://a.test/f\"\nkind = \"\(kind)\"\nbody_file = \"/tmp/b\"\n".utf8))
            guard case .transfer(_, let made) = spec else { preconditionFailure() }
            var other = LogBuilder()
            _ = other.add(.created(made), task: "t")
            log = other
        }
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://a.test/f")), task: "t")
        if bytes > 0 {
            _ = log.add(.progressed(Progressed(bytes: bytes, total: total, etag: etag, lastModified: lastModified)), task: "t")
        }
        return log.state["t"]!
    }

    @Test func bytesWaitForTheNewURLOnlyWhenTheLogKnowsWhatToCompare() {
        #expect(RetargetRules.start(for: task(bytes: 0)) == .startOver(reason: nil))
        #expect(RetargetRules.start(for: task(bytes: 400)) == .keep(bytes: 400))
        #expect(RetargetRules.start(for: task(bytes: 400, etag: nil, lastModified: "Mon, 01 Jan 2024 00:00:00 GMT")) == .keep(bytes: 400))
        #expect(RetargetRules.start(for: task(bytes: 400, etag: "W/\"weak\"")) == .startOver(
            reason: "its 400 bytes came with no validator (ETag or Last-Modified) to compare the new URL's file with"))
        #expect(RetargetRules.start(for: task(bytes: 400, total: nil)) == .startOver(
            reason: "the size of the file its 400 bytes are part of is not known, so the new URL's cannot be compared with it"))
        #expect(RetargetRules.start(for: task(bytes: 400, kind: "upload")) == .startOver(
            reason: "an upload is sent again from its first byte at the new URL"))
    }

    // MARK: At the new URL's answer

    let held = RetargetRules.HeldFile(etag: "\"v1\"", lastModified: "Mon", size: 1000)

    @Test(arguments: [
        // The same file: every validator agrees, the size is said and the same.
        (RetargetRules.AnsweredFile(etag: "\"v1\"", lastModified: "Mon", size: 1000), nil),
        // A date need not come back beside the ETag that did.
        (RetargetRules.AnsweredFile(etag: "\"v1\"", lastModified: nil, size: 1000), nil),
        (RetargetRules.AnsweredFile(etag: "\"v2\"", lastModified: "Mon", size: 1000),
         "the new URL serves another file (ETag \"v1\" → \"v2\")"),
        (RetargetRules.AnsweredFile(etag: nil, lastModified: "Mon", size: 1000),
         "the new URL's answer carries no ETag (the bytes held came with \"v1\"): it may be another file"),
        (RetargetRules.AnsweredFile(etag: "\"v1\"", lastModified: "Tue", size: 1000),
         "the new URL serves another file (Last-Modified Mon → Tue)"),
        (RetargetRules.AnsweredFile(etag: "\"v1\"", lastModified: "Mon", size: 999),
         "the file at the new URL has 999 bytes, not the 1000 of the file the bytes held are part of"),
        (RetargetRules.AnsweredFile(etag: "\"v1\"", lastModified: "Mon", size: nil),
         "the new URL's answer does not say its file's size (the bytes held are of a file of 1000 bytes)"),
    ] as [(RetargetRules.AnsweredFile, String?)])
    func theNewURLsAnswerMustShowTheSameFile(answer: RetargetRules.AnsweredFile, words: String?) {
        #expect(RetargetRules.sameFile(held: held, answer: answer) == words)
    }

    @Test func aDateHeldAloneMustComeBack() {
        let dated = RetargetRules.HeldFile(etag: nil, lastModified: "Mon", size: 10)
        #expect(RetargetRules.sameFile(held: dated, answer: .init(etag: "\"any\"", lastModified: "Mon", size: 10)) == nil)
        #expect(RetargetRules.sameFile(held: dated, answer: .init(etag: "\"any\"", lastModified: nil, size: 10))
                == "the new URL's answer carries no Last-Modified (the bytes held came with Mon): it may be another file")
        // A weak ETag held guards nothing: the date does.
        let weak = RetargetRules.HeldFile(etag: "W/\"w\"", lastModified: "Mon", size: 10)
        #expect(weak.etag == nil)
        #expect(RetargetRules.sameFile(held: weak, answer: .init(etag: nil, lastModified: "Mon", size: 10)) == nil)
    }

    // MARK: The verdict on the new URL's answer (`ResponseRules`)

    func ask(offset: Int64 = 400, rangeEnd: Int64? = nil) -> ExchangeAsk {
        ExchangeAsk(offset: offset, rangeEnd: rangeEnd, ifRange: "\"v1\"", knownTotal: 1000, heldETag: "\"v1\"", retargetHeld: held)
    }

    func partial(etag: String?, lastModified: String? = "Mon", from: Int64 = 400, size: Int64? = 1000) -> ResponseHead {
        ResponseHead(status: 206, url: "http://b.test/f", etag: etag, lastModified: lastModified,
                     contentRange: .value(HTTPNumbers.ContentRange(first: from, last: 999, complete: size)), contentLength: .value(1000 - from))
    }

    @Test func aPartialAnswerOfTheSameFileIsTaken() {
        #expect(ResponseRules.judge(partial(etag: "\"v1\""), asked: ask()) == .accept(Acceptance(total: 1000, answerEnd: 1000)))
    }

    @Test func aPartialAnswerOfAnotherFileStartsOverWithTheReason() {
        // (A server that ignores If-Range sends the rest of its own file.)
        #expect(ResponseRules.judge(partial(etag: "\"v1\"", size: nil), asked: ask())
                == .end(.retryFromZero("the new URL's answer does not say its file's size (the bytes held are of a file of 1000 bytes)")))
        #expect(ResponseRules.judge(partial(etag: "\"v1\"", lastModified: "Tue"), asked: ask())
                == .end(.retryFromZero("the new URL serves another file (Last-Modified Mon → Tue)")))
        // One range of a segmented download: refused, so the download falls back to one connection from 0.
        #expect(ResponseRules.judge(partial(etag: "\"v1\"", size: nil), asked: ask(rangeEnd: 1000))
                == .end(.rangeRefused(reason: "the new URL's answer does not say its file's size (the bytes held are of a file of 1000 bytes)")))
    }

    @Test func aWholeAnswerIsTakenFromZeroSayingWhy() {
        let other = ResponseHead(status: 200, url: "http://b.test/f", etag: "\"v2\"", contentLength: .value(1200))
        #expect(ResponseRules.judge(other, asked: ask())
                == .accept(Acceptance(total: 1200, restartReason: "the new URL serves another file (ETag \"v1\" → \"v2\")")))
        let same = ResponseHead(status: 200, url: "http://b.test/f", etag: "\"v1\"", lastModified: "Mon", contentLength: .value(1000))
        #expect(ResponseRules.judge(same, asked: ask())
                == .accept(Acceptance(total: 1000, restartReason: "the server at the new URL ignored Range and sent the whole file")))
    }

    // MARK: The plan of a request

    @Test func onlyAResumeOfARetargetedTaskAsksForTheCheck() throws {
        var log = LogBuilder()
        log.create("t", url: "http://a.test/f")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://a.test/f")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 400, total: 1000, etag: "\"v1\"")), task: "t")
        #expect(try RequestPlan.of(log.state["t"]!, sharedHeaders: [], offset: 400, ifRange: "\"v1\"").ask.retargetHeld == nil)
        _ = log.add(.retargeted(Retargeted(from: "http://a.test/f", to: "http://b.test/f?sig=2", bytes: 400)), task: "t")
        let plan = try RequestPlan.of(log.state["t"]!, sharedHeaders: [], offset: 400, ifRange: "\"v1\"")
        #expect(plan.url == "http://b.test/f?sig=2")
        #expect(plan.ask.retargetHeld == RetargetRules.HeldFile(etag: "\"v1\"", lastModified: nil, size: 1000))
        #expect(plan.headers.contains(Header(name: "If-Range", value: "\"v1\"")) && plan.range == "400-")
    }

    // MARK: The fold

    @Test func retargetedMovesTheURLAndKeepsTheIdentity() {
        var log = LogBuilder()
        log.create("t", url: "http://a.test/f")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://a.test/f")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 400, total: 1000, etag: "\"v1\"")), task: "t")
        _ = log.add(.redirected(Redirected(from: "http://a.test/f", to: "http://cdn.test/f?exp=1", status: 302)), task: "t")
        #expect(log.state.runningByHost == ["cdn.test:80": 1])
        _ = log.add(.retargeted(Retargeted(from: "http://cdn.test/f?exp=1", to: "http://b.test/f?sig=2", bytes: 400)), task: "t")
        var task = log.state["t"]!
        #expect(task.phase == .queued && task.spec.url == "http://a.test/f" && task.currentURL == "http://b.test/f?sig=2")
        #expect(task.bytes == 400 && task.etag == "\"v1\"" && task.total == 1000 && task.redirects == 0)
        #expect(task.awaitsRetargetCheck)
        // The slot it held on its old host is given back.
        #expect(log.state.runningCount == 0 && log.state.runningByHost.isEmpty)
        // The next start records the new URL; the first claim from it confirms the bytes.
        _ = log.add(.started(Started(attempt: 2, offset: 400, url: "http://b.test/f?sig=2")), task: "t")
        #expect(log.state.runningByHost == ["b.test:80": 1])
        _ = log.add(.progressed(Progressed(bytes: 600, total: 1000, etag: "\"v1\"")), task: "t")
        task = log.state["t"]!
        #expect(!task.awaitsRetargetCheck && task.currentURL == "http://b.test/f?sig=2")
        #expect(AgentState.replay(log.events) == log.state)
    }

    @Test func startingOverDropsTheBytesAndSaysWhy() {
        var log = LogBuilder()
        log.create("t", url: "http://a.test/f")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://a.test/f")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 400, total: 1000, lastModified: "Mon")), task: "t")
        _ = log.add(.paused(Paused(bytes: 400, reason: .user)), task: "t")
        _ = log.add(.retargeted(Retargeted(from: "http://a.test/f", to: "http://b.test/g", bytes: 0, reason: "retargeted: why")), task: "t")
        let task = log.state["t"]!
        // A paused task stays paused, at its new URL.
        #expect(task.phase == .paused && task.pauseReason == .user && task.currentURL == "http://b.test/g")
        #expect(task.bytes == 0 && task.restartReason == "retargeted: why" && task.lastModified == nil && task.total == nil)
        #expect(!task.awaitsRetargetCheck && task.digests == nil)
    }

    @Test func aFailedTaskRunsAgainWithFreshRetries() {
        var log = LogBuilder()
        log.create("t", url: "http://a.test/f")
        for attempt in 1...3 {
            _ = log.add(.started(Started(attempt: attempt, offset: 0, url: "http://a.test/f")), task: "t")
            _ = log.add(.retrying(Retrying(attempt: attempt, reason: "503", delayMs: 10, bytes: 0)), task: "t")
        }
        _ = log.add(.failed(Failed(reason: "server answered 403 Forbidden for http://a.test/f", code: .http(403), bytes: 0)), task: "t")
        _ = log.add(.forgotten(Forgotten()), task: "t")
        #expect(log.state.activeCount == 0 && log.state.holder(ofDestination: log.state["t"]!.spec.dest!) == nil)
        _ = log.add(.retargeted(Retargeted(from: "http://a.test/f", to: "http://b.test/f", bytes: 0)), task: "t")
        let task = log.state["t"]!
        #expect(task.phase == .queued && task.attemptsUsed == 0 && task.endedAtMs == nil && task.firstStartedAtMs == nil)
        #expect(!task.forgotten && task.notBeforeMs == nil)
        #expect(log.state.activeCount == 1 && log.state.holder(ofDestination: task.spec.dest!) == "t")
    }

    // MARK: Coding and snapshots

    @Test func theEventCodesBothWaysAndReadsLeniently() throws {
        let full = Retargeted(from: "http://a.test/f", to: "http://b.test/f", bytes: 400, reason: "why",
                              metrics: AttemptMetrics(dnsUs: 1, connectUs: 2, tlsUs: 0, ttfbUs: 3, totalUs: 4, status: 200))
        let data = EventCoding.data(of: .retargeted(full))
        #expect(try EventCoding.body(type: "retargeted", data: data) == .retargeted(full))
        #expect(data.contains("\"to\":\"http://b.test/f\"") && data.contains("\"bytes\":400"))
        // Only `to` is required: a log written with fewer fields, or more, still reads.
        #expect(try EventCoding.body(type: "retargeted", data: #"{"to":"http://b.test/f","later_field":1}"#)
                == .retargeted(Retargeted(from: nil, to: "http://b.test/f", bytes: 0)))
        #expect(throws: EventCoding.DecodingFailure.self) { try EventCoding.body(type: "retargeted", data: #"{"bytes":1}"#) }
    }

    @Test func aSnapshotKeepsTheCheckStillOwed() throws {
        var log = LogBuilder()
        log.create("t", url: "http://a.test/f")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://a.test/f")), task: "t")
        _ = log.add(.progressed(Progressed(bytes: 400, total: 1000, etag: "\"v1\"")), task: "t")
        _ = log.add(.retargeted(Retargeted(from: "http://a.test/f", to: "http://b.test/f", bytes: 400)), task: "t")
        let decoded = try Snapshot.decode(Snapshot.encode(log.state))
        #expect(decoded == log.state)
        #expect(decoded["t"]?.awaitsRetargetCheck == true && decoded["t"]?.currentURL == "http://b.test/f")
    }
}

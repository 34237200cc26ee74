import Testing
@testable import SyncAgentCore

/// SPEC §7's response rules, one row each: what was asked, what the server
/// answered, and the verdict — accept (with the size the body completes),
/// restart from zero, retry, fail, hop or finish. Every case an adversary
/// found against the binary is a row here too.
@Suite("Response rules: the verdict on an answer")
struct ResponseRulesTests {
    static let url = "http://files.test/a.iso"

    struct Row: CustomTestStringConvertible, Sendable {
        var name: String
        var asked: ExchangeAsk
        var head: ResponseHead
        var verdict: ResponseVerdict
        var testDescription: String { name }
    }

    static func head(_ status: Int, etag: String? = nil, lastModified: String? = nil, range: String? = nil,
                     length: String? = nil, twoLengths: Bool = false, retryAfterMs: Int64? = nil,
                     redirectTarget: String? = nil) -> ResponseHead {
        ResponseHead(status: status, url: url, etag: etag, lastModified: lastModified,
                     contentRange: range.map { HTTPNumbers.contentRange($0).map { .value($0) } ?? .unreadable } ?? .absent,
                     contentLength: length.map { HTTPNumbers.contentLength($0).map { .value($0) } ?? .unreadable } ?? .absent,
                     conflictingLengths: twoLengths, retryAfterMs: retryAfterMs, redirectTarget: redirectTarget)
    }

    static let fresh = ExchangeAsk()
    static let resume = ExchangeAsk(offset: 500, ifRange: "\"v1\"", knownTotal: 1000, heldETag: "\"v1\"")
    static let segment = ExchangeAsk(offset: 4096, rangeEnd: 8192, ifRange: "\"v1\"", knownTotal: 10_000, heldETag: "\"v1\"")
    static let date = "Tue, 01 Oct 2024 10:00:00 GMT"
    /// Apache's answer for a file changed within the second: a weak ETag; the resume is guarded by the date.
    static let weakResume = ExchangeAsk(offset: 500, ifRange: date, knownTotal: 1000, heldETag: "W/\"v1\"", heldLastModified: date)
    static let dateResume = ExchangeAsk(offset: 500, ifRange: date, knownTotal: 1000, heldLastModified: date)
    static let weakGuard = "the server sent the whole file instead of the rest: it would not resume against If-Range: \(date), its ETag "
        + "W/\"v1\" being weak (RFC 9110 §13.1.5 lets If-Range resume only against a strong validator); the file had not changed"
    static let slice = ExchangeAsk(slice: HLSByteRange(length: 100, offset: 1000), knownTotal: 100)
    static let upload = ExchangeAsk(resumes: false, hopStatuses: [307, 308])
    static let withCredentials = ExchangeAsk(hopStatuses: [301, 302, 303, 307, 308])

    static let atFirstByte: [Row] = [
        Row(name: "a fresh 200 with its length", asked: fresh, head: head(200, length: "1000"),
            verdict: .accept(Acceptance(total: 1000))),
        Row(name: "a fresh 200 without a length ends when the server closes it", asked: fresh, head: head(200),
            verdict: .accept(Acceptance(total: nil))),
        Row(name: "a resume answered with its range", asked: resume,
            head: head(206, etag: "\"v1\"", range: "bytes 500-999/1000", length: "500"),
            verdict: .accept(Acceptance(total: 1000, answerEnd: 1000))),
        Row(name: "a 206 from the wrong byte", asked: resume, head: head(206, etag: "\"v1\"", range: "bytes 0-999/1000"),
            verdict: .end(.retryFromZero("server sent bytes from 0 when asked for 500"))),
        Row(name: "a 206 without Content-Range", asked: resume, head: head(206, etag: "\"v1\""),
            verdict: .end(.retryFromZero("server sent bytes from nowhere (no Content-Range) when asked for 500"))),
        Row(name: "a 206 with an unreadable Content-Range", asked: resume, head: head(206, etag: "\"v1\"", range: "bytes 9-1/1000"),
            verdict: .end(.retryFromZero("server sent bytes from nowhere (an unreadable Content-Range) when asked for 500"))),
        Row(name: "a 206 whose length is not its range's", asked: resume,
            head: head(206, etag: "\"v1\"", range: "bytes 500-999/1000", length: "10"),
            verdict: .end(.retryFromZero("server sent 10 bytes (Content-Length) for the 500 bytes 500–999 of its Content-Range (\(url))"))),
        Row(name: "If-Range ignored: the rest of another file", asked: resume,
            head: head(206, etag: "\"v2\"", range: "bytes 500-999/1000"),
            verdict: .end(.retryFromZero("the file changed on the server (validator \"v1\" → \"v2\")"))),
        Row(name: "a 206 to an ETag-guarded resume that names no ETag", asked: resume, head: head(206, range: "bytes 500-999/1000"),
            verdict: .end(.retryFromZero("the server's answer to a resume carried no ETag (the file had \"v1\"): it may be another file"))),
        Row(name: "a resume whose file changed size", asked: resume, head: head(206, etag: "\"v1\"", range: "bytes 500-999/2000"),
            verdict: .end(.retryFromZero("the file on the server changed size (1000 bytes → 2000)"))),
        Row(name: "Range ignored: the whole file again, from 0", asked: resume, head: head(200, etag: "\"v1\"", length: "1000"),
            verdict: .accept(Acceptance(total: 1000, restartReason: "the server ignored Range and sent the whole file"))),
        Row(name: "If-Range found a changed file: the whole new one, from 0", asked: resume,
            head: head(200, etag: "\"v2\"", length: "1200"),
            verdict: .accept(Acceptance(total: 1200, restartReason: "the file changed on the server (validator \"v1\" → \"v2\")"))),
        // Issue 38: "the file changed on the server" where it had not: Apache would not resume against the date.
        Row(name: "a weak ETag grown strong, the date refused: the same file, sent whole", asked: weakResume,
            head: head(200, etag: "\"v1\"", lastModified: date, length: "1000"),
            verdict: .accept(Acceptance(total: 1000, restartReason: weakGuard))),
        Row(name: "a weak ETag still weak, the date refused: the same file, sent whole", asked: weakResume,
            head: head(200, etag: "W/\"v1\"", lastModified: date, length: "1000"),
            verdict: .accept(Acceptance(total: 1000, restartReason: weakGuard))),
        Row(name: "a weak ETag that changed: another file", asked: weakResume,
            head: head(200, etag: "W/\"v2\"", lastModified: date, length: "1000"),
            verdict: .accept(Acceptance(total: 1000, restartReason: "the file changed on the server (validator W/\"v1\" → W/\"v2\")"))),
        Row(name: "a date refused, no ETag at all: the same file, sent whole", asked: dateResume,
            head: head(200, lastModified: date, length: "1000"),
            verdict: .accept(Acceptance(total: 1000, restartReason: "the server sent the whole file instead of the rest: it would not "
                                        + "resume against If-Range: \(date) (RFC 9110 §13.1.5 lets If-Range resume only against a strong "
                                        + "validator); the file had not changed"))),
        Row(name: "a date that changed: another file", asked: dateResume,
            head: head(200, lastModified: "Wed, 02 Oct 2024 10:00:00 GMT", length: "1000"),
            verdict: .accept(Acceptance(total: 1000, restartReason: "the file changed on the server (validator \(date) → "
                                        + "Wed, 02 Oct 2024 10:00:00 GMT)"))),
        Row(name: "a date answered without validators: nothing said of the file", asked: dateResume, head: head(200, length: "1000"),
            verdict: .accept(Acceptance(total: 1000, restartReason: "the server ignored Range and sent the whole file"))),
        Row(name: "two different Content-Lengths", asked: fresh, head: head(200, length: "10", twoLengths: true),
            verdict: .end(.retryFromZero("server sent two different Content-Length headers for \(url)"))),
        Row(name: "an unreadable Content-Length (curl would read 1e5 as 1)", asked: fresh, head: head(200, length: "1e5"),
            verdict: .end(.retryFromZero("server sent an unreadable Content-Length for \(url)"))),
        Row(name: "a range answered with the whole file", asked: segment, head: head(200, etag: "\"v1\"", length: "10000"),
            verdict: .end(.rangeRefused(reason: "the server answered 200, not 206, to a range of \(url)"))),
        Row(name: "a range answered whole because the file changed", asked: segment, head: head(200, etag: "\"v9\""),
            verdict: .end(.rangeRefused(reason: "the file changed on the server (validator \"v1\" → \"v9\")"))),
        Row(name: "a range of another file", asked: segment, head: head(206, etag: "\"v9\"", range: "bytes 4096-8191/10000"),
            verdict: .end(.rangeRefused(reason: "the file changed on the server (validator \"v1\" → \"v9\")"))),
        Row(name: "a range answered with less than asked", asked: segment,
            head: head(206, etag: "\"v1\"", range: "bytes 4096-5000/10000"),
            verdict: .accept(Acceptance(total: 10_000, answerEnd: 5001))),
        Row(name: "a playlist's byte range answered whole", asked: slice, head: head(200, length: "5000"),
            verdict: .end(.permanent(reason: "server answered 200, not 206, to the byte range of \(url)", code: .rangeIgnored))),
        Row(name: "a playlist's byte range, counted from its slice", asked: slice, head: head(206, range: "bytes 1000-1099/5000"),
            verdict: .accept(Acceptance(total: 100, answerEnd: 100))),
        Row(name: "a playlist's byte range from the wrong byte", asked: slice, head: head(206, range: "bytes 0-99/5000"),
            verdict: .end(.retryFromZero("server sent bytes from 0 when asked for 1000"))),
        Row(name: "404 fails", asked: fresh, head: head(404),
            verdict: .end(.permanent(reason: "server answered 404 Not Found for \(url)", code: .http(404)))),
        Row(name: "503 is retried after its Retry-After", asked: fresh, head: head(503, retryAfterMs: 30_000),
            verdict: .end(.retry("server answered 503 Service Unavailable for \(url)", retryAfterMs: 30_000))),
        Row(name: "a hop the agent takes (credentials stay home)", asked: withCredentials,
            head: head(302, redirectTarget: "http://cdn.test/a.iso"),
            verdict: .end(.redirect(to: "http://cdn.test/a.iso", status: 302))),
        Row(name: "a 301 to an upload is its answer, not a hop", asked: upload, head: head(301, redirectTarget: "http://other.test/"),
            verdict: .end(.permanent(reason: "server answered 301 for \(url)", code: .http(301)))),
        Row(name: "a 307 to an upload keeps its method and body: a hop", asked: upload,
            head: head(307, redirectTarget: "http://other.test/up"), verdict: .end(.redirect(to: "http://other.test/up", status: 307))),
        Row(name: "a 3xx with nowhere to go is an answer", asked: withCredentials, head: head(302),
            verdict: .end(.permanent(reason: "server answered 302 for \(url)", code: .http(302)))),
    ]

    @Test(arguments: atFirstByte)
    func atTheFirstByte(_ row: Row) {
        #expect(ResponseRules.judge(row.head, asked: row.asked) == row.verdict)
    }

    struct EndRow: CustomTestStringConvertible, Sendable {
        var name: String
        var asked: ExchangeAsk
        var head: ResponseHead
        var outcome: AttemptOutcome?
        var testDescription: String { name }
    }

    static let atTheEnd: [EndRow] = [
        EndRow(name: "304 to a conditional request: unchanged", asked: ExchangeAsk(conditional: true), head: head(304, etag: "\"e\""),
               outcome: .notModified(etag: "\"e\"")),
        EndRow(name: "304 to a data task that asked nothing: its result", asked: ExchangeAsk(accepts: 200...399, resumes: false),
               head: head(304), outcome: nil),
        EndRow(name: "304 to a download that asked nothing fails", asked: fresh, head: head(304),
               outcome: .permanent(reason: "server answered 304 for \(url)", code: .http(304))),
        EndRow(name: "416 saying the file is what is held, where it was longer: another file", asked: resume, head: head(416, range: "bytes */500"),
               outcome: .retryFromZero("server answered 416 for byte 500 saying its file has 500 bytes, where it said 1000 before: "
                                       + "the file changed")),
        EndRow(name: "416 at the end the task knew: complete", asked: ExchangeAsk(offset: 1000, knownTotal: 1000),
               head: head(416, range: "bytes */1000"), outcome: .complete(bytes: 1000)),
        EndRow(name: "416 with no size, at the known end: complete", asked: ExchangeAsk(offset: 1000, knownTotal: 1000),
               head: head(416), outcome: .complete(bytes: 1000)),
        EndRow(name: "416 naming another size: another file", asked: resume, head: head(416, range: "bytes */2000"),
               outcome: .retryFromZero("server answered 416 for byte 500 saying its file has 2000 bytes, where it said 1000 before: "
                                       + "the file changed")),
        EndRow(name: "416 for a range is never the file's end", asked: ExchangeAsk(offset: 10_000, rangeEnd: 12_000, knownTotal: 10_000),
               head: head(416, range: "bytes */10000"),
               outcome: .retryFromZero("server answered 416 for byte 10000 and its file has 10000 bytes")),
        EndRow(name: "416 to a fresh request that says nothing", asked: fresh, head: head(416),
               outcome: .retryFromZero("server answered 416 for byte 0 and it did not say its size")),
        EndRow(name: "a playlist's byte range past its file's end", asked: slice, head: head(416, range: "bytes */900"),
               outcome: .permanent(reason: "the playlist's byte range starts at byte 1000 of \(url), whose file has 900 bytes",
                                   code: .http(416))),
        EndRow(name: "429 is retried", asked: fresh, head: head(429),
               outcome: .retry("server answered 429 Too Many Requests for \(url)")),
    ]

    @Test(arguments: atTheEnd)
    func whenCurlIsDone(_ row: EndRow) {
        #expect(ResponseRules.ending(row.head, asked: row.asked) == row.outcome)
    }

    @Test func aBodyThatStopsShortIsRetriedFromWhereItStopped() {
        #expect(ResponseRules.shortBody(written: 500, end: 1000, asked: Self.fresh) == .retry("connection closed at byte 500 of 1000"))
        #expect(ResponseRules.shortBody(written: 1000, end: 1000, asked: Self.fresh) == nil)
        // Unknown end (no length): the close is the end.
        #expect(ResponseRules.shortBody(written: 500, end: nil, asked: Self.fresh) == nil)
        // What does not resume is sent or fetched again whole anyway.
        #expect(ResponseRules.shortBody(written: 500, end: 1000, asked: Self.upload) == nil)
    }
}

@Suite("Request plans: what one request sends")
struct RequestPlanTests {
    static func task(_ configure: (inout TaskSpec) -> Void = { _ in }) -> TaskState {
        var spec = TaskSpec(url: "http://files.test/a.iso", dest: "/d/a.iso")
        configure(&spec)
        return TaskState(id: "t", spec: spec, seq: 1, atMs: 1)
    }

    @Test func theJobsHeadersReplaceTheConfigsOfTheSameName() throws {
        let shared = [Header(name: "User-Agent", value: "config"), Header(name: "X-Trace", value: "1")]
        let plan = try RequestPlan.of(Self.task { $0.headers = [Header(name: "user-agent", value: "job")] }, sharedHeaders: shared)
        #expect(plan.headers == [Header(name: "X-Trace", value: "1"), Header(name: "user-agent", value: "job")])
        #expect(plan.method == "GET" && plan.body == .none && plan.range == nil && plan.redirects == .byCurl)
    }

    @Test func credentialsGoToTheJobsOwnHostOnly() throws {
        let secret = Header(name: "X-Api-Key", value: "k")
        var task = Self.task { $0.headers = [secret] }
        let home = try RequestPlan.of(task, sharedHeaders: [])
        #expect(home.headers == [secret])
        // A credential makes the agent take every hop itself, GET's five of them.
        #expect(home.redirects == .byAgent && home.ask.hopStatuses == [301, 302, 303, 307, 308])
        task.currentURL = "http://elsewhere.test/a.iso"
        #expect(try RequestPlan.of(task, sharedHeaders: []).headers.isEmpty)
        // A child's origin is its parent's URL.
        #expect(try RequestPlan.of(task, sharedHeaders: [], origin: "http://elsewhere.test/master.m3u8").headers == [secret])
    }

    @Test func aResumeAsksForTheRestGuardedByItsValidator() throws {
        let plan = try RequestPlan.of(Self.task(), sharedHeaders: [], offset: 500, ifRange: "\"v1\"")
        #expect(plan.range == "500-")
        #expect(plan.headers == [Header(name: "If-Range", value: "\"v1\"")])
        #expect(plan.ask.offset == 500 && plan.ask.ifRange == "\"v1\"")
        // A fresh request sends no If-Range, even with a validator at hand.
        let fresh = try RequestPlan.of(Self.task(), sharedHeaders: [], offset: 0, ifRange: "\"v1\"")
        #expect(fresh.range == nil && fresh.headers.isEmpty && fresh.ask.ifRange == nil)
    }

    @Test func aRangeOfASegmentedDownloadIsGuardedByTheDownloadsValidator() throws {
        let plan = try RequestPlan.of(Self.task(), sharedHeaders: [], offset: 4096, rangeEnd: 8192, ifRange: "\"v1\"")
        #expect(plan.range == "4096-8191")
        #expect(plan.ask.heldETag == "\"v1\"" && plan.ask.heldLastModified == nil && plan.ask.rangeEnd == 8192)
    }

    @Test func aPlaylistsByteRangeAsksForItsSliceOnly() throws {
        let task = Self.task { $0.byteRange = HLSByteRange(length: 100, offset: 1000) }
        #expect(try RequestPlan.of(task, sharedHeaders: []).range == "1000-1099")
        let resumed = try RequestPlan.of(task, sharedHeaders: [], offset: 40, ifRange: "\"v\"")
        #expect(resumed.range == "1040-1099" && resumed.ask.knownTotal == 100)
    }

    @Test func onlyAWholeFileMayBeAnsweredNotModified() throws {
        let validators = PublishedValidators(etag: "\"e\"", lastModified: "Mon, 01 Jan 2024 00:00:00 GMT")
        let whole = try RequestPlan.of(Self.task(), sharedHeaders: [], ifChanged: validators)
        #expect(whole.headers == [Header(name: "If-None-Match", value: "\"e\""),
                                  Header(name: "If-Modified-Since", value: "Mon, 01 Jan 2024 00:00:00 GMT")])
        #expect(whole.ask.conditional)
        let resumed = try RequestPlan.of(Self.task(), sharedHeaders: [], offset: 10, ifChanged: validators)
        #expect(!resumed.ask.conditional && !resumed.headers.contains { $0.name == "If-None-Match" })
    }

    @Test func aFileSentAsABodySaysItIsBytes() throws {
        let post = try RequestPlan.of(Self.task { $0.kind = .upload; $0.bodyFile = "/tmp/b"; $0.method = "POST" }, sharedHeaders: [])
        #expect(post.body == .file(path: "/tmp/b", slice: nil, rewindable: true))
        #expect(post.headers == [Header(name: "Content-Type", value: "application/octet-stream")])
        let put = try RequestPlan.of(Self.task { $0.kind = .upload; $0.bodyFile = "/tmp/b" }, sharedHeaders: [])
        #expect(put.method == "PUT" && put.headers.isEmpty && put.countsSent && put.ask.hopStatuses.isEmpty)
        let form = try RequestPlan.of(Self.task { $0.kind = .upload; $0.bodyFile = "/tmp/b"; $0.formField = "file" }, sharedHeaders: [])
        #expect(form.method == "POST" && form.body == .form(path: "/tmp/b", field: "file", fields: []))
    }

    @Test func aProtocolStepSendsItsSliceAndIsNeverRedirected() throws {
        let task = Self.task { $0.kind = .upload; $0.bodyFile = "/tmp/b"; $0.headers = [Header(name: "Authorization", value: "x")] }
        let step = ProtocolRequest(url: "http://files.test/up/1", method: "PATCH",
                                   headers: [Header(name: "Upload-Offset", value: "10")], body: ByteSpan(10, 20))
        let plan = try RequestPlan.of(task, sharedHeaders: [], protocolRequest: step)
        #expect(plan.url == "http://files.test/up/1" && plan.method == "PATCH" && plan.redirects == .never)
        #expect(plan.body == .file(path: "/tmp/b", slice: ByteSpan(10, 20), rewindable: false))
        #expect(plan.isProtocolStep && plan.keepsResponseHeaders && !plan.countsSent && plan.ask.knownTotal == nil)
        let creation = ProtocolRequest(url: "http://files.test/up", method: "POST", headers: [], body: nil)
        #expect(try RequestPlan.of(task, sharedHeaders: [], protocolRequest: creation).body == .empty)
    }

    @Test func aLineBreakInAHeaderNeverReachesTheWire() {
        #expect(throws: RequestPlan.Refusal.self) {
            try RequestPlan.of(Self.task { $0.headers = [Header(name: "X", value: "a\r\nHost: evil")] }, sharedHeaders: [])
        }
    }
}

@Suite("Failure codes")
struct FailureCodeTests {
    /// `submit --wait` exits as aria2c does for the same failure.
    @Test(arguments: [
        (FailureCode.http(404), Int32(3)), (.http(410), 3), (.http(403), 24), (.http(401), 24), (.checksumMismatch, 32),
        (.diskFull, 9), (.destExists, 13), (.totalTimeout, 2), (.curl(6), 19), (.curl(7), 6), (.retriesExhausted, 6),
        (.ioError, 17), (.http(400), 1), (.badPlaylist, 1), (.other("new_code"), 1),
    ])
    func aria2cExitStatus(code: FailureCode, status: Int32) {
        #expect(code.aria2ExitStatus == status)
    }

    @Test func everyCodeIsWrittenAsTheLogHasAlwaysHeldIt() {
        let written = ["disk_full", "io_error", "local_error", "log_error", "read_error", "cannot_start", "dest_busy",
                       "dest_exists", "dest_reserved", "dest_unreachable", "dest_refused", "part_changed", "checksum_mismatch", "total_timeout",
                       "retries_exhausted", "range_ignored", "bad_playlist", "no_variant", "separate_audio",
                       "max_duration_missing", "playlist_unavailable", "segment_failed", "segment_changed", "cannot_join",
                       "decrypt_failed", "bad_key", "part_failed", "body_unreadable", "body_changed", "upload_refused", "too_large",
                       "http_404", "http_503", "curl_7", "curl_0"]
        for raw in written {
            let code = FailureCode(rawValue: raw)
            #expect(code.rawValue == raw)
            if case .other = code { Issue.record("\(raw) should be a code this build knows") }
        }
        #expect(FailureCode(rawValue: "http_404") == .http(404))
        #expect(FailureCode(rawValue: "curl_28") == .curl(28))
    }

    @Test func aCodeThisBuildDoesNotKnowIsKeptAsItWasWritten() {
        for raw in ["quota_exceeded", "http_", "http_04", "http_-1", "curl_x", "", "HTTP_404"] {
            #expect(FailureCode(rawValue: raw) == .other(raw))
            #expect(FailureCode(rawValue: raw).rawValue == raw)
        }
    }
}

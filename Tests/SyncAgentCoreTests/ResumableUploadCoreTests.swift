import Foundation
import Testing
@testable import SyncAgentCore

/// Resumable uploads (issue 11) in the pure core: the job's keys, chunk
/// sizes, what each server answer means, the fold, and what a restart does.
@Suite("Resumable uploads: keys, chunk sizes, answers, fold")
struct ResumableUploadCoreTests {
    let parser = JobParser(downloadDir: "/home/me/Downloads")

    func spec(_ text: String) throws -> TaskSpec {
        guard case .transfer(_, let spec) = try parser.parse(Array(text.utf8)) else { throw KeyError(key: nil, "not a transfer") }
        return spec
    }

    func problem(_ text: String) -> String? {
        do {
            _ = try parser.parse(Array(text.utf8))
            return nil
        } catch {
            return (error as? KeyError)?.description
        }
    }

    let upload = "url = \"http://h.test/files/\"\nkind = \"upload\"\nbody_file = \"/v.mp4\"\n"

    @Test func theJobsKeys() throws {
        #expect(try spec(upload).upload == nil)
        #expect(try spec(upload + "protocol = \"plain\"").upload == nil)
        #expect(try spec(upload + "protocol = \"tus\"").upload == UploadOptions(protocol: .tus))
        #expect(try spec(upload + "protocol = \"tus\"\nchunk_size = \"8M\"\nparallel = 4").upload
            == UploadOptions(protocol: .tus, chunkSize: 8 << 20, parallel: 4))
        #expect(try spec(upload + "protocol = \"ietf\"\nchunk_size = \"auto\"").upload == UploadOptions(protocol: .ietf))
        #expect(try spec(upload + "protocol = \"ietf\"\nchunk_size = 65536").upload?.chunkSize == 65536)
        // A plain upload stays one request, as before.
        #expect(try spec(upload).behaviour.resumes == false)
        #expect(try spec(upload + "protocol = \"tus\"").behaviour.resumes == true)
    }

    @Test func badKeysAreNamed() {
        #expect(problem(upload + "protocol = \"ftp\"")?.hasPrefix("key \"protocol\"") == true)
        #expect(problem(upload + "protocol = \"tus\"\nchunk_size = \"huge\"")?.hasPrefix("key \"chunk_size\" must be \"auto\"") == true)
        #expect(problem(upload + "protocol = \"tus\"\nchunk_size = \"100\"")?.hasPrefix("key \"chunk_size\"") == true)
        #expect(problem(upload + "protocol = \"tus\"\nparallel = 17")?.hasPrefix("key \"parallel\"") == true)
        #expect(problem(upload + "protocol = \"ietf\"\nparallel = 2")
            == "key \"parallel\" needs protocol = \"tus\" (its concatenation extension sends parts side by side)")
        #expect(problem(upload + "chunk_size = \"8M\"")?.hasPrefix("key \"chunk_size\" applies to resumable uploads only") == true)
        #expect(problem(upload + "protocol = \"tus\"\nmethod = \"PUT\"")?.hasPrefix("key \"method\" does not apply") == true)
        #expect(problem(upload + "protocol = \"tus\"\nform_field = \"file\"")?.hasPrefix("key \"form_field\" does not apply") == true)
        #expect(problem("url = \"http://h.test/a\"\nprotocol = \"tus\"") == "key \"protocol\" applies to uploads (kind = \"upload\") only")
    }

    /// What a server may claim after a restart: the log's offset, then two chunks at most.
    @Test func aClaimAfterARestartIsBoundedByTheLogAndTwoChunks() {
        let big: Int64 = 1 << 40
        #expect(ResumableUpload.believableEnd(logged: 0, chunkSize: 4 << 20, size: big) == 8 << 20)
        // Auto-sized: the probe, then at most 4 times it; or 4 and 16 times the last chunk logged, up to 64 MiB each.
        #expect(ResumableUpload.believableEnd(logged: 1 << 20, chunkSize: nil, size: big) == (1 << 20) + (1 << 20) + (4 << 20))
        #expect(ResumableUpload.believableEnd(logged: 0, chunkSize: nil, lastChunk: 2 << 20, size: big) == (8 << 20) + (32 << 20))
        #expect(ResumableUpload.believableEnd(logged: 0, chunkSize: nil, lastChunk: 32 << 20, size: big) == 128 << 20)
        // Tiny fixed chunks are logged once per interval.
        #expect(ResumableUpload.believableEnd(logged: 0, chunkSize: 1024, unlogged: 8 << 20, size: big) == (8 << 20) + 2048)
        // Never past the upload, and a hostile min-append-size cannot overflow it.
        #expect(ResumableUpload.believableEnd(logged: 100, chunkSize: 4 << 20, size: 1000) == 1000)
        #expect(ResumableUpload.believableEnd(logged: 1 << 62, chunkSize: Int64.max / 2, size: big) == big)
    }

    @Test func chunksProbeThenFollowTheLink() {
        var sizer = ChunkSizer(fixed: nil)
        #expect(sizer.next(remaining: 100 << 20) == ResumableUpload.probeChunk)
        #expect(sizer.next(remaining: 1000) == 1000)
        // 1 MiB in 100 ms: 10 MiB/s, so about 30 MiB for 3 s; but at most 4 times the chunk
        // before, so that a restart can bound what was in flight (`believableEnd`).
        sizer.measured(bytes: 1 << 20, elapsedMs: 100)
        #expect(sizer.next(remaining: 1 << 40) == 4 << 20)
        sizer.measured(bytes: 4 << 20, elapsedMs: 400)
        #expect(sizer.next(remaining: 1 << 40) == 16 << 20)
        sizer.measured(bytes: 16 << 20, elapsedMs: 1600)
        let fast = sizer.next(remaining: 1 << 40)
        #expect(fast > 25 << 20 && fast <= 31 << 20 && fast % (64 << 10) == 0)
        // The link slows down to 100 KiB/s: the next chunk is the smallest.
        sizer.measured(bytes: 100 << 10, elapsedMs: 1000)
        #expect(sizer.next(remaining: 1 << 40) == ResumableUpload.smallestChunk)
        // A very fast link: never over the largest, nor over what the server takes.
        for _ in 0..<3 { sizer.measured(bytes: 64 << 20, elapsedMs: 1) }
        #expect(sizer.next(remaining: 1 << 40) == ResumableUpload.largestChunk)
        sizer.serverMaximum = 5 << 20
        #expect(sizer.next(remaining: 1 << 40) == 5 << 20)
        // A server's smallest append raises a small chunk; only the last may be shorter.
        var careful = ChunkSizer(fixed: nil)
        careful.serverMinimum = 2 << 20
        #expect(careful.next(remaining: 100 << 20) == 2 << 20 && careful.next(remaining: 1000) == 1000)
        // A fixed size is what the job says, whatever the link does.
        var fixed = ChunkSizer(fixed: 8 << 20)
        fixed.measured(bytes: 1, elapsedMs: 100_000)
        #expect(fixed.next(remaining: 1 << 30) == 8 << 20)
        #expect(fixed.next(remaining: 3) == 3)
    }

    @Test func aFileIsSplitIntoPartsThatCoverIt() {
        let parts = ResumableUpload.parts(size: 10_000_003, parallel: 4)
        #expect(parts.count == 4)
        #expect(ByteRanges(parts).spans == [ByteSpan(0, 10_000_003)])
        #expect(parts.dropLast().allSatisfy { $0.length == 10_000_003 / 4 })
        // Too small for parts under the smallest chunk: fewer parts, or one.
        #expect(ResumableUpload.parts(size: 600 << 10, parallel: 8).count == 2)
        #expect(ResumableUpload.parts(size: 1000, parallel: 8) == [ByteSpan(0, 1000)])
        #expect(ResumableUpload.parts(size: 0, parallel: 4) == [ByteSpan(0, 0)])
    }

    @Test func serverNumbersAreUntrusted() {
        #expect(UploadHeaders.integer(" 42 ") == 42)
        for bad in ["", "-1", "1e5", "0x10", "99999999999999999999", "4 2", "٣"] { #expect(UploadHeaders.integer(bad) == nil) }
        #expect(UploadHeaders.list("creation, termination,,checksum ") == ["creation", "termination", "checksum"])
        #expect(UploadHeaders.boolean("?1") == true && UploadHeaders.boolean("?0") == false && UploadHeaders.boolean("1") == nil)
        #expect(UploadHeaders.limits("max-size=100, max-append-size=50;x, max-age=3600, junk, min-size=-1")
            == ["max-size": 100, "max-append-size": 50, "max-age": 3600])
        #expect(UploadHeaders.metadata([("filename", "v é.mp4")]) == "filename " + Data("v é.mp4".utf8).base64EncodedString())
    }

    @Test func whatEachAnswerMeans() {
        let location = [Header(name: "Location", value: "/files/abc?x=1")]
        #expect(UploadAnswers.creation(status: 201, headers: location, informational: [], requestURL: "http://h.test/files/")
            == .created(url: "http://h.test/files/abc?x=1"))
        // An IETF server may give the URL in its 104 only.
        #expect(UploadAnswers.creation(status: 201, headers: [], informational: location, requestURL: "http://h.test/up")
            == .created(url: "http://h.test/files/abc?x=1"))
        if case .refused = UploadAnswers.creation(status: 201, headers: [], informational: [], requestURL: "http://h.test/") {} else {
            Issue.record("a creation without Location must be refused")
        }
        if case .refused(_, let code) = UploadAnswers.creation(status: 201, headers: [Header(name: "Location", value: "file:///etc/passwd")],
                                                              informational: [], requestURL: "http://h.test/") {
            #expect(code == .uploadRefused)
        } else {
            Issue.record("a file: upload URL must be refused")
        }
        // An upload URL past the 8 KiB any URL may have is refused as too long, not as "not http" (issue 42).
        let long = [Header(name: "Location", value: "/files/abc?sig=" + String(repeating: "s", count: 8_200))]
        #expect(UploadAnswers.creation(status: 201, headers: long, informational: [], requestURL: "http://h.test/files/")
            == .refused(reason: "the server's upload URL (its Location) is 8228 bytes long, over the 8 KiB a URL may have", code: .uploadRefused))
        #expect(UploadAnswers.creation(status: 413, headers: [], informational: [], requestURL: "http://h.test/")
            == .refused(reason: "the file is larger than the server accepts (413) when creating the upload", code: .tooLarge))

        let offset = { (value: String) in [Header(name: "Upload-Offset", value: value), Header(name: "Upload-Length", value: "100")] }
        #expect(UploadAnswers.offset(status: 200, headers: offset("40"), size: 100) == .holds(offset: 40))
        #expect(UploadAnswers.offset(status: 404, headers: [], size: 100) == .gone(reason: "the server no longer knows the upload (404 Not Found)"))
        #expect(UploadAnswers.offset(status: 410, headers: [], size: 100) == .gone(reason: "the server no longer keeps the upload (410 Gone)"))
        // A server that claims more than the file, or another length: its upload is not ours.
        if case .gone = UploadAnswers.offset(status: 200, headers: [Header(name: "Upload-Offset", value: "101")], size: 100) {} else {
            Issue.record("an offset past the end must not be believed")
        }
        if case .gone = UploadAnswers.offset(status: 200, headers: offset("4"), size: 99) {} else {
            Issue.record("another Upload-Length must not be believed")
        }
        if case .refused = UploadAnswers.offset(status: 200, headers: [Header(name: "Upload-Offset", value: "-3")], size: 100) {} else {
            Issue.record("an unreadable offset must not be believed")
        }

        // 423 Locked: a tus server's answer while the PATCH that broke off still holds the upload. Asked again later.
        #expect(UploadAnswers.offset(status: 423, headers: [], size: 100) == .tryLater(reason: "the server answered 423 when asking how far the upload got"))
        #expect(UploadAnswers.offset(status: 503, headers: [], size: 100) == .tryLater(reason: "the server answered 503 when asking how far the upload got"))
        if case .tryLater = UploadAnswers.creation(status: 429, headers: [], informational: [], requestURL: "http://h/files") {} else {
            Issue.record("a creation answered 429 must be tried again")
        }
        if case .refused = UploadAnswers.offset(status: 403, headers: [], size: 100) {} else {
            Issue.record("a 403 is an answer, not a reason to wait")
        }

        #expect(UploadAnswers.append(status: 204, headers: offset("60"), from: 40, length: 20, size: 100) == .holds(offset: 60))
        // IETF: no Upload-Offset in the answer means every byte was taken.
        #expect(UploadAnswers.append(status: 204, headers: [], from: 40, length: 20, size: 100) == .holds(offset: 60))
        #expect(UploadAnswers.append(status: 409, headers: [], from: 40, length: 20, size: 100) == .offsetMismatch)
        #expect(UploadAnswers.append(status: 460, headers: [], from: 40, length: 20, size: 100) == .checksumMismatch)
        #expect(UploadAnswers.append(status: 204, headers: offset("999"), from: 40, length: 20, size: 100) == .offsetMismatch)
        // More than was sent is never believed: the upload would finish with a hole.
        #expect(UploadAnswers.append(status: 204, headers: offset("80"), from: 40, length: 20, size: 100) == .offsetMismatch)
        if case .gone = UploadAnswers.append(status: 404, headers: [], from: 40, length: 20, size: 100) {} else {
            Issue.record("404 on an append means the upload is gone")
        }
    }

    @Test func theFoldAndTheRecoveryPlan() throws {
        var state = AgentState()
        let spec = try spec(upload + "protocol = \"tus\"")
        state.apply(Event(seq: 1, atMs: 1, task: "u", body: .created(spec)))
        #expect(RecoveryPlan.plan(for: state["u"]!, nowMs: 1) == .startFromZero)
        state.apply(Event(seq: 2, atMs: 2, task: "u", body: .started(Started(attempt: 1, offset: 0, url: spec.url))))
        state.apply(Event(seq: 3, atMs: 3, task: "u", body: .uploadCreated(UploadCreated(url: "http://h.test/files/1", protocol: .tus))))
        // Created, nothing sent yet: a restart asks the upload URL, never creates a second upload.
        #expect(RecoveryPlan.plan(for: state["u"]!, nowMs: 3) == .resumeUpload(url: "http://h.test/files/1", at: 0))
        state.apply(Event(seq: 4, atMs: 4, task: "u", body: .progressed(Progressed(bytes: 300, total: 1000, chunk: 300))))
        #expect(RecoveryPlan.plan(for: state["u"]!, nowMs: 4) == .resumeUpload(url: "http://h.test/files/1", at: 300))
        #expect(RecoveryPlan.resumeUpload(url: "http://u:pw@h.test/f/1?token=s", at: 300).words.contains("s3cr") == false)
        // The server lost it: a new upload holds nothing, and says why.
        state.apply(Event(seq: 5, atMs: 5, task: "u", body: .uploadCreated(UploadCreated(url: "http://h.test/files/2", protocol: .tus,
                                                                                        reason: "expired"))))
        #expect(state["u"]?.bytes == 0 && state["u"]?.restartReason == "expired")
        state.apply(Event(seq: 6, atMs: 6, task: "u", body: .retrying(Retrying(attempt: 1, reason: "drop", delayMs: 0, bytes: 0))))
        #expect(RecoveryPlan.plan(for: state["u"]!, nowMs: 6) == .resumeUpload(url: "http://h.test/files/2", at: 0))
    }

    @Test func aSplitUploadSettlesWhenEveryPartHasFinished() throws {
        var state = AgentState()
        let spec = try spec(upload + "protocol = \"tus\"\nparallel = 2")
        state.apply(Event(seq: 1, atMs: 1, task: "p", body: .created(spec)))
        state.apply(Event(seq: 2, atMs: 2, task: "p", body: .started(Started(attempt: 1, offset: 0, url: spec.url))))
        #expect(state.runningCount == 1)
        for (index, span) in [ByteSpan(0, 500), ByteSpan(500, 1000)].enumerated() {
            var part = spec
            part.parent = "p"
            part.upload = UploadOptions(protocol: .tus, part: span)
            state.apply(Event(seq: Int64(3 + index), atMs: 3, task: "p.part\(index + 1)", body: .created(part)))
        }
        #expect(state.settledParents.isEmpty)
        state.apply(Event(seq: 5, atMs: 5, task: "p", body: .progressed(Progressed(bytes: 0, total: 1000))))
        state.apply(Event(seq: 6, atMs: 6, task: "p", body: .split(Split(parts: ["p.part1", "p.part2"]))))
        // The parent's slot goes to its parts.
        #expect(state.runningCount == 0 && state["p"]?.isFannedOut == true)
        #expect(RecoveryPlan.plan(for: state["p"]!, in: state, nowMs: 6) == .waitForParts(done: 0, total: 2))
        for (seq, id) in [(7, "p.part1"), (8, "p.part2")] {
            state.apply(Event(seq: Int64(seq), atMs: 7, task: id, body: .started(Started(attempt: 1, offset: 0, url: spec.url))))
            state.apply(Event(seq: Int64(seq) + 10, atMs: 8, task: id, body: .progressed(Progressed(bytes: 500, total: 500))))
        }
        #expect(state.figures(of: state["p"]!).percent == 100)
        #expect(state.settledParents.isEmpty)
        state.apply(Event(seq: 30, atMs: 9, task: "p.part1", body: .finished(Finished(bytes: 500, dest: nil))))
        #expect(state.settledParents.isEmpty)
        state.apply(Event(seq: 31, atMs: 9, task: "p.part2", body: .finished(Finished(bytes: 500, dest: nil))))
        #expect(state.settledParents == ["p"])
    }

    @Test func newEventsRoundTrip() throws {
        for body in [EventBody.uploadCreated(UploadCreated(url: "http://h.test/f/1", protocol: .ietf, extensions: nil, reason: "gone")),
                     .split(Split(parts: ["a.part1", "a.part2"])),
                     .progressed(Progressed(bytes: 5, total: 9, chunk: 4)),
                     .created(try spec(upload + "protocol = \"tus\"\nchunk_size = \"2M\"\nparallel = 3"))] {
            let decoded = try EventCoding.body(type: body.type, data: EventCoding.data(of: body))
            #expect(decoded == body)
        }
    }
}

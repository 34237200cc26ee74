import Foundation
import Testing
@testable import SyncAgentCore

@Suite("Event data JSON")
struct EventCodingTests {
    static let bodies: [EventBody] = [
        .created(TaskSpec(url: "https://h/x.iso", dest: "/d/x.iso", sha256: String(repeating: "a", count: 64),
                          priority: 3, overwrite: .replace, headers: [Header(name: "Authorization", value: "Bearer s3cret")],
                          batch: "nightly", notify: .each, retries: 2, maxSpeed: 2048, notBeforeMs: 5,
                          source: JobSource(file: "x.job", identity: "1:2:3:abc"))),
        .started(Started(attempt: 2, offset: 100, url: "https://h/x.iso")),
        .progressed(Progressed(bytes: 10, total: 20, etag: "\"e\"", lastModified: "Sun", restartReason: "why")),
        .paused(Paused(bytes: 7, reason: .agentStopping)),
        .resumed(Resumed(bytes: 7, reason: "agent restarted")),
        .redirected(Redirected(from: "http://a", to: "http://b", status: 302)),
        .retrying(Retrying(attempt: 1, reason: "503", delayMs: 2000, bytes: 5)),
        .finished(Finished(bytes: 20, dest: "/d/x.iso", sha256: "ff")),
        .failed(Failed(reason: "server answered 404", code: .http(404), bytes: 0)),
        .cancelled(Cancelled(bytes: 3)),
        .rejected(Rejected(file: "bad.job", error: "key \"url\" is missing")),
        .agentStarted(AgentStarted(pid: 9, version: "0.1.0")),
        .agentStopped(AgentStopped(reason: "SIGTERM")),
        .compacted(Compacted(snapshotSeq: 10_000_004, tasks: 10_000, events: 9_999_000, olderThanS: 604_800,
                             bytesBefore: 951_406_592, bytesAfter: 6_000_640, trigger: "requested")),
        .compacted(.failed("\"COMMIT\" failed in /s/events.sqlite: database or disk is full", olderThanS: 0, trigger: "log_size")),
        .batchFinished(BatchFinished(batch: "n", finished: ["a"], failed: ["b"])),
        .notified(Notified(batch: "n", summary: "1 finished, 1 failed", delivered: false, warning: "no bus")),
        // Upload and data tasks, and the metrics every attempt ends with.
        .created(TaskSpec(url: "https://h/up", kind: .upload, dest: nil, method: "POST", bodyFile: "/v/a.mp4",
                          formField: "file", form: [FormField(name: "title", value: "holiday \"24\"")])),
        .finished(Finished(bytes: 9, dest: nil, status: 201, responseHeaders: [Header(name: "Set-Cookie", value: "s=1")],
                           metrics: metrics)),
        .failed(Failed(reason: "server answered 404", code: .http(404), bytes: 0, metrics: metrics)),
        .retrying(Retrying(attempt: 1, reason: "503", delayMs: 2000, bytes: 5, metrics: metrics)),
        .retrying(Retrying(attempt: 2, reason: "ranges disagree; one connection from now on", delayMs: 0, bytes: 0, free: true)),
        .paused(Paused(bytes: 7, reason: .user, metrics: AttemptMetrics())),
        .cancelled(Cancelled(bytes: 3, metrics: metrics)),
        // Issue 9: control outcomes, reloads, skips, rejections that know their file.
        .controlled(Controlled(action: "pause", target: "a", outcome: "a: nothing to do: task already finished",
                               file: "pause.job", identity: "1:2:3:abc")),
        // Issue 39: how many tasks it changed, for the command waiting on it.
        .controlled(Controlled(action: "cancel", target: "*", outcome: "a: cancelled", file: "cancel.job", identity: "1:2:4:abc",
                               changed: 1)),
        .configReloaded(ConfigReloaded(file: "/c.toml", applied: ["max_speed"], needRestart: ["inbox"])),
        .configReloaded(ConfigReloaded(file: "/c.toml", applied: [], needRestart: [], error: "key \"x\" is not a known key")),
        .finished(Finished(bytes: 0, dest: nil, skipped: "skipped: task a (queued) already brings /d/x")),
        .rejected(Rejected(file: "bad.job", error: "key \"url\" is missing", identity: "1:2:3:def")),
        // Issue 10: HLS parents and children.
        .created(TaskSpec(url: "https://h/v/seg1.ts", dest: "/d/v.part/seg1.ts", notify: .none, parent: "v",
                          byteRange: HLSByteRange(length: 100, offset: 2000))),
        .created(TaskSpec(url: "https://h/v/master.m3u8", kind: .hls, dest: "/d/v",
                          hls: HLSOptions(variant: "1280x720", output: .file, maxDurationS: 60))),
        .expanded(Expanded(playlist: "https://h/v/720.m3u8", targetDurationMs: 6000, ended: true,
                           entries: [HLSEntry(child: "v.seg1.ts", durationMs: 5_005, sequence: 1, discontinuity: true,
                                              keyChild: "v.key0.key", iv: "000102030405060708090a0b0c0d0e0f",
                                              mapChild: "v.init1.mp4")])),
        // Issue 14: what overwrite = "update" needs to know.
        .finished(Finished(bytes: 20, dest: "/d/x.iso", modifiedNs: 1_795_000_000_123_456_789)),
        .finished(Finished(bytes: 20, dest: "/d/x.iso", metrics: metrics, modifiedNs: 5, unchanged: true)),
        // Issue 14: segmented downloads.
        .created(TaskSpec(url: "https://h/big.iso", dest: "/d/big.iso", connections: 8)),
        .progressed(Progressed(bytes: 30, total: 100, etag: "\"e\"", ranges: [ByteSpan(0, 10), ByteSpan(50, 70)])),
        .progressed(Progressed(bytes: 10, total: 100, fallback: "the server does not offer ranges (no Accept-Ranges: bytes)")),
        // Issue 42: the digests of what a claim made durable, and what a resume found damaged.
        .progressed(Progressed(bytes: 30, total: 100, ranges: [ByteSpan(0, 10), ByteSpan(50, 70)],
                               digests: [SpanDigest(from: 0, to: 10, sha256: SHA256Value(hex: String(repeating: "ab", count: 32))!),
                                         SpanDigest(from: 50, to: 70, sha256: SHA256Value(hex: String(repeating: "0f", count: 32))!)])),
        .progressed(Progressed(bytes: 8, digests: [], mismatch: "bytes 8-16 of /d/x.part do not match the sha256 logged for them")),
        // Issue 38: a range of a segmented download moved to another connection.
        .progressed(Progressed(bytes: 30, total: 100, ranges: [ByteSpan(0, 10), ByteSpan(50, 70)],
                               moved: "bytes 70-100 moved to another connection: slower than 1.0 KiB/s (min_speed) for 120 s")),
        // Issue 13: forgetting, hooks and the config that arms them.
        .forgotten(Forgotten()),
        .agentStarted(AgentStarted(pid: 9, version: "0.2.0", hooks: ["task_end", "batch_end"])),
        .configReloaded(ConfigReloaded(file: "/c.toml", applied: ["on_task_end"], needRestart: [], hooks: ["task_end"])),
        .hookStarted(HookStarted(hook: .taskEnd, program: "/usr/local/bin/on-done")),
        .hookStarted(HookStarted(hook: .batchEnd, batchSeq: 42, program: "notify")),
        .hookEnded(HookEnded(hook: .taskEnd, pid: 4242, exitStatus: 3, durationMs: 12)),
        .hookEnded(HookEnded(hook: .batchEnd, batchSeq: 42, pid: 4243, signal: 9, timedOut: true, durationMs: 60_000)),
        .hookEnded(HookEnded(hook: .taskEnd, pid: nil, durationMs: 0, error: "cannot start on-done: No such file or directory")),
        // Issue 38: a task moved to another URL, keeping its bytes or starting over.
        .retargeted(Retargeted(from: "https://cdn.test/f?Expires=1", to: "https://cdn.test/f?Expires=2", bytes: 400, metrics: metrics)),
        .retargeted(Retargeted(from: nil, to: "https://m.test/f", bytes: 0, reason: "retargeted: its 400 bytes came with no validator")),
    ]

    static let metrics = AttemptMetrics(dnsUs: 10, connectUs: 20, tlsUs: 30, ttfbUs: 40, totalUs: 50, httpVersion: "2",
                                        status: 206, remoteAddress: "::1", remotePort: 8443, reused: true, redirects: 2,
                                        bytesReceived: 1000, bytesSent: 99)

    @Test(arguments: bodies)
    func roundTrips(_ body: EventBody) throws {
        let data = EventCoding.data(of: body)
        #expect(try EventCoding.body(type: body.type, data: data) == body)
    }

    /// Strings that need escapes take the slow path; the rest are copied whole.
    @Test func stringsWithAndWithoutEscapesRoundTrip() throws {
        for reason in ["plain", "quote \" backslash \\ end", "line\nbreak\ttab\rcr", "bell\u{7}nul\u{0}", "caf\u{E9} \u{1F600}", ""] {
            let body = EventBody.retrying(Retrying(attempt: 1, reason: reason, delayMs: 2, bytes: 3))
            #expect(try EventCoding.body(type: body.type, data: EventCoding.data(of: body)) == body)
        }
        #expect(EventCoding.data(of: .retrying(Retrying(attempt: 1, reason: "a\"b\u{1}", delayMs: 2, bytes: 3)))
            == #"{"attempt":1,"bytes":3,"delay_ms":2,"reason":"a\"b\u0001"}"#)
    }

    /// Numbers are written as `String(value)` writes them, the ends of Int64 too.
    @Test(arguments: [0, 7, -1, 10, 1_048_576, -9_876_543_210, Int64.max, Int64.min])
    func numbersAreWrittenAsStringWritesThem(_ value: Int64) throws {
        let body = EventBody.retrying(Retrying(attempt: 1, reason: "r", delayMs: value, bytes: 3))
        #expect(EventCoding.data(of: body) == #"{"attempt":1,"bytes":3,"delay_ms":\#(value),"reason":"r"}"#)
    }

    @Test func everyTypeHasAnExample() {
        #expect(Set(Self.bodies.map(\.type)) == Set(EventBody.allTypes))
    }

    @Test func keysAreSnakeCase() {
        let data = EventCoding.data(of: .retrying(Retrying(attempt: 1, reason: "r", delayMs: 2, bytes: 3)))
        #expect(data == #"{"attempt":1,"bytes":3,"delay_ms":2,"reason":"r"}"#)
    }

    /// A control outcome says whether it changed a task: by its count, or,
    /// in a log from before the count was kept, by its words.
    @Test func aControlOutcomeSaysWhetherItChangedAnything() throws {
        let counted = #"{"action":"pause","changed":0,"outcome":"a: paused at byte 3","target":"a"}"#
        let old = #"{"action":"cancel","outcome":"a: nothing to do: task already finished","target":"a"}"#
        let oldDone = #"{"action":"resume","outcome":"a: runs again from byte 0","target":"a"}"#
        let changed = try [counted, old, oldDone].map { data -> Bool in
            guard case .controlled(let control) = try EventCoding.body(type: "controlled", data: data) else { return true }
            return control.changedAnything
        }
        #expect(changed == [false, false, true])
        #expect(EventCoding.data(of: try EventCoding.body(type: "controlled", data: old)) == old, "an old event writes back as it was")
    }

    @Test func unknownTypeNamesTheEvent() {
        #expect(throws: EventCoding.DecodingFailure.self) { try EventCoding.body(type: "exploded", data: "{}", seq: 7) }
    }

    @Test func redactedResponseHidesSetCookie() {
        let finished = Finished(bytes: 1, dest: nil, responseHeaders: [
            Header(name: "set-cookie", value: "session=abc"), Header(name: "ETag", value: "\"x\"")])
        #expect(finished.redacted.responseHeaders?.map(\.printable) == ["set-cookie: <redacted>", "ETag: \"x\""])
    }

    @Test func redactedSpecHidesCredentialsOnly() {
        let spec = TaskSpec(url: "http://h", dest: "/d", headers: [
            Header(name: "Authorization", value: "Bearer x"), Header(name: "Accept", value: "text/plain")])
        #expect(spec.redacted.headers.map(\.printable) == ["Authorization: <redacted>", "Accept: text/plain"])
    }
}

@Suite("The log's fast JSON reader")
struct JSONReaderTests {
    @Test func escapedStringsNullsAndUnknownKeys() throws {
        let data = #"{"bytes":12,"etag":"\"v\\1\"","future":{"a":[1,"x",null]},"total":null,"restart_reason":"caf\u00e9"}"#
        let body = try EventCoding.body(type: "progressed", data: data)
        #expect(body == .progressed(Progressed(bytes: 12, total: nil, etag: "\"v\\1\"", restartReason: "café")))
    }

    /// Every string JSONSerialization writes (escapes, control bytes, emoji
    /// as surrogate pairs) reads back as Foundation reads it; escapes JSON
    /// does not have are refused.
    @Test func stringEscapesAgreeWithFoundation() throws {
        var generator = SystemRandomNumberGenerator()
        let alphabet: [Unicode.Scalar] = ["\"", "\\", "/", "\u{08}", "\u{0C}", "\n", "\r", "\t", "\u{01}", "\u{1F}", "a", "Z", "é", "€",
                                          "\u{1F600}", "\u{10FFFF}", "\u{FFFD}", " "]
        for _ in 0..<500 {
            var text = ""
            for _ in 0..<Int.random(in: 0...12, using: &generator) { text.unicodeScalars.append(alphabet.randomElement(using: &generator)!) }
            // Foundation's own escaping, and \u escapes for every scalar, must both read back.
            let written = String(decoding: try JSONSerialization.data(withJSONObject: text, options: .fragmentsAllowed), as: UTF8.self)
            let escapedByHand = "\"" + text.utf16.map { String(format: "\\u%04x", $0) }.joined() + "\""
            for json in [written, escapedByHand] {
                #expect(try Self.readString(json) == text, "\(json)")
            }
        }
        // A plain string's end is found by memchr: a backslash after it is not its own.
        #expect(try Self.readString(#""plain","x\"y""#) == "plain")
        for bad in [#""\x""#, #""\u12""#, #""\ud800""#, #""\ud800\u0041""#, #""\udc00""#, #""\""#, #""unterminated"#] {
            #expect(throws: JSONReader.Malformed.self, "\(bad)") { try Self.readString(bad) }
        }
    }

    static func readString(_ json: String) throws -> String {
        try Array(json.utf8).withUnsafeBytes { bytes in
            var reader = JSONReader(bytes)
            return try reader.readString()
        }
    }

    @Test func whitespaceIsAllowed() throws {
        let body = try EventCoding.body(type: "cancelled", data: " { \"bytes\" : -3 } ")
        #expect(body == .cancelled(Cancelled(bytes: -3)))
    }

    @Test(arguments: [#"{"bytes":}"#, #"{"bytes":1"#, #"{"reason":"x"}"#, #"[1]"#, ""])
    func malformedOrIncompleteDataNamesTheEvent(_ data: String) {
        #expect(throws: EventCoding.DecodingFailure.self) { try EventCoding.body(type: "cancelled", data: data, seq: 9) }
    }
}

@Suite("Hand-written event JSON matches JSONEncoder's")
struct JSONWriterTests {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    func reference<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try Self.encoder.encode(value), as: UTF8.self)
    }

    @Test func sameBytesForEveryHotPayload() throws {
        let tricky = "quote \" backslash \\ tab \t newline \n bell \u{07} slash / café"
        for body in EventCodingTests.bodies {
            let expected: String
            switch body {
            case .started(let p): expected = try reference(p)
            case .progressed(let p): expected = try reference(p)
            case .paused(let p): expected = try reference(p)
            case .resumed(let p): expected = try reference(p)
            case .retrying(let p): expected = try reference(p)
            case .finished(let p): expected = try reference(p)
            case .failed(let p): expected = try reference(p)
            case .cancelled(let p): expected = try reference(p)
            case .redirected(let p): expected = try reference(p)
            case .created(let p): expected = try reference(SpecFields(p))
            default: continue
            }
            #expect(EventCoding.data(of: body) == expected)
        }
        let failure = Failed(reason: tricky, code: .other("x"), bytes: 1)
        #expect(EventCoding.data(of: .failed(failure)) == (try reference(failure)))
        #expect(try EventCoding.body(type: "failed", data: EventCoding.data(of: .failed(failure))) == .failed(failure))
        let minimal = TaskSpec(url: "http://h/x", dest: "/d/x")
        #expect(EventCoding.data(of: .created(minimal)) == (try reference(SpecFields(minimal))))
        let sparse = Progressed(bytes: 5)
        #expect(EventCoding.data(of: .progressed(sparse)) == #"{"bytes":5}"#)
    }
}

/// Every key of a `created` payload as a stored field, so the encoder's
/// synthesized keys are the reference (TaskSpec keeps its rare keys in a box).
private struct SpecFields: Encodable {
    let url: String, kind: TransferKind, dest: String?, sha256: String?, md5: String?, priority: Int
    let overwrite: OverwriteMode, headers: [Header], batch: String?, notify: NotifyMode, retries: Int?
    let maxSpeed: Int64?, notBeforeMs: Int64?, source: JobSource?, method: String?, bodyFile: String?
    let formField: String?, form: [FormField], parent: String?, byteRange: HLSByteRange?, hls: HLSOptions?
    let connections: Int?, allowMetered: Bool?, upload: UploadOptions?

    init(_ spec: TaskSpec) {
        url = spec.url; kind = spec.kind; dest = spec.dest; sha256 = spec.sha256; md5 = spec.md5; priority = spec.priority
        overwrite = spec.overwrite; headers = spec.headers; batch = spec.batch; notify = spec.notify; retries = spec.retries
        maxSpeed = spec.maxSpeed; notBeforeMs = spec.notBeforeMs; source = spec.source; method = spec.method
        bodyFile = spec.bodyFile; formField = spec.formField; form = spec.form; parent = spec.parent
        byteRange = spec.byteRange; hls = spec.hls; connections = spec.connections; allowMetered = spec.allowMetered
        upload = spec.upload
    }
}

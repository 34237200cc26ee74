import Foundation

/// The `data` column: one JSON object per event, snake_case keys.
/// Kept apart from the event types so the log's wire form lives in one place.
public enum EventCoding {
    public struct DecodingFailure: Error, CustomStringConvertible {
        public var seq: Int64
        public var type: String
        public var underlying: String
        public var description: String { "event \(seq) (\(type)): \(underlying)" }
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    private static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return decoder
    }()

    public static func data(of body: EventBody) -> String {
        var json = JSONWriter()
        // The payloads every transfer writes many of: written by hand, keys sorted.
        switch body {
        case .started(let p):
            json.field("attempt", p.attempt); json.field("offset", p.offset); json.field("url", p.url)
            return json.finish()
        case .progressed(let p):
            json.field("bytes", p.bytes); json.field("chunk", p.chunk); json.field("dest", p.dest)
            json.field("digests", json: p.digests.map { "[" + $0.map { "[\($0.from),\($0.to),\"\($0.sha256.hex)\"]" }.joined(separator: ",") + "]" })
            json.field("etag", p.etag); json.field("fallback", p.fallback)
            json.field("last_modified", p.lastModified); json.field("mismatch", p.mismatch); json.field("moved", p.moved)
            json.field("ranges", json: p.ranges.map { "[" + $0.map { "[\($0.start),\($0.end)]" }.joined(separator: ",") + "]" })
            json.field("restart_reason", p.restartReason); json.field("total", p.total)
            return json.finish()
        case .paused(let p):
            json.field("bytes", p.bytes); json.field("metrics", json: p.metrics.map(metricsJSON))
            json.field("reason", p.reason.rawValue)
            return json.finish()
        case .resumed(let p):
            json.field("bytes", p.bytes); json.field("reason", p.reason)
            return json.finish()
        case .retrying(let p):
            json.field("attempt", p.attempt); json.field("bytes", p.bytes); json.field("delay_ms", p.delayMs)
            json.field("free", p.free)
            json.field("metrics", json: p.metrics.map(metricsJSON)); json.field("reason", p.reason)
            return json.finish()
        case .finished(let p):
            json.field("bytes", p.bytes); json.field("dest", p.dest); json.field("metrics", json: p.metrics.map(metricsJSON))
            json.field("modified_ns", p.modifiedNs)
            json.field("response_headers", json: p.responseHeaders.map(headersJSON)); json.field("sha256", p.sha256)
            json.field("skipped", p.skipped); json.field("status", p.status.map(Int64.init))
            if let unchanged = p.unchanged { json.field("unchanged", unchanged) }
            return json.finish()
        case .failed(let p):
            json.field("bytes", p.bytes); json.field("code", p.code.rawValue); json.field("metrics", json: p.metrics.map(metricsJSON))
            json.field("reason", p.reason)
            return json.finish()
        case .cancelled(let p):
            json.field("bytes", p.bytes); json.field("metrics", json: p.metrics.map(metricsJSON))
            return json.finish()
        case .redirected(let p):
            json.field("from", p.from); json.field("status", p.status); json.field("to", p.to)
            return json.finish()
        case .created(let p):
            json.field("batch", p.batch); json.field("body_file", p.bodyFile)
            json.field("byte_range", json: p.byteRange.map { range in
                var object = JSONWriter()
                object.field("length", range.length); object.field("offset", range.offset)
                return object.finish()
            })
            json.field("allow_metered", p.allowMetered)
            json.field("connections", p.connections.map(Int64.init))
            json.field("dest", p.dest)
            json.field("form", json: JSONWriter.array(p.form.map { pairJSON($0.name, $0.value) }))
            json.field("form_field", p.formField); json.field("headers", json: headersJSON(p.headers))
            json.field("hls", json: p.hls.map { hls in
                var object = JSONWriter()
                object.field("audio", hls.audio)
                object.field("max_duration_s", hls.maxDurationS.map(Int64.init)); object.field("output", hls.output.rawValue)
                object.field("subtitles", hls.subtitles)
                object.field("variant", hls.variant)
                return object.finish()
            })
            json.field("kind", p.kind.rawValue); json.field("max_speed", p.maxSpeed); json.field("md5", p.md5)
            json.field("method", p.method); json.field("min_speed", p.minSpeed); json.field("min_speed_time", p.minSpeedTimeS.map(Int64.init))
            json.field("name_from_server", p.nameFromServer)
            json.field("not_before_ms", p.notBeforeMs); json.field("notify", p.notify.rawValue)
            json.field("overwrite", p.overwrite.rawValue); json.field("parent", p.parent); json.field("priority", p.priority)
            json.field("retries", p.retries.map(Int64.init)); json.field("sha256", p.sha256)
            json.field("source", json: p.source.map { source in
                var object = JSONWriter()
                object.field("file", source.file); object.field("identity", source.identity)
                return object.finish()
            })
            json.field("upload", json: p.upload.map { upload in
                var object = JSONWriter()
                object.field("chunk_size", upload.chunkSize); object.field("parallel", Int64(upload.parallel))
                object.field("part", json: upload.part.map { "[\($0.start),\($0.end)]" })
                object.field("protocol", upload.protocol.rawValue)
                return object.finish()
            })
            json.field("url", p.url)
            return json.finish()
        default:
            break
        }
        let bytes: Data
        do {
            switch body {
            case .rejected(let p): bytes = try encoder.encode(p)
            case .agentStarted(let p): bytes = try encoder.encode(p)
            case .agentStopped(let p): bytes = try encoder.encode(p)
            case .batchFinished(let p): bytes = try encoder.encode(p)
            case .notified(let p): bytes = try encoder.encode(p)
            case .controlled(let p): bytes = try encoder.encode(p)
            case .configReloaded(let p): bytes = try encoder.encode(p)
            case .expanded(let p): bytes = try encoder.encode(p)
            case .forgotten(let p): bytes = try encoder.encode(p)
            case .hookStarted(let p): bytes = try encoder.encode(p)
            case .hookEnded(let p): bytes = try encoder.encode(p)
            case .compacted(let p): bytes = try encoder.encode(p)
            case .uploadCreated(let p): bytes = try encoder.encode(p)
            case .split(let p): bytes = try encoder.encode(p)
            case .retargeted(let p): bytes = try encoder.encode(p)
            default: preconditionFailure("written by hand above")
            }
        } catch {
            // Every payload is plain strings and numbers; encoding cannot fail.
            preconditionFailure("event payload failed to encode: \(error)")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func pairJSON(_ name: String, _ value: String) -> String {
        var object = JSONWriter()
        object.field("name", name); object.field("value", value)
        return object.finish()
    }

    private static func headersJSON(_ headers: [Header]) -> String {
        JSONWriter.array(headers.map { pairJSON($0.name, $0.value) })
    }

    private static func metricsJSON(_ m: AttemptMetrics) -> String {
        var json = JSONWriter()
        json.field("bytes_received", m.bytesReceived); json.field("bytes_sent", m.bytesSent)
        json.field("connect_us", m.connectUs); json.field("dns_us", m.dnsUs); json.field("http_version", m.httpVersion)
        json.field("redirects", m.redirects); json.field("remote_address", m.remoteAddress)
        json.field("remote_port", m.remotePort); json.field("reused", m.reused); json.field("status", m.status)
        json.field("tls_us", m.tlsUs); json.field("total_us", m.totalUs); json.field("ttfb_us", m.ttfbUs)
        return json.finish()
    }

    public static func body(type: String, data: String, seq: Int64 = 0) throws -> EventBody {
        var utf8 = data
        return try utf8.withUTF8 { try body(type: type, data: UnsafeRawBufferPointer($0), seq: seq) }
    }

    /// Decodes in place from the log's bytes. The payloads every transfer
    /// writes many of go through `JSONReader`; the rare ones through `JSONDecoder`.
    public static func body(type: String, data: UnsafeRawBufferPointer, seq: Int64 = 0) throws -> EventBody {
        var type = type
        return try type.withUTF8 { try body(type: UnsafeRawBufferPointer($0), data: data, seq: seq) }
    }

    /// Decodes a row as the log holds it: its type and data as UTF-8 bytes.
    /// The type is matched by its bytes and made a string only for an error
    /// or a rare payload.
    public static func body(type typeBytes: UnsafeRawBufferPointer, data: UnsafeRawBufferPointer, seq: Int64 = 0) throws -> EventBody {
        do {
            var reader = JSONReader(data)
            switch JSONReader.Key(bytes: typeBytes) {
            case "progressed": return .progressed(try Progressed(reading: &reader))
            case "created": return .created(try TaskSpec(reading: &reader))
            case "started": return .started(try Started(reading: &reader))
            case "paused": return .paused(try Paused(reading: &reader))
            case "resumed": return .resumed(try Resumed(reading: &reader))
            case "retrying": return .retrying(try Retrying(reading: &reader))
            case "finished": return .finished(try Finished(reading: &reader))
            case "failed": return .failed(try Failed(reading: &reader))
            case "cancelled": return .cancelled(try Cancelled(reading: &reader))
            case "redirected": return .redirected(try Redirected(reading: &reader))
            // Every start-up's tail holds these: JSONDecoder's first use alone would cost more than the rest of it.
            case "agent_started": return .agentStarted(try AgentStarted(reading: &reader))
            case "agent_stopped": return .agentStopped(try AgentStopped(reading: &reader))
            case "compacted": return .compacted(try Compacted(reading: &reader))
            default: break
            }
        } catch let error as JSONReader.Malformed {
            throw DecodingFailure(seq: seq, type: String(decoding: typeBytes, as: UTF8.self), underlying: error.description)
        }
        let type = String(decoding: typeBytes, as: UTF8.self)
        let json = Data(data)
        func decode<T: Decodable>(_: T.Type) throws -> T {
            do { return try decoder.decode(T.self, from: json) } catch {
                throw DecodingFailure(seq: seq, type: type, underlying: String(describing: error))
            }
        }
        switch type {
        case "rejected": return .rejected(try decode(Rejected.self))
        case "batch_finished": return .batchFinished(try decode(BatchFinished.self))
        case "notified": return .notified(try decode(Notified.self))
        case "controlled": return .controlled(try decode(Controlled.self))
        case "config_reloaded": return .configReloaded(try decode(ConfigReloaded.self))
        case "expanded": return .expanded(try decode(Expanded.self))
        case "forgotten": return .forgotten(try decode(Forgotten.self))
        case "hook_started": return .hookStarted(try decode(HookStarted.self))
        case "hook_ended": return .hookEnded(try decode(HookEnded.self))
        case "upload_created": return .uploadCreated(try decode(UploadCreated.self))
        case "split": return .split(try decode(Split.self))
        case "retargeted": return .retargeted(try decode(Retargeted.self))
        default:
            throw DecodingFailure(seq: seq, type: type, underlying: "unknown event type")
        }
    }
}

private func required<T>(_ value: T?, _ key: String) throws -> T {
    guard let value else { throw JSONReader.Malformed(offset: 0, expected: "key \"\(key)\"") }
    return value
}

// The hand-written readers below mirror the Codable encodings (snake_case keys);
// EventCodingTests round-trips every type through both.

extension Started {
    init(reading reader: inout JSONReader) throws {
        var attempt: Int64?, offset: Int64?, url: String?
        try reader.readObject { key, value in
            switch key {
            case "attempt": attempt = try value.readInt()
            case "offset": offset = try value.readInt()
            case "url": url = try value.readString()
            default: try value.skipValue()
            }
        }
        self.init(attempt: Int(try required(attempt, "attempt")), offset: try required(offset, "offset"), url: try required(url, "url"))
    }
}

extension Progressed {
    init(reading reader: inout JSONReader) throws {
        var bytes: Int64?, total: Int64?, etag: String?, lastModified: String?, restartReason: String?
        var ranges: [ByteSpan]?, fallback: String?, chunk: Int64?, digests: [SpanDigest]?, mismatch: String?, dest: String?
        var moved: String?
        try reader.readObject { key, value in
            switch key {
            case "bytes": bytes = try value.readInt()
            case "dest": dest = try value.readOptional { try $0.readString() }
            case "chunk": chunk = try value.readOptional { try $0.readInt() }
            case "digests": digests = try value.readOptional { try $0.readArray { try SpanDigest(reading: &$0) } }
            case "mismatch": mismatch = try value.readOptional { try $0.readString() }
            case "ranges": ranges = try value.readOptional { try $0.readArray { try ByteSpan(reading: &$0) } }
            case "fallback": fallback = try value.readOptional { try $0.readString() }
            case "moved": moved = try value.readOptional { try $0.readString() }
            case "total": total = try value.readOptional { try $0.readInt() }
            case "etag": etag = try value.readOptional { try $0.readString() }
            case "last_modified": lastModified = try value.readOptional { try $0.readString() }
            case "restart_reason": restartReason = try value.readOptional { try $0.readString() }
            default: try value.skipValue()
            }
        }
        self.init(bytes: try required(bytes, "bytes"), total: total, etag: etag, lastModified: lastModified, restartReason: restartReason,
                  ranges: ranges, fallback: fallback, chunk: chunk, digests: digests, mismatch: mismatch, dest: dest, moved: moved)
    }
}

extension SpanDigest {
    /// `[from, to, "hex"]`, with `0 <= from <= to` and 64 hex digits.
    init(reading reader: inout JSONReader) throws {
        var index = 0
        var from: Int64?, to: Int64?, hex: String?
        _ = try reader.readArray { element -> Void in
            switch index {
            case 0: from = try element.readInt()
            case 1: to = try element.readInt()
            case 2: hex = try element.readString()
            default: throw JSONReader.Malformed(offset: 0, expected: "a digest of three elements")
            }
            index += 1
        }
        guard let from, let to, from >= 0, from <= to, let hex, let digest = SHA256Value(hex: hex) else {
            throw JSONReader.Malformed(offset: 0, expected: "a digest [from, to, sha256 hex] with 0 <= from <= to")
        }
        self.init(from: from, to: to, sha256: digest)
    }
}

extension ByteSpan {
    /// `[start, end]`, with `0 <= start <= end`: a log cannot make the fold hold a negative span.
    init(reading reader: inout JSONReader) throws {
        let pair = try reader.readArray { try $0.readInt() }
        guard pair.count == 2, pair[0] >= 0, pair[0] <= pair[1] else {
            throw JSONReader.Malformed(offset: 0, expected: "a byte range [start, end] with 0 <= start <= end")
        }
        self.init(pair[0], pair[1])
    }
}

extension Paused {
    init(reading reader: inout JSONReader) throws {
        var bytes: Int64?, reason: PauseReason?, metrics: AttemptMetrics?
        try reader.readObject { key, value in
            switch key {
            case "bytes": bytes = try value.readInt()
            case "reason": reason = PauseReason(rawValue: try value.readString())
            case "metrics": metrics = try value.readOptional { try AttemptMetrics(reading: &$0) }
            default: try value.skipValue()
            }
        }
        self.init(bytes: try required(bytes, "bytes"), reason: try required(reason, "reason"), metrics: metrics)
    }
}

extension AgentStarted {
    init(reading reader: inout JSONReader) throws {
        var pid: Int64?, version: String?, hooks: [String]?
        try reader.readObject { key, value in
            switch key {
            case "pid": pid = try value.readInt()
            case "version": version = try value.readString()
            case "hooks": hooks = try value.readOptional { try $0.readArray { try $0.readString() } }
            default: try value.skipValue()
            }
        }
        let number = try required(pid, "pid")
        guard let pid = Int32(exactly: number) else { throw JSONReader.Malformed(offset: 0, expected: "a pid, not \(number)") }
        self.init(pid: pid, version: try required(version, "version"), hooks: hooks)
    }
}

extension AgentStopped {
    init(reading reader: inout JSONReader) throws {
        var reason: String?
        try reader.readObject { key, value in
            if key == "reason" { reason = try value.readString() } else { try value.skipValue() }
        }
        self.init(reason: try required(reason, "reason"))
    }
}

extension Compacted {
    init(reading reader: inout JSONReader) throws {
        var snapshotSeq: Int64?, tasks: Int64?, events: Int64?, olderThanS: Int64?, bytesBefore: Int64?, bytesAfter: Int64?
        var trigger: String?, error: String?, requestedBy: [String]?
        try reader.readObject { key, value in
            switch key {
            case "requested_by": requestedBy = try value.readOptional { try $0.readArray { try $0.readString() } }
            case "error": error = try value.readOptional { try $0.readString() }
            case "snapshot_seq": snapshotSeq = try value.readInt()
            case "tasks": tasks = try value.readInt()
            case "events": events = try value.readInt()
            case "older_than_s": olderThanS = try value.readInt()
            case "bytes_before": bytesBefore = try value.readInt()
            case "bytes_after": bytesAfter = try value.readInt()
            case "trigger": trigger = try value.readString()
            default: try value.skipValue()
            }
        }
        self.init(snapshotSeq: try required(snapshotSeq, "snapshot_seq"), tasks: Int(try required(tasks, "tasks")),
                  events: Int(try required(events, "events")), olderThanS: try required(olderThanS, "older_than_s"),
                  bytesBefore: try required(bytesBefore, "bytes_before"), bytesAfter: try required(bytesAfter, "bytes_after"),
                  trigger: try required(trigger, "trigger"), error: error, requestedBy: requestedBy)
    }
}

extension Resumed {
    init(reading reader: inout JSONReader) throws {
        var bytes: Int64?, reason: String?
        try reader.readObject { key, value in
            switch key {
            case "bytes": bytes = try value.readInt()
            case "reason": reason = try value.readString()
            default: try value.skipValue()
            }
        }
        self.init(bytes: try required(bytes, "bytes"), reason: try required(reason, "reason"))
    }
}

extension Retrying {
    init(reading reader: inout JSONReader) throws {
        var attempt: Int64?, reason: String?, delayMs: Int64?, bytes: Int64?, metrics: AttemptMetrics?, free: Bool?
        try reader.readObject { key, value in
            switch key {
            case "attempt": attempt = try value.readInt()
            case "free": free = try value.readOptional { try $0.readBool() }
            case "reason": reason = try value.readString()
            case "delay_ms": delayMs = try value.readInt()
            case "bytes": bytes = try value.readInt()
            case "metrics": metrics = try value.readOptional { try AttemptMetrics(reading: &$0) }
            default: try value.skipValue()
            }
        }
        self.init(attempt: Int(try required(attempt, "attempt")), reason: try required(reason, "reason"),
                  delayMs: try required(delayMs, "delay_ms"), bytes: try required(bytes, "bytes"), metrics: metrics, free: free)
    }
}

extension Finished {
    init(reading reader: inout JSONReader) throws {
        var bytes: Int64?, dest: String?, sha256: String?, status: Int64?, headers: [Header]?, metrics: AttemptMetrics?
        var skipped: String?, modifiedNs: Int64?, unchanged: Bool?
        try reader.readObject { key, value in
            switch key {
            case "bytes": bytes = try value.readInt()
            case "modified_ns": modifiedNs = try value.readOptional { try $0.readInt() }
            case "unchanged": unchanged = try value.readOptional { try $0.readBool() }
            case "dest": dest = try value.readOptional { try $0.readString() }
            case "skipped": skipped = try value.readOptional { try $0.readString() }
            case "sha256": sha256 = try value.readOptional { try $0.readString() }
            case "status": status = try value.readOptional { try $0.readInt() }
            case "response_headers": headers = try value.readOptional { try $0.readHeaders() }
            case "metrics": metrics = try value.readOptional { try AttemptMetrics(reading: &$0) }
            default: try value.skipValue()
            }
        }
        self.init(bytes: try required(bytes, "bytes"), dest: dest, sha256: sha256, status: status.map(Int.init),
                  responseHeaders: headers, metrics: metrics, skipped: skipped, modifiedNs: modifiedNs, unchanged: unchanged)
    }
}

extension Failed {
    init(reading reader: inout JSONReader) throws {
        var reason: String?, code: String?, bytes: Int64?, metrics: AttemptMetrics?
        try reader.readObject { key, value in
            switch key {
            case "reason": reason = try value.readString()
            case "code": code = try value.readString()
            case "bytes": bytes = try value.readInt()
            case "metrics": metrics = try value.readOptional { try AttemptMetrics(reading: &$0) }
            default: try value.skipValue()
            }
        }
        self.init(reason: try required(reason, "reason"), code: FailureCode(rawValue: try required(code, "code")),
                  bytes: try required(bytes, "bytes"), metrics: metrics)
    }
}

extension Cancelled {
    init(reading reader: inout JSONReader) throws {
        var bytes: Int64?, metrics: AttemptMetrics?
        try reader.readObject { key, value in
            switch key {
            case "bytes": bytes = try value.readInt()
            case "metrics": metrics = try value.readOptional { try AttemptMetrics(reading: &$0) }
            default: try value.skipValue()
            }
        }
        self.init(bytes: try required(bytes, "bytes"), metrics: metrics)
    }
}

extension Redirected {
    init(reading reader: inout JSONReader) throws {
        var from: String?, to: String?, status: Int64?
        try reader.readObject { key, value in
            switch key {
            case "from": from = try value.readString()
            case "to": to = try value.readString()
            case "status": status = try value.readInt()
            default: try value.skipValue()
            }
        }
        self.init(from: try required(from, "from"), to: try required(to, "to"), status: Int(try required(status, "status")))
    }
}

extension TaskSpec {
    init(reading reader: inout JSONReader) throws {
        var url: String?, kind = TransferKind.download, dest: String?, sha256: String?, md5: String?
        var priority: Int64 = 0, overwrite = OverwriteMode.rename, headers: [Header] = [], batch: String?
        var notify = NotifyMode.batch, retries: Int64?, maxSpeed: Int64?, notBeforeMs: Int64?, source: JobSource?
        var method: String?, bodyFile: String?, formField: String?, form: [FormField] = []
        var parent: String?, byteRange: HLSByteRange?, hls: HLSOptions?, connections: Int?, allowMetered: Bool?
        var upload: UploadOptions?, minSpeed: Int64?, minSpeedTimeS: Int?, nameFromServer: Bool?
        func choice<E: RawRepresentable>(_ value: inout JSONReader, _ key: String) throws -> E where E.RawValue == String {
            let raw = try value.readString()
            guard let choice = E(rawValue: raw) else { throw JSONReader.Malformed(offset: 0, expected: "a known \(key), not \(raw)") }
            return choice
        }
        try reader.readObject { key, value in
            switch key {
            case "url": url = try value.readString()
            case "kind": kind = try choice(&value, "kind")
            case "dest": dest = try value.readOptional { try $0.readString() }
            case "sha256": sha256 = try value.readOptional { try $0.readString() }
            case "method": method = try value.readOptional { try $0.readString() }
            case "body_file": bodyFile = try value.readOptional { try $0.readString() }
            case "form_field": formField = try value.readOptional { try $0.readString() }
            case "form":
                form = try value.readArray { element in
                    let (name, text) = try element.readStringPair("name", "value")
                    return FormField(name: name, value: text)
                }
            case "md5": md5 = try value.readOptional { try $0.readString() }
            case "priority": priority = try value.readInt()
            case "overwrite": overwrite = try choice(&value, "overwrite")
            case "batch": batch = try value.readOptional { try $0.readString() }
            case "notify": notify = try choice(&value, "notify")
            case "retries": retries = try value.readOptional { try $0.readInt() }
            case "max_speed": maxSpeed = try value.readOptional { try $0.readInt() }
            case "not_before_ms": notBeforeMs = try value.readOptional { try $0.readInt() }
            case "headers": headers = try value.readHeaders()
            case "parent": parent = try value.readOptional { try $0.readString() }
            case "allow_metered": allowMetered = try value.readOptional { try $0.readBool() }
            // Whatever a damaged log says, within what a job may ask (0: the check off).
            case "min_speed": minSpeed = try value.readOptional { max(try $0.readInt(), 0) }
            case "min_speed_time": minSpeedTimeS = try value.readOptional { Int(min(max(try $0.readInt(), 1), Int64(Int32.max))) }
            case "name_from_server": nameFromServer = try value.readOptional { try $0.readBool() } == true ? true : nil
            case "connections":
                // Whatever a damaged log says, within what a job may ask.
                connections = try value.readOptional { min(max(try $0.readInt(), 1), Int64(SegmentPlan.maximumConnections)) }.map(Int.init)
            case "byte_range":
                byteRange = try value.readOptional { element in
                    var length: Int64?, offset: Int64?
                    try element.readObject { key, field in
                        switch key {
                        case "length": length = try field.readInt()
                        case "offset": offset = try field.readOptional { try $0.readInt() }
                        default: try field.skipValue()
                        }
                    }
                    return HLSByteRange(length: try required(length, "length"), offset: offset)
                }
            case "hls":
                hls = try value.readOptional { element in
                    var options = HLSOptions()
                    try element.readObject { key, field in
                        switch key {
                        case "variant": options.variant = try field.readString()
                        case "output": options.output = try choice(&field, "output")
                        case "max_duration_s": options.maxDurationS = try field.readOptional { Int(clamping: try $0.readInt()) }
                        case "audio": options.audio = try field.readOptional { try $0.readString() }
                        case "subtitles": options.subtitles = try field.readOptional { try $0.readString() }
                        default: try field.skipValue()
                        }
                    }
                    return options
                }
            case "upload":
                upload = try value.readOptional { element in
                    var options = UploadOptions(protocol: .tus)
                    try element.readObject { key, field in
                        switch key {
                        case "protocol": options.protocol = try choice(&field, "protocol")
                        case "chunk_size": options.chunkSize = try field.readOptional { try $0.readInt() }
                        // Whatever a damaged log says, within what a job may ask.
                        case "parallel": options.parallel = Int(min(max(try field.readInt(), 1), Int64(ResumableUpload.maximumParallel)))
                        case "part": options.part = try field.readOptional { try ByteSpan(reading: &$0) }
                        default: try field.skipValue()
                        }
                    }
                    return options
                }
            case "source":
                source = try value.readOptional { element in
                    let (file, identity) = try element.readStringPair("file", "identity")
                    return JobSource(file: file, identity: identity)
                }
            default: try value.skipValue()
            }
        }
        self.init(url: try required(url, "url"), kind: kind, dest: dest, sha256: sha256, md5: md5,
                  priority: Int(priority), overwrite: overwrite, headers: headers, batch: batch, notify: notify,
                  retries: retries.map(Int.init), maxSpeed: maxSpeed, notBeforeMs: notBeforeMs, source: source,
                  method: method, bodyFile: bodyFile, formField: formField, form: form, parent: parent,
                  byteRange: byteRange, hls: hls, connections: connections, allowMetered: allowMetered,
                  upload: upload, minSpeed: minSpeed, minSpeedTimeS: minSpeedTimeS, nameFromServer: nameFromServer)
    }
}

extension JSONReader {
    /// `[{"name": …, "value": …}, …]`
    mutating func readHeaders() throws -> [Header] {
        try readArray { element in
            let (name, text) = try element.readStringPair("name", "value")
            return Header(name: name, value: text)
        }
    }
}

extension AttemptMetrics {
    init(reading reader: inout JSONReader) throws {
        var metrics = AttemptMetrics()
        try reader.readObject { key, value in
            switch key {
            case "dns_us": metrics.dnsUs = try value.readInt()
            case "connect_us": metrics.connectUs = try value.readInt()
            case "tls_us": metrics.tlsUs = try value.readInt()
            case "ttfb_us": metrics.ttfbUs = try value.readInt()
            case "total_us": metrics.totalUs = try value.readInt()
            case "http_version": metrics.httpVersion = try value.readOptional { try $0.readString() }
            case "status": metrics.status = Int(try value.readInt())
            case "remote_address": metrics.remoteAddress = try value.readOptional { try $0.readString() }
            case "remote_port": metrics.remotePort = Int(try value.readInt())
            case "reused": metrics.reused = try value.readBool()
            case "redirects": metrics.redirects = Int(try value.readInt())
            case "bytes_received": metrics.bytesReceived = try value.readInt()
            case "bytes_sent": metrics.bytesSent = try value.readInt()
            default: try value.skipValue()
            }
        }
        self = metrics
    }
}

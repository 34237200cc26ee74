import Foundation
import SyncAgentCore

/// Everything outside input reaches through these parsers: job and config
/// files, response header lines and the numbers in them, URLs, and the log's
/// own rows (a damaged log is input too). `run` feeds one input to all of
/// them; none may trap, whatever the bytes. `make fuzz` drives it with
/// libFuzzer; `make test` runs the saved corpus through it once.
public enum FuzzTargets {
    public static func run(_ input: UnsafeRawBufferPointer) {
        let bytes = Array(input)
        jobAndConfigFiles(bytes)
        responseHeaders(input)
        let text = String(decoding: bytes, as: UTF8.self)
        _ = HTTPDate.parseMs(text)
        _ = Redaction.text(text)
        _ = Redaction.url(text)
        logRows(input)
        playlists(bytes)
        uploadAnswers(text)
        rpcRequests(bytes, text: text)
        serverNames(bytes, text: text)
    }

    /// A name a server gives a file (`name_from_server`): the input as a
    /// `Content-Disposition`, or as the end of the URL that answered, made
    /// safe and placed among another task's names.
    static func serverNames(_ bytes: [UInt8], text: String) {
        _ = ServerFileName.safe(text)
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "other", body: .created(TaskSpec(url: "https://h.example/o", dest: "/home/me/Downloads/o"))))
        for (index, mode) in OverwriteMode.allCases.enumerated() {
            let spec = TaskSpec(url: "https://h.example/get", dest: "/home/me/Downloads/get\(index)", overwrite: mode, nameFromServer: true)
            state.apply(Event(seq: Int64(index + 2), atMs: 2, task: "t\(index)", body: .created(spec)))
        }
        for chosen in [ServerFileName.choose(contentDisposition: bytes, finalURL: "https://h.example/get"),
                       ServerFileName.choose(contentDisposition: nil, finalURL: "https://h.example/" + text)] {
            guard let path = parser.serverNamedPath(chosen.name, beside: "/home/me/Downloads/get0") else { continue }
            for task in state.orderedTasks where task.spec.nameFromServer == true {
                _ = Destinations.decide(serverNamed: path, for: task, in: state, exists: { $0.hasSuffix(".1") })
            }
        }
    }

    /// What an RPC client sends: a request body read as one, the host it
    /// names, and its JSON handed as the parameters of every method.
    static func rpcRequests(_ bytes: [UInt8], text: String) {
        _ = RPCHTTPPolicy.allowsHost(text)
        _ = RPCHTTPPolicy.corsHeaders(origin: text, preflightHeaders: text)
        _ = try? RPCListen(parsing: text, key: "rpc_listen")
        let request = RPCRequest.parse(bytes)
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "t", body: .created(TaskSpec(url: "https://h.example/f", dest: "/home/me/Downloads/f"))))
        let methods = RPCMethods(secret: RPCSecret("s"), sessionID: "s", version: "v")
        var context = RPCMethods.Context(state: state, view: RPCView(state: state),
                                         settings: RPCSettings(downloadDir: "/home/me/Downloads", config: AgentConfig()),
                                         parser: parser)
        for case .success(let call) in request.calls { _ = methods.action(for: call, in: &context) }
        guard let params = (try? JSONValue.parse(bytes))?.array else { return }
        for method in RPCMethod.allCases {
            _ = methods.action(for: RPCCall(id: 1, method: method.rawValue, params: ["token:s"] + params), in: &context)
        }
    }

    /// A resumable-upload server's answer: the text as every header it reads, under a few statuses.
    static func uploadAnswers(_ text: String) {
        _ = UploadHeaders.integer(text)
        _ = UploadHeaders.list(text)
        _ = UploadHeaders.boolean(text)
        _ = UploadHeaders.limits(text)
        let headers = ["Location", "Upload-Offset", "Upload-Length", "Upload-Limit"].map { Header(name: $0, value: text) }
        for status in [104, 200, 201, 204, 404, 409, 460] {
            _ = UploadAnswers.creation(status: status, headers: headers, informational: headers, requestURL: "https://h.test/files/")
            _ = UploadAnswers.offset(status: status, headers: headers, size: 1 << 20)
            _ = UploadAnswers.append(status: status, headers: headers, from: 1000, length: 4096, size: 1 << 20)
        }
    }

    /// A playlist as a server may send it, and what the parent makes of it.
    static func playlists(_ bytes: [UInt8]) {
        guard let playlist = try? HLSPlaylist.parse(bytes, base: "https://cdn.example.com/v/index.m3u8?token=t") else { return }
        switch playlist {
        case .master(let variants):
            for rule in ["best", "worst", "1280x720", "800000"] { _ = HLSVariant.pick(variants, rule: rule) }
        case .media(let media):
            var state = AgentState()
            state.apply(Event(seq: 1, atMs: 1, task: "v", body: .created(TaskSpec(
                url: "https://cdn.example.com/v/index.m3u8", kind: .hls, dest: "/home/me/Downloads/v",
                hls: HLSOptions(maxDurationS: 60)))))
            guard let parent = state["v"], let plan = try? HLSFanOut.plan(parent: parent, playlist: media, url: "u", in: state) else { return }
            _ = HLSLocalPlaylist.text(entries: plan.expanded.entries, targetDurationMs: plan.expanded.targetDurationMs)
            _ = EventCoding.data(of: .expanded(plan.expanded))
        }
    }

    private static let parser = JobParser(downloadDir: "/home/me/Downloads",
                                          forbiddenDirs: ["/home/me/Downloads/.state", "/home/me/Downloads/inbox"])

    static func jobAndConfigFiles(_ bytes: [UInt8]) {
        if case .transfer(_, let spec)? = try? parser.parse(bytes) {
            // What intake does with a parsed job: reserve its name, show its URL.
            var state = AgentState()
            state.apply(Event(seq: 1, atMs: 1, task: "t", body: .created(spec)))
            if let dest = spec.dest {
                _ = Destinations.decide(dest: dest, overwrite: spec.overwrite, in: state, exists: { _ in false })
            }
            _ = Redaction.url(spec.url)
            _ = EventCoding.data(of: .created(spec))
        }
        if let text = String(validating: bytes, as: UTF8.self) {
            _ = try? AgentConfig.parse(text)
        }
    }

    /// Each line as curl would hand it to the header callback.
    static func responseHeaders(_ input: UnsafeRawBufferPointer) {
        var start = 0
        for index in 0...input.count where index == input.count || input[index] == 0x0A {
            let line = HeaderLine(UnsafeRawBufferPointer(rebasing: input[start..<min(index + 1, input.count)]))
            start = index + 1
            _ = line.statusCode
            _ = line.pair
            for name: StaticString in ["etag", "last-modified", "retry-after", "content-range", "content-length"] {
                guard let value = line.value(ifNamed: name) else { continue }
                _ = HTTPNumbers.contentRange(value)
                _ = HTTPNumbers.contentLength(value)
                _ = HTTPNumbers.retryAfter(value, nowMs: 1_795_315_973_543)
            }
            if let disposition = line.rawValue(ifNamed: "content-disposition") { _ = ContentDisposition.parse(disposition) }
        }
    }

    /// The input as the `data` of every event type, folded onto a task.
    static func logRows(_ input: UnsafeRawBufferPointer) {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1_000, task: "t",
                          body: .created(TaskSpec(url: "http://127.0.0.1/f", dest: "/home/me/Downloads/f"))))
        var seq: Int64 = 1
        for type in EventBody.allTypes {
            guard let body = try? EventCoding.body(type: type, data: input) else { continue }
            seq += 1
            state.apply(Event(seq: seq, atMs: 1_000 + seq, task: "t", body: body))
            _ = EventCoding.data(of: body)
            _ = state["t"].map { RecoveryPlan.plan(for: $0, nowMs: 2_000).words }
            _ = state["t"].map { TaskReport($0) }
        }
        _ = SchedulerPolicy.tasksToStart(in: state, nowMs: 2_000, limits: SchedulerLimits(maxActive: 4, maxPerHost: 2))
        _ = Notices.drainedBatches(in: state)
    }
}

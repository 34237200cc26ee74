import Foundation
import Testing
@testable import SyncAgentCore

/// aria2's JSON-RPC, its pure parts: reading what a client sends, the
/// token, GIDs, options turned into job keys, the shapes of the answers,
/// which hosts and how fast, and which notifications events make.
@Suite("RPC core: JSON-RPC, tokens, GIDs, options, status shapes, notifications")
struct RPCCoreTests {
    // MARK: - JSON

    @Test(arguments: [
        (#"{"a":[1,-2,3.5,true,false,null,"x"]}"#, #"{"a":[1,-2,3.5,true,false,null,"x"]}"#),
        (#"  "\u00e9\ud83d\ude00\n\"\\\/"  "#, "\"é😀\\n\\\"\\\\/\""),
        (#"{"b":1,"a":2,"b":3}"#, #"{"a":2,"b":3}"#),
        ("[]", "[]"), ("{}", "{}"), ("0", "0"), ("-0", "0"), ("1e3", "1000.0"), ("92233720368547758070", "9.223372036854776e+19"),
    ])
    func jsonIsReadAndWrittenBack(_ input: String, _ written: String) throws {
        #expect(try JSONValue.parse(Array(input.utf8)).text == written)
    }

    @Test(arguments: [
        "", "{", "[1,]", "{\"a\" 1}", "01", "1.", ".5", "+1", "-", "1e", "\"\u{01}\"", "\"\\x\"", "\"\\ud800\"", "\"\\udc00x\"",
        "\"\\ud800\\u0041\"", "nul", "truex", "[1] 2", "{\"a\":1,}", "\"abc", "1e999",
    ])
    func malformedJSONIsRefused(_ input: String) {
        #expect(throws: JSONValue.Malformed.self) { try JSONValue.parse(Array(input.utf8)) }
    }

    @Test func invalidUTF8AndDeepNestingAreRefused() {
        #expect(throws: JSONValue.Malformed.self) { try JSONValue.parse([0x22, 0xFF, 0x22]) }
        let deep = String(repeating: "[", count: JSONValue.maximumDepth + 1) + String(repeating: "]", count: JSONValue.maximumDepth + 1)
        #expect(throws: JSONValue.Malformed.self) { try JSONValue.parse(Array(deep.utf8)) }
        let allowed = String(repeating: "[", count: JSONValue.maximumDepth) + String(repeating: "]", count: JSONValue.maximumDepth)
        #expect((try? JSONValue.parse(Array(allowed.utf8))) != nil)
        // A million brackets: refused at the limit, not by running out of stack.
        let hostile = [UInt8](repeating: UInt8(ascii: "["), count: 1_000_000)
        #expect(throws: JSONValue.Malformed.self) { try JSONValue.parse(hostile) }
    }

    // MARK: - Requests and responses

    /// The shapes aria2 1.36 answers with (read off `aria2c --enable-rpc`).
    @Test func requestsAreReadAsAria2ReadsThem() {
        func answer(_ body: String) -> (Int, String) {
            let request = RPCRequest.parse(Array(body.utf8))
            let responses = request.calls.map { element -> RPCResponse in
                switch element {
                case .success(let call): RPCResponse(id: call.id, .success(.string(call.method)))
                case .failure(let failed): RPCResponse(id: failed.id, .failure(failed.error))
                }
            }
            if case .batch = request { return RPCResponse.body(responses, batch: true).status == 200 ? (200, JSONValue.array(responses.map(\.json)).text) : (0, "") }
            let body = RPCResponse.body(responses, batch: false)
            return (body.status, String(decoding: body.bytes, as: UTF8.self))
        }
        #expect(answer("{bad") == (500, #"{"error":{"code":-32700,"message":"Parse error."},"id":null,"jsonrpc":"2.0"}"#))
        #expect(answer(#""x""#) == (400, #"{"error":{"code":-32600,"message":"Invalid Request."},"id":null,"jsonrpc":"2.0"}"#))
        #expect(answer(#"{"jsonrpc":"2.0","id":1}"#) == (400, #"{"error":{"code":-32600,"message":"Invalid Request."},"id":1,"jsonrpc":"2.0"}"#))
        #expect(answer(#"{"jsonrpc":"2.0","method":"m"}"#).0 == 400)
        #expect(answer(#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}"#)
                == (500, #"{"error":{"code":-32602,"message":"Invalid params."},"id":1,"jsonrpc":"2.0"}"#))
        #expect(answer(#"{"jsonrpc":"2.0","id":"q","method":"m"}"#) == (200, #"{"id":"q","jsonrpc":"2.0","result":"m"}"#))
        // In a batch, what is not an object is left out, as aria2 leaves it out.
        #expect(answer(#"[{"jsonrpc":"2.0","id":"a","method":"m"}, 5, {"id":2}]"#).1
                == #"[{"id":"a","jsonrpc":"2.0","result":"m"},{"error":{"code":-32600,"message":"Invalid Request."},"id":2,"jsonrpc":"2.0"}]"#)
        #expect(answer("[]") == (200, "[]"))
    }

    /// A call that names a key twice is refused, as aria2 refuses it: a
    /// filter in front may have read the other one. Only the call itself
    /// counts; deeper objects keep their last value.
    @Test func aCallThatNamesAKeyTwiceIsInvalid() {
        let twice = #"{"jsonrpc":"2.0","id":1,"method":"aria2.getGlobalStat","method":"aria2.shutdown"}"#
        #expect(RPCRequest.parse(Array(twice.utf8)) == .single(.failure(RPCFailedCall(id: 1, error: .invalidRequest))))
        let batch = "[\(twice),{\"id\":2,\"method\":\"m\",\"params\":[{\"a\":1,\"a\":2}]}]"
        #expect(RPCRequest.parse(Array(batch.utf8)) == .batch([.failure(RPCFailedCall(id: 1, error: .invalidRequest)),
                                                                .success(RPCCall(id: 2, method: "m", params: [["a": 2]]))]))
    }

    /// A number of bytes is digits (and a point), then K, M or G: not hex, an exponent or infinity.
    @Test(arguments: [("2M", Int64(2 << 20)), ("1.5K", 1536), ("512", 512), (" 4KiB ", 4096), ("0x10", nil), ("1e3", nil),
                      ("inf", nil), ("nan", nil), ("-5", nil), (".", nil), ("1.2.3", nil), ("", nil), ("K", nil)])
    func aByteCountIsDigits(_ text: String, _ bytes: Int64?) {
        #expect(ByteCount.parse(text) == bytes, "\(text)")
    }

    @Test func aBatchHasABound() {
        let batch = "[" + Array(repeating: #"{"id":1,"method":"m"}"#, count: RPCRequest.maximumCalls + 1).joined(separator: ",") + "]"
        guard case .single(.failure(let failed)) = RPCRequest.parse(Array(batch.utf8)) else { Issue.record("a batch over the bound was read"); return }
        #expect(failed.error.message.contains("at most"))
    }

    @Test func notificationsHaveAria2sShape() {
        #expect(RPCNotification(.complete, gid: "00000000000000aa").json.text
                == #"{"jsonrpc":"2.0","method":"aria2.onDownloadComplete","params":[{"gid":"00000000000000aa"}]}"#)
    }

    // MARK: - Token

    @Test(arguments: [
        ("s3cret", "s3cret", true), ("s3cret", "s3cre", false), ("s3cret", "s3cret!", false), ("s3cret", "", false),
        ("s3cret", "S3cret", false), ("", "", false), ("é", "é", true), ("s3cret", "s3cres", false),
    ])
    func theTokenMatchesOnlyTheSecret(_ secret: String, _ offered: String, _ matches: Bool) {
        #expect(RPCSecret(secret).matches(offered) == matches)
    }

    @Test func aMadeSecretIs64HexDigitsAndNewEachTime() {
        let one = RPCSecret.random(), two = RPCSecret.random()
        #expect(one.count == 64 && one.allSatisfy(\.isHexDigit))
        #expect(one != two)
    }

    @Test func theTokenIsTakenOffAndCheckedWhereAria2ChecksIt() {
        let methods = RPCMethods(secret: RPCSecret("s3cret"), sessionID: "s", version: "v")
        func authorize(_ method: String, _ params: [JSONValue]) -> Result<[JSONValue], RPCError> {
            methods.authorize(RPCCall(id: 1, method: method, params: params)).map(\.1)
        }
        #expect(authorize("aria2.tellStatus", ["token:s3cret", "ab"]) == .success(["ab"]))
        #expect(authorize("aria2.tellStatus", ["token:wrong", "ab"]) == .failure(.unauthorized))
        #expect(authorize("aria2.tellStatus", ["ab"]) == .failure(.unauthorized))
        #expect(authorize("aria2.getGlobalStat", []) == .failure(.unauthorized))
        // Listing what exists needs no token; a token given is still taken off.
        #expect(authorize("system.listMethods", []) == .success([]))
        #expect(authorize("system.listNotifications", ["token:anything"]) == .success([]))
        // A method that does not exist, without the token: no more is said than for one that does.
        #expect(authorize("aria2.nope", []) == .failure(.unauthorized))
        #expect(methods.statelessAnswer(RPCCall(id: 1, method: "aria2.nope", params: ["token:s3cret"]))
                == .failure(RPCError("No such method: aria2.nope")))
        #expect(methods.statelessAnswer(RPCCall(id: 1, method: "aria2.addTorrent", params: ["token:s3cret", "AAAA"]))?.isFailure == true)
        #expect(methods.statelessAnswer(RPCCall(id: 1, method: "aria2.saveSession", params: ["token:s3cret"])) == .success("OK"))
        #expect(methods.statelessAnswer(RPCCall(id: 1, method: "aria2.tellActive", params: ["token:s3cret"])) == nil)
    }

    // MARK: - GIDs

    @Test func aTasksGIDIsItsOwnAndTheSameEveryTime() {
        #expect(RPCGID.of(taskID: "00000000000000aa") == "00000000000000aa")
        // Golden: GIDs outlive the agent that gave them (a client keeps them across restarts and upgrades).
        #expect(RPCGID.of(taskID: "debian-13") == RPCGID.of(taskID: "debian-13"))
        #expect(RPCGID.of(taskID: "yk3c9t") == "6760b0d99e2af857")
        let ids = (0..<10_000).map { "task\($0)" }
        let gids = Set(ids.map(RPCGID.of))
        #expect(gids.count == ids.count)
        #expect(gids.allSatisfy(RPCGID.isGID))
        // An id that looks like a GID only in upper case is hashed: GIDs are lowercase.
        #expect(RPCGID.of(taskID: "00000000000000AA") != "00000000000000AA")
    }

    /// Two tasks never share a GID, whoever chose the id: a job file's `id`
    /// or an RPC `gid` spelling another task's GID is refused, and so is an
    /// id another task already has; the fold read back from a snapshot
    /// knows the same.
    @Test func aNewTaskIDWhoseGIDIsTakenIsRefused() throws {
        var log = LogBuilder()
        log.create("qufbf9")
        log.create("7000000000000001")
        log.create("child")
        var childSpec = TaskSpec(url: "http://h.example/s0.ts", dest: "/downloads/v/0.ts")
        childSpec.parent = "qufbf9"
        _ = log.add(.created(childSpec), task: "qufbf9.0")
        let victim = RPCGID.of(taskID: "qufbf9")
        for state in [log.state, try Snapshot.decode(Snapshot.encode(log.state))] {
            #expect(state.conflict(ofNewTaskID: victim) == .sharesGID(gid: victim, with: "qufbf9"))
            #expect(state.conflict(ofNewTaskID: "7000000000000001") == .taken)
            #expect(state.conflict(ofNewTaskID: "qufbf9") == .taken)
            #expect(state.conflict(ofNewTaskID: "fresh1") == nil)
            #expect(state.conflict(ofNewTaskID: "7000000000000002") == nil)
            // A segment is its parent's business: no client names it by GID.
            #expect(state.conflict(ofNewTaskID: RPCGID.of(taskID: "qufbf9.0")) == nil)
        }
        #expect(TaskIDConflict.sharesGID(gid: victim, with: "qufbf9").sentence(for: victim)
                == "\"\(victim)\" would have the aria2 RPC GID \(victim), which task qufbf9 has: choose another id")

        // Over RPC, the gid option is refused the same way, and a drawn id never lands on a GID in use.
        let methods = RPCMethods(secret: RPCSecret("s"), sessionID: "sid", version: "v")
        var context = RPCMethods.Context(state: log.state, view: RPCView(state: log.state),
                                         settings: RPCSettings(downloadDir: "/downloads", config: AgentConfig()),
                                         parser: JobParser(downloadDir: "/downloads"))
        let refused = methods.action(for: RPCCall(id: 1, method: "aria2.addUri",
                                                  params: ["token:s", ["http://h.example/intruder.bin"], ["gid": .string(victim)]]), in: &context)
        #expect(refused == .fail(RPCError("GID \(victim) is already used by another download")))

        // A forgotten download's GID is still refused, and the refusal says whose it was (tellStatus says "not found").
        _ = log.add(.forgotten(Forgotten()), task: "qufbf9")
        context.state = log.state
        let reused = methods.action(for: RPCCall(id: 1, method: "aria2.addUri",
                                                 params: ["token:s", ["http://h.example/again.bin"], ["gid": .string(victim)]]), in: &context)
        #expect(reused == .fail(RPCError("GID \(victim) belonged to a download since removed and forgotten; the log keeps every GID it gave, "
                                         + "choose another")))
    }

    @Test func aGIDIsNamedByAUniquePrefixInEitherCase() {
        var log = LogBuilder()
        log.create("00000000000000aa")
        log.create("00000000000000ab")
        log.create("abcdef0000000000")
        let view = RPCView(state: log.state)
        #expect(view.task(named: "00000000000000AA") == "00000000000000aa")
        #expect(view.task(named: "abc") == "abcdef0000000000")
        #expect(view.task(named: "0000") == nil)
        #expect(view.task(named: "zz") == nil)
        #expect(view.task(named: "") == nil)
        #expect(RPCGID.normalizedQuery("zz") == nil)
    }

    // MARK: - Options

    @Test func aria2OptionsBecomeJobKeys() throws {
        let addition = try RPCJobOptions.addition(uris: ["http://h.example/a/file.iso", "http://mirror/file.iso"], options: [
            "dir": "/home/me/Downloads/isos", "out": "debian.iso", "header": ["X-A: 1", "Authorization: Bearer t"],
            "max-download-limit": "2M", "split": "8", "max-connection-per-server": "4", "checksum": .string("sha-256=" + String(repeating: "ab", count: 32)),
            "max-tries": "3", "gid": "00000000000000AA", "pause": "true", "seed-ratio": "1.0",
        ])
        #expect(addition.table["url"] == .string("http://h.example/a/file.iso"))
        #expect(addition.table["dest"] == .string("/home/me/Downloads/isos/debian.iso"))
        #expect(addition.table["max_speed"] == .string("2M"))
        #expect(addition.table["connections"] == .integer(4))
        #expect(addition.table["retries"] == .integer(2))
        #expect(addition.table["sha256"] == .string(String(repeating: "ab", count: 32)))
        guard case .table(let headers)? = addition.table["headers"] else { Issue.record("no headers"); return }
        #expect(headers["Authorization"] == .string("Bearer t"))
        #expect(addition.taskID == "00000000000000aa")
        #expect(addition.startsPaused)
        #expect(addition.origins["dest"] == "dir")
    }

    @Test func theSyncagentKeyReachesEveryJobKey() throws {
        let object = try RPCJobOptions.addition(uris: ["https://cdn.example/talk/master.m3u8"], options: [
            "syncagent": ["kind": "hls", "variant": "best", "output": "file", "priority": 5, "headers": ["Referer": "https://x"]],
            "dir": "/home/me/Downloads/videos",
        ])
        #expect(object.table["kind"] == .string("hls"))
        #expect(object.table["priority"] == .integer(5))
        // The video's own name (its folder's, for a master playlist), not the playlist's.
        #expect(object.table["dest"] == .string("/home/me/Downloads/videos/talk"))
        let text = try RPCJobOptions.addition(uris: ["https://cdn.example/v.m3u8"], options: ["syncagent": "kind = \"hls\"\nmax_duration = 60"])
        #expect(text.table["max_duration"] == .integer(60))
        let parsed = try JobParser(downloadDir: "/home/me/Downloads").parse(table: object.table)
        guard case .transfer(_, let spec) = parsed else { Issue.record("not a transfer"); return }
        #expect(spec.kind == .hls && spec.priority == 5 && spec.hls?.output == .file)
    }

    @Test(arguments: [
        (["http://h/f"], ["checksum": "sha-1=abc"] as [String: JSONValue], "sha-1 is not supported"),
        (["http://h/f"], ["checksum": "abc"], "must look like"),
        (["http://h/f"], ["split": "many"], "option split"),
        (["http://h/f"], ["all-proxy": "http://proxy:3128"], "proxy per download"),
        (["http://h/f"], ["gid": "123"], "not 16 hex digits"),
        (["http://h/f"], ["header": "no colon"], "Name: value"),
        (["http://h/f"], ["syncagent": ["url": "http://other/"]], "cannot be set there"),
        (["http://h/f"], ["syncagent": "kind = "], "not valid TOML"),
        (["magnet:?xt=urn:btih:abc"], [:], "Magnet"),
        ([], [:], "URI is not provided."),
    ] as [([JSONValue], [String: JSONValue], String)])
    func badOptionsAreRefusedByName(_ uris: [JSONValue], _ options: [String: JSONValue], _ words: String) {
        do {
            _ = try RPCJobOptions.addition(uris: uris, options: options)
            Issue.record("accepted: \(options)")
        } catch let error as RPCError {
            #expect(error.message.contains(words), "\(error.message)")
        } catch {
            Issue.record("\(error)")
        }
    }

    @Test func aJobKeysErrorNamesTheOptionItCameFrom() {
        let origins = ["max_speed": "max-download-limit", "kind": "syncagent", "headers": "header"]
        #expect(RPCJobOptions.describe(KeyError(key: "max_speed", "must be positive"), origins: origins) == "option max-download-limit: must be positive")
        #expect(RPCJobOptions.describe(KeyError(key: "headers.X", "bad"), origins: origins) == "option header: bad")
        #expect(RPCJobOptions.describe(KeyError(key: "kind", "bad"), origins: origins) == "option syncagent: key \"kind\" bad")
        #expect(RPCJobOptions.describe(KeyError(key: "dest", "outside"), origins: [:]) == "option syncagent: key \"dest\" outside")
        #expect(RPCJobOptions.describe(KeyError(key: "url", "must be an http or https URL"), origins: [:]) == "URI must be an http or https URL")
    }

    // MARK: - Status

    @Test func phasesHaveAria2sWords() {
        var log = LogBuilder()
        for id in ["q", "r", "p", "n", "f", "x", "c"] { log.create(id) }
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "u")), task: "r")
        _ = log.add(.paused(Paused(bytes: 0, reason: .user)), task: "p")
        _ = log.add(.paused(Paused(bytes: 0, reason: .offline)), task: "n")
        log.runToEnd("f")
        _ = log.add(.failed(Failed(reason: "server answered 404", code: .http(404), bytes: 0)), task: "x")
        _ = log.add(.cancelled(Cancelled(bytes: 0)), task: "c")
        let state = log.state
        let words = ["q": "waiting", "r": "active", "p": "paused", "n": "waiting", "f": "complete", "x": "error", "c": "removed"]
        for (id, word) in words { #expect(RPCTaskStatus.status(of: state[id]!) == word, "\(id)") }
        #expect(RPCTaskStatus.errorCode(of: state["x"]!) == 3)
        #expect(RPCTaskStatus.errorCode(of: state["c"]!) == 31)
        #expect(RPCTaskStatus.errorCode(of: state["f"]!) == 0)
    }

    /// The keys aria2 sends for an HTTP download in each state (compared with aria2c itself in RPCOracleTests).
    @Test func aStatusHasAria2sKeysAndOnlyThoseAskedFor() {
        var log = LogBuilder()
        log.create("w")
        log.create("d")
        log.runToEnd("d", bytes: 3_000_000)
        let state = log.state
        let settings = RPCSettings(downloadDir: "/downloads", config: AgentConfig())
        let waiting = RPCTaskStatus.object(state["w"]!, in: state, settings: settings).object!
        #expect(Set(waiting.keys) == ["gid", "status", "totalLength", "completedLength", "uploadLength", "downloadSpeed", "uploadSpeed",
                                      "pieceLength", "numPieces", "connections", "dir", "files"])
        let done = RPCTaskStatus.object(state["d"]!, in: state, settings: settings).object!
        #expect(Set(done.keys).subtracting(waiting.keys) == ["bitfield", "errorCode", "errorMessage"])
        #expect(done["bitfield"] == "e0" && done["numPieces"] == "3" && done["dir"] == "/downloads")
        #expect(done.values.allSatisfy { if case .string = $0 { true } else if case .array = $0 { true } else { false } })
        let some = RPCTaskStatus.object(state["d"]!, in: state, settings: settings, keys: ["gid", "status", "nope"]).object!
        #expect(some == ["gid": .string(RPCGID.of(taskID: "d")), "status": "complete"])
    }

    @Test(arguments: [
        ([ByteSpan(0, 0)], Int64(3_000_000), "00"), ([ByteSpan(0, 1 << 20)], 3_000_000, "80"),
        ([ByteSpan(0, (1 << 20) - 1)], 3_000_000, "00"), ([ByteSpan(1 << 20, 3_000_000)], 3_000_000, "60"),
        ([ByteSpan(0, 9 << 20)], 9 << 20, "ff80"), ([ByteSpan(0, 3)], 3, "80"), ([], 0, ""),
    ])
    func theBitfieldHasABitPerWholePiece(_ spans: [ByteSpan], _ total: Int64, _ hex: String) {
        #expect(RPCTaskStatus.bitfield(ByteRanges(spans), total: total) == hex)
    }

    @Test(arguments: [
        (Int64(0), Int64(1), ["A"]), (1, 2, ["B", "C"]), (-1, 2, ["C", "B"]), (-3, 5, ["A"]), (5, 1, []), (0, 0, []),
        (-4, 1, []), (0, 100, ["A", "B", "C"]),
    ])
    func pagesFollowAria2sOffsets(_ offset: Int64, _ count: Int64, _ page: [String]) {
        #expect(RPCMethods.page(["A", "B", "C"], offset: offset, count: count) == page)
        // A list whose indexes do not start at 0 (the view's deque may not).
        #expect(RPCMethods.page(["x", "A", "B", "C"].dropFirst(), offset: offset, count: count) == page)
    }

    /// A batch of list calls over a long log is bounded: per call, and per
    /// request by the bytes its calls that read downloads answer (a
    /// `getOption` as much as a list); the call that crosses the budget is
    /// answered whole, the ones after it refused.
    @Test func listsAreBoundedPerCallAndPerRequest() {
        var log = LogBuilder()
        for index in 0..<30 {
            log.create("t\(index)")
            log.runToEnd("t\(index)")
        }
        let methods = RPCMethods(secret: RPCSecret("s"), sessionID: "sid", version: "v")
        var context = RPCMethods.Context(state: log.state, view: RPCView(state: log.state),
                                         settings: RPCSettings(downloadDir: "/downloads", config: AgentConfig()),
                                         parser: JobParser(downloadDir: "/downloads"))
        context.answerBudget = 1000
        func answer(_ method: String, _ params: JSONValue...) -> RPCAction {
            methods.action(for: RPCCall(id: 1, method: method, params: ["token:s"] + params), in: &context)
        }
        func listed(_ offset: Int64, _ count: Int64) -> Int? {
            guard case .answer(.success(.array(let items))) = answer("aria2.tellStopped", .int(offset), .int(count), ["gid"]) else { return nil }
            return items.count
        }
        let spent = RPCError("This request's answer is over \(RPCMethods.answerBudget >> 20) MiB already; "
                             + "ask for fewer downloads, fewer keys or fewer calls at a time.")
        #expect(listed(0, 1_000_000) == 30)
        #expect(context.answerBudget > 0 && context.answerBudget < 1000 - 30 * 16)
        #expect(listed(-1, 10) == 10)
        #expect(context.answerBudget <= 0)
        #expect(listed(0, 10) == nil)
        #expect(answer("aria2.getOption", .string(RPCGID.of(taskID: "t0"))) == .fail(spent))
        #expect(answer("aria2.getFiles", .string(RPCGID.of(taskID: "t0"))) == .fail(spent))
        #expect(answer("aria2.tellStatus", .string(RPCGID.of(taskID: "t0"))) == .fail(spent))
        // What reads no download is not refused; the stops it counts are never fewer than the stopped listed.
        guard case .answer(.success(let stat)) = answer("aria2.getGlobalStat") else { Issue.record("getGlobalStat refused"); return }
        #expect(stat["numStopped"] == "30" && stat["numStoppedTotal"] == "30", "\(stat)")
        // A getOption counts what it writes.
        context.answerBudget = RPCMethods.answerBudget
        guard case .answer(.success(let options)) = answer("aria2.getOption", .string(RPCGID.of(taskID: "t0"))) else { Issue.record("getOption refused"); return }
        #expect(context.answerBudget == RPCMethods.answerBudget - options.estimatedSize)
        #expect(options.estimatedSize >= options.serialized.count)
        guard case .object(let members) = RPCTaskStatus.object(log.state["t0"]!, in: log.state,
                                                                settings: RPCSettings(downloadDir: "/downloads", config: AgentConfig())) else {
            Issue.record("no status"); return
        }
        #expect(Set(members.keys) == RPCTaskStatus.keys)
    }

    // MARK: - Methods

    @Test func callsComeToAnswersOrToChangesForTheLoop() {
        var log = LogBuilder()
        log.create("w")
        log.create("d")
        log.runToEnd("d")
        let methods = RPCMethods(secret: RPCSecret("s"), sessionID: "sid", version: "v")
        var context = RPCMethods.Context(state: log.state, view: RPCView(state: log.state),
                                         settings: RPCSettings(downloadDir: "/downloads", config: AgentConfig()),
                                         parser: JobParser(downloadDir: "/downloads"))
        func action(_ method: String, _ params: JSONValue...) -> RPCAction {
            methods.action(for: RPCCall(id: 1, method: method, params: ["token:s"] + params), in: &context)
        }
        let w = JSONValue.string(RPCGID.of(taskID: "w")), d = JSONValue.string(RPCGID.of(taskID: "d"))
        #expect(action("aria2.pause", w) == .control(.pause, tasks: ["w"], target: "w", answer: w))
        #expect(action("aria2.pause", d) == .fail(RPCError("GID#\(RPCGID.of(taskID: "d")) cannot be paused now")))
        #expect(action("aria2.unpause", w) == .fail(RPCError("GID#\(RPCGID.of(taskID: "w")) cannot be unpaused now")))
        #expect(action("aria2.remove", d) == .fail(RPCError("Active Download not found for GID#\(RPCGID.of(taskID: "d"))")))
        #expect(action("aria2.removeDownloadResult", d) == .control(.forget, tasks: ["d"], target: "d", answer: "OK"))
        #expect(action("aria2.purgeDownloadResult") == .control(.forget, tasks: ["d"], target: "*", answer: "OK"))
        #expect(action("aria2.pauseAll") == .control(.pause, tasks: ["w"], target: "*", answer: "OK"))
        #expect(action("aria2.tellStatus") == .fail(.missing(0)))
        #expect(action("aria2.tellStatus", 5) == .fail(.wrongType(0)))
        #expect(action("aria2.tellStatus", "zz") == .fail(RPCError("Invalid GID zz")))
        #expect(action("aria2.tellStatus", "0123456789abcdef") == .fail(.gidNotFound("0123456789abcdef")))
        #expect(action("aria2.tellWaiting", "0", 1) == .fail(.wrongType(0)))
        #expect(action("aria2.getServers", d) == .fail(RPCError("No active download for GID#\(RPCGID.of(taskID: "d"))")))
        #expect(action("aria2.changeGlobalOption", ["max-concurrent-downloads": "3", "max-overall-download-limit": "0"])
                == .changeSettings(maxActive: 3, maxOverallSpeed: .some(nil), maxSpeed: nil))
        #expect(action("aria2.changeOption", w, ["max-download-limit": "0"]) == .ok("OK"))
        // changeUri is `syncagent retarget`: one URI in, held to a job's url rules; the one it leaves may be named.
        let wURL = JSONValue.string(log.state["w"]!.spec.url)
        #expect(action("aria2.changeUri", w, 1, [wURL], ["https://mirror.example/f"])
                == .retarget(task: "w", url: "https://mirror.example/f", answer: [1, 1]))
        #expect(action("aria2.changeUri", w, 1, [], ["https://mirror.example/f"]) == .retarget(task: "w", url: "https://mirror.example/f", answer: [0, 1]))
        #expect(action("aria2.changeUri", w, 1, [], []) == .ok([0, 0]))
        #expect(action("aria2.changeUri", w, 1, [wURL], []) == .fail(RPCError("A download keeps one URL: give the URI that replaces it in addUris")))
        #expect(action("aria2.changeUri", w, 1, [], ["https://a.example/f", "https://b.example/f"])
                == .fail(RPCError("A download has one URL: give one URI to add, not 2")))
        #expect(action("aria2.changeUri", w, 1, [], ["ftp://bob:pw@h/f"])
                == .fail(RPCError(#"key "addUris" must be an http or https URL, not ftp: "ftp://<redacted>@h/f""#)))
        #expect(action("aria2.changeUri", w, 2, [], ["https://mirror.example/f"])
                == .fail(RPCError("fileIndex is out of range: a download has one file, index 1")))
        #expect(action("aria2.changeUri", d, 1, [], ["https://mirror.example/f"])
                == .fail(RPCError("GID#\(RPCGID.of(taskID: "d")) has ended: there is nothing to fetch from another URL")))
        guard case .add(let id, let spec, false) = action("aria2.addUri", ["http://h.example/x/file.bin"], ["out": "y.bin"]) else {
            Issue.record("addUri made no task"); return
        }
        #expect(spec.dest == "/downloads/y.bin" && spec.source?.file == "rpc" && context.state.conflict(ofNewTaskID: id) == nil)
        if case .answer(.failure(let error)) = action("aria2.addUri", ["http://h.example/x"], ["out": "../../etc/passwd"]) {
            #expect(error.message.hasPrefix("option out:"), "\(error.message)")
        } else {
            Issue.record("a destination outside download_dir was taken")
        }
        let multicall = methods.action(for: RPCCall(id: 1, method: "system.multicall", params: [[
            ["methodName": "aria2.getVersion", "params": ["token:s"]],
            ["methodName": "aria2.getVersion", "params": ["token:wrong"]],
            ["methodName": "system.multicall", "params": []],
        ]]), in: &context)
        // Each call is taken when the one before it is done: a multicall's second call sees what its first did.
        #expect(multicall == .multicall([.success(RPCCall(id: .null, method: "aria2.getVersion", params: ["token:s"])),
                                         .success(RPCCall(id: .null, method: "aria2.getVersion", params: ["token:wrong"])),
                                         .failure(RPCError("Recursive system.multicall forbidden."))]))
    }

    // MARK: - The view of downloads

    /// Kept event by event, the view is the one built from the fold of the same events.
    @Test func theViewKeptAsEventsComeIsTheOneBuiltFromTheFold() {
        var log = LogBuilder()
        var view = RPCView()
        func step(_ body: EventBody, _ task: String) {
            let event = log.add(body, task: task)
            view.note(event, in: log.state)
        }
        for id in ["a", "b", "c", "d"] {
            log.create(id)
            view.note(log.events.last!, in: log.state)
        }
        step(.started(Started(attempt: 1, offset: 0, url: "u")), "a")
        step(.finished(Finished(bytes: 1, dest: "/downloads/a.bin")), "a")
        step(.failed(Failed(reason: "x", code: .http(500), bytes: 0)), "b")
        step(.paused(Paused(bytes: 0, reason: .user)), "c")
        step(.resumed(Resumed(bytes: 0, reason: "run again")), "b")
        step(.started(Started(attempt: 2, offset: 0, url: "u")), "b")
        step(.cancelled(Cancelled(bytes: 0)), "b")
        step(.forgotten(Forgotten()), "a")
        var child = TaskSpec(url: "http://h/seg", dest: "/downloads/seg")
        child.parent = "d"
        let created = log.add(.created(child), task: "d-0")
        view.note(created, in: log.state)
        var built = RPCView(state: log.state)
        let stopped = view.stopped(), builtStopped = built.stopped()
        #expect(stopped == ["b"])
        #expect(builtStopped == ["b"])
        #expect(view.active == built.active && view.waiting == built.waiting && view.tasksByGID == built.tasksByGID)
        #expect(view.waiting == ["c", "d"])
        #expect(view.task(named: RPCGID.of(taskID: "d-0")) == nil)
        #expect(view.task(named: RPCGID.of(taskID: "a")) == nil)
    }

    // MARK: - Notifications

    @Test func committedEventsMakeAria2sNotifications() {
        var log = LogBuilder()
        log.create("t")
        log.create("u")
        var view = RPCView(state: log.state)
        var notifier = RPCNotifier()
        func notifications(_ bodies: [(EventBody, String)]) -> [String] {
            let events = bodies.map { log.add($0.0, task: $0.1) }
            for event in events { view.note(event, in: log.state) }
            return notifier.notifications(for: events, view: view).map { "\($0.method.rawValue.dropFirst(6)) \($0.gid == RPCGID.of(taskID: "t") ? "t" : "u")" }
        }
        #expect(notifications([(.started(Started(attempt: 1, offset: 0, url: "u")), "t")]) == ["onDownloadStart t"])
        // A retry starts again without a second onDownloadStart.
        #expect(notifications([(.retrying(Retrying(attempt: 1, reason: "reset", delayMs: 10, bytes: 5)), "t"),
                               (.started(Started(attempt: 2, offset: 5, url: "u")), "t")]) == [])
        #expect(notifications([(.paused(Paused(bytes: 5, reason: .user)), "t")]) == ["onDownloadPause t"])
        #expect(notifications([(.resumed(Resumed(bytes: 5, reason: "user")), "t"), (.started(Started(attempt: 3, offset: 5, url: "u")), "t"),
                               (.finished(Finished(bytes: 9, dest: "/downloads/t.bin")), "t")]) == ["onDownloadStart t", "onDownloadComplete t"])
        // The agent's own pause (it stops) is no user's.
        #expect(notifications([(.started(Started(attempt: 1, offset: 0, url: "u")), "u"), (.paused(Paused(bytes: 0, reason: .agentStopping)), "u")])
                == ["onDownloadStart u"])
        // Removed while it waits, it was never told as running: aria2 says nothing then either.
        #expect(notifications([(.cancelled(Cancelled(bytes: 0)), "u")]) == [])
        #expect(notifications([(.resumed(Resumed(bytes: 0, reason: "user")), "u"), (.started(Started(attempt: 2, offset: 0, url: "u")), "u"),
                               (.cancelled(Cancelled(bytes: 0)), "u")]) == ["onDownloadStart u", "onDownloadStop u"])
    }

    // MARK: - Host, CORS, rate

    @Test(arguments: [
        ("127.0.0.1:6800", true), ("localhost:6800", true), ("LOCALHOST", true), ("app.localhost:6800", true), ("[::1]:6800", true),
        ("192.168.1.20:6800", true), ("evil.example:6800", false), ("127.0.0.1.evil.example", false), ("localhost.evil.example", false),
        ("", false), ("[::1", false), ("[zz]:1", false), ("127.0.0.1:68a0", false), ("a:b:c", false), ("0x7f.0.0.1", false),
    ])
    func onlyHostsNoPageCanRebindAreAnswered(_ host: String, _ allowed: Bool) {
        #expect(RPCHTTPPolicy.allowsHost(host) == allowed)
    }

    @Test func aRequestWithoutHostComesFromNoBrowser() {
        #expect(RPCHTTPPolicy.allowsHost(nil))
    }

    @Test func corsIsAnsweredAsAria2AnswersItForWebUIs() {
        #expect(RPCHTTPPolicy.corsHeaders(origin: nil, preflightHeaders: nil).isEmpty)
        #expect(RPCHTTPPolicy.corsHeaders(origin: "http://ariang.example", preflightHeaders: nil).map(\.0) == ["Access-Control-Allow-Origin"])
        let preflight = RPCHTTPPolicy.corsHeaders(origin: "http://ariang.example", preflightHeaders: "content-type, x-evil\r\nSet-Cookie: a")
        #expect(preflight.first { $0.0 == "Access-Control-Allow-Headers" }?.1 == "content-type")
        #expect(preflight.contains { $0 == ("Access-Control-Allow-Methods", "POST, GET, OPTIONS") })
    }

    /// Calls without the secret wait their turn: past the burst each is
    /// answered when the bucket has refilled for it, however many come at once.
    @Test func callsWithoutTheSecretWaitTheirTurn() {
        var bucket = RPCRateLimit(rate: 10, burst: 100)
        #expect(bucket.delay(100, nowMs: 0) == 0)
        #expect((0..<5).map { _ in bucket.delay(nowMs: 0) } == [100, 200, 300, 400, 500])
        // A second later ten more have come back: the debt of five is paid, five to spare.
        #expect(bucket.delay(5, nowMs: 1000) == 0)
        #expect(bucket.delay(nowMs: 1000) == 100)
        // However many are sent at once, none waits more than a minute.
        #expect(bucket.delay(100_000, nowMs: 1000) == RPCRateLimit.maximumDelayMs)
        #expect(bucket.delay(nowMs: 1000) == RPCRateLimit.maximumDelayMs)
    }

    /// The rates count calls by whether they carry the secret; a multicall by the calls in it.
    @Test func aRequestsCallsAreCountedByTheirToken() {
        let methods = RPCMethods(secret: RPCSecret("s"), sessionID: "sid", version: "v")
        func counted(_ body: String) -> RPCAdmission { methods.admission(of: RPCRequest.parse(Array(body.utf8))) }
        #expect(counted(#"{"id":1,"method":"aria2.tellActive","params":["token:s"]}"#) == RPCAdmission(trusted: 1))
        #expect(counted(#"{"id":1,"method":"aria2.tellActive","params":["token:x"]}"#) == RPCAdmission(untrusted: 1))
        #expect(counted("{bad") == RPCAdmission(untrusted: 1))
        #expect(counted(#"[{"id":1,"method":"aria2.tellActive","params":["token:s"]},{"id":2,"method":"aria2.nope","params":["token:x"]}]"#)
                == RPCAdmission(trusted: 1, untrusted: 1))
        // A call that needs no secret waits behind no guess; with the secret, it is the holder's call.
        #expect(counted(#"{"id":1,"method":"system.listMethods"}"#) == RPCAdmission(open: 1))
        #expect(counted(#"{"id":1,"method":"system.listNotifications","params":["token:x"]}"#) == RPCAdmission(open: 1))
        #expect(counted(#"{"id":1,"method":"system.listMethods","params":["token:s"]}"#) == RPCAdmission(trusted: 1))
        #expect(counted(#"{"id":1,"method":"system.multicall","params":[[{"methodName":"aria2.tellActive","params":["token:s"]},"#
                        + #"{"methodName":"aria2.tellActive","params":["token:x"]},{"methodName":"aria2.getVersion","params":["token:s"]}]]}"#)
                == RPCAdmission(trusted: 2, untrusted: 1))
        // A multicall none of whose calls carries the secret is answered without the agent's loop.
        let guesses = RPCCall(id: 1, method: "system.multicall", params: [[["methodName": "aria2.tellActive", "params": ["token:x"]],
                                                                            ["methodName": "system.listNotifications"]]])
        guard case .success(.array(let results))? = methods.statelessAnswer(guesses) else { Issue.record("the loop was asked"); return }
        #expect(results.first == RPCError.unauthorized.json && results.count == 2)
        #expect(methods.statelessAnswer(RPCCall(id: 1, method: "system.multicall",
                                                params: [[["methodName": "aria2.tellActive", "params": ["token:s"]]]])) == nil)
    }

    @Test func theRateIsABucket() {
        var bucket = RPCRateLimit(rate: 10, burst: 20)
        var taken: [Bool] = []
        for _ in 0..<21 { taken.append(bucket.take(nowMs: 0)) }
        // 100 ms later one more; then none; much later no more than the burst.
        for (cost, at) in [(1.0, Int64(100)), (1, 100), (30, 100_000), (20, 100_000)] { taken.append(bucket.take(cost, nowMs: at)) }
        #expect(taken == Array(repeating: true, count: 20) + [false, true, false, false, true])
    }

    @Test(arguments: [("127.0.0.1:6800", true), ("[::1]:6800", true), ("0.0.0.0:1", true), ("localhost:6800", false),
                      ("127.0.0.1", false), ("127.0.0.1:0", false), ("127.0.0.1:70000", false), ("[zz]:6800", false)])
    func rpcListenIsAnAddressAndAPort(_ text: String, _ valid: Bool) {
        #expect(((try? RPCListen(parsing: text, key: "rpc_listen")) != nil) == valid)
    }

    @Test func theConfigKeysAreRead() throws {
        let config = try AgentConfig.parse("rpc = true\nrpc_listen = \"[::1]:6801\"\nrpc_secret = \"abc\"\n")
        #expect(config.rpc && config.rpcListen == RPCListen(host: "::1", port: 6801) && config.rpcSecret == "abc")
        #expect(throws: KeyError.self) { try AgentConfig.parse("rpc_secret = \"two words\"\n") }
        #expect(!AgentConfig().rpc && AgentConfig().rpcListen.description == "127.0.0.1:6800")
    }
}

private extension Result {
    var isFailure: Bool { if case .failure = self { true } else { false } }
}

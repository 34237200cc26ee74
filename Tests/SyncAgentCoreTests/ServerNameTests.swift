import Testing
@testable import SyncAgentCore

/// A name a server gives made safe before it names a file, and where it
/// puts the file among other tasks' names and the disk (`name_from_server`).
@Suite("Names the server gives")
struct ServerNameTests {
    // MARK: A safe name

    @Test(arguments: [
        ("report.pdf", "report.pdf"),
        ("../../.bashrc", "bashrc"),
        ("/etc/passwd", "passwd"),
        ("C:\\Users\\me\\evil.exe", "evil.exe"),
        ("..\\..\\win.ini", "win.ini"),
        (".hidden", "hidden"),
        ("...dots", "dots"),
        (" . .x", "x"),
        ("evil\u{0}.txt", "evil_.txt"),
        ("line\nbreak\r.txt", "line_break_.txt"),
        ("esc\u{1B}[31mred.txt", "esc_[31mred.txt"),
        ("invoice\u{202E}fdp.exe", "invoice_fdp.exe"),
        ("zero\u{200B}width.txt", "zero_width.txt"),
        ("arabic\u{061C}mark.txt", "arabic_mark.txt"),
        ("trailing.txt  ", "trailing.txt"),
        ("名前.txt", "名前.txt"),
        ("a/\u{301}b.txt", "\u{301}b.txt"),
    ] as [(String, String)])
    func aNameIsMadeSafe(raw: String, safe: String) {
        #expect(ServerFileName.safe(raw) == safe)
    }

    @Test(arguments: ["", ".", "..", "../..", "/", "dir/", "  ", ". .", "\\", "....", "x/.."])
    func nothingUsableIsNoName(raw: String) {
        #expect(ServerFileName.safe(raw) == nil)
    }

    @Test func aLongNameIsCutBetweenCharactersKeepingItsExtension() throws {
        let long = String(repeating: "é", count: 5_000) + ".tar.gz"
        let name = try #require(ServerFileName.safe(long))
        #expect(name.utf8.count <= ServerFileName.maximumBytes)
        #expect(name.hasSuffix("é.gz"))
        #expect(String(validating: Array(name.utf8), as: UTF8.self) == name)
        let plain = try #require(ServerFileName.safe(String(repeating: "x", count: 10_000)))
        #expect(plain.utf8.count == ServerFileName.maximumBytes)
        // Four-byte characters, cut so that none is split.
        let emoji = try #require(ServerFileName.safe(String(repeating: "😀", count: 100) + ".png"))
        #expect(emoji.utf8.count <= ServerFileName.maximumBytes && emoji.hasSuffix("😀.png"))
        // An "extension" too long to be one is cut with the rest.
        let noExtension = try #require(ServerFileName.safe("a." + String(repeating: "b", count: 300)))
        #expect(noExtension.utf8.count == ServerFileName.maximumBytes && noExtension.hasPrefix("a.b"))
    }

    // MARK: Which name

    @Test func theHeaderComesFirstThenTheURLThenTheDefault() {
        let header = Array("attachment; filename=\"from-header.zip\"".utf8)
        #expect(ServerFileName.choose(contentDisposition: header, finalURL: "https://h/x/from-url.zip").name == "from-header.zip")
        #expect(ServerFileName.choose(contentDisposition: nil, finalURL: "https://h/x/from%20url.zip?token=1").name == "from url.zip")
        #expect(ServerFileName.choose(contentDisposition: nil, finalURL: "https://h/x/").name == ServerFileName.fallback)
        #expect(ServerFileName.choose(contentDisposition: nil, finalURL: "https://h").name == ServerFileName.fallback)
        // A header whose names leave nothing usable gives way to the URL.
        let dots = Array("attachment; filename*=UTF-8''%2e%2e%2f; filename=\"..\"".utf8)
        #expect(ServerFileName.choose(contentDisposition: dots, finalURL: "https://h/real.bin") == ("real.bin", .url))
        // The URL's own escapes: %2F is a separator once decoded, %00 a control character.
        #expect(ServerFileName.choose(contentDisposition: nil, finalURL: "https://h/a%2F..%2F.profile").name == "profile")
        #expect(ServerFileName.choose(contentDisposition: nil, finalURL: "https://h/nul%00.txt").name == "nul_.txt")
    }

    @Test func theExtendedNameWinsOverThePlainOne() {
        let header = Array("attachment; filename=\"plain.txt\"; filename*=UTF-8''%2e%2e%2f%2e%2e%2f.ssh%2fauthorized_keys".utf8)
        #expect(ServerFileName.choose(contentDisposition: header, finalURL: "https://h/u") == ("authorized_keys", .contentDisposition))
    }

    // MARK: Against other tasks and the disk

    static func namedTask(_ id: String, dest: String, overwrite: OverwriteMode = .rename, in state: inout AgentState, seq: Int64) {
        let spec = TaskSpec(url: "https://h/\(id)", dest: dest, overwrite: overwrite, nameFromServer: true)
        state.apply(Event(seq: seq, atMs: seq, task: id, body: .created(spec)))
        state.apply(Event(seq: seq + 1, atMs: seq, task: id, body: .started(Started(attempt: 1, offset: 0, url: spec.url))))
    }

    @Test func aNameIsReservedAsTheAnswerIsRecordedAndTheNextOneIsRenamed() throws {
        var state = AgentState()
        Self.namedTask("a", dest: "/dl/get", in: &state, seq: 1)
        Self.namedTask("b", dest: "/dl/get.1", in: &state, seq: 3)
        let first = Destinations.decide(serverNamed: "/dl/report.pdf", for: try #require(state["a"]), in: state, exists: { _ in false })
        #expect(first == .use("/dl/report.pdf"))
        state.apply(Event(seq: 5, atMs: 5, task: "a", body: .progressed(Progressed(bytes: 0, dest: "/dl/report.pdf"))))
        #expect(state.holder(ofDestination: "/dl/report.pdf") == "a")
        #expect(state["a"]?.dest == "/dl/report.pdf")
        #expect(state["a"]?.partPath == "/dl/get.part")
        let second = Destinations.decide(serverNamed: "/dl/report.pdf", for: try #require(state["b"]), in: state, exists: { _ in false })
        #expect(second == .use("/dl/report.1.pdf"))
        // A later answer naming it otherwise changes nothing: the first name holds.
        state.apply(Event(seq: 6, atMs: 6, task: "a", body: .progressed(Progressed(bytes: 0, dest: "/dl/other.pdf"))))
        #expect(state["a"]?.namedDest == "/dl/report.pdf")
        #expect(state.holder(ofDestination: "/dl/other.pdf") == nil)
        // Ended, the task lets both names go.
        state.apply(Event(seq: 7, atMs: 7, task: "a", body: .failed(Failed(reason: "x", code: .cannotStart, bytes: 0))))
        #expect(state.holder(ofDestination: "/dl/report.pdf") == nil)
        #expect(state.holder(ofDestination: "/dl/get") == nil)
        // Run again, it holds them again.
        state.apply(Event(seq: 8, atMs: 8, task: "a", body: .resumed(Resumed(bytes: 0, reason: "again"))))
        #expect(state.holder(ofDestination: "/dl/report.pdf") == "a")
    }

    @Test func aJobWithoutTheKeyIsNeverRenamedByALog() {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "plain", body: .created(TaskSpec(url: "https://h/x", dest: "/dl/x"))))
        state.apply(Event(seq: 2, atMs: 2, task: "plain", body: .progressed(Progressed(bytes: 0, dest: "/dl/elsewhere"))))
        #expect(state["plain"]?.dest == "/dl/x")
        #expect(state.holder(ofDestination: "/dl/elsewhere") == nil)
    }

    @Test func overwriteDecidesAgainstOtherTasksAndTheDisk() throws {
        var state = AgentState()
        state.apply(Event(seq: 1, atMs: 1, task: "other", body: .created(TaskSpec(url: "https://h/o", dest: "/dl/taken.bin"))))
        for (index, mode) in [OverwriteMode.skip, .fail, .replace, .rename].enumerated() {
            Self.namedTask("t\(index)", dest: "/dl/get\(index)", overwrite: mode, in: &state, seq: Int64(10 + index * 2))
        }
        func decide(_ id: String, _ path: String, onDisk: Set<String> = []) throws -> Destinations.ServerNameDecision {
            Destinations.decide(serverNamed: path, for: try #require(state[id]), in: state, exists: onDisk.contains)
        }
        // Another live task's destination, or its partial file.
        #expect(try decide("t0", "/dl/taken.bin") == .skip(reason: "skipped: task other (queued) already brings /dl/taken.bin", existing: nil))
        guard case .fail(_, .destReserved) = try decide("t1", "/dl/taken.bin") else { Issue.record("fail did not refuse"); return }
        guard case .fail(_, .destReserved) = try decide("t2", "/dl/taken.bin.part") else { Issue.record("replace took a partial file"); return }
        #expect(try decide("t3", "/dl/taken.bin") == .use("/dl/taken.1.bin"))
        // A file on disk.
        #expect(try decide("t0", "/dl/here.txt", onDisk: ["/dl/here.txt"]) == .skip(reason: "skipped: /dl/here.txt already exists",
                                                                                       existing: "/dl/here.txt"))
        guard case .fail(_, .destExists) = try decide("t1", "/dl/here.txt", onDisk: ["/dl/here.txt"]) else {
            Issue.record("fail did not refuse an existing file"); return
        }
        #expect(try decide("t2", "/dl/here.txt", onDisk: ["/dl/here.txt"]) == .use("/dl/here.txt"))
        #expect(try decide("t3", "/dl/here.txt", onDisk: ["/dl/here.txt"]) == .use("/dl/here.1.txt"))
        // Its own names: the one it was created with is its own; its partial file's never is free.
        #expect(try decide("t1", "/dl/get1") == .use("/dl/get1"))
        #expect(try decide("t3", "/dl/get3.part") == .use("/dl/get3"))
    }
}

import Foundation
import Testing
@testable import SyncAgentCore

/// The pure half of issue 9: numbers from servers, secrets in URLs,
/// reserved destinations, retry decisions, header injection.
@Suite("Hardening: the pure decisions")
struct HardeningCoreTests {
    // MARK: - Numbers a server sends

    /// `status --task` prints a response's headers: a server's escape
    /// sequence (clear screen, window title) reaches no terminal raw.
    @Test func aHeaderIsPrintedWithItsControlCharactersEscaped() {
        #expect(Header(name: "X-Bad", value: "\u{1B}[2J zz").printable == "X-Bad: \\x1B[2J zz")
        #expect(Header(name: "ETag", value: "\"\u{1B}]0;pwned\u{07}\"").printable == "ETag: \"\\x1B]0;pwned\\x07\"")
        #expect(Header(name: "X-Api-Key", value: "\u{1B}secret").printable == "X-Api-Key: <redacted>")
        #expect(Header(name: "Content-Type", value: "text/plain").printable == "Content-Type: text/plain")
    }

    @Test func countsRejectSignsOverflowAndJunk() {
        #expect(HTTPNumbers.parseCount("0") == 0)
        #expect(HTTPNumbers.parseCount("123456789012345678") == 123_456_789_012_345_678)
        for bad in ["", "-1", "+1", "1e9", " 1", "1 ", "9223372036854775807", "99999999999999999999999", "１２"] {
            #expect(HTTPNumbers.parseCount(bad) == nil, "\(bad)")
        }
        #expect(HTTPNumbers.contentLength(" 4096 ") == 4096)
        #expect(HTTPNumbers.contentLength("\(HTTPNumbers.maximumLength + 1)") == nil)
    }

    @Test func contentRangeIsParsedStrictly() {
        typealias Range = HTTPNumbers.ContentRange
        #expect(HTTPNumbers.contentRange("bytes 0-99/100") == Range(first: 0, last: 99, complete: 100))
        #expect(HTTPNumbers.contentRange("bytes 50000-99999/100000") == Range(first: 50000, last: 99999, complete: 100000))
        #expect(HTTPNumbers.contentRange("bytes 10-19/*") == Range(first: 10, last: 19, complete: nil))
        #expect(HTTPNumbers.contentRange("bytes */100") == Range(first: nil, last: nil, complete: 100))
        for bad in ["bytes 9-1/100", "bytes 0-100/100", "bytes -5-9/100", "bytes 0-9223372036854775806/9223372036854775807",
                    "bytes */*", "items 0-1/2", "bytes 0-1", "bytes 1/2", "bytes 0-1/2/3", ""] {
            #expect(HTTPNumbers.contentRange(bad) == nil, "\(bad)")
        }
    }

    @Test func retryAfterInSecondsSaturatesInsteadOfOverflowing() {
        #expect(HTTPNumbers.retryAfter("120", nowMs: 0) == .delayMs(120_000))
        #expect(HTTPNumbers.retryAfter("99999999999999999", nowMs: 0) == .delayMs(Int64.max))
        #expect(HTTPNumbers.retryAfter("9999999999999999999999999", nowMs: 0) == .delayMs(Int64.max))
        #expect(HTTPNumbers.retryAfter("-5", nowMs: 0) == .unreadable("-5"))
        #expect(HTTPNumbers.retryAfter("12abc", nowMs: 0) == .unreadable("12abc"))
    }

    @Test func retryAfterAsAnHTTPDateInEachForm() {
        // 1994-11-06T08:49:37Z, RFC 9110's own example.
        let expected: Int64 = 784_111_777_000
        #expect(HTTPDate.parseMs("Sun, 06 Nov 1994 08:49:37 GMT") == expected)
        #expect(HTTPDate.parseMs("Sunday, 06-Nov-94 08:49:37 GMT") == expected)
        #expect(HTTPDate.parseMs("Sun Nov  6 08:49:37 1994") == expected)
        #expect(HTTPNumbers.retryAfter("Sun, 06 Nov 1994 08:49:47 GMT", nowMs: expected) == .delayMs(10_000))
        // A date in the past means "now".
        #expect(HTTPNumbers.retryAfter("Sun, 06 Nov 1994 08:49:37 GMT", nowMs: expected + 5000) == .delayMs(0))
        for bad in ["Sun, 06 Nov 1994 25:49:37 GMT", "Sun, 32 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
                    "Sun, 06 Nov 1994 08:49:37 CET", "tomorrow", ""] {
            #expect(HTTPDate.parseMs(bad) == nil, "\(bad)")
        }
    }

    @Test func civilTimePrintsWhatFoundationPrintsAndRoundTrips() {
        // Foundation is the reference; CivilTime replaced it because each
        // formatter costs ~150 µs, which made `replay` of many waiting tasks take seconds.
        let reference = ISO8601DateFormatter()
        var generator = SystemRandomNumberGenerator()
        let edges: [Int64] = [0, -1, 999, -1000, -1001, 951_782_400_000 /* 2000-02-29 */, 4_107_542_399_999 /* 2100-02-28T23:59:59.999 */,
                              -2_208_988_800_000 /* 1900-01-01 */, 253_402_300_799_000 /* 9999-12-31T23:59:59 */]
        let sampled = (0..<2000).map { _ in Int64.random(in: -2_208_988_800_000...253_402_300_799_000, using: &generator) }
        for ms in edges + sampled {
            let expected = reference.string(from: Date(timeIntervalSince1970: (Double(ms) / 1000).rounded(.down)))
            #expect(CivilTime.iso8601(ms: ms) == expected, "\(ms)")
        }
        for days in stride(from: Int64(-800_000), through: 800_000, by: 37) {
            let (year, month, day) = CivilTime.date(days: days)
            #expect(CivilTime.days(year: year, month: month, day: day) == days, "\(days)")
        }
    }

    // MARK: - Secrets

    @Test func urlsLoseTheirUserinfoAndCredentialParameters() {
        #expect(Redaction.url("https://user:pass@example.com/f.iso?access_token=abc&page=2&sig=x#frag")
                == "https://<redacted>@example.com/f.iso?access_token=<redacted>&page=2&sig=<redacted>#frag")
        #expect(Redaction.url("https://s3.example.com/b/k?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA&X-Amz-Date=1")
                == "https://s3.example.com/b/k?X-Amz-Signature=<redacted>&X-Amz-Credential=<redacted>&X-Amz-Date=1")
        #expect(Redaction.url("http://example.com/design?key=1&password=2&token=3")
                == "http://example.com/design?key=<redacted>&password=<redacted>&token=<redacted>")
        #expect(Redaction.url("http://example.com/plain") == "http://example.com/plain")
        // Nothing to hide without userinfo, query or fragment: the text comes back as it was.
        for plain in ["http://example.com/a/b.iso", "https://[::1]:8443/x", "ftp://h/%40", "not a url", "http://h/a;b=c"] {
            #expect(Redaction.url(plain) == plain)
        }
        #expect(Redaction.url("http://h/p@q/f?key=1") == "http://h/p@q/f?key=<redacted>")
        // A fifth adversary: a URL with credentials inside a parameter's value kept them.
        #expect(Redaction.url("http://h/login?redirect_to=http://bob:pw2@other/x&page=2")
                == "http://h/login?redirect_to=http://<redacted>@other/x&page=2")
        #expect(Redaction.url("http://h/login?next=http%3A%2F%2Fbob%3Apw2%40other%2F&page=2")
                == "http://h/login?next=<redacted>&page=2")
        #expect(Redaction.url("http://h/go?to=http://other/x") == "http://h/go?to=http://other/x")
        #expect(Redaction.text("server answered 404 Not Found for http://u:p@h/x?token=t (retrying)")
                == "server answered 404 Not Found for http://<redacted>@h/x?token=<redacted> (retrying)")
    }

    @Test func aFragmentWrittenLikeAQueryIsRedactedToo() {
        #expect(Redaction.url("https://h/cb#access_token=abc&state=1") == "https://h/cb#access_token=<redacted>&state=1")
        #expect(Redaction.url("https://h/page#section-2") == "https://h/page#section-2")
    }

    @Test func controlCharactersAreShownNotSent() throws {
        #expect(Printable.escaping("evil\u{1B}[31m\nname\u{7F}") == "evil\\x1B[31m\\x0Aname\\x7F")
        #expect(Printable.escaping("plain naïve") == "plain naïve")
        // The edges of printable ASCII, which is passed through without a look at its scalars.
        #expect(Printable.escaping(" ~\u{7F}\u{1F}") == " ~\\x7F\\x1F")
        #expect(Printable.escaping("a\u{202E}b") == "a\\x202Eb")
        // JSON keeps its meaning: the escapes decode to the same string.
        let json = "{\"a\" : \"x\u{202E}y\u{7F}\u{85}é\u{1F600}\"}"
        let safe = Printable.jsonSafe(json)
        #expect(safe == "{\"a\" : \"x\\u202Ey\\u007F\\u0085é\u{1F600}\"}")
        let decode = { (text: String) in try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: String] }
        #expect(try decode(safe) == decode(json))
        #expect(Printable.jsonSafe("{\n  \"plain\" : 1\n}") == "{\n  \"plain\" : 1\n}")
        #expect(URLRules.fileName(from: "http://h/evil%1B%5B31m%0Aevil.bin") == "evil_[31m_evil.bin")
        #expect(throws: KeyError.self) { try JobParser(downloadDir: "/dl").parse(Array("url = \"http://h/x\"\ndest = \"a\\nb\"\n".utf8)) }
    }

    /// `max_per_host` counts by `hostKey`: its fast path for plain URLs must
    /// say what URLComponents says, and leave every other URL to it.
    @Test(arguments: [
        "http://127.0.0.1:8080/f.bin", "https://Example.COM/a?b=c#d", "http://h", "http://h:/x", "https://h:08443/",
        "http://user:pa:ss@host.example:81/p", "http://user@h/", "HTTP://H.example/x", "http://h?q=1", "http://h#frag",
        "http://a-b.c-d.example:65535/", "http://h:65536/", "http://h:99999/", "http://h:8x/", "http://[::1]:8080/x",
        "http://ex%41mple.com/", "http://bücher.example/", "http://h:-1/", "ftp://h/x", "http:/h/x", "http://@/x",
    ])
    func aPlainURLsHostKeyIsURLComponentsOne(_ url: String) {
        guard let plain = URLRules.plainHostKey(url) else { return }
        let components = URLComponents(string: url)
        let port = components?.port ?? (components?.scheme?.lowercased() == "https" ? 443 : 80)
        #expect(plain == "\(URLRules.canonicalHost(components?.host ?? "")):\(port)")
    }

    /// Found by the adversary: other spellings of one IPv4 address got a slot
    /// each under `max_per_host = 1` (curl connects them all to 127.0.0.1).
    @Test func everySpellingOfOneAddressIsOneHost() {
        for host in ["127.0.0.1", "127.1", "2130706433", "0x7f.0.0.1", "0x7F000001", "0177.0.0.1", "127.0.0.1.",
                     "%31%32%37.0.0.1", "127.0.0.%31", "127.0.1"] {
            #expect(URLRules.hostKey("http://\(host):8080/x") == "127.0.0.1:8080", "\(host)")
        }
        #expect(URLRules.hostKey("http://Example.COM./x") == "example.com:80")
        #expect(URLRules.hostKey("http://1.2.3.4.5/x") == "1.2.3.4.5:80")
        #expect(URLRules.hostKey("http://256.0.0.1/x") == "256.0.0.1:80")
        #expect(URLRules.hostKey("https://h1/x") == "h1:443")
        // IPv6: one text form per address, and a mapped IPv4 address is that address.
        for host in ["[::ffff:7f00:1]", "[0:0:0:0:0:ffff:7f00:1]", "[::ffff:7f00:0001]", "[::ffff:127.0.0.1]", "[::FFFF:7F00:1]"] {
            #expect(URLRules.hostKey("http://\(host):8080/x") == "127.0.0.1:8080", "\(host)")
        }
        #expect(URLRules.hostKey("http://[0:0:0:0:0:0:0:1]:8080/") == URLRules.hostKey("http://[::1]:8080/"))
        #expect(URLRules.hostKey("http://[fe80::1%25lo]:8080/") != URLRules.hostKey("http://[fe80::1]:8080/"))
    }

    /// The fast path's test of an address inet_ntoa would write: anything else goes the canonical way.
    @Test func aDottedQuadIsFourPlainNumbersUpTo255() {
        for quad in ["127.0.0.1", "0.0.0.0", "255.255.255.255", "10.20.30.40", "1.0.10.100"] {
            #expect(URLRules.isDottedQuad(ArraySlice(quad.utf8)), "\(quad)")
        }
        for other in ["", ".", "1.2.3", "1.2.3.4.5", "1.2.3.", ".1.2.3", "1..2.3", "256.0.0.1", "01.2.3.4", "1.2.3.00",
                      "1.2.3.0255", "1.2.3.a", "0x7f.0.0.1", "1.2.3.4 ", "999.1.1.1"] {
            #expect(!URLRules.isDottedQuad(ArraySlice(other.utf8)), "\(other)")
        }
    }

    /// Found by the adversary: accepted at intake, refused by curl at the first attempt.
    @Test(arguments: [
        ("http://127.0.0.1:0/a", "has port 0"), ("http://127.0.0.1:65536/a", "has port 65536"),
        ("http://127.0.0.1:99999999999999999999999/a", "has port 99999999999999999999999"),
        ("http://[::1]:65536/a", "has port 65536"), ("http://[]:8080/a", "has no host"),
        ("http://user:pa@ss@127.0.0.1/a", "more than one '@'"), ("http://u@v@w@h/a", "more than one '@'"),
        ("http://[127.0.0.1]:8080/a", "which is no IPv6 address"), ("http://[::1:]:8080/a", "which is no IPv6 address"),
        ("http://[1:2:3:4:5:6:7:8:9]/a", "which is no IPv6 address"), ("http://[fe80::1%]:8080/a", "which is no IPv6 address"),
        ("http://127.0.0.1:1x/a", "is not a valid URL"),
    ])
    func urlsCurlWouldRefuseAreRefusedAtIntake(_ url: String, _ words: String) {
        do {
            try URLRules.checkTransferURL(url, key: "url")
            Issue.record("accepted \(url)")
        } catch {
            #expect("\(error)".contains(words), "\(error)")
            #expect("\(error)".hasPrefix("key \"url\""))
        }
    }

    @Test(arguments: ["http://h:/x", "http://[::1]:8080/x", "http://u%40x:p@h/x", "https://h:65535", "http://h/a@b?c=@#@",
                      "http://127.0.0.1:018232/x", "http://h:0000000000018232/x", "http://[fe80::1%25lo]:8080/x"])
    func unusualButValidURLsAreTaken(_ url: String) throws {
        try URLRules.checkTransferURL(url, key: "url")
    }

    @Test func aPartialFileNoLiveTaskHoldsIsRefusedUnlessRenamed() {
        var log = LogBuilder()
        _ = log.add(.created(TaskSpec(url: "http://h/a", dest: "/dl/a.bin")), task: "a")
        _ = log.add(.failed(Failed(reason: "disk full", code: .diskFull, bytes: 10)), task: "a")
        let onDisk = { (path: String) in path == "/dl/a.bin.part" }
        guard case .refuse(_, let reason) = Destinations.decide(dest: "/dl/a.bin", overwrite: .replace, in: log.state, exists: onDisk) else {
            Issue.record("a failed task's kept bytes were handed to a new task"); return
        }
        #expect(reason.contains("the bytes task a kept when it failed (resume or cancel it)"))
        #expect(Destinations.decide(dest: "/dl/a.bin", overwrite: .rename, in: log.state, exists: onDisk) == .use("/dl/a.1.bin"))
    }

    @Test func credentialHeadersAreSecretByTheirNames() {
        for name in ["Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key", "X-Auth-Token",
                     "Client-Secret", "X-Session-Id"] {
            #expect(Header(name: name, value: "v").isSecret, "\(name)")
        }
        for name in ["Accept", "Content-Type", "User-Agent", "Range"] {
            #expect(!Header(name: name, value: "v").isSecret, "\(name)")
        }
    }

    @Test func headerAndFormValuesCannotCarryLineBreaks() throws {
        let parser = JobParser(downloadDir: "/dl")
        for value in ["a\\r\\nX-Injected: 1", "a\\nb", "a\\rb", "a\\u0000b"] {
            let job = "url = \"http://h/x\"\n[headers]\nX-A = \"\(value)\"\n"
            #expect(throws: KeyError(key: "headers.X-A", "must not contain CR, LF or NUL")) { try parser.parse(Array(job.utf8)) }
        }
        let form = "url = \"http://h/x\"\nkind = \"upload\"\nbody_file = \"/etc/hostname\"\nform_field = \"f\"\n[form]\nt = \"a\\r\\nb\"\n"
        #expect(throws: KeyError(key: "form.t", "must not contain CR, LF or NUL")) { try parser.parse(Array(form.utf8)) }
        let url = "url = \"http://h/x\\r\\nX-Injected: 1\"\n"
        #expect(throws: KeyError.self) { try parser.parse(Array(url.utf8)) }
        #expect(throws: KeyError(key: "user_agent", "must not contain CR, LF, NUL or other control characters")) {
            try AgentConfig.parse("user_agent = \"a\\r\\nX-Injected: 1\"")
        }
    }

    @Test func destinationsNeverLandInTheAgentsOwnFolders() throws {
        let parser = JobParser(downloadDir: "/home/me", forbiddenDirs: ["/home/me/.local/state/syncagent", "/home/me/inbox"])
        #expect(throws: KeyError(key: "dest", "\".local/state/syncagent/events.sqlite\" is inside the agent's own folder /home/me/.local/state/syncagent")) {
            try parser.parse(Array("url = \"http://h/x\"\ndest = \".local/state/syncagent/events.sqlite\"\n".utf8))
        }
        #expect(throws: KeyError.self) { try parser.parse(Array("url = \"http://h/x\"\ndest = \"inbox/evil.job\"\n".utf8)) }
        #expect(throws: KeyError.self) { try parser.parse(Array("url = \"http://h/x\"\ndest = \"\(String(repeating: "n", count: 250))\"\n".utf8)) }
        // A URL whose last segment is too long for a file name still gets a usable default.
        let long = "http://h/" + String(repeating: "v", count: 300) + ".mp4"
        guard case .transfer(_, let spec) = try parser.parse(Array("url = \"\(long)\"\n".utf8)) else { Issue.record(); return }
        #expect(spec.dest?.hasSuffix(".mp4") == true)
        #expect((spec.dest! as NSString).lastPathComponent.utf8.count <= 200)
    }

    // MARK: - Reserved destinations

    func state(with dests: [String: String], phases: [String: EventBody] = [:]) -> AgentState {
        var log = LogBuilder()
        for (id, dest) in dests.sorted(by: { $0.key < $1.key }) {
            _ = log.add(.created(TaskSpec(url: "http://h/\(id)", dest: dest)), task: id)
            if let body = phases[id] { _ = log.add(body, task: id) }
        }
        return log.state
    }

    /// Many jobs for one file name: each `rename` goes on from where the last
    /// stopped, so 1,000 of them make a linear number of probes, not a
    /// quadratic one (6,000 took 10 s of one loop turn, found by an
    /// adversary), and get the names a walk from 1 would have given.
    @Test func manyJobsForOneNameAreRenamedWithoutProbingEveryNumberAgain() {
        var state = AgentState()
        var hints = Destinations.RenameHints()
        var probes = 0
        var userFiles: Set<String> = ["/dl/same.bin"]
        var onDisk = userFiles
        var chosen: [String] = []
        for index in 0..<2_000 {
            // A user's file takes a number now and then, ahead of the walk.
            if index % 100 == 50 {
                let ahead = Destinations.candidate("/dl/same.bin", number: index + 20)
                userFiles.insert(ahead)
                onDisk.insert(ahead)
            }
            let decision = Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: state, hints: &hints,
                                               exists: { probes += 1; return onDisk.contains($0) })
            guard case .use(let path) = decision else { Issue.record("\(decision)"); return }
            chosen.append(path)
            // Half of them live tasks, half files on disk already (their tasks long ended).
            if index % 2 == 1 { onDisk.insert(path); continue }
            state.apply(Event(seq: Int64(index + 1), atMs: 1_000, task: "t\(index)", body: .created(TaskSpec(url: "http://h/\(index)", dest: path))))
        }
        #expect(Set(chosen).count == chosen.count, "each its own name")
        #expect(Set(chosen).isDisjoint(with: userFiles), "no user's file")
        #expect(chosen.prefix(3) == ["/dl/same.1.bin", "/dl/same.2.bin", "/dl/same.3.bin"])
        #expect(probes < 10 * chosen.count, "\(probes) probes")
        // Without hints, the same state gives the same next name.
        let fresh = Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: state, exists: { onDisk.contains($0) })
        #expect(fresh == Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: state, hints: &hints,
                                             exists: { onDisk.contains($0) }))
    }

    @Test func renamePicksAFreeNameAgainstLiveTasksAndTheDisk() {
        let live = state(with: ["a": "/dl/same.bin", "b": "/dl/same.1.bin"])
        #expect(Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: live, exists: { _ in false }) == .use("/dl/same.2.bin"))
        #expect(Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: live, exists: { $0 == "/dl/same.2.bin" })
                == .use("/dl/same.3.bin"))
        // Another task's partial file is a reserved name too.
        #expect(Destinations.decide(dest: "/dl/same.bin.part", overwrite: .rename, in: live, exists: { _ in false })
                == .use("/dl/same.bin.1.part"))
        // A stray partial file on disk is not clobbered.
        #expect(Destinations.decide(dest: "/dl/new.bin", overwrite: .rename, in: live, exists: { $0 == "/dl/new.bin.part" })
                == .use("/dl/new.1.bin"))
        #expect(Destinations.candidate("/dl/.hidden", number: 2) == "/dl/.hidden.2")
        #expect(Destinations.candidate("/dl/v1.0/archive.tar.gz", number: 1) == "/dl/v1.0/archive.tar.1.gz")
    }

    @Test func replaceFailAndSkipAreDecidedAgainstReservedNames() {
        let live = state(with: ["a": "/dl/x.bin"])
        guard case .refuse(_, let reason) = Destinations.decide(dest: "/dl/x.bin", overwrite: .replace, in: live, exists: { _ in false }) else {
            Issue.record("replace over a live task's file must be refused"); return
        }
        #expect(reason.contains("task a (queued)"))
        guard case .refuse = Destinations.decide(dest: "/dl/x.bin", overwrite: .fail, in: live, exists: { _ in false }) else {
            Issue.record(); return
        }
        guard case .skip(_, let why) = Destinations.decide(dest: "/dl/x.bin", overwrite: .skip, in: live, exists: { _ in false }) else {
            Issue.record(); return
        }
        #expect(why == "skipped: task a (queued) already brings /dl/x.bin")
        // The disk alone decides nothing at creation for these three.
        #expect(Destinations.decide(dest: "/dl/y.bin", overwrite: .replace, in: live, exists: { $0 == "/dl/y.bin" }) == .use("/dl/y.bin"))
    }

    @Test func reservationsEndWithTheTaskAndComeBackWhenAFailedTaskRunsAgain() {
        var log = LogBuilder()
        _ = log.add(.created(TaskSpec(url: "http://h/a", dest: "/dl/a.bin")), task: "a")
        #expect(log.state.reservedPaths == ["/dl/a.bin": "a"])
        _ = log.add(.failed(Failed(reason: "disk full", code: .diskFull, bytes: 10)), task: "a")
        #expect(log.state.reservedPaths.isEmpty)
        _ = log.add(.resumed(Resumed(bytes: 10, reason: "run again")), task: "a")
        #expect(log.state.reservedPaths["/dl/a.bin"] == "a")
        _ = log.add(.finished(Finished(bytes: 20, dest: "/dl/a.bin")), task: "a")
        #expect(log.state.reservedPaths.isEmpty)
        // A log from before reservations may name one file twice: the first holder keeps it.
        _ = log.add(.created(TaskSpec(url: "http://h/b", dest: "/dl/b.bin")), task: "b")
        _ = log.add(.created(TaskSpec(url: "http://h/c", dest: "/dl/b.bin")), task: "c")
        _ = log.add(.cancelled(Cancelled(bytes: 0)), task: "c")
        #expect(log.state.reservedPaths["/dl/b.bin"] == "b")
    }

    @Test func runningAFailedTaskAgainGivesFreshRetriesAndTimeout() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/t")), task: "t")
        _ = log.add(.retrying(Retrying(attempt: 1, reason: "503", delayMs: .max, bytes: 0)), task: "t")
        #expect(log.state["t"]?.notBeforeMs == .max)
        _ = log.add(.started(Started(attempt: 2, offset: 0, url: "http://h/t")), task: "t")
        _ = log.add(.failed(Failed(reason: "gave up", code: .retriesExhausted, bytes: 0)), task: "t")
        _ = log.add(.resumed(Resumed(bytes: 0, reason: "run again by the user")), task: "t")
        let task = log.state["t"]!
        #expect(task.phase == .queued)
        #expect(task.attemptsBeforeRerun == 2)
        #expect(task.firstStartedAtMs == nil)
        #expect(log.state.activeCount == 1)
    }

    // MARK: - Retry or fail

    @Test func retryAfterBeyondTheDeadlineFailsWithAReason() {
        let decide = { (retryAfter: Int64?) in
            RetryDecision.decide(reason: "server answered 503", attemptsUsed: 1, retriesAllowed: 5, retryAfterMs: retryAfter,
                                 nowMs: 1_000_000, deadlineMs: 1_060_000, totalTimeoutS: 60, jitter: 0.5)
        }
        #expect(decide(nil) == .retry(delayMs: 750))
        #expect(decide(30_000) == .retry(delayMs: 30_000))
        guard case .fail(let reason, let code) = decide(.max) else { Issue.record(); return }
        #expect(code == .totalTimeout)
        #expect(reason.hasPrefix("server asked to wait more than ten years before trying again (Retry-After), more than the 60 s left of total_timeout (60 s); last attempt: server answered 503"))
        #expect(RetryDecision.decide(reason: "x", attemptsUsed: 6, retriesAllowed: 5, retryAfterMs: nil, nowMs: 0,
                                     deadlineMs: .max, totalTimeoutS: 60, jitter: 0)
                == .fail(reason: "gave up after 6 attempts: x", code: .retriesExhausted))
        #expect(RetryDecision.decide(reason: "x", attemptsUsed: 1, retriesAllowed: 0, retryAfterMs: nil, nowMs: 0,
                                     deadlineMs: .max, totalTimeoutS: 60, jitter: 0)
                == .fail(reason: "gave up after 1 attempt: x", code: .retriesExhausted))
    }

    @Test func aDamagedLogCannotOverflowTheFold() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.progressed(Progressed(bytes: .max, total: .max)), task: "t", afterMs: 1)
        _ = log.add(.progressed(Progressed(bytes: .min)), task: "t", afterMs: 1)
        _ = log.add(.progressed(Progressed(bytes: .max)), task: "t", afterMs: 1)
        #expect(log.state["t"]?.bytes == .max)
    }
}

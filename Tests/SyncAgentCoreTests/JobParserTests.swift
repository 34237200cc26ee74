import Foundation
import Testing
@testable import SyncAgentCore

@Suite("Job files")
struct JobParserTests {
    let parser = JobParser(downloadDir: "/home/me/Downloads")

    func parse(_ text: String) throws -> Job { try parser.parse(Array(text.utf8)) }

    func rejection(_ text: String) -> String? {
        do {
            _ = try parse(text)
            return nil
        } catch {
            return (error as? KeyError)?.description
        }
    }

    @Test func fullDownloadJob() throws {
        let job = try parse("""
            url = "https://example.com/isos/debian.iso"
            dest = "isos/debian.iso"
            id = "debian-13"
            sha256 = "\(String(repeating: "AB", count: 32))"
            priority = 5
            overwrite = "replace"
            not_before = 2026-11-22T03:00:00Z
            batch = "nightly"
            notify = "each"
            retries = 3
            max_speed = "2M"
            [headers]
            Authorization = "Bearer abc"
            """)
        guard case .transfer(let id, let spec) = job else { Issue.record("not a transfer"); return }
        #expect(id == "debian-13")
        #expect(spec.url == "https://example.com/isos/debian.iso")
        #expect(spec.dest == "/home/me/Downloads/isos/debian.iso")
        #expect(spec.sha256 == String(repeating: "ab", count: 32))
        #expect(spec.priority == 5)
        #expect(spec.overwrite == .replace)
        #expect(spec.notBeforeMs == 1_795_316_400_000)
        #expect(spec.batch == "nightly")
        #expect(spec.notify == .each)
        #expect(spec.retries == 3)
        #expect(spec.maxSpeed == 2_097_152)
        #expect(spec.headers == [Header(name: "Authorization", value: "Bearer abc")])
    }

    @Test func defaultsComeFromTheURL() throws {
        guard case .transfer(let id, let spec) = try parse(#"url = "http://h/files/a%20b.txt?x=1""#) else { return }
        #expect(id == nil)
        #expect(spec.dest == "/home/me/Downloads/a b.txt")
        #expect(spec.kind == .download)
        #expect(spec.overwrite == .rename)
        #expect(spec.notify == .batch)
        #expect(spec.priority == 0)
    }

    @Test func bareHostDownloadsIndexHTML() throws {
        guard case .transfer(_, let spec) = try parse(#"url = "http://h/""#) else { return }
        #expect(spec.dest == "/home/me/Downloads/index.html")
    }

    @Test func controlJob() throws {
        #expect(try parse("action = \"pause\"\ntask = \"*\"") == .control(ControlJob(action: .pause, task: "*")))
        #expect(rejection("action = \"explode\"\ntask = \"x\"") == #"key "action" must be one of "pause", "resume", "cancel", "forget", "compact", "retarget", not "explode""#)
        #expect(rejection("action = \"cancel\"") == #"key "task" is missing: a control job names a task id, or "*" for all"#)
    }

    // SPEC §4.1: unparsable, unknown key, missing url, bad value, forbidden destination, over 64 KiB.

    @Test func unparsable() {
        let error = rejection("url = \"http://h/x\"\nthis is not toml")
        #expect(error?.hasPrefix("is not valid TOML:") == true)
        #expect(error?.contains("line 2") == true)
    }

    @Test func unknownKey() {
        #expect(rejection("url = \"http://h/x\"\ncolour = \"red\"") == #"key "colour" is not a known key"#)
    }

    @Test func missingURL() {
        #expect(rejection("dest = \"x\"") == #"key "url" is missing: every transfer job needs a url"#)
    }

    @Test(arguments: [
        ("url = \"ftp://h/x\"", #"key "url" must be an http or https URL, not ftp: "ftp://h/x""#),
        ("url = \"file:///etc/passwd\"", #"key "url" must be an http or https URL, not file: "file:///etc/passwd""#),
        ("url = 5", #"key "url" must be a string, not an integer"#),
        ("url = \"http://h/x\"\npriority = \"high\"", #"key "priority" must be an integer, not a string"#),
        ("url = \"http://h/x\"\nsha256 = \"abc\"", #"key "sha256" must be 64 hexadecimal digits"#),
        ("url = \"http://h/x\"\noverwrite = \"clobber\"", #"key "overwrite" must be one of "rename", "replace", "skip", "fail", "update", not "clobber""#),
        ("url = \"http://h/x\"\nretries = 1000", #"key "retries" must be between 0 and 100, not 1000"#),
        ("url = \"http://h/x\"\nmax_speed = \"fast\"", #"key "max_speed" must be a positive number of bytes such as 2000000, "512K" or "2M" (K, M and G are powers of 1024, also written KiB, MiB and GiB)"#),
        ("url = \"http://h/x\"\nid = \"a b\"", #"key "id" must be 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'"#),
        ("url = \"http://h/x\"\nid = \"--all\"", #"key "id" must be 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'"#),
        ("url = \"http://h/x\"\nkind = \"hls\"\nvariant = \"huge\"", #"key "variant" must be "best", "worst", a BANDWIDTH such as "2500000" or a resolution such as "1280x720", not "huge""#),
        ("url = \"http://h/x\"\noutput = \"file\"", #"key "output" applies to HLS jobs (kind = "hls") only"#),
        ("url = \"http://h/x.m3u8\"\nkind = \"hls\"\nmax_duration = 0", #"key "max_duration" must be between 1 and 2592000, not 0"#),
        ("url = \"http://h/x\"\nkind = \"upload\"", #"key "body_file" is missing: an upload sends a file"#),
        ("url = \"http://h/x\"\nkind = \"upload\"\nbody_file = \"a.mp4\"", #"key "body_file" must be an absolute path, not "a.mp4""#),
        ("url = \"http://h/x\"\nkind = \"upload\"\nbody_file = \"/a\"\nmethod = \"GET\"", #"key "method" must be PUT or POST for an upload, not GET"#),
        ("url = \"http://h/x\"\nkind = \"upload\"\nbody_file = \"/a\"\ndest = \"r.json\"", #"key "dest" does not apply to an upload, whose response body is not kept; use kind = "data" with body_file to save what the server answers"#),
        ("url = \"http://h/x\"\nkind = \"upload\"\nbody_file = \"/a\"\n[form]\nt = \"x\"", #"key "form_field" is missing: [form] fields go with the file's form_field"#),
        ("url = \"http://h/x\"\nkind = \"data\"\nform_field = \"f\"", #"key "form_field" applies to upload jobs only"#),
        ("url = \"http://h/x\"\nkind = \"data\"\nmethod = \"GE T\"", #"key "method" "GE T" is not an HTTP method"#),
        ("url = \"http://h/x\"\nkind = \"data\"\nsha256 = \"\(String(repeating: "a", count: 64))\"", #"key "sha256" applies only to a job that saves a file (a download, or a data job with dest)"#),
        ("url = \"http://h/x\"\nmethod = \"POST\"", #"key "method" applies to upload and data jobs only, not to a download"#),
        ("url = \"http://h/x\"\n[headers]\n\"Bad Name\" = \"v\"", #"key "headers.Bad Name" is not a valid HTTP header name"#),
        // Framing from a job: `Content-Length: 0` before a body would send the body as a second request.
        ("url = \"http://h/x\"\nkind = \"data\"\nmethod = \"POST\"\nbody_file = \"/a\"\n[headers]\nContent-Length = \"0\"",
         #"key "headers.Content-Length" is set by the agent (from the body and the connection); a value of its own would cut or split the request"#),
        ("url = \"http://h/x\"\n[headers]\ntransfer-ENCODING = \"chunked\"",
         #"key "headers.transfer-ENCODING" is set by the agent (from the body and the connection); a value of its own would cut or split the request"#),
        ("url = \"http://h/x\"\n[headers]\nConnection = \"close\"",
         #"key "headers.Connection" is set by the agent (from the body and the connection); a value of its own would cut or split the request"#),
    ])
    func badValue(_ text: String, _ expected: String) {
        #expect(rejection(text) == expected)
    }

    @Test func multipartUploadJob() throws {
        let job = try parse("""
            url = "https://example.com/photos"
            kind = "upload"
            body_file = "/home/me/holiday.jpg"
            form_field = "file"
            [form]
            title = "holiday"
            album = "summer"
            """)
        guard case .transfer(_, let spec) = job else { Issue.record("not a transfer"); return }
        #expect(spec.kind == .upload)
        #expect(spec.dest == nil)
        #expect(spec.bodyFile == "/home/me/holiday.jpg")
        #expect(spec.formField == "file")
        #expect(spec.form == [FormField(name: "album", value: "summer"), FormField(name: "title", value: "holiday")])
        #expect(spec.effectiveMethod == "POST", "a form goes out as POST")
        #expect(!spec.isResumable)
    }

    @Test func dataJobDefaultsAndPlainUpload() throws {
        guard case .transfer(_, let data) = try parse("url = \"http://h/api\"\nkind = \"data\"\nmethod = \"patch\"\ndest = \"a.json\""),
              case .transfer(_, let upload) = try parse("url = \"http://h/up\"\nkind = \"upload\"\nbody_file = \"/v.mp4\"") else {
            Issue.record("not transfers"); return
        }
        #expect(data.effectiveMethod == "PATCH")
        #expect(data.dest == "/home/me/Downloads/a.json")
        #expect(upload.effectiveMethod == "PUT")
        #expect(upload.dest == nil)
    }

    @Test(arguments: ["../../etc/passwd", "/etc/passwd", "a/../../b", "sub/"])
    func forbiddenDestination(_ dest: String) {
        let error = rejection("url = \"http://h/x\"\ndest = \"\(dest)\"")
        #expect(error?.hasPrefix("key \"dest\"") == true)
    }

    @Test func absoluteDestinationInsideDownloadDirIsFine() throws {
        guard case .transfer(_, let spec) = try parse("url = \"http://h/x\"\ndest = \"/home/me/Downloads/a/./b/../c\"") else { return }
        #expect(spec.dest == "/home/me/Downloads/a/c")
    }

    /// Paths are read as the kernel reads them: split on the byte '/', even
    /// where a combining mark after it would make one Character of the two.
    @Test(arguments: [
        ("/a//b/./c/", "/a/b/c"), ("/a/b/../../..", "/"), ("", "/"), ("//", "/"), ("/x/..y/.z", "/x/..y/.z"),
        ("/a/\u{301}/../b", "/a/b"), ("/caf\u{E9}/../n\u{E9}", "/n\u{E9}"), ("/.../a", "/.../a"),
    ])
    func pathsAreNormalizedByTheirBytes(_ path: String, _ normalized: String) {
        #expect(Array(PathRules.normalize(path).utf8) == Array(normalized.utf8))
    }

    /// Inside means beneath, byte for byte: never the folder itself, a
    /// sibling that shares its first bytes, or a name its bytes differ from.
    @Test(arguments: [
        ("/dl/x", "/dl", true), ("/dl/a/b", "/dl", true), ("/dl", "/dl", false), ("/dl/", "/dl", false),
        ("/dlx/y", "/dl", false), ("/d", "/dl", false), ("/x", "/", true), ("/", "/", false), ("", "/", false),
        ("/d\u{301}l/x", "/dl", false), ("/dl/\u{301}", "/dl", true), ("/caf\u{E9}/x", "/cafe\u{301}", false),
    ])
    func insideIsByBytes(_ path: String, _ folder: String, _ inside: Bool) {
        #expect(PathRules.isInside(path, folder) == inside)
    }

    /// `more_dirs`: an absolute dest may name a folder the config allows;
    /// one outside them all is refused, saying how to allow its folder.
    @Test func moreDirsAreFoldersADestMayName() throws {
        let parser = JobParser(downloadDir: "/home/u/Downloads", moreDirs: ["/mnt/media/", "/srv/x"], forbiddenDirs: ["/mnt/media/inbox"])
        func dest(_ path: String) throws -> String? {
            guard case .transfer(_, let spec) = try parser.parse(Array("url = \"http://h/x\"\ndest = \"\(path)\"".utf8)) else { return nil }
            return spec.dest
        }
        #expect(try dest("/mnt/media/isos/a.iso") == "/mnt/media/isos/a.iso")
        #expect(try dest("/srv/x/../x/b.iso") == "/srv/x/b.iso")
        #expect(try dest("isos/a.iso") == "/home/u/Downloads/isos/a.iso", "a relative dest is download_dir's")
        #expect(throws: KeyError(key: "dest", "\"/mnt/media/inbox/a.job\" is inside the agent's own folder /mnt/media/inbox")) {
            try dest("/mnt/media/inbox/a.job")
        }
        #expect(throws: KeyError(key: "dest", "\"/mnt/other/a.iso\" is outside download_dir /home/u/Downloads and more_dirs; to let jobs "
                                 + "save in /mnt/other, add it to more_dirs in the config (more_dirs = [\"/mnt/other\"]) and restart the agent")) {
            try dest("/mnt/other/a.iso")
        }
        // No advice to open a folder that holds the agent's own (here /mnt/media/inbox), or for a dest climbing out with "..".
        #expect(throws: KeyError(key: "dest", "\"/mnt/media\" is outside download_dir /home/u/Downloads and more_dirs")) {
            try dest("/mnt/media")
        }
        #expect(throws: KeyError(key: "dest", "\"/a.iso\" is outside download_dir /home/u/Downloads and more_dirs")) {
            try dest("/a.iso")
        }
        #expect(throws: KeyError(key: "dest", "\"../../outside.bin\" is outside download_dir /home/u/Downloads and more_dirs; "
                                 + "a relative dest stays inside download_dir")) {
            try dest("../../outside.bin")
        }
        #expect(try AgentConfig.parse("more_dirs = [\"/mnt/media\", \"~/Videos\"]").moreDirs == ["/mnt/media", "~/Videos"])
        let rule = "must be an array of folders, each absolute or starting with ~/, such as [\"/mnt/media\", \"~/Videos\"]"
        for bad in ["more_dirs = \"/mnt\"", "more_dirs = [\"media\"]", "more_dirs = [1]"] {
            #expect(throws: KeyError(key: "more_dirs", rule), "\(bad)") { try AgentConfig.parse(bad) }
        }
    }

    /// Sameness is by bytes too: canonically equal text is another name.
    @Test(arguments: [
        ("/dl", "/dl", true), ("", "", true), ("/dl", "/dl/", false), ("/caf\u{E9}", "/cafe\u{301}", false), ("/a", "/b", false),
    ])
    func samenessIsByBytes(_ path: String, _ other: String, _ same: Bool) {
        #expect(PathRules.isSame(path, other) == same)
    }

    /// A path's folder, as `NSString.deletingLastPathComponent` names it
    /// (the agent asks for every file it publishes, and cannot afford
    /// Foundation's bridging). Written out: Foundation's own traps on some
    /// of these (an illegal instruction in `_startOfLastPathComponent`).
    @Test(arguments: [
        ("/dl/a.bin", "/dl"), ("/a", "/"), ("/", "/"), ("a", ""), ("", ""), ("a/b", "a"), ("/dl/sub/x.part", "/dl/sub"),
        ("/dl//x", "/dl"), ("/dl/x/", "/dl"), ("//x", "/"), ("a//b/", "a"), ("/caf\u{E9}/n\u{E9}", "/caf\u{E9}"),
    ])
    func aFolderIsWhatFoundationWouldSay(_ path: String, _ folder: String) {
        #expect(Array(PathRules.folder(of: path).utf8) == Array(folder.utf8), "\(path)")
    }

    /// Found by the adversary of issue 12's intake work: String comparison
    /// treats canonically equivalent text as equal and a '/' followed by a
    /// combining mark as no '/', so these passed the checks (a download became
    /// a job in the inbox; a file went to a folder beside download_dir).
    @Test(arguments: [
        ("/dl/inbox/\u{301}x.job", "is inside the agent's own folder"),
        ("inbox/\u{301}x.job", "is inside the agent's own folder"),
        ("state/\u{301}x.txt", "is inside the agent's own folder"),
        ("../\u{212A}dl/x.txt", "is outside download_dir"),
        ("/\u{212A}dl/x.txt", "is outside download_dir"),
        ("../cafe\u{301}/x.txt", "is outside download_dir"),
        ("/\u{301}x", "is outside download_dir"),
    ])
    func destinationsAreCheckedByTheirBytes(_ dest: String, _ words: String) {
        let parser = JobParser(downloadDir: dest.contains("cafe") ? "/caf\u{E9}" : dest.contains("\u{212A}") ? "/Kdl" : "/dl",
                               forbiddenDirs: ["/dl/inbox", "/dl/state"])
        do {
            let job = try parser.parse(Array("url = \"http://h/x\"\ndest = \"\(dest)\"".utf8))
            Issue.record("accepted: \(job)")
        } catch {
            #expect("\(error)".contains(words), "\(error)")
        }
    }

    @Test(arguments: [("./\u{301}./x.txt", "/dl/\u{301}./x.txt"), ("\u{301}x.txt", "/dl/\u{301}x.txt"), ("a/\u{301}/../b", "/dl/a/b")])
    func namesBeginningWithACombiningMarkAreNames(_ dest: String, _ resolved: String) throws {
        let parser = JobParser(downloadDir: "/dl", forbiddenDirs: ["/dl/inbox"])
        guard case .transfer(_, let spec) = try parser.parse(Array("url = \"http://h/x\"\ndest = \"\(dest)\"".utf8)) else { return }
        #expect(spec.dest.map { Array($0.utf8) } == Array(resolved.utf8))
    }

    @Test func overSixtyFourKiB() {
        let text = "url = \"http://h/x\"\n#" + String(repeating: "x", count: 65 * 1024)
        #expect(rejection(text) == "the job file is \(text.utf8.count) bytes, over the 64 KiB limit")
    }

    @Test func notUTF8() {
        #expect(throws: KeyError(key: nil, "the job file is not UTF-8 text (the first bad byte is at offset 3)")) {
            try parser.parse([0x75, 0x72, 0x6C, 0xFF, 0xFE])
        }
    }

    @Test func inboxNames() {
        #expect(InboxRules.isJobFileName("a.job"))
        for ignored in [".a.job", "a.job.tmp", "a.job.part", "a.job~", "a.txt", ".job"] {
            #expect(!InboxRules.isJobFileName(ignored), "\(ignored)")
        }
    }

    @Test func byteCounts() {
        #expect(ByteCount.parse("2M") == 2_097_152)
        #expect(ByteCount.parse("512K") == 524_288)
        #expect(ByteCount.parse("1.5GiB") == 1_610_612_736)
        #expect(ByteCount.parse("100") == 100)
        #expect(ByteCount.parse("lots") == nil)
        // MB, kb, Gb: powers of 1000 to some tools, of 1024 or bits to others. Refused, saying what to write.
        for ambiguous in ["2MB", "2mb", "2Mb", "500KB", "1GB", "1.5MB"] {
            #expect(ByteCount.parse(ambiguous) == nil, "\(ambiguous)")
            #expect(ByteCount.ambiguity(of: ambiguous)?.hasPrefix("must not be \"\(ambiguous)\": ") == true, "\(ambiguous)")
        }
        #expect(ByteCount.ambiguity(of: "2MB") == "must not be \"2MB\": MB is a power of 1000 to some tools, of 1024 (or bits) to "
                + "others; write \"2M\" or \"2MiB\" (2097152 bytes), or a number of bytes (K, M and G are powers of 1024, also written "
                + "KiB, MiB and GiB)")
        for fine in ["2M", "2MiB", "2mib", "100B", "100", "lots", "B", "MB"] { #expect(ByteCount.ambiguity(of: fine) == nil, "\(fine)") }
        #expect(ByteCount.parse("100B") == 100 && ByteCount.parse("2mib") == 2_097_152)
        #expect(throws: KeyError(key: "max_speed", ByteCount.ambiguity(of: "2MB")!)) {
            try JobParser(downloadDir: "/d").parse(Array("url = \"http://h/a\"\nmax_speed = \"2MB\"\n".utf8))
        }
        #expect(ByteCount.format(1536) == "1.5 KiB")
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

    /// A batch's name goes into hooks' environments, notifications and
    /// status: a line break there forged a `SYNCAGENT_FAILED=` line in a
    /// hook's `env`. Like it, the task a control job names and a form
    /// field's name (the multipart head) hold no control character.
    @Test(arguments: [("a\\nSYNCAGENT_FAILED=0", "a\nSYNCAGENT_FAILED=0"), ("a\\u0000b", "a\u{0}b"), ("a\\rb", "a\rb"),
                      ("a\\u001B[31mb", "a\u{1B}[31mb"), ("a\\u202Eb", "a\u{202E}b"), ("a\\u0085b", "a\u{85}b"), ("a\\u2028b", "a\u{2028}b"),
                      ("a\\u061Cb", "a\u{61C}b")])
    func namesCannotCarryControlCharacters(_ value: String, _ shown: String) throws {
        let parser = JobParser(downloadDir: "/dl")
        let words = "must not contain control characters (a line break, NUL, an escape …): \"\(Printable.escaping(shown))\""
        #expect(throws: KeyError(key: "batch", words)) { try parser.parse(Array("url = \"http://h/x\"\nbatch = \"\(value)\"\n".utf8)) }
        #expect(throws: KeyError(key: "task", words)) { try parser.parse(Array("action = \"pause\"\ntask = \"\(value)\"\n".utf8)) }
        let upload = "url = \"http://h/x\"\nkind = \"upload\"\nbody_file = \"/etc/hostname\"\n"
        #expect(throws: KeyError(key: "form_field", words)) { try parser.parse(Array((upload + "form_field = \"\(value)\"\n").utf8)) }
        #expect(throws: KeyError(key: "form.\(shown)", "is not a usable form field name (no quotes or control characters)")) {
            try parser.parse(Array((upload + "form_field = \"f\"\n[form]\n\"\(value)\" = \"v\"\n").utf8))
        }
        // What a name may hold: any printable text, spaces and all.
        guard case .transfer(_, let spec) = try parser.parse(Array("url = \"http://h/x\"\nbatch = \"nightly 2 ✓\"\n".utf8)) else {
            Issue.record("not a transfer")
            return
        }
        #expect(spec.batch == "nightly 2 ✓")
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

    /// A body file goes to a server: never from the agent's own folders or
    /// the kernel's, for any job; from beneath download_dir only, for one
    /// that came over the RPC. The log's jobs are held to the same rules.
    @Test func aBodyFileIsReadOnlyWhereAJobMayRead() throws {
        let parser = JobParser(downloadDir: "/home/me/Downloads", forbiddenDirs: ["/home/me/.local/state/syncagent", "/home/me/inbox"])
        let rules = parser.bodyFileRules
        #expect(rules.problem("/home/me/.local/state/syncagent/events.sqlite", fromRPC: false)
                == "names /home/me/.local/state/syncagent/events.sqlite, inside the agent's own folder /home/me/.local/state/syncagent, which no job may send")
        #expect(rules.problem("/home/me/Downloads/../inbox/a.job", fromRPC: false)?.contains("the agent's own folder /home/me/inbox") == true)
        for path in ["/proc/self/environ", "/sys/kernel/x", "/dev/mem", "/dev"] {
            #expect(rules.problem(path, fromRPC: false)?.contains("the kernel's, which no job may send") == true, "\(path)")
        }
        #expect(rules.problem("/home/me/video.mp4", fromRPC: false) == nil)
        #expect(rules.problem("/home/me/video.mp4", fromRPC: true)
                == "names /home/me/video.mp4, outside download_dir /home/me/Downloads, where a download added over the RPC must find its body")
        #expect(rules.problem("/home/me/Downloads/video.mp4", fromRPC: true) == nil)
        #expect(rules.problem("/home/me/Downloads", fromRPC: true) != nil)
        #expect(rules.problem("video.mp4", fromRPC: false) == "must be an absolute path, not \"video.mp4\"")
        #expect(BodyFileRules.problem("/x", fileSystemType: 0x9fa0) != nil && BodyFileRules.problem("/x", fileSystemType: 0xef53) == nil)

        let job = "url = \"http://h.example/up\"\nkind = \"upload\"\nbody_file = \"/proc/self/environ\"\n"
        #expect(throws: KeyError.self) { try parser.parse(Array(job.utf8)) }
        let rpc = JobSource(file: "rpc", identity: JobSource.rpcIdentityPrefix + "0123456789abcdef")
        #expect(rpc.isRPC && !JobSource(file: "a.job", identity: "12:34:ab").isRPC)
        let mine = "url = \"http://h.example/up\"\nkind = \"upload\"\nbody_file = \"/home/me/video.mp4\"\n"
        #expect((try? parser.parse(Array(mine.utf8))) != nil)
        #expect(throws: KeyError.self) { try parser.parse(Array(mine.utf8), source: rpc) }
        guard case .transfer(_, var spec) = try parser.parse(Array(mine.utf8)) else { Issue.record("no transfer"); return }
        #expect(parser.refusal(ofRecorded: spec) == nil)
        spec.source = rpc
        #expect(parser.refusal(ofRecorded: spec)?.code == .bodyUnreadable)
    }
}

@Suite("config.toml")
struct AgentConfigTests {
    @Test func defaultsMatchTheSpec() throws {
        let config = try AgentConfig.parse("")
        #expect(config.maxActive == 4)
        #expect(config.maxPerHost == 6)
        #expect(config.retries == 5)
        #expect(config.connectTimeout == 30)
        #expect(config.idleTimeout == 60)
        #expect(config.totalTimeout == 604_800)
        #expect(config.maxRedirects == 10)
        #expect(config.notify == .batch)
        #expect(config.cookies == .persistent)
    }

    @Test func unknownKeyIsNamed() {
        #expect(throws: KeyError(key: "max_actve", "is not a known key")) { try AgentConfig.parse("max_actve = 3") }
    }

    @Test func valuesAreRead() throws {
        let config = try AgentConfig.parse("max_active = 8\nmax_speed = \"1M\"\ndownload_dir = \"/tmp/d\"\n[headers]\nX-A = \"b\"")
        #expect(config.maxActive == 8)
        #expect(config.maxSpeed == 1_048_576)
        #expect(config.downloadDir == "/tmp/d")
        #expect(config.headers == [Header(name: "X-A", value: "b")])
        #expect(throws: (any Error).self) { try AgentConfig.parse("download_dir = \"/tmp/d\"\n[headers]\nContent-Length = \"10\"") }
    }
}

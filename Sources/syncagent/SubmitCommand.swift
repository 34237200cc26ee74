import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

struct SubmitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "submit",
        abstract: "Write one job file per URL into the inbox and print each task's id.",
        discussion: """
            Each file is written under a temporary name and renamed, so the agent never \
            sees half a job. Works whether or not the agent runs (it says so when none \
            does); the agent takes the jobs when it (next) runs. Every job is checked \
            first: if one is wrong, none is written.

            -i FILE (or - for standard input) reads URLs one per line, aria2c-style: a \
            URL's options go on indented key=value lines below it (any job key, and \
            dir, out, header, form); they override the flags for that URL.

            Examples:
              syncagent submit https://example.com/a.iso --dest isos/a.iso \\
                --sha256 3a7b… --priority 5
              syncagent submit --dir isos \\
                https://example.com/a.iso https://example.com/b.iso
              printf 'https://example.com/a.iso\\n  out=a.iso\\n' \\
                | syncagent submit -i -
              syncagent submit https://example.com/videos --kind upload \\
                --body-file clip.mp4 --form-field file --form title=holiday
              syncagent submit https://example.com/files/ --kind upload \\
                --body-file video.mp4 --protocol tus --parallel 4
              syncagent submit https://example.com/talk/master.m3u8 --kind hls \\
                --dest videos/talk --variant 1280x720 --output file
              syncagent submit https://example.com/api/items --kind data \\
                --method POST --body-file item.json --dest answers/item.json \\
                --header 'Content-Type: application/json'
            """)

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The http or https URLs to transfer: one job each.")
    var urls: [String] = []

    @Option(name: [.customShort("i"), .customLong("input-file")],
            help: ArgumentHelp("Read URLs from FILE (- for standard input), one per line, each with indented key=value options.",
                               valueName: "file"))
    var inputFile: String?

    @Option(help: "Destination, relative to download_dir (default: the URL's file name). One URL only.")
    var dest: String?

    @Option(name: [.customShort("d"), .long],
            help: ArgumentHelp("Save into this folder (relative to download_dir) under the URL's file name, or -o's (aria2c -d).",
                               valueName: "dir"))
    var dir: String?

    @Option(name: [.customShort("o"), .customLong("out")],
            help: ArgumentHelp("Save under this file name, in download_dir or -d's folder (aria2c -o). One URL only.", valueName: "name"))
    var out: String?

    @Option(help: "The task's id (default: a new short id). One URL only.")
    var id: String?

    @Option(help: "download (default), upload, data or hls.", completion: .list(["download", "upload", "data", "hls"]))
    var kind: String?

    @Option(help: "Expected SHA-256 of the file, verified before it is published.")
    var sha256: String?

    @Option(help: "Expected MD5 of the file, verified before it is published.")
    var md5: String?

    @Option(help: "When the destination exists: rename (default: name.1.ext), replace, skip, fail or update.",
            completion: .list(["rename", "replace", "skip", "fail", "update"]))
    var overwrite: String?

    @Flag(help: "Fetch only if it changed since this agent published it (overwrite = \"update\"; wget -N, curl -z).")
    var update = false

    @Option(help: "Higher starts first.")
    var priority: Int?

    @Option(help: ArgumentHelp("Tasks with the same batch are notified together.", valueName: "name"))
    var batch: String?

    @Option(help: "batch (default), each (one notification per task too) or none.", completion: .list(["batch", "each", "none"]))
    var notify: String?

    @Option(help: "Retries after a transient failure (default: the config's retries).")
    var retries: Int?

    @Option(help: ArgumentHelp("Downloads: fetch ranges of the file over this many connections at once (1-16).", valueName: "n"))
    var connections: Int?

    @Option(name: .customLong("allow-metered"), help: ArgumentHelp("false: wait while NetworkManager says the link is metered.",
                                                                     valueName: "true|false"), completion: .list(["true", "false"]))
    var allowMetered: Bool?

    @Option(name: .customLong("max-speed"), help: ArgumentHelp("A cap in bytes per second, such as 500K or 2M (K, M, G: powers of 1024; 2MB is refused as ambiguous).",
                                                                             valueName: "rate"))
    var maxSpeed: String?

    @Option(name: .customLong("min-speed"), help: ArgumentHelp(
        "An attempt slower than this (bytes per second, such as 1K) over --min-speed-time is retried; 0: never (default: the config's).",
        valueName: "rate"))
    var minSpeed: String?

    @Option(name: .customLong("min-speed-time"), help: ArgumentHelp("Seconds --min-speed is averaged over (default: the config's).",
                                                                     valueName: "seconds"))
    var minSpeedTime: Int?

    @Flag(name: .customLong("name-from-server"),
          help: "Downloads without --dest: name the file as its server does (Content-Disposition, else the URL after redirects).")
    var nameFromServer = false

    @Option(name: .customLong("not-before"), help: ArgumentHelp("Do not start before this time, such as 2026-11-22T03:00:00Z.", valueName: "time"))
    var notBefore: String?

    @Option(name: .customLong("header"), help: ArgumentHelp("A request header, 'Name: value'; repeatable.", valueName: "K: V"))
    var headers: [String] = []

    @Option(help: "Upload and data jobs: the request method (default GET, or PUT for an upload).")
    var method: String?

    @Option(help: "Upload and data jobs: a file sent as the request body, streamed from disk (never one in the agent's state dir or inbox, nor under /proc, /sys or /dev).")
    var bodyFile: String?

    @Option(help: "Upload jobs: send the file as multipart/form-data under this field name.")
    var formField: String?

    @Option(name: .customLong("form"), help: ArgumentHelp("An extra form field, 'name=value'; repeatable.", valueName: "K=V"))
    var formFields: [String] = []

    @Option(name: .customLong("protocol"), help: ArgumentHelp("Upload jobs: plain (default: one request), tus or ietf (resumable).",
                                                           valueName: "name"), completion: .list(["plain", "tus", "ietf"]))
    var uploadProtocol: String?

    @Option(name: .customLong("chunk-size"), help: ArgumentHelp("Resumable uploads: auto (default) or a size such as 8M per request.",
                                                             valueName: "size"))
    var chunkSize: String?

    @Option(help: ArgumentHelp("tus uploads: parts of the file sent at once (1-16; needs the server's concatenation extension).",
                               valueName: "n"))
    var parallel: Int?

    @Option(help: "HLS jobs: best (default), worst, a BANDWIDTH or a resolution such as 1280x720.")
    var variant: String?

    @Option(help: "HLS jobs: directory (default: DEST/index.m3u8 and its segments) or file (one DEST.ts or DEST.mp4).",
            completion: .list(["directory", "file"]))
    var output: String?

    @Option(name: .customLong("max-duration"), help: "HLS jobs: seconds of media to take from a live playlist.")
    var maxDuration: Int?

    @Option(help: ArgumentHelp("HLS jobs: the sound rendition: default (the master's default), none (the variant's own "
                               + "segments alone) or a language such as en or pt-BR.", valueName: "audio"),
            completion: .list(["default", "none"]))
    var audio: String?

    @Option(help: ArgumentHelp("HLS jobs: the subtitles rendition of this language (en, pt-BR …).", valueName: "language"))
    var subtitles: String?

    @Flag(help: ArgumentHelp("Stay until the tasks end, with a live line for each (on stderr), and exit as aria2c does: "
                             + "0 when all finished, else its status for the last failure (3 not found, 24 refused, 32 checksum …)."))
    var wait = false

    /// Checked in `run`, not `validate`: `--help` must not print an error first.
    private func check() throws {
        if dest != nil && dir != nil { throw fail("give --dest (a file) or --dir (a folder), not both") }
        if dest != nil && out != nil { throw fail("give --dest (a path) or -o/--out (a file name), not both") }
        if let out, out.contains("/") || out == "." || out == ".." || out.isEmpty {
            throw fail("-o/--out takes a file name, not \"\(out)\" (a folder goes in -d/--dir)")
        }
        if update, let overwrite, overwrite != "update" { throw fail("--update is overwrite = \"update\"; it cannot go with --overwrite \(overwrite)") }
        if nameFromServer, dest != nil || dir != nil || out != nil {
            throw fail("--name-from-server names the file in download_dir as its server does; it cannot go with --dest, --dir or --out")
        }
        if urls.isEmpty && inputFile == nil { throw fail("give at least one URL, or -i FILE (- for standard input)") }
    }

    /// The URLs of a long `submit` line, and the line without them; nil for a
    /// short line (the parser's own way costs nothing there) or one asking for help.
    /// Every option is taken to have a value but the flags named here: a flag
    /// missing from the list only leaves a URL to the parser, which then parses
    /// the whole line itself (`SyncAgentCommand.parsed`).
    static func urlsTakenOut(of arguments: [String]) -> (rest: [String], urls: [String])? {
        let flags: Set<String> = ["--update", "--wait", "--name-from-server"]
        guard arguments.first == "submit", arguments.count > 64 else { return nil }
        var rest = ["submit"], urls: [String] = []
        var index = 1
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--" {
                urls += arguments[index...]
                break
            }
            guard argument.hasPrefix("-"), argument != "-" else {
                urls.append(argument)
                continue
            }
            if argument == "-h" || argument == "--help" { return nil }
            rest.append(argument)
            if !argument.contains("="), !flags.contains(argument), index < arguments.count {
                rest.append(arguments[index])
                index += 1
            }
        }
        return (rest, urls)
    }

    func run() throws {
        try check()
        let resolved = try global.resolve()
        var entries = urls.enumerated().map { index, url in
            SubmitEntry(url: url, options: [], line: 0, origin: urls.count == 1 ? "" : "URL \(index + 1) (\(url)): ")
        }
        if let inputFile { entries += try readList(inputFile) }
        if entries.isEmpty { throw fail("\(inputFile ?? "-"): no URL in the list") }
        if entries.count > 1, dest != nil { throw fail("--dest names one file, but \(entries.count) URLs were given; use --dir") }
        if entries.count > 1, out != nil { throw fail("-o/--out names one file, but \(entries.count) URLs were given; use -d/--dir") }
        // No scheme typed ("example.com/a.iso"): https, as a browser would, and said so.
        for index in entries.indices {
            guard let url = URLRules.assumingHTTPS(entries[index].url) else { continue }
            FileHandle.standardError.write(Data("syncagent: \(entries[index].origin)no scheme in \"\(entries[index].url)\": taken as \(url)\n".utf8))
            entries[index].url = url
        }
        if entries.count > 1, id != nil { throw fail("--id names one task, but \(entries.count) URLs were given") }

        // One submit at a time checks ids against the inbox and writes: two
        // running at once with the same --id would both pass the check.
        let inboxLock: Int32
        do {
            inboxLock = try InboxWriter(inbox: resolved.paths.inbox).lock()
        } catch {
            throw fail("cannot lock the inbox \(resolved.paths.inbox): \(error)")
        }
        defer { Posix.close(inboxLock) }
        // Every job is checked before any is written: a typo in line 40 leaves no half-submitted list.
        // Ids are checked one at a time through the log's index, not by folding
        // the whole log. Jobs waiting in the inbox are all read only when an id
        // is chosen; a random one is checked against the ids in submit's own
        // file names (another job naming the same six random characters is as
        // unlikely as it gets, and the agent would refuse it by name).
        let chosenIDs = id != nil || entries.contains { $0.options.contains { $0.key == "id" } }
        var taken = chosenIDs ? pendingJobIDs(resolved.paths)
                              : submittedJobIDs(inbox: resolved.paths.inbox)
        let parser = JobParser.agents(paths: resolved.paths, config: resolved.config)
        var jobs: [(id: String, text: String)] = []
        func prepareJobs(_ inLog: (String) -> Bool) throws {
            for entry in entries {
                let job = try jobText(for: entry, taken: { taken.contains($0) || inLog($0) })
                do {
                    _ = try parser.parse(Array(job.text.utf8))
                } catch let error as KeyError {
                    // A key set on an option line is named by that line, not the URL's.
                    let optionLine = entry.options.last { $0.key == error.key }?.line
                    throw fail((optionLine.map(entry.origin(ofLine:)) ?? entry.origin) + error.description)
                }
                taken.insert(job.id)
                jobs.append(job)
            }
        }
        var checked = false
        do {
            try EventStore(readingFrom: resolved.paths.eventLog).lookingUpTasks { lookup in
                checked = true
                try prepareJobs { (try? lookup.knows($0)) ?? false }
            }
        } catch where !checked {
            // A log that cannot be read holds no id we could check against.
            try prepareJobs { _ in false }
        }
        do {
            _ = try InboxWriter(inbox: resolved.paths.inbox).write(jobs.map { ($0.text, "submit-\($0.id)") })
        } catch {
            let taken = pendingJobIDs(resolved.paths)
            let inboxed = jobs.map(\.id).filter(taken.contains)
            throw fail("cannot write into the inbox \(resolved.paths.inbox): \(error)"
                       + (inboxed.isEmpty ? "; no job was submitted" : "; these went in: \(inboxed.joined(separator: " "))"))
        }
        // The ids only once every job is in: a reader that goes away (`| head -1`)
        // cannot stop the list half-way, and an id that cannot be printed is an error.
        let ids = Array(jobs.map { $0.id + "\n" }.joined().utf8)
        do {
            try Posix.ignore(signal: SIGPIPE)
            try ids.withUnsafeBytes { try Posix.writeAll(STDOUT_FILENO, $0, shown: "standard output") }
        } catch {
            throw fail("\(jobs.count) jobs were written, but their ids could not be printed (\(Posix.words((error as? SystemError)?.errno ?? EIO))): "
                       + jobs.map(\.id).joined(separator: " "))
        }
        if wait { try SubmitWait.follow(jobs.map(\.id), global: global, paths: resolved.paths) }
        warnIfNoAgent(resolved.paths)
    }

    private func readList(_ path: String) throws -> [SubmitEntry] {
        let name = path == "-" ? "standard input" : path
        var isFolder: ObjCBool = false
        if path != "-", FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue {
            throw fail("\(name): is a folder, not a URL list")
        }
        // Read as a stream: a FIFO or `<(…)` has no size to read up to.
        func unreadable(_ error: Error) -> ExitCode {
            fail("\(name): cannot read the URL list: \(Posix.words((error as? SystemError)?.errno ?? EIO))")
        }
        let fd: Int32
        do {
            fd = path == "-" ? STDIN_FILENO : try Posix.open(path, O_RDONLY)
        } catch {
            throw unreadable(error)
        }
        defer { if fd != STDIN_FILENO { Posix.close(fd) } }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count: Int
            do {
                count = try buffer.withUnsafeMutableBytes { try Posix.read(fd, into: $0, shown: name) }
            } catch {
                throw unreadable(error)
            }
            if count == 0 { break }
            data.append(contentsOf: buffer[0..<count])
        }
        guard let text = String(data: data, encoding: .utf8) else { throw fail("\(name): the URL list is not UTF-8 text") }
        do {
            return try SubmitInput.parse(text).map {
                var entry = $0
                entry.input = name
                return entry
            }
        } catch let error as SubmitInput.Malformed {
            throw fail("\(name) \(error)")
        }
    }

    /// The TOML of one job: the flags, then the entry's own options over them.
    private func jobText(for entry: SubmitEntry, taken: (String) -> Bool) throws -> (id: String, text: String) {
        var keys: [String: String] = [:]
        func set(_ key: String, _ value: String?) { if let value { keys[key] = value } }
        set("kind", kind); set("dest", dest); set("sha256", sha256); set("md5", md5)
        set("overwrite", update ? "update" : overwrite)
        set("priority", priority.map(String.init)); set("batch", batch); set("notify", notify)
        set("retries", retries.map(String.init)); set("max_speed", maxSpeed); set("not_before", notBefore)
        set("connections", connections.map(String.init)); set("allow_metered", allowMetered.map(String.init))
        set("method", method); set("body_file", bodyFile); set("form_field", formField); set("variant", variant)
        set("output", output); set("max_duration", maxDuration.map(String.init)); set("id", id)
        set("audio", audio); set("subtitles", subtitles)
        set("protocol", uploadProtocol); set("chunk_size", chunkSize); set("parallel", parallel.map(String.init))
        set("min_speed", minSpeed); set("min_speed_time", minSpeedTime.map(String.init))
        if nameFromServer { set("name_from_server", "true") }
        // Each with how an error names it: the flag, or the list's line that gave it.
        var headerLines = headers.map { (text: $0, shown: "--header \"\($0)\"") }
        var formLines = formFields.map { (text: $0, shown: "--form \"\($0)\"") }
        var folder = dir, fileName = out
        for option in entry.options {
            let shown = "\(entry.origin(ofLine: option.line))\(option.key)=\(option.value)"
            switch option.key {
            case "dir": folder = option.value
            case "out": fileName = option.value
            case "header": headerLines.append((option.value, shown))
            // aria2c's name for it (-s): ranges fetched at once.
            case "split": keys["connections"] = option.value
            case "form": formLines.append((option.value, shown))
            case "url", "headers":
                throw fail("\(entry.origin)key \"\(option.key)\" cannot be set on an option line (line \(option.line))")
            default: keys[option.key] = option.value
            }
        }
        if folder != nil || fileName != nil {
            let name = fileName ?? (keys["kind"] == "hls" ? URLRules.videoName(from: entry.url) : URLRules.fileName(from: entry.url))
            keys["dest"] = folder.map { ($0.hasSuffix("/") ? $0 : $0 + "/") + name } ?? name
        }
        if let body = keys["body_file"] {
            // The agent runs elsewhere: a relative path means this shell's directory.
            let absolute = URL(fileURLWithPath: body, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
            keys["body_file"] = absolute.standardizedFileURL.path
        }
        let taskID = keys["id"] ?? IDRules.random(isTaken: taken)
        if keys["id"] != nil, taken(taskID) {
            throw fail("\(entry.origin)key \"id\": \"\(taskID)\" is already used by a task in the log, a job waiting in the inbox, or an earlier URL of this submit")
        }
        keys["id"] = taskID
        // Numbers stay numbers; anything else is a string the agent parses (and names when wrong).
        let integerKeys: Set<String> = ["priority", "retries", "max_duration", "connections", "parallel", "min_speed_time"]
        let booleanKeys: Set<String> = ["allow_metered", "name_from_server"]
        var lines = ["url = \(TOML.quoted(entry.url))"]
        for key in keys.keys.sorted() {
            let value = keys[key]!
            let bare = integerKeys.contains(key) && Int(value) != nil || booleanKeys.contains(key) && Bool(value) != nil
            lines.append("\(tomlKey(key)) = " + (bare ? value : TOML.quoted(value)))
        }
        try appendTable("headers", headerLines, separator: ":", shape: "'Name: value'", to: &lines)
        try appendTable("form", formLines, separator: "=", shape: "'name=value'", to: &lines)
        return (taskID, lines.joined(separator: "\n") + "\n")
    }
}

/// A key as written by a user on an option line: bare when it can be.
private func tomlKey(_ key: String) -> String {
    key.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") } && !key.isEmpty ? key : TOML.quoted(key)
}

/// `[name]` with one `key = "value"` per `key<separator>value` given; an
/// error names the pair as `shown` says (the flag, or the list's line).
private func appendTable(_ name: String, _ pairs: [(text: String, shown: String)], separator: Character, shape: String,
                         to lines: inout [String]) throws {
    guard !pairs.isEmpty else { return }
    lines.append("[\(name)]")
    for (pair, shown) in pairs {
        guard let split = pair.firstIndex(of: separator) else {
            throw fail("\(shown) must look like \(shape)")
        }
        let key = pair[..<split].trimmingCharacters(in: .whitespaces)
        let value = pair[pair.index(after: split)...].trimmingCharacters(in: .whitespaces)
        lines.append("\(TOML.quoted(key)) = \(TOML.quoted(value))")
    }
}

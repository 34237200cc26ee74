import Foundation

/// A parsed, validated job file: a transfer to create, or a control request.
public enum Job: Equatable, Sendable {
    case transfer(id: String?, spec: TaskSpec)
    case control(ControlJob)
}

public struct ControlJob: Equatable, Sendable {
    public enum Action: String, CaseIterable, Sendable { case pause, resume, cancel, forget, compact, retarget }
    public var action: Action
    /// A task id, or `*` for every task (`compact`: always `*`; `retarget`: never).
    public var task: String
    /// `compact`: ended tasks older than this many seconds go into the snapshot (nil: `keep_ended`).
    public var olderThanS: Int64?
    /// `retarget`: the URL the task goes on from (checked as a transfer job's `url` is).
    public var url: String?
    public init(action: Action, task: String, olderThanS: Int64? = nil, url: String? = nil) {
        self.action = action; self.task = task; self.olderThanS = olderThanS; self.url = url
    }
}

extension ControlJob {
    /// The job file that asks for it, as `syncagent resume` and a notice's "Retry" write it.
    public var fileText: String {
        "action = \(TOML.quoted(action.rawValue))\ntask = \(TOML.quoted(task))\n"
            + (olderThanS.map { "older_than = \"\($0)s\"\n" } ?? "") + (url.map { "url = \(TOML.quoted($0))\n" } ?? "")
    }
}

extension ControlJob.Action {
    /// Whether this control would change `task` (what shell completion
    /// offers it for; anything else the agent answers "nothing to do").
    public func changes(_ task: TaskState) -> Bool {
        // A video's segments and an upload's parts follow their parent, and are not offered.
        guard task.parentID == nil else { return false }
        switch self {
        case .pause: return task.phase.isActive || (task.phase == .paused && task.pauseReason != .user)
        case .resume: return task.phase == .paused || task.phase == .failed
        case .cancel: return !task.phase.isEnded || task.phase == .failed
        case .forget: return task.phase.isEnded && !task.forgotten
        case .compact: return false
        // (A resumable upload keeps what it sent at its server's upload URL: it cannot move.)
        case .retarget: return (!task.phase.isEnded || task.phase == .failed) && task.spec.upload == nil
        }
    }
}

/// Turns the bytes of a job file into a `Job`, or a `KeyError` whose
/// sentence goes into `INBOX/rejected/NAME.error`. Pure: the caller reads the file.
public struct JobParser: Sendable {
    public static let maximumSize = 64 * 1024

    /// Absolute; every destination must stay inside it, or inside one of `moreDirs`.
    public let downloadDir: String
    /// `more_dirs`: folders an absolute `dest` may name too.
    public let moreDirs: [String]
    public let defaultNotify: NotifyMode
    /// The agent's own folders (state dir, inbox): no destination may lie
    /// in them, even when they sit inside `download_dir`.
    public let forbiddenDirs: [String]
    /// The config's `name_from_server`: downloads without `dest` (nor a
    /// key of their own) are named by their server's answer.
    public let defaultNameFromServer: Bool
    /// Where a body file may be read from. Made once: every job and every
    /// attempt asks, and making it normalizes each folder again.
    public let bodyFileRules: BodyFileRules

    public init(downloadDir: String, moreDirs: [String] = [], defaultNotify: NotifyMode = .batch, forbiddenDirs: [String] = [],
                nameFromServer: Bool = false) {
        self.downloadDir = PathRules.normalize(downloadDir)
        self.moreDirs = moreDirs.map(PathRules.normalize)
        self.defaultNotify = defaultNotify
        self.forbiddenDirs = forbiddenDirs.map(PathRules.normalize)
        defaultNameFromServer = nameFromServer
        bodyFileRules = BodyFileRules(forbiddenDirs: self.forbiddenDirs, rpcRoot: self.downloadDir)
    }

    /// Where `name`, a name a server gave (made safe: `ServerFileName`),
    /// puts a file beside `dest`: nil when the rules a job's `dest` is held
    /// to refuse it there (one of the agent's own folders, say).
    public func serverNamedPath(_ name: String, beside dest: String) -> String? {
        let folder = PathRules.folder(of: dest)
        let path = (folder == "/" ? "" : folder) + "/" + name
        guard let resolved = try? PathRules.resolve(path, inside: downloadDir, orIn: moreDirs, excluding: forbiddenDirs, key: "dest",
                                                    advising: false),
              PathRules.isSame(resolved, path) else { return nil }
        return resolved
    }

    private func resolveDest(_ dest: String) throws -> String {
        try PathRules.resolve(dest, inside: downloadDir, orIn: moreDirs, excluding: forbiddenDirs, key: "dest")
    }

    /// What keeps a task read from the log from running, if anything: the
    /// log is input too (SPEC §6 rule 3), and a destination or body file
    /// written there is held to the rules a job's is held to when it is
    /// taken (here, by the same code), against the folders of this run. A
    /// destination must also be the path those rules make of it (no `..`,
    /// `.` or `//` left in it), and names may be as long as the file system
    /// allows: `rename` adds `.N`, and an HLS video's segments go in `DEST.part/`.
    /// - Parameter serverNamed: the destination its server's answer named, as the log recorded it.
    public func refusal(ofRecorded spec: TaskSpec, serverNamed: String? = nil) -> (reason: String, code: FailureCode)? {
        for dest in [spec.dest, serverNamed].compactMap({ $0 }) {
            do {
                // No advice to allow its folder: the log may be another hand's, naming any file at all.
                let resolved = try PathRules.resolve(dest, inside: downloadDir, orIn: moreDirs, excluding: forbiddenDirs, key: "dest",
                                                     nameLimit: PathRules.nameMax, pathLimit: PathRules.pathMax, advising: false)
                guard PathRules.isSame(resolved, dest) else {
                    return ("the log's dest \"\(Printable.escaping(dest))\" is not a plain path (it means \(resolved))", .destRefused)
                }
            } catch {
                return ("the log's dest \((error as? KeyError)?.problem ?? "\(error)")", .destRefused)
            }
        }
        if let body = spec.bodyFile, let problem = bodyFileRules.problem(body, fromRPC: spec.source?.isRPC ?? false) {
            return ("the log's body_file \(problem)", .bodyUnreadable)
        }
        return nil
    }

    /// Every key a transfer job may hold (syncagent.job(5) names each).
    public static let transferKeys: Set<String> = [
        "url", "kind", "dest", "id", "sha256", "md5", "priority", "overwrite", "not_before",
        "batch", "notify", "retries", "max_speed", "headers", "connections", "allow_metered",
        "min_speed", "min_speed_time", "name_from_server",
        // upload and data jobs:
        "method", "body_file", "form_field", "form",
        // resumable uploads:
        "protocol", "chunk_size", "parallel",
        // HLS jobs:
        "variant", "output", "max_duration", "audio", "subtitles",
    ]
    /// Every key a control job may hold.
    public static let controlKeys: Set<String> = ["action", "task", "older_than", "url"]

    public func parse(_ bytes: [UInt8], source: JobSource? = nil) throws -> Job {
        if bytes.count > Self.maximumSize {
            throw KeyError(key: nil, "the job file is \(bytes.count) bytes, over the 64 KiB limit")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw KeyError(key: nil, "the job file is not UTF-8 text (the first bad byte is at offset \(UTF8Text.firstInvalidOffset(bytes) ?? 0))")
        }
        return try parse(table: try TOMLReader.parse(text).table, source: source)
    }

    /// A job's keys already read (an RPC call's, for one): checked as a file's are.
    public func parse(table: TOMLTable, source: JobSource? = nil) throws -> Job {
        let reader = TOMLReader(table)
        if reader.has("action") {
            return .control(try parseControl(reader))
        }
        return try parseTransfer(reader, source: source)
    }

    private func parseControl(_ reader: TOMLReader) throws -> ControlJob {
        try reader.rejectUnknownKeys(allowed: Self.controlKeys)
        guard let action = try reader.choice("action", ControlJob.Action.self) else {
            throw KeyError(key: "action", "is missing")
        }
        if action != .retarget, reader.has("url") {
            throw KeyError(key: "url", "belongs to action = \"retarget\" only (a transfer job has no action)")
        }
        if action == .compact {
            // The log as a whole: no task to name.
            if let task = try reader.string("task"), task != "*" {
                throw KeyError(key: "task", "must be \"*\" or left out for compact, not \"\(task)\"")
            }
            return ControlJob(action: .compact, task: "*", olderThanS: try reader.duration("older_than"))
        }
        if reader.has("older_than") { throw KeyError(key: "older_than", "belongs to action = \"compact\" only") }
        guard let task = try reader.name("task"), !task.isEmpty else {
            throw KeyError(key: "task", "is missing: a control job names a task id, or \"*\" for all")
        }
        guard action == .retarget else { return ControlJob(action: action, task: task) }
        // One new URL is one task's: every task at once would be every file at one address.
        guard task != "*" else { throw KeyError(key: "task", "must name one task for retarget, not \"*\"") }
        guard let url = try reader.string("url") else {
            throw KeyError(key: "url", "is missing: retarget names the URL the task goes on from")
        }
        try URLRules.checkTransferURL(url, key: "url")
        return ControlJob(action: action, task: task, url: url)
    }

    private func parseTransfer(_ reader: TOMLReader, source: JobSource?) throws -> Job {
        try reader.rejectUnknownKeys(allowed: Self.transferKeys)
        guard let url = try reader.string("url") else {
            throw KeyError(key: "url", "is missing: every transfer job needs a url")
        }
        try URLRules.checkTransferURL(url, key: "url")

        let kind = try reader.choice("kind", TransferKind.self) ?? .download
        let request = try parseRequest(reader, kind: kind, fromRPC: source?.isRPC ?? false)
        let hls = try parseHLS(reader, kind: kind)

        let id = try reader.string("id")
        if let id { try IDRules.check(id) }

        var dest: String?
        switch kind {
        case .download:
            dest = try resolveDest(try reader.string("dest") ?? URLRules.fileName(from: url))
        case .hls:
            dest = try resolveDest(try reader.string("dest") ?? URLRules.videoName(from: url))
        case .data:
            dest = try reader.string("dest").map(resolveDest)
        case .upload:
            if reader.has("dest") {
                throw KeyError(key: "dest", "does not apply to an upload, whose response body is not kept; use kind = \"data\" with body_file to save what the server answers")
            }
        }
        for key in ["sha256", "md5", "overwrite"] where dest == nil && reader.has(key) {
            throw KeyError(key: key, "applies only to a job that saves a file (a download, or a data job with dest)")
        }
        if kind != .download, try reader.choice("overwrite", OverwriteMode.self) == .update {
            throw KeyError(key: "overwrite", "\"update\" (fetch only if changed) applies to downloads")
        }

        let nameFromServer = try parseNameFromServer(reader, kind: kind)
        let sha256 = try reader.string("sha256").map { try Self.hexDigest($0, key: "sha256", length: 64) }
        let md5 = try reader.string("md5").map { try Self.hexDigest($0, key: "md5", length: 32) }

        var batch = try reader.name("batch")
        if let name = batch {
            if name.isEmpty || name.count > 128 {
                throw KeyError(key: "batch", "must be a name of 1 to 128 characters")
            }
        } else {
            batch = nil
        }

        let spec = TaskSpec(
            url: url,
            kind: kind,
            dest: dest,
            sha256: sha256,
            md5: md5,
            priority: try reader.int("priority", in: -1_000_000...1_000_000) ?? 0,
            overwrite: try reader.choice("overwrite", OverwriteMode.self) ?? .rename,
            headers: try reader.headers("headers"),
            batch: batch,
            notify: try reader.choice("notify", NotifyMode.self) ?? defaultNotify,
            retries: try reader.int("retries", in: 0...100),
            maxSpeed: try reader.byteCount("max_speed"),
            notBeforeMs: try reader.instantMs("not_before"),
            source: source,
            method: request.method,
            bodyFile: request.bodyFile,
            formField: request.formField,
            form: request.form,
            hls: hls,
            connections: try parseConnections(reader, kind: kind),
            allowMetered: try reader.bool("allow_metered"),
            upload: try parseUpload(reader, kind: kind, method: request.method, formField: request.formField),
            minSpeed: try parseMinSpeed(reader),
            minSpeedTimeS: try parseMinSpeedTime(reader),
            nameFromServer: nameFromServer ? true : nil
        )
        return .transfer(id: id, spec: spec)
    }

    /// `min_speed`: bytes per second, over the config's; 0 turns the check off for this job.
    private func parseMinSpeed(_ reader: TOMLReader) throws -> Int64? {
        guard reader.has("min_speed") else { return nil }
        if reader.isZero("min_speed") { return 0 }
        guard let speed = try? reader.byteCount("min_speed") else {
            throw KeyError(key: "min_speed", "must be a speed in bytes per second such as 1024, \"512\", \"1K\" or \"2M\", "
                           + "or 0 to turn the check off for this job")
        }
        return speed
    }

    /// `min_speed_time`: the seconds `min_speed` is averaged over.
    private func parseMinSpeedTime(_ reader: TOMLReader) throws -> Int? {
        guard reader.has("min_speed_time") else { return nil }
        guard let seconds = try? reader.seconds("min_speed_time") else {
            throw KeyError(key: "min_speed_time", "must be a whole number of seconds from 1 to \(Int32.max), such as 120")
        }
        return seconds
    }

    /// `name_from_server` (the job's, else the config's): a download without
    /// `dest` is named by its server's answer. A job that names its file, or
    /// asks to fetch it only if changed (the file must be known before the
    /// request), cannot be named so; the config's default then does not apply.
    private func parseNameFromServer(_ reader: TOMLReader, kind: TransferKind) throws -> Bool {
        guard let asked = try reader.bool("name_from_server") else {
            return defaultNameFromServer && kind == .download && !reader.has("dest")
                && (try? reader.choice("overwrite", OverwriteMode.self)) != .update
        }
        guard asked else { return false }
        guard kind == .download else {
            throw KeyError(key: "name_from_server", "applies to downloads only, not to kind = \"\(kind.rawValue)\"")
        }
        if reader.has("dest") {
            throw KeyError(key: "name_from_server", "names a file the job leaves unnamed, and this job sets dest: "
                           + "drop one of the two")
        }
        if try reader.choice("overwrite", OverwriteMode.self) == .update {
            throw KeyError(key: "name_from_server", "does not go with overwrite = \"update\", which needs the file's name "
                           + "before the request; the server's name comes with its answer")
        }
        return true
    }

    /// `connections`: downloads only (an upload or a data task is one
    /// exchange; an HLS video already fetches its segments side by side).
    private func parseConnections(_ reader: TOMLReader, kind: TransferKind) throws -> Int? {
        guard let connections = try reader.int("connections", in: 1...SegmentPlan.maximumConnections) else { return nil }
        guard kind == .download else {
            throw KeyError(key: "connections", "applies to downloads only, not to kind = \"\(kind.rawValue)\"")
        }
        return connections
    }

    /// `protocol`, `chunk_size`, `parallel`: uploads only. A resumable
    /// protocol chooses its own requests (no `method`, no form), and only
    /// tus can send parts side by side (its `concatenation` extension).
    private func parseUpload(_ reader: TOMLReader, kind: TransferKind, method: String?, formField: String?) throws -> UploadOptions? {
        guard kind == .upload else {
            for key in ["protocol", "chunk_size", "parallel"] where reader.has(key) {
                throw KeyError(key: key, "applies to uploads (kind = \"upload\") only")
            }
            return nil
        }
        let chosen = try reader.choice("protocol", UploadProtocol.self) ?? .plain
        let parallel = try reader.int("parallel", in: 1...ResumableUpload.maximumParallel)
        var chunkSize: Int64?
        if reader.has("chunk_size"), (try? reader.string("chunk_size")) != "auto" {
            let words = "must be \"auto\" or a size from 1K to 4G such as \"8M\""
            guard let size = try? reader.byteCount("chunk_size") else { throw KeyError(key: "chunk_size", words) }
            guard size >= 1 << 10, size <= 1 << 32 else { throw KeyError(key: "chunk_size", "\(words), not \(size) bytes") }
            chunkSize = size
        }
        guard chosen != .plain else {
            for key in ["chunk_size", "parallel"] where reader.has(key) {
                throw KeyError(key: key, "applies to resumable uploads only: set protocol = \"tus\" or \"ietf\"")
            }
            return nil
        }
        if method != nil { throw KeyError(key: "method", "does not apply with protocol = \"\(chosen.rawValue)\", which chooses its own requests") }
        if formField != nil { throw KeyError(key: "form_field", "does not apply with protocol = \"\(chosen.rawValue)\": the file is sent as it is") }
        if let parallel, parallel > 1, chosen != .tus {
            throw KeyError(key: "parallel", "needs protocol = \"tus\" (its concatenation extension sends parts side by side)")
        }
        return UploadOptions(protocol: chosen, chunkSize: chunkSize, parallel: parallel ?? 1)
    }

    /// `variant`, `output`, `max_duration`: HLS jobs only; no checksum
    /// applies to a video made of many files.
    private func parseHLS(_ reader: TOMLReader, kind: TransferKind) throws -> HLSOptions? {
        guard kind == .hls else {
            for key in ["variant", "output", "max_duration", "audio", "subtitles"] where reader.has(key) {
                throw KeyError(key: key, "applies to HLS jobs (kind = \"hls\") only")
            }
            return nil
        }
        for key in ["sha256", "md5"] where reader.has(key) {
            throw KeyError(key: key, "does not apply to an HLS job: a video is many files, each checked as it arrives")
        }
        var options = HLSOptions()
        if let variant = try reader.string("variant") {
            let isResolution = variant.range(of: #"^[0-9]{1,5}x[0-9]{1,5}$"#, options: .regularExpression) != nil
            guard variant == "best" || variant == "worst" || HTTPNumbers.parseCount(variant) != nil || isResolution else {
                throw KeyError(key: "variant", "must be \"best\", \"worst\", a BANDWIDTH such as \"2500000\" or a resolution such as \"1280x720\", not \"\(variant)\"")
            }
            options.variant = variant
        }
        options.output = try reader.choice("output", HLSOutput.self) ?? .directory
        options.maxDurationS = try reader.int("max_duration", in: 1...(30 * 86_400))
        if let audio = try reader.string("audio") {
            guard audio == HLSOptions.defaultAudio || audio == HLSOptions.noAudio || HLSRenditionChoice.isLanguageTag(audio) else {
                throw KeyError(key: "audio", "must be \"default\", \"none\" or a language such as \"en\" or \"pt-BR\", not \"\(Printable.escaping(String(audio.prefix(40))))\"")
            }
            options.audio = audio
        }
        if let subtitles = try reader.string("subtitles") {
            guard HLSRenditionChoice.isLanguageTag(subtitles) else {
                throw KeyError(key: "subtitles", "must be a language such as \"en\" or \"pt-BR\", not \"\(Printable.escaping(String(subtitles.prefix(40))))\"")
            }
            options.subtitles = subtitles
        }
        return options
    }

    /// The request keys of upload and data jobs: `method`, `body_file`, `form_field`, `[form]`.
    private func parseRequest(_ reader: TOMLReader, kind: TransferKind, fromRPC: Bool) throws
        -> (method: String?, bodyFile: String?, formField: String?, form: [FormField]) {
        if kind == .download {
            for key in ["method", "body_file", "form_field", "form"] where reader.has(key) {
                throw KeyError(key: key, "applies to upload and data jobs only, not to a download")
            }
            return (nil, nil, nil, [])
        }
        var method = try reader.string("method")
        if let given = method {
            method = given.uppercased()
            guard given.count <= 32, Header.isToken(method!) else {
                throw KeyError(key: "method", "\"\(given)\" is not an HTTP method")
            }
            if kind == .upload, method != "PUT", method != "POST" {
                throw KeyError(key: "method", "must be PUT or POST for an upload, not \(given)")
            }
        }
        let bodyFile = try reader.string("body_file")
        if let path = bodyFile, let problem = bodyFileRules.problem(path, fromRPC: fromRPC) {
            throw KeyError(key: "body_file", problem)
        }
        if kind == .upload, bodyFile == nil {
            throw KeyError(key: "body_file", "is missing: an upload sends a file")
        }
        let formField = try reader.name("form_field")
        let form = try reader.formFields("form")
        if formField != nil || !form.isEmpty {
            guard kind == .upload else {
                throw KeyError(key: formField != nil ? "form_field" : "form", "applies to upload jobs only")
            }
            guard let field = formField, !field.isEmpty else {
                throw KeyError(key: "form_field", "is missing: [form] fields go with the file's form_field")
            }
            if field.contains("\"") {
                throw KeyError(key: "form_field", "must not contain quotes")
            }
        }
        return (method, bodyFile, formField, form)
    }

    static func hexDigest(_ text: String, key: String, length: Int) throws -> String {
        let lower = text.lowercased()
        guard lower.count == length, lower.allSatisfy(\.isHexDigit) else {
            throw KeyError(key: key, "must be \(length) hexadecimal digits")
        }
        return lower
    }
}

public enum IDRules {
    /// A new short id: six letters and digits without look-alikes (no l, o,
    /// 0, 1), about 10⁹ of them; `isTaken` says which are used.
    public static func random(isTaken: (String) -> Bool) -> String {
        let alphabet = Array("abcdefghijkmnpqrstuvwxyz23456789")
        while true {
            var bits = UInt64.random(in: 0...UInt64.max)
            var id = ""
            for _ in 0..<6 {
                id.append(alphabet[Int(bits & 31)])
                bits >>= 5
            }
            if !isTaken(id) { return id }
        }
    }

    /// Ids appear in file names and command lines: keep them plain. (One starting with '-' would be
    /// read as an option: `syncagent cancel --all`.)
    public static func check(_ id: String) throws {
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        guard !id.isEmpty, id.count <= 64, id != "*", !id.hasPrefix("."), !id.hasPrefix("-"),
              id.unicodeScalars.allSatisfy({ allowed.contains($0) }) else {
            throw KeyError(key: "id", "must be 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'")
        }
    }
}

public enum URLRules {
    /// Whether the URL names http or https (whatever else may be wrong with it): a URL refused for
    /// its scheme is said so, one refused for anything else in the words of `checkTransferURL`.
    public static func hasHTTPScheme(_ url: String) -> Bool {
        guard let colon = url.firstIndex(of: ":") else { return false }
        return ["http", "https"].contains(url[..<colon].lowercased())
    }

    /// HTTP and HTTPS only, with a host: for the job URL and every redirect.
    public static func checkTransferURL(_ url: String, key: String) throws {
        // Redacted only when an error shows it: intake checks every job's URL.
        var shown: String { Redaction.url(url) }
        // A space or a control character (CR, LF, NUL …) could end the request line.
        guard !url.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) else {
            // Swift's own quoting, without its quotes: a line break reads \n, not as the end of the message.
            let escaped = String(url.debugDescription.dropFirst().dropLast())
            throw KeyError(key: key, "must not contain spaces or control characters: \"\(Redaction.url(escaped))\"")
        }
        guard url.utf8.count <= 8192 else {
            throw KeyError(key: key, "is \(url.utf8.count) bytes long, over the 8 KiB a URL may have")
        }
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased() else {
            throw KeyError(key: key, "is not a valid URL: \"\(shown)\"")
        }
        guard scheme == "http" || scheme == "https" else {
            throw KeyError(key: key, "must be an http or https URL, not \(scheme): \"\(shown)\"")
        }
        guard let host = components.host, !host.isEmpty, host != "[]" else {
            throw KeyError(key: key, "has no host: \"\(shown)\"")
        }
        // What URLComponents lets through and curl then refuses at the first attempt: said at intake.
        let authority = Self.authority(of: url)
        if let open = authority.lastIndex(of: UInt8(ascii: "[")) {
            let close = authority[open...].firstIndex(of: UInt8(ascii: "]")) ?? authority.endIndex
            let literal = (String(decoding: authority[(open + 1)..<close], as: UTF8.self).removingPercentEncoding ?? "")
            guard ipv6(literal) != nil else {
                throw KeyError(key: key, "has [\(literal)] for a host, which is no IPv6 address: \"\(shown)\"")
            }
        }
        if authority.filter({ $0 == UInt8(ascii: "@") }).count > 1 {
            throw KeyError(key: key, "has more than one '@' before its host (write an '@' of a user name or password as %40): \"\(shown)\"")
        }
        if let port = Self.portText(of: authority), !port.isEmpty {
            guard let number = Self.portNumber(port), number >= 1 else {
                throw KeyError(key: key, "has port \(String(decoding: port, as: UTF8.self)), not a number from 1 to 65535: \"\(shown)\"")
            }
        }
    }

    /// A port's digits as a number up to 65535, else nil. Leading zeros are
    /// allowed (RFC 3986's port is *DIGIT; curl reads 018232 as 18232).
    static func portNumber<Bytes: Collection<UInt8>>(_ text: Bytes) -> Int? {
        let significant = text.drop { $0 == UInt8(ascii: "0") }
        guard text.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), significant.count <= 5 else { return nil }
        let number = significant.reduce(0) { $0 * 10 + Int($1 - 0x30) }
        return number <= 65535 ? number : nil
    }

    /// The bytes between `scheme://` and the path, query or fragment.
    static func authority(of url: String) -> ArraySlice<UInt8> {
        let bytes = Array(url.utf8)
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), bytes[colon...].starts(with: Array("://".utf8)) else { return [] }
        let start = colon + 3
        let end = bytes[start...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") } ?? bytes.endIndex
        return bytes[start..<end]
    }

    /// The port's text in an authority (after an IPv6 literal's ']'), nil when it has none.
    static func portText(of authority: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        var host = authority
        if let at = host.lastIndex(of: UInt8(ascii: "@")) { host = host[(at + 1)...] }
        if let close = host.lastIndex(of: UInt8(ascii: "]")) { host = host[(close + 1)...] }
        guard let colon = host.lastIndex(of: UInt8(ascii: ":")) else { return nil }
        return host[(colon + 1)...]
    }

    /// The default destination: the URL's last path segment, decoded.
    /// `example.com/a.iso` → `https://example.com/a.iso`: what was typed
    /// with no scheme (as one types into curl or a browser), when it reads
    /// as a host, with a port or none, and a path; nil for anything else (a
    /// URL with a scheme, a file path, `mailto:x`), to be judged as it is.
    public static func assumingHTTPS(_ text: String) -> String? {
        guard !text.isEmpty, !text.contains("://"), !text.hasPrefix("/"), !text.hasPrefix("."),
              !text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) else { return nil }
        let authority = text.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let colon = authority.lastIndex(of: ":") {
            // host:port, not scheme:rest.
            let port = authority[authority.index(after: colon)...]
            guard !port.isEmpty, port.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        }
        let candidate = "https://" + text
        guard let host = URLComponents(string: candidate)?.host, !host.isEmpty else { return nil }
        return candidate
    }

    public static func fileName(from url: String) -> String {
        let path = URLComponents(string: url)?.path ?? ""
        let last = path.split(separator: "/").last.map(String.init) ?? ""
        // A name from the URL never carries a control character into a file name or a terminal.
        let decoded = String(String.UnicodeScalarView((last.removingPercentEncoding ?? last).unicodeScalars.map {
            Printable.isControl($0) || $0 == "/" ? "_" : $0
        }))
        if decoded.isEmpty || decoded == "." || decoded == ".." || decoded.contains("\0") { return "index.html" }
        // A name the file system can hold, keeping the extension where it can.
        guard decoded.utf8.count > 200 else { return decoded }
        let ext = (decoded as NSString).pathExtension
        var stem = String(decoded.prefix(200 - min(ext.utf8.count + 1, 40)))
        while stem.utf8.count + ext.utf8.count + 1 > 200 { stem.removeLast() }
        return ext.isEmpty || ext.utf8.count >= 40 ? stem : stem + "." + ext
    }

    /// The default destination of an HLS job: the playlist's name without
    /// its extension, or its folder's name when the playlist is called
    /// `index`, `master` or `playlist` (…/talk/master.m3u8 → talk).
    public static func videoName(from url: String) -> String {
        let parts = (URLComponents(string: url)?.path ?? "").split(separator: "/").map { ($0.removingPercentEncoding ?? String($0)) }
        var name = ((parts.last ?? "") as NSString).deletingPathExtension
        if ["index", "master", "playlist", "prog_index", ""].contains(name.lowercased()), parts.count > 1 {
            name = parts[parts.count - 2]
        }
        let safe = String(String.UnicodeScalarView(name.unicodeScalars.map { Printable.isControl($0) || $0 == "/" ? "_" : $0 }))
        return safe.isEmpty || safe == "." || safe == ".." || safe.contains("\0") ? "video" : String(safe.prefix(200))
    }

    /// The URL's host, lowercased, an IPv6 address without its brackets.
    public static func host(of url: String) -> String? {
        URLComponents(string: url)?.host.map { $0.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]")) }
    }

    /// `host:port` with the scheme's default port: what `max_per_host` counts.
    public static func hostKey(_ url: String) -> String {
        if let plain = plainHostKey(url) { return plain }
        guard let components = URLComponents(string: url) else { return url }
        let host = canonicalHost(components.host ?? "")
        let port = components.port ?? (components.scheme?.lowercased() == "https" ? 443 : 80)
        return "\(host):\(port)"
    }

    /// One spelling per host, for `max_per_host`: lowercased, escapes decoded,
    /// a final '.' dropped, and an IPv4 address in any form inet_aton reads
    /// (127.1, 2130706433, 0x7f.0.0.1, 0177.0.0.1) as a dotted quad. curl
    /// connects all of those to one address, which one limit must count.
    static func canonicalHost(_ host: String) -> String {
        // Each step only where it has work: every job and every start asks (callgrind: 26k instructions a call otherwise).
        var name = host
        if name.utf8.contains(UInt8(ascii: "%")) { name = name.removingPercentEncoding ?? name }
        if name.utf8.contains(where: { ($0 >= 0x41 && $0 <= 0x5A) || $0 >= 0x80 }) { name = name.lowercased() }
        // An IPv6 literal, with or without its brackets (no name or IPv4 address holds a ':').
        if name.utf8.contains(UInt8(ascii: ":")) {
            let inner = name.hasPrefix("[") && name.hasSuffix("]") ? String(name.dropFirst().dropLast()) : name
            return ipv6(inner) ?? name
        }
        if name.utf8.count > 1, name.utf8.last == UInt8(ascii: ".") { name.removeLast() }
        return ipv4(name) ?? name
    }

    /// The dotted quad of an IPv4 address written with 1 to 4 numbers
    /// (decimal, 0x hex or 0 octal; the last fills the bytes left), else nil.
    static func ipv4(_ name: String) -> String? {
        let bytes = Array(name.utf8)
        var numbers: [UInt64] = []
        var start = 0
        while start <= bytes.count {
            let end = bytes[start...].firstIndex(of: UInt8(ascii: ".")) ?? bytes.count
            var digits = bytes[start..<end]
            guard !digits.isEmpty, numbers.count < 4 else { return nil }
            var radix: UInt64 = 10
            if digits.count >= 2, digits.first == UInt8(ascii: "0"), digits.dropFirst().first == UInt8(ascii: "x") {
                radix = 16
                digits = digits.dropFirst(2)
            } else if digits.count >= 2, digits.first == UInt8(ascii: "0") {
                radix = 8
                digits = digits.dropFirst()
            }
            guard digits.count <= 12 else { return nil }
            var number: UInt64 = 0
            for byte in digits {
                let value: UInt64
                switch byte {
                case 0x30...0x39: value = UInt64(byte - 0x30)
                case 0x61...0x66: value = UInt64(byte - 0x61 + 10)
                default: return nil
                }
                guard value < radix else { return nil }
                number = number * radix + value
            }
            numbers.append(number)
            start = end + 1
        }
        let last = numbers.removeLast()
        guard numbers.allSatisfy({ $0 <= 255 }), last < (UInt64(1) << (8 * (4 - numbers.count))) else { return nil }
        let address = numbers.enumerated().reduce(last) { $0 | $1.element << (8 * (3 - $1.offset)) }
        return "\(address >> 24).\(address >> 16 & 0xFF).\(address >> 8 & 0xFF).\(address & 0xFF)"
    }

    /// An IPv6 literal in its one text form (RFC 5952, via inet_ntop), or
    /// the IPv4 address it maps (`::ffff:127.0.0.1` is 127.0.0.1); nil if it
    /// is none. A zone (`%lo`) stays: it names another interface.
    static func ipv6(_ literal: String) -> String? {
        let parts = literal.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false)
        var address = in6_addr()
        guard inet_pton(AF_INET6, String(parts[0]), &address) == 1 else { return nil }
        let bytes = withUnsafeBytes(of: address) { Array($0) }
        if parts.count == 1, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            return bytes[12...].map(String.init).joined(separator: ".")
        }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return nil }
        let zone = parts.count == 2 ? "%" + parts[1] : ""
        let written = text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return "[" + String(decoding: written, as: UTF8.self) + zone + "]"
    }


    /// `hostKey` of the URLs jobs nearly always have (`http[s]://host[:port]/…`,
    /// plain ASCII, no brackets or escapes), read without URLComponents, whose
    /// parse and IDNA pass cost more than the rest of a job's intake. Nil: ask URLComponents.
    /// (Read in place from the string's bytes: every job and every replayed `created` asks.)
    static func plainHostKey(_ url: String) -> String? {
        var url = url
        return url.withUTF8(plainHostKey(bytes:))
    }

    private static func plainHostKey(bytes url: UnsafeBufferPointer<UInt8>) -> String? {
        func lowered(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }
        func isLetter(_ byte: UInt8) -> Bool { (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) }
        // "http://" or "https://", in any case.
        let secure = url.count > 5 && lowered(url[4]) == UInt8(ascii: "s")
        let colon = secure ? 5 : 4
        guard url.count > colon + 2, lowered(url[0]) == UInt8(ascii: "h"), lowered(url[1]) == UInt8(ascii: "t"),
              lowered(url[2]) == UInt8(ascii: "t"), lowered(url[3]) == UInt8(ascii: "p"), url[colon] == UInt8(ascii: ":"),
              url[colon + 1] == UInt8(ascii: "/"), url[colon + 2] == UInt8(ascii: "/") else { return nil }
        var hostStart = colon + 3, hostEnd = hostStart
        var portColon: Int?
        while hostEnd < url.count {
            let byte = url[hostEnd]
            if byte == UInt8(ascii: "/") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#") { break }
            if byte == UInt8(ascii: "@") { (hostStart, portColon) = (hostEnd + 1, nil) }
            if byte == UInt8(ascii: ":") { portColon = hostEnd }
            hostEnd += 1
        }
        var port = secure ? 443 : 80
        if let portColon {
            let text = url[(portColon + 1)..<hostEnd]
            hostEnd = portColon
            if !text.isEmpty {
                guard let number = portNumber(text) else { return nil }
                port = number
            }
        }
        let host = url[hostStart..<hostEnd]
        // Letters, digits, '-' and '.': anything else (IPv6, escapes, non-ASCII) is URLComponents' to read.
        guard let last = host.last, host.allSatisfy({ byte in
            isLetter(byte) || (byte >= 0x30 && byte <= 0x39) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
        }) else { return nil }
        // Names whose last label is a letter, and addresses written as a plain dotted quad, are
        // canonical already; other numbers and a final '.' take the canonical path.
        guard isLetter(last) || isDottedQuad(host) else {
            return canonicalHost(String(decoding: host, as: UTF8.self).lowercased()) + ":" + String(port)
        }
        // "name:port", written once into its string: decoding a lazily lowered copy and appending the
        // port cost 1,800 instructions more a call (callgrind: the decode's cast, copy and appends).
        let digits = port >= 10_000 ? 5 : port >= 1_000 ? 4 : port >= 100 ? 3 : port >= 10 ? 2 : 1
        return String(unsafeUninitializedCapacity: host.count + 1 + digits) { out in
            var index = 0
            for byte in host { out[index] = lowered(byte); index += 1 }
            out[index] = UInt8(ascii: ":")
            var rest = port
            for place in stride(from: index + digits, to: index, by: -1) {
                out[place] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            }
            return index + 1 + digits
        }
    }

    /// Four decimal numbers of 0–255 without leading zeros: an IPv4 address as inet_ntoa writes it.
    /// (One pass, nothing allocated: every job and every replayed `created` asks, and jobs for
    /// 127.0.0.1 spent a quarter of a replay splitting their host.)
    static func isDottedQuad<Bytes: Collection<UInt8>>(_ host: Bytes) -> Bool {
        var dots = 0, digits = 0, value = 0
        for byte in host {
            if byte == UInt8(ascii: ".") {
                guard digits > 0, dots < 3 else { return false }
                (dots, digits, value) = (dots + 1, 0, 0)
                continue
            }
            // A digit, at most three of them, none after a leading zero, 255 at most.
            guard byte >= 0x30, byte <= 0x39, digits < 3, digits == 0 || value != 0 else { return false }
            value = value * 10 + Int(byte - 0x30)
            digits += 1
            guard value <= 255 else { return false }
        }
        return dots == 3 && digits > 0
    }
}

public enum PathRules {
    /// Collapses `.`, `..` and repeated slashes without touching the disk.
    /// Split on the byte '/', as the kernel reads a path (a Character split
    /// would also be ten times slower, for every job taken).
    public static func normalize(_ path: String) -> String {
        let slash = UInt8(ascii: "/"), dot = UInt8(ascii: ".")
        let bytes = Array(path.utf8)
        var normalized: [UInt8] = []
        normalized.reserveCapacity(bytes.count + 1)
        // Where each kept name begins in `normalized`, for `..` to take it back.
        var starts: [Int] = []
        var index = 0
        while index < bytes.count {
            while index < bytes.count, bytes[index] == slash { index += 1 }
            let start = index
            while index < bytes.count, bytes[index] != slash { index += 1 }
            switch index - start {
            case 0: continue
            case 1 where bytes[start] == dot: continue
            case 2 where bytes[start] == dot && bytes[start + 1] == dot:
                if let kept = starts.popLast() { normalized.removeSubrange(kept...) }
                continue
            default:
                starts.append(normalized.count)
                normalized.append(slash)
                normalized.append(contentsOf: bytes[start..<index])
            }
        }
        return normalized.isEmpty ? "/" : String(decoding: normalized, as: UTF8.self)
    }

    /// The longest name a Linux file system holds, and the longest path the kernel takes.
    public static let nameMax = 255
    public static let pathMax = 4096

    /// `dest` relative to `downloadDir` (or absolute inside it, or inside
    /// one of `moreDirs`) → absolute path, never inside one of `excluded`
    /// (the agent's own folders). Symbolic links are not looked at here:
    /// the engine opens every component beneath its folder without following one.
    /// - Parameters:
    ///   - nameLimit, pathLimit: the longest name and path allowed: a job's leave
    ///     room for `.part` and a rename's `.N` within `nameMax` and `pathMax`.
    ///   - advising: a refusal for being outside says how to allow the folder (more_dirs).
    public static func resolve(_ dest: String, inside downloadDir: String, orIn moreDirs: [String] = [], excluding excluded: [String] = [],
                               key: String, nameLimit: Int = 240, pathLimit: Int = 4000, advising: Bool = true) throws -> String {
        if dest.isEmpty || dest.utf8.last == UInt8(ascii: "/") {
            throw KeyError(key: key, "must name a file, not \"\(dest)\"")
        }
        if dest.unicodeScalars.contains(where: Printable.isControl) {
            throw KeyError(key: key, "must not contain control characters (a line break, an escape …): \"\(Printable.escaping(dest))\"")
        }
        let root = normalize(downloadDir)
        let joined = dest.utf8.first == UInt8(ascii: "/") ? dest : root + "/" + dest
        let resolved = normalize(joined)
        guard isInside(resolved, root) || moreDirs.contains(where: { isInside(resolved, normalize($0)) }) else {
            // Refused for a job anyone's script may drop; allowed by the one who writes the config,
            // for a folder named outright: a relative dest climbing out with ".." names no folder
            // anyone meant, and a folder holding the agent's own is never one to open to jobs.
            let folder = normalize(resolved + "/..")
            let namedOutright = dest.utf8.first == UInt8(ascii: "/")
            let holdsAgentsOwn = folder == "/" || excluded.contains { isSame($0, folder) || isInside($0, folder) }
            let advice = !advising ? ""
                : !namedOutright ? "; a relative dest stays inside download_dir"
                : holdsAgentsOwn ? ""
                : "; to let jobs save in \(folder), add it to more_dirs in the config (more_dirs = [\"\(folder)\"]) and restart the agent"
            throw KeyError(key: key, "\"\(dest)\" is outside download_dir \(root)" + (moreDirs.isEmpty ? "" : " and more_dirs") + advice)
        }
        for folder in excluded where isSame(resolved, folder) || isInside(resolved, folder) {
            throw KeyError(key: key, "\"\(dest)\" is inside the agent's own folder \(folder)")
        }
        // Room for `.part` and a rename's `.N` within a name's 255 bytes.
        guard resolved.utf8.count < pathLimit, resolved.utf8.split(separator: UInt8(ascii: "/")).allSatisfy({ $0.count <= nameLimit }) else {
            throw KeyError(key: key, "\"\(dest)\" is too long a path (at most \(nameLimit) bytes a name)")
        }
        return resolved
    }

    /// `path` lies strictly below `folder`. Compared byte for byte, as the
    /// kernel compares names: String's `hasPrefix` and `==` treat canonically
    /// equivalent text as equal (a Kelvin sign and `K`, `é` and `e` + U+0301)
    /// and a `/` followed by a combining mark as no `/`, so a destination in
    /// another folder, or in the inbox, passed for one inside download_dir.
    public static func isInside(_ path: String, _ folder: String) -> Bool {
        // Compared as bytes in memory: every path the agent opens is asked
        // this, about 20 times a file (a generic walk of the views cost 1,500 instructions a call).
        var path = path, folder = folder
        return path.withUTF8 { path in
            folder.withUTF8 { folder in
                let slash = UInt8(ascii: "/")
                if folder.count == 1, folder[0] == slash { return path.count > 1 && path[0] == slash }
                guard path.count > folder.count + 1, path[folder.count] == slash else { return false }
                return folder.isEmpty || memcmp(path.baseAddress!, folder.baseAddress!, folder.count) == 0
            }
        }
    }

    /// The folder holding `path`, as `NSString.deletingLastPathComponent`
    /// gives it ("/" for "/name", "" for a bare name), without its cost
    /// (about 300 instructions a call, where Foundation's bridging took 16,000):
    /// asked for every file published and every new partial file.
    public static func folder(of path: String) -> String {
        let slash = UInt8(ascii: "/")
        var bytes = path.utf8[...]
        while bytes.count > 1, bytes.last == slash { bytes = bytes.dropLast() }
        guard let last = bytes.lastIndex(of: slash) else { return "" }
        var folder = bytes[..<last]
        while folder.count > 1, folder.last == slash { folder = folder.dropLast() }
        return folder.isEmpty ? "/" : String(decoding: folder, as: UTF8.self)
    }

    /// The same path, byte for byte.
    public static func isSame(_ path: String, _ other: String) -> Bool {
        var path = path, other = other
        return path.withUTF8 { path in
            other.withUTF8 { other in
                path.count == other.count && (path.isEmpty || memcmp(path.baseAddress!, other.baseAddress!, path.count) == 0)
            }
        }
    }
}

public enum InboxRules {
    /// `*.job`, except names still being written or hidden (SPEC §4.1).
    public static func isJobFileName(_ name: String) -> Bool {
        name.hasSuffix(".job") && name.count > 4 && !name.hasPrefix(".")
            && !name.hasSuffix(".tmp") && !name.hasSuffix(".part") && !name.hasSuffix("~")
    }
}

public enum UTF8Text {
    /// Where the first byte that breaks UTF-8 sits, or nil for valid text.
    public static func firstInvalidOffset(_ bytes: [UInt8]) -> Int? {
        var offset = 0
        while offset < bytes.count {
            let lead = bytes[offset]
            let length = lead < 0x80 ? 1 : lead >> 5 == 0b110 ? 2 : lead >> 4 == 0b1110 ? 3 : lead >> 3 == 0b11110 ? 4 : 0
            guard length > 0, offset + length <= bytes.count,
                  String(validating: bytes[offset..<offset + length], as: UTF8.self) != nil else { return offset }
            offset += length
        }
        return nil
    }
}

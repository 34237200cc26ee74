import Foundation

public enum TransferKind: String, Codable, Equatable, Sendable, CaseIterable {
    case download, upload, data, hls
}

/// What to do when `dest` already exists at publish time.
public enum OverwriteMode: String, Codable, Equatable, Sendable, CaseIterable {
    /// Publish beside it as `name.1.ext`, `name.2.ext`, …
    case rename
    case replace
    /// Leave the existing file and finish without downloading.
    case skip
    /// Fail the task.
    case fail
    /// Fetch only if it changed (wget -N, curl -z): the validators the file
    /// was published with go out as If-None-Match / If-Modified-Since, and a
    /// 304 finishes the task `unchanged` with no byte written.
    case update

    /// Whether publishing may put the download in place of a file already
    /// at its path. Otherwise a file that appears there before the rename
    /// (after a crash, the agent may be down for days) is never replaced.
    public var replacesFiles: Bool { self == .replace || self == .update }
}

public enum NotifyMode: String, Codable, Equatable, Sendable, CaseIterable {
    case batch, each, none
}

public struct Header: Codable, Equatable, Sendable {
    public var name: String
    public var value: String
    public init(name: String, value: String) { self.name = name; self.value = value }

    /// Values of these headers are credentials: never printed.
    public var isSecret: Bool { Redaction.isSecretName(name) }

    /// `Name: value`, or `Name: <redacted>` for credentials; control
    /// characters escaped (a server's header must not clear the terminal).
    public var printable: String {
        let shown = redacted
        return Printable.escaping("\(shown.name): \(shown.value)")
    }

    /// Itself, or with the value replaced by `<redacted>` for credentials.
    public var redacted: Header { isSecret ? Header(name: name, value: "<redacted>") : self }

    private static let tokenCharacters = CharacterSet(
        charactersIn: "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

    /// Headers that say where a message ends or how the connection is used
    /// (RFC 9112 §6, RFC 9110 §7.6.1). Sent from a job, `Content-Length: 0`
    /// before a body would make the body a second request to the server.
    public static func isFraming(_ name: String) -> Bool {
        framingNames.contains(name.lowercased())
    }

    private static let framingNames: Set<String> = [
        "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade",
    ]

    /// An RFC 9110 token: what header names and methods are made of.
    public static func isToken(_ text: String) -> Bool {
        !text.isEmpty && text.unicodeScalars.allSatisfy { tokenCharacters.contains($0) }
    }
}

/// Where a job came from, to make intake exactly-once: a file whose identity
/// matches a recorded task was taken already (the agent died before removing
/// it). A new drop with the same content has a new inode/ctime, so a new identity.
public struct JobSource: Codable, Equatable, Sendable {
    public var file: String
    public var identity: String
    public init(file: String, identity: String) { self.file = file; self.identity = identity }

    /// The job came over the RPC (`aria2.addUri`), not from a file in the inbox.
    public var isRPC: Bool { identity.hasPrefix(Self.rpcIdentityPrefix) }
    /// What an RPC job's identity starts with (a job file's is its inode, ctime and digest).
    public static let rpcIdentityPrefix = "rpc:"
}

/// One extra field of a `multipart/form-data` upload (`[form]` in a job).
public struct FormField: Codable, Equatable, Sendable {
    public var name: String
    public var value: String
    public init(name: String, value: String) { self.name = name; self.value = value }
}

/// `output` of an HLS job: a folder with a local playlist, or one file.
public enum HLSOutput: String, Codable, Equatable, Sendable, CaseIterable {
    case directory, file
}

/// The keys only an HLS job has.
public struct HLSOptions: Codable, Equatable, Sendable {
    /// `best`, `worst`, a BANDWIDTH, or `WxH`.
    public var variant: String
    public var output: HLSOutput
    /// Seconds of media to take from a live playlist (required for one).
    public var maxDurationS: Int?
    /// `"default"`, `"none"` or a language: which sound rendition (`HLSRenditionChoice`); nil as `"default"`.
    public var audio: String?
    /// A language: which subtitles rendition; nil: none.
    public var subtitles: String?
    public static let defaultAudio = "default"
    public static let noAudio = "none"
    public init(variant: String = "best", output: HLSOutput = .directory, maxDurationS: Int? = nil,
                audio: String? = nil, subtitles: String? = nil) {
        self.variant = variant; self.output = output; self.maxDurationS = maxDurationS
        self.audio = audio; self.subtitles = subtitles
    }
}

/// A validated transfer: the payload of the `created` event.
///
/// Every task holds one for its whole life, so its size is paid per task:
/// 100,000 queued jobs held 43 MiB of specs when every key was a stored
/// field. The keys most jobs leave unset live in one shared box, absent
/// when all of them are (issue 12).
public struct TaskSpec: Equatable, Sendable {
    // The one-byte fields come last, after the optional's flag byte: each
    // in between the words was padded to 8 bytes (160 bytes, now 136).
    public var url: String
    /// Absolute path the received body is published at. Always set for
    /// downloads; optional for data tasks; nil for uploads (their response
    /// status and headers are recorded, the body is not kept).
    public var dest: String?
    public var priority: Int
    public var headers: [Header]
    public var batch: String?
    public var source: JobSource?
    /// A child task's parent (an HLS segment's playlist task): SPEC §10.
    public var parent: String?
    /// The keys few jobs set, absent while none is.
    private(set) var rare = OutOfLine<Rare>()
    /// Unix epoch milliseconds before which the task does not start.
    public var notBeforeMs: Int64?
    public var kind: TransferKind
    public var overwrite: OverwriteMode
    public var notify: NotifyMode

    struct Rare: OutOfLineFields {
        var sha256: String?
        var md5: String?
        var retries: Int?
        var maxSpeed: Int64?
        var method: String?
        var bodyFile: String?
        var formField: String?
        var form: [FormField] = []
        var byteRange: HLSByteRange?
        var hls: HLSOptions?
        var connections: Int?
        var allowMetered: Bool?
        var upload: UploadOptions?
        var minSpeed: Int64?
        var minSpeedTimeS: Int?
        var nameFromServer: Bool?
    }

    public var sha256: String? { get { rare.box?.fields.sha256 } set { rare.fields.sha256 = newValue } }
    public var md5: String? { get { rare.box?.fields.md5 } set { rare.fields.md5 = newValue } }
    public var retries: Int? { get { rare.box?.fields.retries } set { rare.fields.retries = newValue } }
    /// Bytes per second; nil for no limit.
    public var maxSpeed: Int64? { get { rare.box?.fields.maxSpeed } set { rare.fields.maxSpeed = newValue } }
    /// The request method; nil for the kind's default (GET, or PUT for uploads).
    public var method: String? { get { rare.box?.fields.method } set { rare.fields.method = newValue } }
    /// Absolute path of the request body, streamed from disk (uploads, data tasks).
    public var bodyFile: String? { get { rare.box?.fields.bodyFile } set { rare.fields.bodyFile = newValue } }
    /// Set: the upload is `multipart/form-data` with the file under this field …
    public var formField: String? { get { rare.box?.fields.formField } set { rare.fields.formField = newValue } }
    /// … after these fields.
    public var form: [FormField] { get { rare.box?.fields.form ?? [] } set { rare.fields.form = newValue } }
    /// Only these bytes of the URL's resource (an HLS `#EXT-X-BYTERANGE`).
    public var byteRange: HLSByteRange? { get { rare.box?.fields.byteRange } set { rare.fields.byteRange = newValue } }
    public var hls: HLSOptions? { get { rare.box?.fields.hls } set { rare.fields.hls = newValue } }
    /// Downloads: ranges of the file fetched at once over this many
    /// connections (aria2c -x/-s); nil: the config's `connections`.
    public var connections: Int? { get { rare.box?.fields.connections } set { rare.fields.connections = newValue } }
    /// False: never transfers over a link NetworkManager calls metered; nil: the config's `allow_metered`.
    public var allowMetered: Bool? { get { rare.box?.fields.allowMetered } set { rare.fields.allowMetered = newValue } }
    /// A resumable upload (`protocol = "tus" | "ietf"`); nil for a plain one and for other kinds.
    public var upload: UploadOptions? { get { rare.box?.fields.upload } set { rare.fields.upload = newValue } }
    /// The job's `min_speed` in bytes per second, over the config's; 0 turns
    /// the check off for this task; nil: the config's.
    public var minSpeed: Int64? { get { rare.box?.fields.minSpeed } set { rare.fields.minSpeed = newValue } }
    /// The job's `min_speed_time` in seconds; nil: the config's.
    public var minSpeedTimeS: Int? { get { rare.box?.fields.minSpeedTimeS } set { rare.fields.minSpeedTimeS = newValue } }
    /// True: a download without `dest` is named by its server's answer
    /// (`name_from_server`); `dest` is then only where its partial file goes.
    public var nameFromServer: Bool? { get { rare.box?.fields.nameFromServer } set { rare.fields.nameFromServer = newValue } }

    public init(url: String, kind: TransferKind = .download, dest: String?, sha256: String? = nil,
                md5: String? = nil, priority: Int = 0, overwrite: OverwriteMode = .rename,
                headers: [Header] = [], batch: String? = nil, notify: NotifyMode = .batch,
                retries: Int? = nil, maxSpeed: Int64? = nil, notBeforeMs: Int64? = nil,
                source: JobSource? = nil, method: String? = nil, bodyFile: String? = nil,
                formField: String? = nil, form: [FormField] = [], parent: String? = nil,
                byteRange: HLSByteRange? = nil, hls: HLSOptions? = nil, connections: Int? = nil, allowMetered: Bool? = nil,
                upload: UploadOptions? = nil, minSpeed: Int64? = nil, minSpeedTimeS: Int? = nil, nameFromServer: Bool? = nil) {
        self.url = url; self.kind = kind; self.dest = dest
        self.priority = priority; self.overwrite = overwrite; self.headers = headers
        self.batch = batch; self.notify = notify; self.notBeforeMs = notBeforeMs; self.source = source
        self.parent = parent
        self.rare = OutOfLine(Rare(sha256: sha256, md5: md5, retries: retries, maxSpeed: maxSpeed, method: method, bodyFile: bodyFile,
                         formField: formField, form: form, byteRange: byteRange, hls: hls, connections: connections,
                         allowMetered: allowMetered, upload: upload, minSpeed: minSpeed, minSpeedTimeS: minSpeedTimeS,
                         nameFromServer: nameFromServer))
    }

    public static func == (lhs: TaskSpec, rhs: TaskSpec) -> Bool {
        lhs.url == rhs.url && lhs.kind == rhs.kind && lhs.dest == rhs.dest && lhs.priority == rhs.priority
            && lhs.overwrite == rhs.overwrite && lhs.headers == rhs.headers && lhs.batch == rhs.batch
            && lhs.notify == rhs.notify && lhs.notBeforeMs == rhs.notBeforeMs && lhs.source == rhs.source
            && lhs.parent == rhs.parent && lhs.rare == rhs.rare
    }

    /// The method the request goes out with.
    public var effectiveMethod: String {
        if let method { return method }
        switch kind {
        case .upload: return formField == nil ? "PUT" : "POST"
        case .download, .data, .hls: return "GET"
        }
    }

    /// Only downloads continue from a byte offset; a request with a body, or
    /// a data task's answer, is sent or fetched again from the start.
    public var isResumable: Bool { behaviour.resumes }

    /// The spec as it may be shown: credentials replaced by `<redacted>`.
    public var redacted: TaskSpec {
        var copy = self
        copy.url = Redaction.url(url)
        copy.headers = headers.map(\.redacted)
        return copy
    }
}

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
}

public enum NotifyMode: String, Codable, Equatable, Sendable, CaseIterable {
    case batch, each, none
}

public struct Header: Codable, Equatable, Sendable {
    public var name: String
    public var value: String
    public init(name: String, value: String) { self.name = name; self.value = value }

    /// Values of these headers are credentials: never printed.
    public var isSecret: Bool {
        let lower = name.lowercased()
        return ["authorization", "proxy-authorization", "cookie", "x-api-key"].contains(lower)
            || lower.contains("token") || lower.contains("secret")
    }

    /// `Name: value`, or `Name: <redacted>` for credentials.
    public var printable: String { "\(name): \(isSecret ? "<redacted>" : value)" }
}

/// Where a job came from, to make intake exactly-once: a file whose identity
/// matches a recorded task was taken already (the agent died before removing
/// it). A new drop with the same content has a new inode/ctime, so a new identity.
public struct JobSource: Codable, Equatable, Sendable {
    public var file: String
    public var identity: String
    public init(file: String, identity: String) { self.file = file; self.identity = identity }
}

/// A validated transfer: the payload of the `created` event.
public struct TaskSpec: Codable, Equatable, Sendable {
    public var url: String
    public var kind: TransferKind
    /// Absolute path the finished file is published at.
    public var dest: String
    public var sha256: String?
    public var md5: String?
    public var priority: Int
    public var overwrite: OverwriteMode
    public var headers: [Header]
    public var batch: String?
    public var notify: NotifyMode
    public var retries: Int?
    /// Bytes per second; nil for no limit.
    public var maxSpeed: Int64?
    /// Unix epoch milliseconds before which the task does not start.
    public var notBeforeMs: Int64?
    public var source: JobSource?

    public init(url: String, kind: TransferKind = .download, dest: String, sha256: String? = nil,
                md5: String? = nil, priority: Int = 0, overwrite: OverwriteMode = .rename,
                headers: [Header] = [], batch: String? = nil, notify: NotifyMode = .batch,
                retries: Int? = nil, maxSpeed: Int64? = nil, notBeforeMs: Int64? = nil,
                source: JobSource? = nil) {
        self.url = url; self.kind = kind; self.dest = dest; self.sha256 = sha256; self.md5 = md5
        self.priority = priority; self.overwrite = overwrite; self.headers = headers
        self.batch = batch; self.notify = notify; self.retries = retries; self.maxSpeed = maxSpeed
        self.notBeforeMs = notBeforeMs; self.source = source
    }

    /// The spec as it may be shown: credentials replaced by `<redacted>`.
    public var redacted: TaskSpec {
        var copy = self
        copy.headers = headers.map { $0.isSecret ? Header(name: $0.name, value: "<redacted>") : $0 }
        return copy
    }
}

/// Why a task failed, for code to branch on: the `code` of a `failed`
/// event. Its raw values are the strings logs have always held ("http_404",
/// "disk_full", …), so every log replays unchanged; a code this build does
/// not know (a newer agent's) is kept as it was written.
public enum FailureCode: Hashable, Sendable, CustomStringConvertible {
    // The local machine.
    case diskFull, ioError, localError, logError, readError
    /// The task's attempt could not be set up (curl refused an option, a body file is gone …).
    case cannotStart
    /// Another process writes the partial file.
    case destBusy
    case destExists, destReserved, destUnreachable
    /// The destination the log gives is not one the rules allow (outside download_dir, `..`, …).
    case destRefused
    /// The partial file was swapped or cut under the agent.
    case partChanged
    case checksumMismatch
    // Limits.
    case totalTimeout, retriesExhausted
    // The server's answer.
    case http(Int)
    case curl(Int)
    /// A proxy refused the login, or the connection by its rules.
    case proxyRefused
    case rangeIgnored
    // HLS.
    case badPlaylist, noVariant, separateAudio, maxDurationMissing, playlistUnavailable, noRendition, muxFailed
    case segmentFailed, segmentChanged, cannotJoin, decryptFailed, badKey
    // Resumable uploads.
    case partFailed, bodyUnreadable, bodyChanged, uploadRefused, tooLarge
    /// A code this build does not know, as the log holds it.
    case other(String)

    private static let named: [(FailureCode, String)] = [
        (.diskFull, "disk_full"), (.ioError, "io_error"), (.localError, "local_error"), (.logError, "log_error"),
        (.readError, "read_error"), (.cannotStart, "cannot_start"), (.destBusy, "dest_busy"), (.destExists, "dest_exists"),
        (.destReserved, "dest_reserved"), (.destUnreachable, "dest_unreachable"), (.destRefused, "dest_refused"), (.partChanged, "part_changed"),
        (.checksumMismatch, "checksum_mismatch"), (.totalTimeout, "total_timeout"), (.retriesExhausted, "retries_exhausted"),
        (.rangeIgnored, "range_ignored"), (.badPlaylist, "bad_playlist"), (.noVariant, "no_variant"),
        (.separateAudio, "separate_audio"), (.maxDurationMissing, "max_duration_missing"),
        (.playlistUnavailable, "playlist_unavailable"), (.noRendition, "no_rendition"), (.muxFailed, "mux_failed"), (.segmentFailed, "segment_failed"),
        (.segmentChanged, "segment_changed"), (.cannotJoin, "cannot_join"), (.decryptFailed, "decrypt_failed"),
        (.badKey, "bad_key"), (.partFailed, "part_failed"), (.bodyUnreadable, "body_unreadable"),
        (.bodyChanged, "body_changed"), (.uploadRefused, "upload_refused"), (.tooLarge, "too_large"),
        (.proxyRefused, "proxy_refused"),
    ]
    private static let byName = Dictionary(uniqueKeysWithValues: named.map { ($0.1, $0.0) })

    public init(rawValue: String) {
        if let known = Self.byName[rawValue] {
            self = known
        } else if let status = Self.number(after: "http_", in: rawValue) {
            self = .http(status)
        } else if let code = Self.number(after: "curl_", in: rawValue) {
            self = .curl(code)
        } else {
            self = .other(rawValue)
        }
    }

    public var rawValue: String {
        switch self {
        case .http(let status): "http_\(status)"
        case .curl(let code): "curl_\(code)"
        case .other(let text): text
        default: Self.named.first { $0.0 == self }?.1 ?? "local_error"
        }
    }

    public var description: String { rawValue }

    /// The digits after `prefix`, if that is all there is ("http_404" → 404;
    /// "http_04" stays `other`, so it is written back as it was read).
    private static func number(after prefix: String, in text: String) -> Int? {
        guard text.hasPrefix(prefix) else { return nil }
        let digits = text.dropFirst(prefix.count)
        guard !digits.isEmpty, digits.count <= 9, digits.first != "0" || digits.count == 1,
              digits.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(digits) else { return nil }
        return value
    }
}

extension FailureCode: Codable {
    public init(from decoder: Decoder) throws { self.init(rawValue: try decoder.singleValueContainer().decode(String.self)) }
    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

extension FailureCode {
    /// The server no longer lets this URL in (401, 403, 410): what signed
    /// links answer once they expire. It says nothing against the bytes the
    /// link gave before, so a task failed so keeps them for `retarget` (or
    /// `resume`) to go on from.
    public var isLinkRefused: Bool {
        switch self {
        case .http(401), .http(403), .http(410): true
        default: false
        }
    }

    /// aria2c's exit status for the same failure (its man page, EXIT
    /// STATUS), for `submit --wait`, which answers as aria2c would: a script
    /// written for one reads the other. 1 for what aria2c has no number of its own for.
    public var aria2ExitStatus: Int32 {
        switch self {
        case .http(404), .http(410): 3
        case .http(401), .http(403), .http(407): 24
        case .checksumMismatch: 32
        case .diskFull: 9
        case .destExists: 13
        case .totalTimeout: 2
        case .ioError, .readError, .partChanged: 17
        // Couldn't resolve host; a connection refused, reset or timed out; retries spent on them.
        case .curl(6): 19
        case .curl(7), .curl(28), .curl(52), .curl(55), .curl(56), .retriesExhausted: 6
        case .rangeIgnored: 8
        default: 1
        }
    }
}

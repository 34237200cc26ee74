import Foundation

/// Numbers a server sends, parsed as untrusted input: digits only, no sign,
/// no overflow, and a clear "this is not a number we accept" instead of a
/// trap (SPEC §7). A crash here would repeat on every restart, so nothing
/// in this file may trap on any input; the fuzz target checks that.
public enum HTTPNumbers {
    /// Files larger than this are not real (2^60 bytes, an exbibyte): a
    /// server announcing one is lying, and sums with it could overflow.
    public static let maximumLength: Int64 = 1 << 60

    /// A non-negative decimal integer of at most 18 digits, else nil.
    public static func parseCount<S: StringProtocol>(_ text: S) -> Int64? {
        let digits = text.utf8
        guard !digits.isEmpty, digits.count <= 18 else { return nil }
        var value: Int64 = 0
        for byte in digits {
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            value = value * 10 + Int64(byte - 0x30)
        }
        return value
    }

    /// `Content-Length`: a byte count no larger than `maximumLength`.
    public static func contentLength<S: StringProtocol>(_ text: S) -> Int64? {
        guard let value = parseCount(trimmed(text)), value <= maximumLength else { return nil }
        return value
    }

    /// `Content-Range` (RFC 9110 §14.4): `bytes FIRST-LAST/COMPLETE`,
    /// `bytes FIRST-LAST/*` or `bytes */COMPLETE`.
    public struct ContentRange: Equatable, Sendable {
        /// nil for the unsatisfied form `bytes */COMPLETE` (with a 416).
        public var first: Int64?
        public var last: Int64?
        /// nil when the server does not know (`/*`).
        public var complete: Int64?

        public init(first: Int64?, last: Int64?, complete: Int64?) {
            self.first = first; self.last = last; self.complete = complete
        }
    }

    /// nil when the value is malformed or inconsistent (LAST before FIRST,
    /// or past the end): such a range is never trusted.
    public static func contentRange<S: StringProtocol>(_ text: S) -> ContentRange? {
        let value = trimmed(text)
        guard value.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = value.dropFirst(6).drop { $0 == " " }
        let halves = spec.split(separator: "/", omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        var complete: Int64?
        if halves[1] != "*" {
            guard let length = parseCount(halves[1]), length <= maximumLength else { return nil }
            complete = length
        }
        if halves[0] == "*" {
            guard complete != nil else { return nil }
            return ContentRange(first: nil, last: nil, complete: complete)
        }
        let ends = halves[0].split(separator: "-", omittingEmptySubsequences: false)
        guard ends.count == 2, let first = parseCount(ends[0]), let last = parseCount(ends[1]),
              first <= last, last < (complete ?? maximumLength) else { return nil }
        return ContentRange(first: first, last: last, complete: complete)
    }

    /// What a `Retry-After` asks for.
    public enum RetryAfter: Equatable, Sendable {
        case delayMs(Int64)
        /// Present but neither delay-seconds nor an HTTP-date.
        case unreadable(String)
    }

    /// `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date,
    /// as a delay from `nowMs` (a date in the past means now). A huge delay
    /// is returned as it is, saturated, for the caller to weigh against
    /// the task's deadline; it never overflows.
    public static func retryAfter<S: StringProtocol>(_ text: S, nowMs: Int64) -> RetryAfter {
        let value = trimmed(text)
        if let first = value.utf8.first, first >= 0x30, first <= 0x39 {
            guard value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return .unreadable(String(value.prefix(64))) }
            // Digits only: more than 18 of them is "longer than anyone will wait".
            let seconds = parseCount(value) ?? Int64.max
            return .delayMs(seconds.multipliedReportingOverflow(by: 1000).overflow ? Int64.max : seconds * 1000)
        }
        guard let dateMs = HTTPDate.parseMs(value) else { return .unreadable(String(value.prefix(64))) }
        return .delayMs(max(0, dateMs - nowMs))
    }

    private static func trimmed<S: StringProtocol>(_ text: S) -> Substring {
        let isSpace = { (c: Character) in c == " " || c == "\t" || c == "\r" || c == "\n" }
        var value = Substring(text).drop(while: isSpace)
        while let last = value.last, isSpace(last) { value.removeLast() }
        return value
    }
}

/// HTTP-date (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and
/// asctime forms a recipient must also accept. Always GMT.
public enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// Unix epoch milliseconds, or nil for anything that is not an HTTP-date.
    public static func parseMs<S: StringProtocol>(_ text: S) -> Int64? {
        let words = text.split(whereSeparator: { $0 == " " || $0 == "," }).map { $0.lowercased() }
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT   → [sun, 06, nov, 1994, 08:49:37, gmt]
        // RFC 850:     Sunday, 06-Nov-94 08:49:37 GMT  → [sunday, 06-nov-94, 08:49:37, gmt]
        // asctime:     Sun Nov  6 08:49:37 1994        → [sun, nov, 6, 08:49:37, 1994]
        var day: Int64?, month: Int?, year: Int64?, clock: String?
        if words.count == 6, words[5] == "gmt" {
            day = number(words[1], digits: 2...2); month = months.firstIndex(of: words[2])
            year = number(words[3], digits: 4...4); clock = words[4]
        } else if words.count == 4, words[3] == "gmt" {
            let parts = words[1].split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 3, let twoDigit = number(String(parts[2]), digits: 2...2) else { return nil }
            day = number(String(parts[0]), digits: 2...2); month = months.firstIndex(of: String(parts[1]))
            // RFC 9110: a two-digit year more than 50 years ahead is in the past century.
            year = twoDigit < 70 ? 2000 + twoDigit : 1900 + twoDigit; clock = words[2]
        } else if words.count == 5 {
            month = months.firstIndex(of: words[1]); day = number(words[2], digits: 1...2)
            clock = words[3]; year = number(words[4], digits: 4...4)
        }
        guard let day, let month, let year, let clock else { return nil }
        let hms = clock.split(separator: ":", omittingEmptySubsequences: false).map { number(String($0), digits: 2...2) }
        guard hms.count == 3, let hour = hms[0], let minute = hms[1], let second = hms[2],
              hour < 24, minute < 60, second < 61, (1...31).contains(day), year >= 1900, year <= 9999 else { return nil }
        let days = CivilTime.days(year: year, month: Int64(month + 1), day: day)
        return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000
    }

    private static func number(_ text: String, digits: ClosedRange<Int>) -> Int64? {
        guard digits.contains(text.utf8.count) else { return nil }
        return HTTPNumbers.parseCount(text)
    }
}

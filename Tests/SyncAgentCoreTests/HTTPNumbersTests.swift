import Foundation
import Testing
@testable import SyncAgentCore

/// Numbers and dates as a server sends them: counts, Content-Range,
/// Retry-After in seconds or as an HTTP date, and the calendar under them.
@Suite("HTTP numbers and dates")
struct HTTPNumbersTests {
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
}

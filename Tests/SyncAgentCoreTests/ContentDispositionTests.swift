import Testing
@testable import SyncAgentCore

/// `Content-Disposition` read for a file's name (RFC 6266, RFC 8187):
/// quoted strings and escapes, `charset'lang'` and percent escapes,
/// ISO-8859-1, repeated and unknown parameters, and malformed values.
@Suite("Content-Disposition")
struct ContentDispositionTests {
    @Test(arguments: [
        // (header, type, filename*, filename)
        ("attachment; filename=\"report.pdf\"", "attachment", nil, "report.pdf"),
        ("inline; filename=plain.txt", "inline", nil, "plain.txt"),
        ("ATTACHMENT; FILENAME=\"Up.TXT\"", "attachment", nil, "Up.TXT"),
        ("attachment;filename=\"a;b.txt\";size=3", "attachment", nil, "a;b.txt"),
        ("attachment; filename=\"say \\\"hi\\\".txt\"", "attachment", nil, "say \"hi\".txt"),
        ("attachment; filename=\"back\\\\slash\\x.txt\"", "attachment", nil, "back\\slashx.txt"),
        ("attachment; filename*=UTF-8''%E2%82%AC%20rates.pdf", "attachment", "€ rates.pdf", nil),
        ("attachment; filename*=utf-8'en'%C3%A9t%C3%A9.txt", "attachment", "été.txt", nil),
        ("attachment; filename*=iso-8859-1'de'%E4rger.txt", "attachment", "ärger.txt", nil),
        ("attachment; filename*=\"UTF-8''quoted%20ext.txt\"", "attachment", "quoted ext.txt", nil),
        ("attachment; filename=\"fallback.txt\"; filename*=UTF-8''%E6%97%A5%E6%9C%AC.txt", "attachment", "日本.txt", "fallback.txt"),
        ("attachment; filename*=UTF-8''first.txt; filename=\"second.txt\"", "attachment", "first.txt", "second.txt"),
        ("attachment; filename=\"one.txt\"; filename=\"two.txt\"", "attachment", nil, "one.txt"),
        ("attachment; name=\"field\"; creation-date=\"Wed, 12 Feb 1997 16:29:51 -0500\"; filename=x.bin", "attachment", nil, "x.bin"),
        ("filename=\"no-type.txt\"", nil, nil, "no-type.txt"),
        ("attachment; filename=my file name.txt ; other=1", "attachment", nil, "my file name.txt"),
        ("attachment", "attachment", nil, nil),
        ("", nil, nil, nil),
    ] as [(String, String?, String?, String?)])
    func readsTheHeader(header: String, type: String?, extended: String?, plain: String?) {
        let parsed = ContentDisposition.parse(header)
        #expect(parsed.type == type)
        #expect(parsed.extendedFileName == extended)
        #expect(parsed.fileName == plain)
        #expect(parsed.name == (extended ?? plain))
    }

    @Test(arguments: [
        "attachment; filename*=UTF-8''%E2%82",          // cut inside a UTF-8 sequence
        "attachment; filename*=UTF-8''%zz.txt",         // not hex
        "attachment; filename*=UTF-8''trail%4",         // a % without its two digits
        "attachment; filename*=koi8-r''%C1.txt",        // a charset not read here
        "attachment; filename*=noquotes.txt",           // no charset'' part
        "attachment; filename*=us-ascii''%E9.txt",      // not ASCII
        "attachment; filename*=UTF-8''%FF%FE.txt",      // not UTF-8
    ])
    func anExtendedNameThatCannotBeDecodedIsNone(header: String) {
        #expect(ContentDisposition.parse(header).extendedFileName == nil)
    }

    @Test func anUndecodableExtendedNameGivesWayToThePlainOne() {
        let parsed = ContentDisposition.parse("attachment; filename*=UTF-8''%C3; filename=\"plain.txt\"")
        #expect(parsed.name == "plain.txt")
    }

    @Test(arguments: [
        "attachment; filename=\"never closed.txt",
        "attachment; ; ;; filename",
        "attachment; =x; filename=",
        "attachment; filename==\"x\"",
        ";;;",
        "\"\"\"",
        "attachment; filename*=''",
        "attachment; filename*='",
        String(repeating: "a; ", count: 3000),
        String(repeating: "\\", count: 500),
    ])
    func malformedValuesNeverTrap(header: String) {
        let parsed = ContentDisposition.parse(header)
        _ = parsed.name
    }

    @Test func anUnclosedQuoteRunsToTheEnd() {
        #expect(ContentDisposition.parse("attachment; filename=\"never closed.txt").fileName == "never closed.txt")
    }

    @Test func plainBytesThatAreNotUTF8AreISO88591() {
        let header = Array("attachment; filename=\"caf".utf8) + [0xE9] + Array(".txt\"".utf8)
        #expect(ContentDisposition.parse(header).fileName == "café.txt")
        let utf8 = Array("attachment; filename=\"café.txt\"".utf8)
        #expect(ContentDisposition.parse(utf8).fileName == "café.txt")
    }
}

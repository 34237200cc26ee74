import Foundation
import Testing
@testable import SyncAgentCore

@Suite("TOML parser")
struct TOMLTests {
    @Test func everyValueKind() throws {
        let table = try TOML.parse(#"""
            # a comment
            basic = "tab\t quote\" unicode \u00e9 \U0001F600"
            literal = 'C:\path\no-escapes'
            multi = """
            first \
              second"""
            raw = '''
            line one
            line two'''
            int = 1_000
            hex = 0xff
            negative = -42
            float = 6.5e-1
            yes = true
            no = false
            instant = 2026-11-22T03:00:00Z
            offset = 2026-11-22T04:30:00.250+01:30
            spaced = 1979-05-27 07:32:00Z
            local = 2026-11-22
            list = [ 1, 2,
                     3, ]  # trailing comma
            inline = { name = "x", nested.deep = 1 }
            "quoted key" = 1
            dotted.key = "v"
            [headers]
            Authorization = "Bearer abc"
            [a.b]
            c = 1
            """#)
        #expect(table["basic"] == .string("tab\t quote\" unicode é 😀"))
        #expect(table["literal"] == .string(#"C:\path\no-escapes"#))
        #expect(table["multi"] == .string("first second"))
        #expect(table["raw"] == .string("line one\nline two"))
        #expect(table["int"] == .integer(1000))
        #expect(table["hex"] == .integer(255))
        #expect(table["negative"] == .integer(-42))
        #expect(table["float"] == .float(0.65))
        #expect(table["yes"] == .boolean(true))
        #expect(table["no"] == .boolean(false))
        #expect(table["instant"] == .instant(1_795_316_400_000))
        #expect(table["offset"] == .instant(1_795_316_400_250))
        #expect(table["spaced"] == .instant(296_638_320_000))
        #expect(table["local"] == .local("2026-11-22"))
        #expect(table["list"] == .array([.integer(1), .integer(2), .integer(3)]))
        guard case .table(let inline)? = table["inline"], case .table(let nested)? = inline["nested"] else {
            Issue.record("inline table missing"); return
        }
        #expect(inline["name"] == .string("x"))
        #expect(nested["deep"] == .integer(1))
        #expect(table["quoted key"] == .integer(1))
        guard case .table(let dotted)? = table["dotted"], case .table(let headers)? = table["headers"],
              case .table(let a)? = table["a"], case .table(let b)? = a["b"] else { Issue.record("tables missing"); return }
        #expect(dotted["key"] == .string("v"))
        #expect(headers["Authorization"] == .string("Bearer abc"))
        #expect(b["c"] == .integer(1))
        #expect(table.keys.first == "basic")
    }

    @Test(arguments: [
        ("a = 1\na = 2", "key \"a\" is defined twice at line 2, column 1"),
        ("[t]\n[t]", "table [t] is defined twice at line 2, column 4"),
        ("a = \"open", "unterminated string at line 1, column 5"),
        ("a = 1 b = 2", "expected the end of the line, found 'b' at line 1, column 7"),
        ("a =", "expected a value, found the end of the file at line 1, column 4"),
        ("a = 01", "expected a value, found 01 at line 1, column 5"),
        ("a = \"\\q\"", "invalid escape \\q at line 1, column 7"),
        ("a = [1, 2", "expected ',' or ']' in the array, found the end of the file at line 1, column 10"),
        ("a = 1\na.b = 2", "key \"a\" is already a value, not a table at line 2, column 1"),
        ("t = { x = 1 }\nt.y = 2", "cannot add keys to the inline table t at line 2, column 1"),
        ("[[jobs]]", "arrays of tables ([[…]]) are not supported at line 1, column 1"),
        ("= 1", "expected a key, found '=' at line 1, column 1"),
    ])
    func errorsSayWhatAndWhere(_ text: String, _ message: String) {
        #expect(throws: TOMLSyntaxError.self) { try TOML.parse(text) }
        do { _ = try TOML.parse(text) } catch { #expect("\(error)" == message) }
    }

    @Test func emptyDocumentAndCRLF() throws {
        #expect(try TOML.parse("").keys.isEmpty)
        #expect(try TOML.parse("a = 1\r\nb = \"x\"\r\n")["b"] == .string("x"))
    }
}

/// Issue 15: what the official TOML 1.0 suite calls invalid is invalid here
/// too — each class with the line and column of the fault.
@Suite("TOML 1.0 strictness")
struct TOMLStrictnessTests {
    @Test(arguments: [
        // A table defined twice: by a header, by dotted keys, or as an inline table.
        ("[fruit]\napple.color = \"red\"\n[fruit.apple]", "table [fruit.apple] is defined twice at line 3, column 14"),
        ("[a.b.c]\nz = 9\n[a]\nb.c.t = 1", "table [a.b.c] is defined twice at line 4, column 1"),
        ("t = { x = 1 }\n[t.y]", "table [t.y] is defined twice at line 2, column 6"),
        ("a = { b = { c = 1 }, b.d = 2 }", "cannot add keys to the inline table b at line 1, column 22"),
        ("[headers]\nA = \"1\"\n[headers]\nB = \"2\"", "table [headers] is defined twice at line 3, column 10"),
        ("url = \"http://a\"\nurl = \"http://b\"", "key \"url\" is defined twice at line 2, column 1"),
        // Dates and times that do not exist.
        ("a = 2021-02-30", "2021-02-30 is not a valid date or time at line 1, column 5"),
        ("a = 2023-02-29", "2023-02-29 is not a valid date or time at line 1, column 5"),
        ("a = 25:00:00", "25:00:00 is not a valid date or time at line 1, column 5"),
        ("a = 2021-01-01T23:60:00Z", "2021-01-01T23:60:00Z is not a valid date or time at line 1, column 5"),
        ("a = 2021-01-01T10:00:00+24:00", "2021-01-01T10:00:00+24:00 is not a valid date or time at line 1, column 5"),
        ("a = 2021-01-01T10:00:00-01:60", "2021-01-01T10:00:00-01:60 is not a valid date or time at line 1, column 5"),
        // Digits of other scripts are no digits of a date (they crashed the agent in a loop).
        ("a = 1\u{662}\u{663}\u{664}-01-01", "expected a value, found 1\u{662}\u{663}\u{664}-01-01 at line 1, column 5"),
        ("a = 12:3\u{664}:00", "expected a value, found 12:3\u{664}:00 at line 1, column 5"),
        ("a = 2021-01-01T10:00:0\u{664}Z", "2021-01-01T10:00:0\u{664}Z is not a valid date or time at line 1, column 5"),
        ("a = 2021-01-01T10:00:00.Z", "2021-01-01T10:00:00.Z is not a valid date or time at line 1, column 5"),
        ("a = 1.5\u{664}", "expected a value, found 1.5\u{664} at line 1, column 5"),
        // Control characters in comments and strings.
        ("a = 1 # del \u{7F}", "control character U+007F in a comment at line 1, column 13"),
        ("# bare \r cr", "control character U+000D in a comment at line 1, column 8"),
        ("a = 'nul \u{0} here'", "control character U+0000 in a string at line 1, column 10"),
        ("a = '''x\ry'''", "control character U+000D in a string at line 1, column 9"),
        ("a = \"\"\"x\u{7F}y\"\"\"", "control character U+007F in a string at line 1, column 9"),
        // Floats TOML does not have.
        ("a = .5", "expected a value, found .5 at line 1, column 5"),
        ("a = +.5", "expected a value, found +.5 at line 1, column 5"),
        ("a = 01.5", "expected a value, found 01.5 at line 1, column 5"),
        ("a = 1_e2", "expected a value, found 1_e2 at line 1, column 5"),
        ("a = 1e_2", "expected a value, found 1e_2 at line 1, column 5"),
        ("a = 1._5", "expected a value, found 1._5 at line 1, column 5"),
    ])
    func invalidDocumentsAreRejected(_ text: String, _ message: String) {
        do {
            let table = try TOML.parse(text)
            Issue.record("accepted: \(table)")
        } catch {
            #expect("\(error)" == message)
        }
    }

    @Test func validDocumentsStillParse() throws {
        let table = try TOML.parse("""
            leap = 2024-02-29
            second = 2016-12-31T23:59:60Z
            east = 2021-01-01T10:00:00+23:59
            floats = [1e06, +1.5, -0.0, 1_000.5e1_0, 0e0, 3.14_15]
            [fruit]
            apple.color = "red"
            [fruit.apple.texture]
            smooth = true
            """)
        #expect(table["leap"] == .local("2024-02-29"))
        #expect(try TOML.parse("\u{FEFF}a = 1")["a"] == .integer(1))
        #expect(table["floats"] == .array([.float(1e6), .float(1.5), .float(-0.0), .float(1000.5e10), .float(0), .float(3.1415)]))
        guard case .table(let fruit)? = table["fruit"], case .table(let apple)? = fruit["apple"],
              case .table(let texture)? = apple["texture"] else { Issue.record("tables missing"); return }
        #expect(texture["smooth"] == .boolean(true))
    }

    /// TOML truncates a fraction it cannot hold (found by the adversary: 17 nines rounded to the next second).
    @Test func aLongFractionIsTruncatedToTheMillisecond() throws {
        let table = try TOML.parse("a = 2026-11-22T03:00:00.99999999999999999Z\nb = 2026-11-22T03:00:00.5Z\nc = 2026-11-22T03:00:00.0409Z")
        #expect(table["a"] == .instant(1_795_316_400_999))
        #expect(table["b"] == .instant(1_795_316_400_500))
        #expect(table["c"] == .instant(1_795_316_400_040))
    }

    @Test func textThatIsNotUTF8IsNamedWithItsOffset() throws {
        #expect(UTF8Text.firstInvalidOffset(Array("héllo".utf8)) == nil)
        #expect(UTF8Text.firstInvalidOffset([0x61, 0x62, 0xE9, 0x63]) == 2)
        #expect(UTF8Text.firstInvalidOffset([0x61, 0xE2, 0x82]) == 1)
        #expect(throws: KeyError(key: nil, "the job file is not UTF-8 text (the first bad byte is at offset 11)")) {
            try JobParser(downloadDir: "/dl").parse(Array("url = \"http".utf8) + [0xFF] + Array("\"\n".utf8))
        }
    }
}

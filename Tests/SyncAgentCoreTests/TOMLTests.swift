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

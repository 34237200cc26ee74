import Foundation

/// A TOML value. Job and config files are TOML 1.0; this parser covers the
/// language (tables, dotted keys, inline tables, arrays, every string form,
/// integers, floats, booleans, date-times) except arrays of tables, which no
/// syncagent file uses. It replaces TOMLKit 0.6.0, whose tables are never
/// freed: a resident agent taking jobs all day must not grow with each one.
public indirect enum TOMLValue: Equatable, Sendable {
    case string(String)
    case integer(Int)
    case float(Double)
    case boolean(Bool)
    /// An offset date-time, as Unix epoch milliseconds.
    case instant(Int64)
    /// A local date, time or date-time (no offset), as written.
    case local(String)
    case array([TOMLValue])
    case table(TOMLTable)

    var typeName: String {
        switch self {
        case .string: "a string"
        case .integer: "an integer"
        case .float: "a number with a fraction"
        case .boolean: "true or false"
        case .instant: "a date-time"
        case .local: "a date or time without a time zone"
        case .array: "an array"
        case .table: "a table"
        }
    }
}

/// A table: keys in the order written.
public struct TOMLTable: Equatable, Sendable {
    public private(set) var keys: [String] = []
    private var values: [String: TOMLValue] = [:]

    public init() {}

    public subscript(key: String) -> TOMLValue? { values[key] }

    mutating func set(_ key: String, _ value: TOMLValue) {
        if values.updateValue(value, forKey: key) == nil { keys.append(key) }
    }
}

public struct TOMLSyntaxError: Error, Equatable, CustomStringConvertible {
    public var message: String
    public var line: Int
    public var column: Int
    public var description: String { "\(message) at line \(line), column \(column)" }
}

public enum TOML {
    public static func parse(_ text: String) throws -> TOMLTable {
        var bytes = Array(text.utf8)
        // A byte order mark may open the file (editors on other systems write one).
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        var parser = TOMLParser(bytes)
        return try parser.document()
    }

    /// A TOML basic string with the escapes TOML requires.
    public static func quoted(_ value: String) -> String {
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    out += String(format: "\\u%04X", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}

private struct TOMLParser {
    private let bytes: [UInt8]
    private var index = 0
    private var root = TOMLTable()
    /// Tables created by a `[header]` (may not be opened twice, nor extended
    /// by dotted keys from elsewhere), by dotted keys (may not get a
    /// `[header]` of their own) or by an inline table (may not be extended).
    private var explicitTables: Set<[String]> = []
    private var dottedTables: Set<[String]> = []
    private var closedTables: Set<[String]> = []

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    // MARK: Positions and errors

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }
    private func peek(_ offset: Int) -> UInt8? { index + offset < bytes.count ? bytes[index + offset] : nil }

    private func error(_ message: String, at position: Int? = nil) -> TOMLSyntaxError {
        let upTo = bytes[..<min(position ?? index, bytes.count)]
        let line = upTo.filter { $0 == 0x0A }.count + 1
        let lineStart = upTo.lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
        let column = String(decoding: bytes[lineStart..<min(position ?? index, bytes.count)], as: UTF8.self).count + 1
        return TOMLSyntaxError(message: message, line: line, column: column)
    }

    private func describeCurrent() -> String {
        guard let byte = current else { return "the end of the file" }
        if byte == 0x0A { return "the end of the line" }
        return "'\(String(decoding: [byte], as: UTF8.self))'"
    }

    private mutating func skipSpaces() {
        while let byte = current, byte == 0x20 || byte == 0x09 { index += 1 }
    }

    private mutating func skipComment() throws {
        guard current == UInt8(ascii: "#") else { return }
        while let byte = current, byte != 0x0A {
            if isForbiddenControl(byte) { throw error("control character \(Self.hex(byte)) in a comment") }
            index += 1
        }
    }

    /// Control characters TOML allows nowhere in comments and strings: all
    /// but tab, and CR unless it starts a CRLF (LF is the caller's business).
    private func isForbiddenControl(_ byte: UInt8) -> Bool {
        (byte < 0x20 && byte != 0x09 && byte != 0x0A && !(byte == 0x0D && peek(1) == 0x0A)) || byte == 0x7F
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits = String(byte, radix: 16, uppercase: true)
        return "U+" + String(repeating: "0", count: 4 - digits.count) + digits
    }

    /// Spaces, then a comment, then the end of the line (or file).
    private mutating func endOfLine() throws {
        skipSpaces()
        try skipComment()
        if current == 0x0D, peek(1) == 0x0A { index += 1 }
        guard current == nil || current == 0x0A else { throw error("expected the end of the line, found \(describeCurrent())") }
        if current == 0x0A { index += 1 }
    }

    /// Whitespace, newlines and comments (inside arrays, between statements).
    private mutating func skipBlank() throws {
        while true {
            skipSpaces()
            try skipComment()
            if current == 0x0A { index += 1; continue }
            if current == 0x0D, peek(1) == 0x0A { index += 2; continue }
            return
        }
    }

    // MARK: Document

    mutating func document() throws -> TOMLTable {
        var tablePath: [String] = []
        while true {
            try skipBlank()
            guard let byte = current else { return root }
            if byte == UInt8(ascii: "[") {
                if peek(1) == UInt8(ascii: "[") { throw error("arrays of tables ([[…]]) are not supported") }
                index += 1
                skipSpaces()
                let path = try key()
                skipSpaces()
                guard current == UInt8(ascii: "]") else { throw error("expected ']' after the table name, found \(describeCurrent())") }
                index += 1
                guard explicitTables.insert(path).inserted, !closedTables.contains(where: { path.starts(with: $0) }),
                      !dottedTables.contains(path) else {
                    throw error("table [\(path.joined(separator: "."))] is defined twice")
                }
                try ensureTable(path, at: index)
                tablePath = path
                try endOfLine()
            } else {
                let pair = try keyValue()
                // Dotted keys define tables below the current one; they may
                // not reach into a table a [header] defined elsewhere.
                for depth in 1..<max(pair.path.count, 1) {
                    let table = tablePath + pair.path.prefix(depth)
                    if explicitTables.contains(table) {
                        throw error("table [\(table.joined(separator: "."))] is defined twice", at: pair.start)
                    }
                    dottedTables.insert(table)
                }
                try assign(tablePath + pair.path, pair.value, at: pair.start)
                try endOfLine()
            }
        }
    }

    /// Makes sure every table along `path` exists (implicitly created ones may be reopened).
    private mutating func ensureTable(_ path: [String], at position: Int) throws {
        let here = error("", at: position)
        var table = root
        try table.update(path: path[...]) { _ in } orFail: { key in
            TOMLSyntaxError(message: "key \"\(key)\" is already a value, not a table", line: here.line, column: here.column)
        }
        root = table
    }

    private mutating func assign(_ path: [String], _ newValue: TOMLValue, at position: Int) throws {
        let tablePath = Array(path.dropLast())
        if closedTables.contains(where: { tablePath.starts(with: $0) }) {
            throw error("cannot add keys to the inline table \(tablePath.joined(separator: "."))", at: position)
        }
        var document = root
        try document.insert(newValue, at: path, reportingAt: error("", at: position))
        root = document
        if case .table = newValue { closedTables.insert(path) }
    }

    /// `key = value`, for the document and inline tables alike; `start` locates errors.
    private mutating func keyValue() throws -> (path: [String], value: TOMLValue, start: Int) {
        let start = index
        let path = try key()
        skipSpaces()
        guard current == UInt8(ascii: "=") else { throw error("expected '=' after the key, found \(describeCurrent())") }
        index += 1
        skipSpaces()
        return (path, try value(), start)
    }

    // MARK: Keys

    private mutating func key() throws -> [String] {
        var parts = [try simpleKey()]
        while true {
            skipSpaces()
            guard current == UInt8(ascii: ".") else { return parts }
            index += 1
            skipSpaces()
            parts.append(try simpleKey())
        }
    }

    private mutating func simpleKey() throws -> String {
        switch current {
        case UInt8(ascii: "\""): return try basicString()
        case UInt8(ascii: "'"): return try literalString()
        default:
            let start = index
            while let byte = current, isBareKeyByte(byte) { index += 1 }
            guard index > start else { throw error("expected a key, found \(describeCurrent())") }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }
    }

    private func isBareKeyByte(_ byte: UInt8) -> Bool {
        (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
            || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
    }

    // MARK: Values

    private mutating func value() throws -> TOMLValue {
        guard let byte = current else { throw error("expected a value, found the end of the file") }
        switch byte {
        case UInt8(ascii: "\""):
            if peek(1) == UInt8(ascii: "\""), peek(2) == UInt8(ascii: "\"") { return .string(try multilineBasicString()) }
            return .string(try basicString())
        case UInt8(ascii: "'"):
            if peek(1) == UInt8(ascii: "'"), peek(2) == UInt8(ascii: "'") { return .string(try multilineLiteralString()) }
            return .string(try literalString())
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "{"): return try inlineTable()
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            if match("true") { return .boolean(true) }
            if match("false") { return .boolean(false) }
            throw error("expected a value, found \(describeCurrent())")
        default:
            return try numberOrDate()
        }
    }

    private mutating func match(_ word: String) -> Bool {
        let utf8 = Array(word.utf8)
        guard index + utf8.count <= bytes.count, Array(bytes[index..<index + utf8.count]) == utf8 else { return false }
        if let next = peek(utf8.count), isBareKeyByte(next) { return false }
        index += utf8.count
        return true
    }

    private mutating func array() throws -> TOMLValue {
        index += 1
        var elements: [TOMLValue] = []
        while true {
            try skipBlank()
            if current == UInt8(ascii: "]") { index += 1; return .array(elements) }
            elements.append(try value())
            try skipBlank()
            if current == UInt8(ascii: ",") { index += 1; continue }
            guard current == UInt8(ascii: "]") else { throw error("expected ',' or ']' in the array, found \(describeCurrent())") }
            index += 1
            return .array(elements)
        }
    }

    private mutating func inlineTable() throws -> TOMLValue {
        index += 1
        var table = TOMLTable()
        // Inline tables inside this one are closed too: `{ a = {}, a.b = 1 }` is an error.
        var closed: [[String]] = []
        skipSpaces()
        if current == UInt8(ascii: "}") { index += 1; return .table(table) }
        while true {
            skipSpaces()
            let pair = try keyValue()
            if let inline = closed.first(where: { Array(pair.path.dropLast()).starts(with: $0) }) {
                throw error("cannot add keys to the inline table \(inline.joined(separator: "."))", at: pair.start)
            }
            if case .table = pair.value { closed.append(pair.path) }
            try table.insert(pair.value, at: pair.path, reportingAt: error("", at: pair.start))
            skipSpaces()
            if current == UInt8(ascii: ",") { index += 1; continue }
            guard current == UInt8(ascii: "}") else { throw error("expected ',' or '}' in the inline table, found \(describeCurrent())") }
            index += 1
            return .table(table)
        }
    }

    // MARK: Strings

    private mutating func basicString() throws -> String {
        let start = index
        index += 1
        var out: [UInt8] = []
        while true {
            guard let byte = current, byte != 0x0A else { throw error("unterminated string", at: start) }
            index += 1
            switch byte {
            case UInt8(ascii: "\""): return try utf8(out, from: start)
            case UInt8(ascii: "\\"): out += try escape()
            default:
                if byte < 0x20 && byte != 0x09 || byte == 0x7F { throw error("control character \(Self.hex(byte)) in a string", at: index - 1) }
                out.append(byte)
            }
        }
    }

    /// Skips a `"""` or `\'\'\'` opener and a newline right after it.
    private mutating func openMultiline() {
        index += 3
        if current == 0x0A { index += 1 } else if current == 0x0D, peek(1) == 0x0A { index += 2 }
    }

    /// At three `quote`s, consumes the closer; up to two more quotes before
    /// it belong to the content and are appended to `out`.
    private mutating func closesMultiline(_ quote: UInt8, into out: inout [UInt8]) -> Bool {
        guard current == quote, peek(1) == quote, peek(2) == quote else { return false }
        index += 3
        for _ in 0..<2 where current == quote { out.append(quote); index += 1 }
        return true
    }

    private mutating func multilineBasicString() throws -> String {
        let start = index
        openMultiline()
        var out: [UInt8] = []
        while true {
            guard let byte = current else { throw error("unterminated multi-line string", at: start) }
            if closesMultiline(UInt8(ascii: "\""), into: &out) { return try utf8(out, from: start) }
            index += 1
            if byte == UInt8(ascii: "\\") {
                // A backslash at the end of a line trims the newline and following whitespace.
                var probe = index
                while probe < bytes.count, bytes[probe] == 0x20 || bytes[probe] == 0x09 { probe += 1 }
                if probe < bytes.count, bytes[probe] == 0x0A || (bytes[probe] == 0x0D && probe + 1 < bytes.count && bytes[probe + 1] == 0x0A) {
                    index = probe
                    while let next = current, next == 0x20 || next == 0x09 || next == 0x0A || next == 0x0D { index += 1 }
                    continue
                }
                out += try escape()
                continue
            }
            if isForbiddenControl(byte) { throw error("control character \(Self.hex(byte)) in a string", at: index - 1) }
            out.append(byte)
        }
    }

    private mutating func literalString() throws -> String {
        let start = index
        index += 1
        let contentStart = index
        while let byte = current, byte != UInt8(ascii: "'") {
            if byte == 0x0A { break }
            if byte < 0x20 && byte != 0x09 || byte == 0x7F { throw error("control character \(Self.hex(byte)) in a string") }
            index += 1
        }
        guard current == UInt8(ascii: "'") else { throw error("unterminated string", at: start) }
        let content = Array(bytes[contentStart..<index])
        index += 1
        return try utf8(content, from: start)
    }

    private mutating func multilineLiteralString() throws -> String {
        let start = index
        openMultiline()
        var out: [UInt8] = []
        while true {
            guard let byte = current else { throw error("unterminated multi-line string", at: start) }
            if closesMultiline(UInt8(ascii: "'"), into: &out) { return try utf8(out, from: start) }
            if isForbiddenControl(byte) { throw error("control character \(Self.hex(byte)) in a string") }
            out.append(byte)
            index += 1
        }
    }

    private mutating func escape() throws -> [UInt8] {
        guard let code = current else { throw error("unterminated escape") }
        index += 1
        switch code {
        case UInt8(ascii: "b"): return [0x08]
        case UInt8(ascii: "t"): return [0x09]
        case UInt8(ascii: "n"): return [0x0A]
        case UInt8(ascii: "f"): return [0x0C]
        case UInt8(ascii: "r"): return [0x0D]
        case UInt8(ascii: "e"): return [0x1B]
        case UInt8(ascii: "\""): return [0x22]
        case UInt8(ascii: "\\"): return [0x5C]
        case UInt8(ascii: "u"), UInt8(ascii: "U"):
            let count = code == UInt8(ascii: "u") ? 4 : 8
            guard index + count <= bytes.count,
                  let scalarValue = UInt32(String(decoding: bytes[index..<index + count], as: UTF8.self), radix: 16),
                  let scalar = Unicode.Scalar(scalarValue) else {
                throw error("invalid \\\(String(decoding: [code], as: UTF8.self)) escape")
            }
            index += count
            return Array(String(Character(scalar)).utf8)
        default:
            index -= 1
            throw error("invalid escape \\\(String(decoding: [code], as: UTF8.self))")
        }
    }

    private func utf8(_ raw: [UInt8], from start: Int) throws -> String {
        guard let text = String(validating: raw, as: UTF8.self) else { throw error("string is not valid UTF-8", at: start) }
        return text
    }

    // MARK: Numbers and dates

    private mutating func numberOrDate() throws -> TOMLValue {
        let start = index
        while let byte = current, !(byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
                                      || byte == UInt8(ascii: ",") || byte == UInt8(ascii: "]")
                                      || byte == UInt8(ascii: "}") || byte == UInt8(ascii: "#")) {
            index += 1
        }
        // A date and a time may be separated by one space: 1979-05-27 07:32:00Z.
        if current == 0x20, index - start == 10, bytes[start + 4] == UInt8(ascii: "-"),
           let next = peek(1), next >= 0x30, next <= 0x39 {
            index += 1
            while let byte = current, !(byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
                                          || byte == UInt8(ascii: ",") || byte == UInt8(ascii: "]")
                                          || byte == UInt8(ascii: "}") || byte == UInt8(ascii: "#")) { index += 1 }
        }
        let token = String(decoding: bytes[start..<index], as: UTF8.self)
        guard !token.isEmpty else { throw error("expected a value, found \(describeCurrent())") }
        if let date = Self.dateTime(token) { return date }
        if let integer = Self.integer(token) { return .integer(integer) }
        if let float = Self.float(token) { return .float(float) }
        if TokenScanner(token).startsLikeDateOrTime {
            throw error("\(token) is not a valid date or time", at: start)
        }
        throw error("expected a value, found \(token)", at: start)
    }

    private static func integer(_ token: String) -> Int? {
        var text = Substring(token)
        var radix = 10
        for (prefix, base) in [("0x", 16), ("0o", 8), ("0b", 2)] where text.hasPrefix(prefix) {
            radix = base
            text = text.dropFirst(2)
        }
        if text.isEmpty || text.hasPrefix("_") || text.hasSuffix("_") || text.contains("__") { return nil }
        let digits = text.replacingOccurrences(of: "_", with: "")
        if radix == 10 {
            let unsigned = digits.hasPrefix("+") || digits.hasPrefix("-") ? digits.dropFirst() : Substring(digits)
            if unsigned.count > 1 && unsigned.hasPrefix("0") { return nil }
        } else if digits.hasPrefix("+") || digits.hasPrefix("-") {
            return nil
        }
        return Int(digits, radix: radix)
    }

    private static func float(_ token: String) -> Double? {
        switch token {
        case "inf", "+inf": return .infinity
        case "-inf": return -.infinity
        case "nan", "+nan", "-nan": return .nan
        default: break
        }
        guard token.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }), TokenScanner(token).isFloat else { return nil }
        return Double(token.replacingOccurrences(of: "_", with: ""))
    }

    /// Offset date-times become instants; local dates and times stay as written.
    private static func dateTime(_ token: String) -> TOMLValue? {
        var scanner = TokenScanner(token)
        if let time = scanner.time(), scanner.atEnd { return time.isValid ? .local(token) : nil }
        scanner = TokenScanner(token)
        guard let year = scanner.digits(4), scanner.take("-"), let month = scanner.digits(2), scanner.take("-"),
              let day = scanner.digits(2) else { return nil }
        // No 30 February: a date that does not exist is an error, never rolled over.
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let daysInMonth = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...12).contains(month), (1...daysInMonth[month - 1]).contains(day) else { return nil }
        if scanner.atEnd { return .local(token) }
        guard scanner.take("T") || scanner.take("t") || scanner.take(" "), let time = scanner.time(), time.isValid else { return nil }
        if scanner.atEnd { return .local(token) }
        var offsetMinutes = 0
        if !(scanner.take("Z") || scanner.take("z")) {
            let sign = scanner.take("-") ? -1 : scanner.take("+") ? 1 : 0
            guard sign != 0, let hours = scanner.digits(2), scanner.take(":"), let minutes = scanner.digits(2),
                  hours < 24, minutes < 60 else { return nil }
            offsetMinutes = sign * (hours * 60 + minutes)
        }
        guard scanner.atEnd else { return nil }
        let days = CivilTime.days(year: Int64(year), month: Int64(month), day: Int64(day))
        let seconds = days * 86_400 + Int64(time.hour * 3600 + time.minute * 60 + time.second) - Int64(offsetMinutes * 60)
        return .instant(seconds * 1000 + Int64(time.milliseconds))
    }
}

private extension TOMLTable {
    /// Sets `value` at the dotted `path`, creating tables along it. Errors
    /// take their line and column from `here`.
    mutating func insert(_ value: TOMLValue, at path: [String], reportingAt here: TOMLSyntaxError) throws {
        var failure: TOMLSyntaxError?
        try update(path: path.dropLast()[...]) { table in
            if table[path.last!] != nil {
                failure = TOMLSyntaxError(message: "key \"\(path.joined(separator: "."))\" is defined twice", line: here.line, column: here.column)
                return
            }
            table.set(path.last!, value)
        } orFail: { key in
            TOMLSyntaxError(message: "key \"\(key)\" is already a value, not a table", line: here.line, column: here.column)
        }
        if let failure { throw failure }
    }

    /// Walks (creating as needed) the tables along `path` and lets `body` change the last one.
    mutating func update(path: ArraySlice<String>, _ body: (inout TOMLTable) -> Void,
                         orFail failure: (String) -> TOMLSyntaxError) throws {
        guard let first = path.first else {
            body(&self)
            return
        }
        var child: TOMLTable
        switch self[first] {
        case nil: child = TOMLTable()
        case .table(let existing): child = existing
        default: throw failure(first)
        }
        try child.update(path: path.dropFirst(), body, orFail: failure)
        if self[first] == nil { set(first, .table(child)) } else { values[first] = .table(child) }
    }
}

/// Reads the shapes TOML numbers, dates and times take from a token's bytes.
/// Digits are ASCII only (a regular expression's `\d` also takes other
/// scripts' digits, which no integer parse then reads), and no pattern is
/// compiled per value: a job's `not_before` is read 100,000 times at intake.
private struct TokenScanner {
    private let bytes: [UInt8]
    private var at = 0

    init(_ token: String) { bytes = Array(token.utf8) }

    var atEnd: Bool { at == bytes.count }

    private var current: UInt8? { at < bytes.count ? bytes[at] : nil }

    private static func isDigit(_ byte: UInt8?) -> Bool { byte.map { $0 >= 0x30 && $0 <= 0x39 } ?? false }

    /// Takes `character` if it is next.
    mutating func take(_ character: Unicode.Scalar) -> Bool {
        guard current == UInt8(ascii: character) else { return false }
        at += 1
        return true
    }

    /// Exactly `count` digits, as a number.
    mutating func digits(_ count: Int) -> Int? {
        guard at + count <= bytes.count, bytes[at..<at + count].allSatisfy({ Self.isDigit($0) }) else { return nil }
        defer { at += count }
        return bytes[at..<at + count].reduce(0) { $0 * 10 + Int($1 - 0x30) }
    }

    /// One digit or more, each underscore (when allowed) between two digits.
    private mutating func digitRun(underscores: Bool) -> Bool {
        guard Self.isDigit(current) else { return false }
        at += 1
        while true {
            if Self.isDigit(current) {
                at += 1
            } else if underscores, current == UInt8(ascii: "_"), at + 1 < bytes.count, Self.isDigit(bytes[at + 1]) {
                at += 2
            } else {
                return true
            }
        }
    }

    struct Time {
        var hour, minute, second: Int
        /// The seconds' fraction in whole milliseconds, 0 ..< 1000.
        var milliseconds: Int
        /// RFC 3339: 00–23 h, 00–59 min, 00–60 s (a leap second).
        var isValid: Bool { hour < 24 && minute < 60 && second <= 60 }
    }

    /// `hh:mm:ss` and an optional `.fraction`.
    mutating func time() -> Time? {
        guard let hour = digits(2), take(":"), let minute = digits(2), take(":"), let second = digits(2) else { return nil }
        var milliseconds = 0
        if current == UInt8(ascii: "."), at + 1 < bytes.count, Self.isDigit(bytes[at + 1]) {
            let start = at + 1
            at = start
            _ = digitRun(underscores: false)
            // TOML truncates what it cannot hold: the first three digits, never rounded
            // (as a Double, .99999999999999999 became the next second).
            let digits = bytes[start..<min(at, start + 3)]
            milliseconds = digits.reduce(0) { $0 * 10 + Int($1 - 0x30) } * [100, 10, 1][digits.count - 1]
        }
        return Time(hour: hour, minute: minute, second: second, milliseconds: milliseconds)
    }

    /// TOML 1.0's float: an integer part (no leading zero), then a fraction,
    /// an exponent or both; each underscore between two digits.
    var isFloat: Bool {
        var scanner = self
        _ = scanner.take("+") || scanner.take("-")
        if !scanner.take("0") {
            guard let first = scanner.current, first >= 0x31, first <= 0x39, scanner.digitRun(underscores: true) else { return false }
        }
        if scanner.take(".") && !scanner.digitRun(underscores: true) { return false }
        if scanner.take("e") || scanner.take("E") {
            _ = scanner.take("+") || scanner.take("-")
            guard scanner.digitRun(underscores: true) else { return false }
        }
        return scanner.atEnd
    }

    /// Begins as a date (`dddd-dd-dd`) or a time (`dd:dd`) does: a value meant as one.
    var startsLikeDateOrTime: Bool {
        var date = self, time = self
        return (date.digits(4) != nil && date.take("-") && date.digits(2) != nil && date.take("-") && date.digits(2) != nil)
            || (time.digits(2) != nil && time.take(":") && time.digits(2) != nil)
    }
}

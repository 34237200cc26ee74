import Foundation

/// A problem with one key of a TOML document (job or config), in words.
public struct KeyError: Error, Equatable, CustomStringConvertible, Sendable {
    public var key: String?
    public var problem: String
    public init(key: String?, _ problem: String) { self.key = key; self.problem = problem }

    /// One human sentence naming the key and the problem.
    public var description: String {
        guard let key else { return problem }
        return "key \"\(key)\" \(problem)"
    }
}

/// Typed, checked access to a TOML table: each accessor names the key in
/// its error, and `rejectUnknownKeys` turns typos into errors, not silence.
struct TOMLReader {
    let table: TOMLTable
    /// Dotted prefix for nested tables ("headers.").
    let prefix: String

    init(_ table: TOMLTable, prefix: String = "") {
        self.table = table
        self.prefix = prefix
    }

    static func parse(_ text: String) throws -> TOMLReader {
        do {
            return TOMLReader(try TOML.parse(text))
        } catch let error as TOMLSyntaxError {
            throw KeyError(key: nil, "is not valid TOML: \(error.message) at line \(error.line), column \(error.column)")
        }
    }

    var keys: [String] { table.keys }

    func has(_ key: String) -> Bool { table[key] != nil }

    func rejectUnknownKeys(allowed: Set<String>) throws {
        for key in table.keys where !allowed.contains(key) {
            throw KeyError(key: prefix + key, "is not a known key")
        }
    }

    private func mismatch(_ key: String, expected: String, got value: TOMLValue) -> KeyError {
        KeyError(key: prefix + key, "must be \(expected), not \(value.typeName)")
    }

    func string(_ key: String) throws -> String? {
        guard let value = table[key] else { return nil }
        guard case .string(let string) = value else { throw mismatch(key, expected: "a string", got: value) }
        return string
    }

    /// A string people read and hooks are handed (a batch's name, the task
    /// a control job names, a form field's name): a line break in it would
    /// forge a line in a hook's `env`, a notification or a log, NUL would cut
    /// it short, an escape or a bidirectional override would redraw a
    /// terminal. The rule of `dest` (`Printable.isControl`), said the same way.
    func name(_ key: String) throws -> String? {
        guard let text = try string(key) else { return nil }
        if text.unicodeScalars.contains(where: Printable.isControl) {
            throw KeyError(key: prefix + key, "must not contain control characters (a line break, NUL, an escape …): \"\(Printable.escaping(text))\"")
        }
        return text
    }

    func int(_ key: String, in range: ClosedRange<Int>? = nil) throws -> Int? {
        guard let value = table[key] else { return nil }
        guard case .integer(let int) = value else { throw mismatch(key, expected: "an integer", got: value) }
        if let range, !range.contains(int) {
            throw KeyError(key: prefix + key, "must be between \(range.lowerBound) and \(range.upperBound), not \(int)")
        }
        return int
    }

    func bool(_ key: String) throws -> Bool? {
        guard let value = table[key] else { return nil }
        guard case .boolean(let flag) = value else { throw mismatch(key, expected: "true or false", got: value) }
        return flag
    }

    /// Durations are whole seconds.
    func seconds(_ key: String) throws -> Int? {
        try int(key, in: 1...Int(Int32.max))
    }

    /// A span of time such as `"7d"`, `"12h"`, `"30m"`, `"0"`, or whole seconds.
    func duration(_ key: String) throws -> Int64? {
        guard let value = table[key] else { return nil }
        if case .integer(let int) = value, int >= 0 { return Int64(int) }
        if case .string(let text) = value, let seconds = DurationText.seconds(text) { return seconds }
        throw KeyError(key: prefix + key, "must be a duration such as \"7d\", \"12h\", \"30m\" or a number of seconds")
    }

    func choice<E: RawRepresentable & CaseIterable>(_ key: String, _: E.Type) throws -> E? where E.RawValue == String {
        guard let raw = try string(key) else { return nil }
        guard let value = E(rawValue: raw) else {
            let names = E.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
            throw KeyError(key: prefix + key, "must be one of \(names), not \"\(raw)\"")
        }
        return value
    }

    /// A byte rate such as `2000000`, `"512K"` or `"2M"` (powers of 1024).
    /// Whether `key` is set to 0 (or "0"): a limit turned off.
    func isZero(_ key: String) -> Bool {
        switch table[key] {
        case .integer(0)?, .string("0")?: return true
        default: return false
        }
    }

    func byteCount(_ key: String) throws -> Int64? {
        guard let value = table[key] else { return nil }
        if case .integer(let int) = value, int > 0 { return Int64(int) }
        if case .string(let text) = value {
            if let count = ByteCount.parse(text), count > 0 { return count }
            if let words = ByteCount.ambiguity(of: text) { throw KeyError(key: prefix + key, words) }
        }
        throw KeyError(key: prefix + key, "must be a positive number of bytes such as 2000000, \"512K\" or \"2M\" "
                       + "(K, M and G are powers of 1024, also written KiB, MiB and GiB)")
    }

    /// A TOML offset date-time (`2026-11-22T03:00:00Z`) or the same as a string.
    func instantMs(_ key: String) throws -> Int64? {
        guard let value = table[key] else { return nil }
        if case .instant(let ms) = value { return ms }
        if case .string(let text) = value, case .instant(let ms)? = try? TOML.parse("t = \(text)")["t"] { return ms }
        throw KeyError(key: prefix + key, "must be a date-time with a time zone, such as 2026-11-22T03:00:00Z")
    }

    /// Folders as an array of strings, each absolute or under `~`
    /// (`["/mnt/media", "~/Videos"]`): relative to what, for an agent
    /// started anywhere, could not be said.
    func folders(_ key: String) throws -> [String]? {
        guard let value = table[key] else { return nil }
        let rule = "must be an array of folders, each absolute or starting with ~/, such as [\"/mnt/media\", \"~/Videos\"]"
        guard case .array(let items) = value else { throw KeyError(key: prefix + key, rule) }
        return try items.map { item in
            guard case .string(let folder) = item, folder.hasPrefix("/") || folder == "~" || folder.hasPrefix("~/"),
                  !folder.unicodeScalars.contains(where: Printable.isControl) else { throw KeyError(key: prefix + key, rule) }
            return folder
        }
    }

    /// A command as an array of strings (`["notify-send", "done"]`): run
    /// without a shell, so every word is a whole argument.
    func command(_ key: String) throws -> [String]? {
        guard let value = table[key] else { return nil }
        let rule = "must be a command as an array of strings, such as [\"/usr/local/bin/on-done\", \"--quiet\"]"
        guard case .array(let items) = value, !items.isEmpty else { throw KeyError(key: prefix + key, rule) }
        var words: [String] = []
        for item in items {
            guard case .string(let word) = item else { throw KeyError(key: prefix + key, rule) }
            // An argv entry cannot hold NUL; the program must be named.
            guard !word.contains("\0") else { throw KeyError(key: prefix + key, "must not contain NUL characters") }
            words.append(word)
        }
        guard !words[0].isEmpty else { throw KeyError(key: prefix + key, "must start with the program to run") }
        // "bin/x" would be looked for wherever the agent was started from.
        if words[0].contains("/") && !words[0].hasPrefix("/") {
            throw KeyError(key: prefix + key, "must name its program by an absolute path or a bare name found on PATH, not \"\(words[0])\"")
        }
        return words
    }

    func subtable(_ key: String) throws -> TOMLReader? {
        guard let value = table[key] else { return nil }
        guard case .table(let table) = value else { throw mismatch(key, expected: "a table", got: value) }
        return TOMLReader(table, prefix: prefix + key + ".")
    }

    /// `[headers]`: names are HTTP tokens, values single-line strings.
    /// A table of single-line strings (`[headers]`, `[form]`), in key order.
    func stringTable(_ key: String, nameIsValid: (String) -> Bool, nameRule: String) throws -> [(name: String, value: String)] {
        guard let table = try subtable(key) else { return [] }
        var pairs: [(name: String, value: String)] = []
        for name in table.keys.sorted() {
            guard let value = try table.string(name) else { continue }
            if name.isEmpty || !nameIsValid(name) {
                throw KeyError(key: "\(key).\(name)", nameRule)
            }
            // A line break would end the header and start another on the wire.
            if value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) {
                throw KeyError(key: "\(key).\(name)", "must not contain CR, LF or NUL")
            }
            pairs.append((name, value))
        }
        return pairs
    }

    func headers(_ key: String) throws -> [Header] {
        let pairs = try stringTable(key, nameIsValid: Header.isToken, nameRule: "is not a valid HTTP header name")
        if let framing = pairs.first(where: { Header.isFraming($0.name) }) {
            throw KeyError(key: "\(key).\(framing.name)",
                           "is set by the agent (from the body and the connection); a value of its own would cut or split the request")
        }
        return pairs.map { Header(name: $0.name, value: $0.value) }
    }

    /// `[form]`: names go into a quoted `Content-Disposition` parameter.
    func formFields(_ key: String) throws -> [FormField] {
        try stringTable(key, nameIsValid: { !$0.contains("\"") && !$0.unicodeScalars.contains(where: Printable.isControl) },
                        nameRule: "is not a usable form field name (no quotes or control characters)")
            .map { FormField(name: $0.name, value: $0.value) }
    }
}

public enum ByteCount {
    /// `"2M"` and `"2MiB"` → 2097152, `"100"` and `"100B"` → 100: K, M and G
    /// are powers of 1024. `"2MB"` is nil: MB is 10⁶ bytes to some tools and
    /// 2²⁰ to others (`ambiguity` says so), and `"2Mb"` may be megabits.
    public static func parse(_ text: String) -> Int64? {
        var digits = text.trimmingCharacters(in: .whitespaces).uppercased()
        guard ambiguousUnit(of: text) == nil else { return nil }
        for suffix in ["IB", "B"] where digits.hasSuffix(suffix) && digits.count > suffix.count {
            digits.removeLast(suffix.count)
        }
        var multiplier: Int64 = 1
        if let last = digits.last, let power = ["K": 1, "M": 2, "G": 3][String(last)] {
            multiplier = Int64(1) << (10 * power)
            digits.removeLast()
        }
        // Digits and at most one point: Double alone would also read "0x10", "1e3", "inf" and "nan".
        let point = UInt8(ascii: ".")
        guard digits.utf8.contains(where: { $0 != point }), digits.utf8.filter({ $0 == point }).count <= 1,
              digits.utf8.allSatisfy({ $0 == point || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
              let number = Double(digits), number * Double(multiplier) < 9e18 else { return nil }
        return Int64(number * Double(multiplier))
    }

    /// The unit of `"2MB"`, `"500kb"`, `"1Gb"`: one that tools read as powers
    /// of 1000 or of 1024 (or as bits); nil for any other text.
    private static func ambiguousUnit(of text: String) -> String? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard trimmed.count >= 3, trimmed.uppercased().hasSuffix("B"), !trimmed.uppercased().hasSuffix("IB") else { return nil }
        let unit = String(trimmed.suffix(2))
        guard let prefix = unit.first, "KMGkmg".contains(prefix), let number = Double(trimmed.dropLast(2)), number >= 0 else { return nil }
        return unit
    }

    /// Why `text` is refused though it looks like a size ("2MB"), with what to write instead.
    public static func ambiguity(of text: String) -> String? {
        guard let unit = ambiguousUnit(of: text) else { return nil }
        let number = text.trimmingCharacters(in: .whitespaces).dropLast(2)
        let letter = unit.prefix(1).uppercased()
        let binary = parse("\(number)\(letter)").map { " (\($0) bytes)" } ?? ""
        return "must not be \"\(text)\": \(unit) is a power of 1000 to some tools, of 1024 (or bits) to others; "
            + "write \"\(number)\(letter)\" or \"\(number)\(letter)iB\"\(binary), or a number of bytes "
            + "(K, M and G are powers of 1024, also written KiB, MiB and GiB)"
    }

    /// 1536 → "1.5 KiB".
    public static func format(_ bytes: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        // Not String(format:): status prints thousands of these.
        let tenths = Int((value * 10).rounded())
        return unit == 0 ? "\(bytes) B" : "\(tenths / 10).\(tenths % 10) \(units[unit])"
    }
}

/// `Content-Disposition` (RFC 6266) read for the file name a server gives:
/// `filename*` (RFC 8187: `charset'language'percent-encoded`) first, then
/// `filename`. Untrusted bytes: nothing here traps, and what it returns is
/// still to be made safe (`ServerFileName`) before it names a file.
///
/// Read leniently where servers are known to stray and browsers still read
/// them (no disposition type, an unquoted name with spaces, a quoted
/// `filename*`, a quote never closed), and refusing only what cannot be
/// decoded as its charset says.
public enum ContentDisposition {
    public struct Parsed: Equatable, Sendable {
        /// `attachment`, `inline` or another token, lowercased; nil when the value starts with a parameter.
        public var type: String?
        /// `filename*`, decoded; nil when absent, or when its charset is unknown or its bytes are not that charset.
        public var extendedFileName: String?
        /// `filename`: UTF-8 when its bytes are, else ISO-8859-1 (what a header's bytes were).
        public var fileName: String?

        /// The name it gives: `filename*` over `filename` (RFC 6266 §4.3).
        public var name: String? { extendedFileName ?? fileName }

        public init(type: String? = nil, extendedFileName: String? = nil, fileName: String? = nil) {
            self.type = type; self.extendedFileName = extendedFileName; self.fileName = fileName
        }
    }

    public static func parse(_ value: String) -> Parsed { parse(Array(value.utf8)) }

    /// A header's value, as the bytes the server sent.
    public static func parse(_ bytes: [UInt8]) -> Parsed {
        var reader = Reader(bytes: bytes)
        var parsed = Parsed()
        reader.skipSpace()
        let typeStart = reader.index
        let type = reader.token()
        reader.skipSpace()
        if reader.peek == UInt8(ascii: "=") {
            // No type: the value starts with a parameter (`filename="x"`), read as one.
            reader.index = typeStart
        } else {
            if !type.isEmpty { parsed.type = String(decoding: type, as: UTF8.self).lowercased() }
            reader.skipPast(UInt8(ascii: ";"))
        }
        // Each parameter once: the first of a name counts (RFC 6266 calls repeats invalid; browsers take the first).
        var seen: Set<String> = []
        while !reader.atEnd {
            reader.skipSpace()
            if reader.peek == UInt8(ascii: ";") { reader.index += 1; continue }
            let name = String(decoding: reader.token(), as: UTF8.self).lowercased()
            reader.skipSpace()
            guard !name.isEmpty, reader.peek == UInt8(ascii: "=") else {
                // Not `name=value`: passed over up to the next parameter.
                reader.skipPast(UInt8(ascii: ";"))
                continue
            }
            reader.index += 1
            reader.skipSpace()
            let value = reader.value()
            reader.skipPast(UInt8(ascii: ";"))
            guard seen.insert(name).inserted else { continue }
            switch name {
            case "filename*": parsed.extendedFileName = extendedValue(value)
            case "filename": parsed.fileName = text(value)
            default: break
            }
        }
        return parsed
    }

    /// RFC 8187's `ext-value`: `charset'[language]'value-chars`, the
    /// value percent-encoded. Nil when malformed, of a charset not read
    /// here, or not text in its charset.
    static func extendedValue(_ bytes: [UInt8]) -> String? {
        let quote = UInt8(ascii: "'")
        guard let first = bytes.firstIndex(of: quote),
              let second = bytes[(first + 1)...].firstIndex(of: quote) else { return nil }
        let charset = String(decoding: bytes[..<first], as: UTF8.self).lowercased()
        guard let decoded = percentDecoded(bytes[(second + 1)...]) else { return nil }
        switch charset {
        case "utf-8", "utf8":
            return String(validating: decoded, as: UTF8.self)
        case "iso-8859-1", "latin1", "iso_8859-1":
            return latin1(decoded)
        case "us-ascii":
            return decoded.allSatisfy({ $0 < 0x80 }) ? latin1(decoded) : nil
        default:
            return nil
        }
    }

    /// `%XX` decoded; nil when a `%` is not followed by two hex digits.
    static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            guard byte == UInt8(ascii: "%") else {
                out.append(byte)
                index += 1
                continue
            }
            guard bytes.endIndex - index >= 3, let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2]) else { return nil }
            out.append(high << 4 | low)
            index += 3
        }
        return out
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }

    /// A plain parameter's bytes as text: UTF-8 when they are (what most
    /// servers send now), else ISO-8859-1 (RFC 9110's reading of a header's bytes).
    static func text(_ bytes: [UInt8]) -> String {
        String(validating: bytes, as: UTF8.self) ?? latin1(bytes)
    }

    private static func latin1(_ bytes: [UInt8]) -> String {
        String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool { index >= bytes.count }
        var peek: UInt8? { atEnd ? nil : bytes[index] }

        mutating func skipSpace() {
            while let byte = peek, byte == 0x20 || byte == 0x09 { index += 1 }
        }

        /// Up to a separator of the grammar: space, `;`, `=`, `"`, or a control byte.
        mutating func token() -> [UInt8] {
            let start = index
            while let byte = peek, byte > 0x20, byte != 0x7F, byte != UInt8(ascii: ";"), byte != UInt8(ascii: "="),
                  byte != UInt8(ascii: "\"") {
                index += 1
            }
            return Array(bytes[start..<index])
        }

        /// A quoted string (its `\` escapes undone; unclosed: to the end),
        /// or the bytes up to the next `;`, trailing space trimmed (an
        /// unquoted name with spaces, as some servers send).
        mutating func value() -> [UInt8] {
            if peek == UInt8(ascii: "\"") {
                index += 1
                var out: [UInt8] = []
                while let byte = peek {
                    index += 1
                    if byte == UInt8(ascii: "\"") { return out }
                    if byte == UInt8(ascii: "\\"), let escaped = peek {
                        index += 1
                        out.append(escaped)
                    } else {
                        out.append(byte)
                    }
                }
                return out
            }
            let start = index
            while let byte = peek, byte != UInt8(ascii: ";") { index += 1 }
            var end = index
            while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
            return Array(bytes[start..<end])
        }

        /// Past the next `byte` outside a quoted string, or to the end.
        mutating func skipPast(_ byte: UInt8) {
            var quoted = false
            while let next = peek {
                index += 1
                if quoted {
                    if next == UInt8(ascii: "\\") { if !atEnd { index += 1 } } else if next == UInt8(ascii: "\"") { quoted = false }
                } else if next == UInt8(ascii: "\"") {
                    quoted = true
                } else if next == byte {
                    return
                }
            }
        }
    }
}

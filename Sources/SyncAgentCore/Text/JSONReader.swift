import Foundation

/// A strict, allocation-light reader for the flat JSON objects the log
/// stores. Replay decodes a million of these; `JSONDecoder` spends about
/// 37,000 instructions on each (measured with callgrind), this reader a
/// small fraction of that. It reads UTF-8 bytes in place.
struct JSONReader {
    struct Malformed: Error, CustomStringConvertible {
        var offset: Int
        var expected: String
        var description: String { "malformed JSON at byte \(offset): expected \(expected)" }
    }

    private let bytes: UnsafeRawBufferPointer
    private var index = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    @inline(__always)
    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    @inline(__always)
    private mutating func skipSpace() {
        while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
    }

    @inline(__always)
    private mutating func expect(_ byte: UInt8, _ what: String) throws {
        skipSpace()
        guard current == byte else { throw Malformed(offset: index, expected: what) }
        index += 1
    }

    /// A key as it stands in the bytes: compared, never turned into a String.
    struct Key {
        let bytes: UnsafeRawBufferPointer

        @inline(__always)
        static func ~= (pattern: StaticString, key: Key) -> Bool {
            UnsafeRawBufferPointer(start: pattern.utf8Start, count: pattern.utf8CodeUnitCount).sameBytes(as: key.bytes)
        }

        static func == (key: Key, pattern: StaticString) -> Bool { pattern ~= key }
    }

    @inline(__always)
    private mutating func readKey() throws -> Key {
        try expect(UInt8(ascii: "\""), "a key")
        let start = index
        while let byte = current, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") { index += 1 }
        guard current == UInt8(ascii: "\"") else { throw Malformed(offset: index, expected: "a plain key") }
        defer { index += 1 }
        return Key(bytes: UnsafeRawBufferPointer(rebasing: bytes[start..<index]))
    }

    /// Calls `body` with each key; `body` must read or skip the value.
    mutating func readObject(_ body: (Key, inout JSONReader) throws -> Void) throws {
        try expect(UInt8(ascii: "{"), "{")
        skipSpace()
        if current == UInt8(ascii: "}") { index += 1; return }
        while true {
            let key = try readKey()
            try expect(UInt8(ascii: ":"), ":")
            try body(key, &self)
            skipSpace()
            if current == UInt8(ascii: ",") { index += 1; continue }
            try expect(UInt8(ascii: "}"), ", or }")
            return
        }
    }

    mutating func readString() throws -> String {
        try expect(UInt8(ascii: "\""), "a string")
        let start = index
        // Most strings have no escape: their end is the next quote, found (as
        // the absence of a backslash before it) by memchr, not byte by byte.
        if start < bytes.count, let base = bytes.baseAddress,
           let quote = memchr(base + start, Int32(UInt8(ascii: "\"")), bytes.count - start) {
            let end = base.distance(to: UnsafeRawPointer(quote))
            if memchr(base + start, Int32(UInt8(ascii: "\\")), end - start) == nil {
                index = end + 1
                return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
            }
        }
        var escaped = false
        while let byte = current, byte != UInt8(ascii: "\"") {
            if byte == UInt8(ascii: "\\") { escaped = true; index += 1 }
            index += 1
        }
        guard current == UInt8(ascii: "\"") else { throw Malformed(offset: index, expected: "end of string") }
        let raw = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
        index += 1
        if !escaped { return String(decoding: raw, as: UTF8.self) }
        // Every quoted ETag has escapes: unescaped here, byte by byte, not by a JSON library per value.
        guard let value = Self.unescape(raw) else { throw Malformed(offset: start, expected: "a valid string escape") }
        return value
    }

    /// The string a JSON string body (between its quotes) stands for; nil
    /// for an escape JSON does not have, or a lone UTF-16 surrogate.
    static func unescape(_ raw: UnsafeRawBufferPointer) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(raw.count)
        var index = 0
        func hex4() -> UInt32? {
            guard index + 4 <= raw.count else { return nil }
            var value: UInt32 = 0
            for byte in raw[index..<(index + 4)] {
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)
            }
            index += 4
            return value
        }
        while index < raw.count {
            let byte = raw[index]
            index += 1
            guard byte == UInt8(ascii: "\\") else { out.append(byte); continue }
            guard index < raw.count else { return nil }
            let escape = raw[index]
            index += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard var scalar = hex4() else { return nil }
                if (0xD800..<0xDC00).contains(scalar) {
                    // A high surrogate must be followed by its low half.
                    guard index + 2 <= raw.count, raw[index] == UInt8(ascii: "\\"), raw[index + 1] == UInt8(ascii: "u") else { return nil }
                    index += 2
                    guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let unicode = Unicode.Scalar(scalar) else { return nil }
                out.append(contentsOf: String(unicode).utf8)
            default:
                return nil
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    @inline(__always)
    mutating func readInt() throws -> Int64 {
        skipSpace()
        var negative = false
        if current == UInt8(ascii: "-") { negative = true; index += 1 }
        var value: Int64 = 0
        var digits = 0
        while let byte = current, byte >= 0x30, byte <= 0x39 {
            value = value &* 10 &+ Int64(byte - 0x30)
            index += 1
            digits += 1
        }
        guard digits > 0 else { throw Malformed(offset: index, expected: "an integer") }
        return negative ? -value : value
    }

    mutating func readBool() throws -> Bool {
        skipSpace()
        if matchLiteral("true") { return true }
        if matchLiteral("false") { return false }
        throw Malformed(offset: index, expected: "true or false")
    }

    /// `null` → nil; otherwise `read`.
    mutating func readOptional<T>(_ read: (inout JSONReader) throws -> T) throws -> T? {
        skipSpace()
        if matchLiteral("null") { return nil }
        return try read(&self)
    }

    mutating func readArray<T>(_ element: (inout JSONReader) throws -> T) throws -> [T] {
        try expect(UInt8(ascii: "["), "[")
        var values: [T] = []
        skipSpace()
        if current == UInt8(ascii: "]") { index += 1; return values }
        while true {
            values.append(try element(&self))
            skipSpace()
            if current == UInt8(ascii: ",") { index += 1; continue }
            try expect(UInt8(ascii: "]"), ", or ]")
            return values
        }
    }

    /// `{"first": "…", "second": "…"}` (in any order, other keys skipped).
    mutating func readStringPair(_ first: StaticString, _ second: StaticString) throws -> (String, String) {
        var a: String?, b: String?
        try readObject { key, value in
            if key == first { a = try value.readString() } else if key == second { b = try value.readString() } else { try value.skipValue() }
        }
        guard let a, let b else { throw Malformed(offset: index, expected: "keys \"\(first)\" and \"\(second)\"") }
        return (a, b)
    }

    /// Skips any value: unknown keys from newer versions are ignored.
    mutating func skipValue() throws {
        skipSpace()
        guard let byte = current else { throw Malformed(offset: index, expected: "a value") }
        switch byte {
        case UInt8(ascii: "\""): _ = try readString()
        case UInt8(ascii: "{"): try readObject { _, reader in try reader.skipValue() }
        case UInt8(ascii: "["):
            index += 1
            skipSpace()
            if current == UInt8(ascii: "]") { index += 1; return }
            while true {
                try skipValue()
                skipSpace()
                if current == UInt8(ascii: ",") { index += 1; continue }
                try expect(UInt8(ascii: "]"), ", or ]")
                return
            }
        default:
            // Numbers and literals: everything up to the next delimiter.
            while let next = current, next != UInt8(ascii: ","), next != UInt8(ascii: "}"), next != UInt8(ascii: "]") { index += 1 }
        }
    }

    private mutating func matchLiteral(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        for offset in 0..<count where bytes[index + offset] != literal.utf8Start[offset] { return false }
        index += count
        return true
    }
}

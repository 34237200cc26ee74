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

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipSpace() {
        while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
    }

    private mutating func expect(_ byte: UInt8, _ what: String) throws {
        skipSpace()
        guard current == byte else { throw Malformed(offset: index, expected: what) }
        index += 1
    }

    /// A key as it stands in the bytes: compared, never turned into a String.
    struct Key {
        let bytes: UnsafeRawBufferPointer

        static func ~= (pattern: StaticString, key: Key) -> Bool {
            pattern.utf8CodeUnitCount == key.bytes.count
                && memcmp(pattern.utf8Start, key.bytes.baseAddress!, key.bytes.count) == 0
        }

        static func == (key: Key, pattern: StaticString) -> Bool { pattern ~= key }
    }

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
        var escaped = false
        while let byte = current, byte != UInt8(ascii: "\"") {
            if byte == UInt8(ascii: "\\") { escaped = true; index += 1 }
            index += 1
        }
        guard current == UInt8(ascii: "\"") else { throw Malformed(offset: index, expected: "end of string") }
        let raw = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
        index += 1
        if !escaped { return String(decoding: raw, as: UTF8.self) }
        // Rare (quotes in ETags, backslashes): let Foundation unescape it.
        let quoted = "\"" + String(decoding: raw, as: UTF8.self) + "\""
        guard let value = try? JSONSerialization.jsonObject(with: Data(quoted.utf8), options: .fragmentsAllowed) as? String else {
            throw Malformed(offset: start, expected: "a valid string escape")
        }
        return value
    }

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

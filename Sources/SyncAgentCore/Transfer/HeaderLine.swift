import Foundation

/// One response header line as curl hands it over, read in place:
/// untrusted bytes, so nothing here may trap (the fuzz target checks).
public struct HeaderLine {
    public let bytes: UnsafeRawBufferPointer

    public init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// `HTTP/1.1 206 Partial Content` → 206.
    public var statusCode: Int? {
        guard bytes.count >= 12, bytes[0] == UInt8(ascii: "H"), bytes[1] == UInt8(ascii: "T"),
              bytes[2] == UInt8(ascii: "T"), bytes[3] == UInt8(ascii: "P"), bytes[4] == UInt8(ascii: "/"),
              let space = bytes.firstIndex(of: UInt8(ascii: " ")), space + 3 < bytes.count else { return nil }
        var code = 0
        for index in space + 1...space + 3 {
            let digit = Int(bytes[index]) - 0x30
            guard (0...9).contains(digit) else { return nil }
            code = code * 10 + digit
        }
        return code
    }

    /// `name: value` as a header, or nil for the status line and the blank end.
    public var pair: Header? {
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0 else { return nil }
        // Split on the byte, not on characters: a multi-byte name must not shift the cut.
        let name = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[..<colon]), as: UTF8.self)
        let value = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[(colon + 1)...]), as: UTF8.self)
        return Header(name: name, value: value.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The trimmed value if this line is `name: value` (name matched ignoring case).
    public func value(ifNamed lowercaseName: StaticString) -> String? {
        valueBytes(ifNamed: lowercaseName).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The trimmed value's bytes as sent (a value that is not UTF-8 is read
    /// by its own rules: `Content-Disposition`'s `filename` as ISO-8859-1).
    public func rawValue(ifNamed lowercaseName: StaticString) -> [UInt8]? {
        valueBytes(ifNamed: lowercaseName).map(Array.init)
    }

    private func valueBytes(ifNamed lowercaseName: StaticString) -> UnsafeRawBufferPointer? {
        let count = lowercaseName.utf8CodeUnitCount
        guard bytes.count > count, bytes[count] == UInt8(ascii: ":") else { return nil }
        for index in 0..<count where bytes[index] | 0x20 != lowercaseName.utf8Start[index] { return nil }
        var start = count + 1
        var end = bytes.count
        let isSpace = { (byte: UInt8) in byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        while start < end, isSpace(bytes[start]) { start += 1 }
        while end > start, isSpace(bytes[end - 1]) { end -= 1 }
        return UnsafeRawBufferPointer(rebasing: bytes[start..<end])
    }
}

/// Writes one flat JSON object, keys in the order given (callers give them
/// sorted, as `JSONEncoder` with `.sortedKeys` would). Nil values are left
/// out. The agent writes one of these per event; `JSONEncoder` costs ~20x more.
public struct JSONWriter {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]

    /// Room for a `created` event with its URL and destination, so the
    /// array is not grown and copied a few times over for each event.
    init() { bytes.reserveCapacity(512) }

    private mutating func key(_ name: StaticString) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    mutating func field(_ name: StaticString, _ value: Int64?) {
        guard let value else { return }
        key(name)
        Self.appendDecimal(value, to: &bytes)
    }

    /// `value` in decimal, as `String(value)` writes it, without making that String.
    static func appendDecimal(_ value: Int64, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        // The magnitude as unsigned: Int64.min has none as a signed number.
        var left = value.magnitude
        let start = bytes.count
        repeat {
            bytes.append(UInt8(ascii: "0") + UInt8(left % 10))
            left /= 10
        } while left > 0
        bytes[start...].reverse()
    }

    mutating func field(_ name: StaticString, _ value: Int) { field(name, Int64(value)) }

    mutating func field(_ name: StaticString, _ value: String?) {
        guard let value else { return }
        key(name)
        Self.appendQuoted(value, to: &bytes)
    }

    /// `text` as a JSON string literal (`events --json`'s task and type columns).
    public static func quoted(_ text: String) -> String {
        var bytes: [UInt8] = []
        appendQuoted(text, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Escaped as `JSONEncoder` escapes (`status --json` is compared with it byte for byte).
    static func appendQuoted(_ value: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        // Most values need no escape: copied whole, not appended a byte at a time,
        // and looked through as the bytes they are stored as where they are.
        func needsNoEscape(_ utf8: some Sequence<UInt8>) -> Bool {
            !utf8.contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
        }
        let plain = value.utf8.withContiguousStorageIfAvailable { stored in
            guard needsNoEscape(stored) else { return false }
            bytes.append(contentsOf: stored)
            return true
        } ?? {
            guard needsNoEscape(value.utf8) else { return false }
            bytes.append(contentsOf: value.utf8)
            return true
        }()
        if plain {
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                bytes.append(UInt8(ascii: "\\"))
                bytes.append(byte)
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x08: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x0C: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: Array("\\u00".utf8))
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0x0F)])
            default:
                bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    mutating func field(_ name: StaticString, _ value: Bool) {
        key(name)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    /// Omitted when nil, as JSONEncoder omits an optional.
    mutating func field(_ name: StaticString, _ value: Bool?) {
        if let value { field(name, value) }
    }

    /// A nested object or array, already written.
    mutating func field(_ name: StaticString, json value: String?) {
        guard let value else { return }
        key(name)
        bytes.append(contentsOf: value.utf8)
    }

    static func array(_ elements: [String]) -> String {
        "[" + elements.joined(separator: ",") + "]"
    }

    consuming func finish() -> String {
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }
}

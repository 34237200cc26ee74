/// A JSON document as an RPC client sends it and as the agent answers:
/// any shape, read strictly. The log's own rows have their fixed shapes
/// and their own faster reader (`JSONReader`); this one is for what comes
/// from outside, so it bounds what an input can make it do.
public enum JSONValue: Equatable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    /// A number with a fraction or an exponent, or one too large for Int64.
    case double(Double)
    case string(String)
    case array([JSONValue])
    /// Keys written more than once: the last one counts, as in most readers.
    case object([String: JSONValue])

    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members[key]
    }

    public var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    public var array: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    public var object: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }
}

// MARK: - Reading

extension JSONValue {
    public struct Malformed: Error, Equatable, CustomStringConvertible {
        public var offset: Int
        public var problem: String
        public var description: String { "\(problem) at byte \(offset)" }
    }

    /// Arrays and objects nested deeper than this are refused: each level
    /// is a stack frame of the reader, and no aria2 call nests beyond four.
    public static let maximumDepth = 64

    /// The one JSON value `bytes` hold (whitespace around it allowed), or why not.
    public static func parse<Bytes: Collection<UInt8>>(_ bytes: Bytes) throws -> JSONValue {
        var ignored = Set<Int>()
        return try parse(bytes, callsWithKeysTwice: &ignored)
    }

    /// As `parse`, and which of the request's calls (the objects at its top:
    /// the document itself, -1, or the elements of a top-level array, by
    /// index) name a key twice: a filter in front of the agent may have read
    /// the other one, so aria2 refuses such a call, and so does the agent.
    static func parse<Bytes: Collection<UInt8>>(_ bytes: Bytes, callsWithKeysTwice: inout Set<Int>) throws -> JSONValue {
        let copy = Array(bytes)
        return try copy.withUnsafeBufferPointer { buffer in
            var reader = ValueReader(bytes: buffer)
            let value = try reader.value(depth: 0)
            reader.skipSpace()
            guard reader.index == buffer.count else { throw reader.malformed("text after the JSON value") }
            callsWithKeysTwice = reader.callsWithKeysTwice
            return value
        }
    }

    private struct ValueReader {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0
        /// The document is an array (a batch), and the element of it being read.
        var topIsArray = false
        var topElement = -1
        var callsWithKeysTwice = Set<Int>()

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        func malformed(_ problem: String) -> Malformed { Malformed(offset: index, problem: problem) }

        mutating func skipSpace() {
            while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { index += 1 }
        }

        mutating func value(depth: Int) throws -> JSONValue {
            skipSpace()
            guard let byte = current else { throw malformed("a value expected, the text ended") }
            switch byte {
            case UInt8(ascii: "{"): return try object(depth: depth + 1)
            case UInt8(ascii: "["):
                if depth == 0 { topIsArray = true }
                return try array(depth: depth + 1)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
            default: throw malformed("a value expected")
            }
        }

        mutating func literal(_ word: StaticString) throws {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { throw malformed("\(word) expected") }
            for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] {
                throw malformed("\(word) expected")
            }
            index += count
        }

        mutating func object(depth: Int) throws -> JSONValue {
            guard depth <= JSONValue.maximumDepth else { throw malformed("nested deeper than \(JSONValue.maximumDepth) levels") }
            index += 1
            var members: [String: JSONValue] = [:]
            skipSpace()
            if current == UInt8(ascii: "}") { index += 1; return .object(members) }
            while true {
                skipSpace()
                guard current == UInt8(ascii: "\"") else { throw malformed("a key expected") }
                let key = try string()
                skipSpace()
                guard current == UInt8(ascii: ":") else { throw malformed("':' expected") }
                index += 1
                let member = try value(depth: depth)
                if members.updateValue(member, forKey: key) != nil, depth == (topIsArray ? 2 : 1) {
                    callsWithKeysTwice.insert(topIsArray ? topElement : -1)
                }
                skipSpace()
                switch current {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "}"): index += 1; return .object(members)
                default: throw malformed("',' or '}' expected")
                }
            }
        }

        mutating func array(depth: Int) throws -> JSONValue {
            guard depth <= JSONValue.maximumDepth else { throw malformed("nested deeper than \(JSONValue.maximumDepth) levels") }
            index += 1
            var elements: [JSONValue] = []
            skipSpace()
            if current == UInt8(ascii: "]") { index += 1; return .array(elements) }
            while true {
                if depth == 1 { topElement = elements.count }
                elements.append(try value(depth: depth))
                skipSpace()
                switch current {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "]"): index += 1; return .array(elements)
                default: throw malformed("',' or ']' expected")
                }
            }
        }

        mutating func string() throws -> String {
            index += 1
            var out: [UInt8] = []
            while true {
                guard let byte = current else { throw malformed("the string is not closed") }
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    // Escapes make only valid scalars; the raw bytes are checked here.
                    guard let text = String(validating: out, as: UTF8.self) else { throw malformed("a string that is not UTF-8") }
                    return text
                case UInt8(ascii: "\\"):
                    index += 1
                    try escape(into: &out)
                case 0..<0x20:
                    throw malformed("a control character inside a string")
                default:
                    out.append(byte)
                    index += 1
                }
            }
        }

        mutating func escape(into out: inout [UInt8]) throws {
            guard let byte = current else { throw malformed("the string is not closed") }
            index += 1
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(byte)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    // A high surrogate stands only before a low one.
                    guard current == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else {
                        throw malformed("a lone surrogate in a \\u escape")
                    }
                    index += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw malformed("a lone surrogate in a \\u escape") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw malformed("a lone surrogate in a \\u escape")
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw malformed("not a Unicode scalar") }
                out.append(contentsOf: String(Character(unicode)).utf8)
            default:
                throw malformed("an unknown escape")
            }
        }

        mutating func hex4() throws -> UInt32 {
            guard index + 4 <= bytes.count else { throw malformed("four hex digits expected") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw malformed("four hex digits expected")
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }

        /// RFC 8259's number grammar, exactly: no leading zeros, no bare '.', no '+'.
        mutating func number() throws -> JSONValue {
            let start = index
            if current == UInt8(ascii: "-") { index += 1 }
            func digits() -> Int {
                let from = index
                while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { index += 1 }
                return index - from
            }
            let integerStart = index
            let integerDigits = digits()
            guard integerDigits > 0 else { throw malformed("a digit expected") }
            guard integerDigits == 1 || bytes[integerStart] != UInt8(ascii: "0") else { throw malformed("a number with a leading zero") }
            var isInteger = true
            if current == UInt8(ascii: ".") {
                index += 1
                guard digits() > 0 else { throw malformed("a digit expected after '.'") }
                isInteger = false
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                index += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
                guard digits() > 0 else { throw malformed("a digit expected in the exponent") }
                isInteger = false
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            if isInteger, let integer = Int64(text) { return .int(integer) }
            guard let double = Double(text), double.isFinite else { throw malformed("a number out of range") }
            return .double(double)
        }
    }
}

// MARK: - Writing

extension JSONValue {
    /// Compact UTF-8 JSON, object keys in sorted order (as aria2 writes them).
    public var serialized: [UInt8] {
        var bytes: [UInt8] = []
        write(to: &bytes)
        return bytes
    }

    public var text: String { String(decoding: serialized, as: UTF8.self) }

    /// About how many bytes `serialized` comes to (escapes not counted), without writing them.
    public var estimatedSize: Int {
        switch self {
        case .null, .bool: 5
        case .int, .double: 20
        case .string(let value): value.utf8.count + 2
        case .array(let elements): elements.reduce(2) { $0 + $1.estimatedSize + 1 }
        case .object(let members): members.reduce(2) { $0 + $1.key.utf8.count + 4 + $1.value.estimatedSize }
        }
    }

    public func write(to bytes: inout [UInt8]) {
        switch self {
        case .null: bytes.append(contentsOf: "null".utf8)
        case .bool(let value): bytes.append(contentsOf: (value ? "true" : "false").utf8)
        case .int(let value): bytes.append(contentsOf: String(value).utf8)
        case .double(let value): bytes.append(contentsOf: (value.isFinite ? "\(value)" : "null").utf8)
        case .string(let value): JSONWriter.appendQuoted(value, to: &bytes)
        case .array(let elements):
            bytes.append(UInt8(ascii: "["))
            for (position, element) in elements.enumerated() {
                if position > 0 { bytes.append(UInt8(ascii: ",")) }
                element.write(to: &bytes)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            for (position, key) in members.keys.sorted().enumerated() {
                if position > 0 { bytes.append(UInt8(ascii: ",")) }
                JSONWriter.appendQuoted(key, to: &bytes)
                bytes.append(UInt8(ascii: ":"))
                members[key]!.write(to: &bytes)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
                     ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { $1 }))
    }
    public init(nilLiteral: ()) { self = .null }
}

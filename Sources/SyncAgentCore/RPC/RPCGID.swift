/// aria2's name for a download: 16 hex digits. A task's GID is a function
/// of its id alone, so it needs no event of its own and is the same after
/// any restart: an id that is itself 16 lowercase hex digits (one an RPC
/// client chose with the `gid` option) is its own GID; any other id is
/// hashed (FNV-1a, then SplitMix64's finaliser to spread it over all 64 bits).
public enum RPCGID {
    public static func of(taskID id: String) -> String {
        if isGID(id) { return id }
        return hex(number(of: id))
    }

    /// The GID of task `id` as the number its 16 hex digits spell.
    public static func number(of id: String) -> UInt64 {
        if isGID(id), let value = UInt64(id, radix: 16) { return value }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in id.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01B3
        }
        hash = (hash ^ (hash >> 30)) &* 0xbf58_476d_1ce4_e5b9
        hash = (hash ^ (hash >> 27)) &* 0x94d0_49bb_1331_11eb
        hash ^= hash >> 31
        return hash
    }

    /// Exactly 16 lowercase hex digits.
    public static func isGID(_ text: String) -> Bool {
        text.utf8.count == 16 && text.utf8.allSatisfy(isLowerHex)
    }

    /// What a client may name a download by: a GID or a prefix of one (aria2
    /// takes any unique prefix), in either case. Nil: not hex at all.
    public static func normalizedQuery(_ text: String) -> String? {
        let lowered = text.lowercased()
        guard !lowered.isEmpty, lowered.utf8.count <= 16, lowered.utf8.allSatisfy(isLowerHex) else { return nil }
        return lowered
    }

    static func hex(_ value: UInt64) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8](repeating: 0, count: 16)
        for position in 0..<16 { out[position] = digits[Int((value >> (60 - 4 * UInt64(position))) & 0xF)] }
        return String(decoding: out, as: UTF8.self)
    }

    private static func isLowerHex(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"))
    }
}

/// The RPC secret, compared in time that does not depend on where a guess
/// goes wrong: every byte of the longer of the two is looked at, and the
/// lengths are compared in the same pass.
public struct RPCSecret: Sendable, Equatable {
    private let bytes: [UInt8]

    public init(_ text: String) { bytes = Array(text.utf8) }

    public var isEmpty: Bool { bytes.isEmpty }

    /// Whether `offered` (what followed `token:`) is the secret.
    public func matches(_ offered: String) -> Bool {
        let guess = Array(offered.utf8)
        var difference = UInt64(guess.count ^ bytes.count)
        let length = max(guess.count, bytes.count)
        for position in 0..<length {
            let mine = position < bytes.count ? bytes[position] : 0
            let theirs = position < guess.count ? guess[position] : 0
            difference |= UInt64(mine ^ theirs)
        }
        return difference == 0 && !bytes.isEmpty
    }

    /// A new secret: 32 random bytes as 64 hex digits.
    public static func random() -> String {
        (0..<4).map { _ in RPCGID.hex(UInt64.random(in: 0...UInt64.max)) }.joined()
    }
}

import Foundation

extension UnsafeRawBufferPointer {
    /// The same bytes: the readers of the log and of snapshots ask this once
    /// per field or key, where a generic comparison walked the bytes through
    /// a collection's indices. Short ones (keys, type names, ids) are compared
    /// in place, inlined: a `memcmp` call for each candidate of a decoder's
    /// `switch` was a tenth of decoding a `progressed` event (callgrind).
    @inline(__always)
    public func sameBytes(as other: UnsafeRawBufferPointer) -> Bool {
        guard count == other.count else { return false }
        if count <= 16 {
            for offset in 0..<count where self[offset] != other[offset] { return false }
            return true
        }
        return memcmp(baseAddress!, other.baseAddress!, count) == 0
    }
}

extension String {
    /// Whether this string's UTF-8 is exactly `raw` (a value read in place,
    /// recognised without making a new string of it).
    public func hasUTF8(_ raw: UnsafeRawBufferPointer) -> Bool {
        guard utf8.count == raw.count else { return false }
        var string = self
        return string.withUTF8 { UnsafeRawBufferPointer($0).sameBytes(as: raw) }
    }
}

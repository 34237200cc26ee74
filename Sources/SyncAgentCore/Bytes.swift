import Foundation

extension UnsafeRawBufferPointer {
    /// The same bytes, compared by `memcmp`: the readers of the log and of
    /// snapshots ask this once per field, where a generic comparison walked
    /// the bytes one at a time.
    public func sameBytes(as other: UnsafeRawBufferPointer) -> Bool {
        count == other.count && (count == 0 || memcmp(baseAddress!, other.baseAddress!, count) == 0)
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

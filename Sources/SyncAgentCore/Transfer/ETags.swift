/// Entity tags (RFC 9110 §8.8.3): `"xyz"` is strong, `W/"xyz"` weak.
public enum ETags {
    /// A weak ETag cannot guard a byte range (RFC 9110 §13.1.5): only a strong one may go in `If-Range`.
    public static func isStrong(_ etag: String) -> Bool {
        etag.hasPrefix("\"")
    }

    public static func isWeak(_ etag: String) -> Bool {
        etag.hasPrefix("W/")
    }

    /// The tag without its weakness mark, for the weak comparison (RFC 9110 §8.8.3.2):
    /// `W/"1"` and `"1"` name the same representation.
    public static func opaque(_ etag: String) -> Substring {
        isWeak(etag) ? etag.dropFirst(2) : Substring(etag)
    }
}

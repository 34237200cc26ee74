import Foundation

/// Secrets never reach output (SPEC §7): what counts as one, and how a URL
/// or a header is shown without it. The log keeps the real values (a
/// resume needs the signed URL); everything printed goes through here.
public enum Redaction {
    public static let placeholder = "<redacted>"

    /// Header names and query parameter names that carry credentials, by
    /// the words they contain: `Authorization`, `X-Api-Key`, `Cookie`,
    /// `access_token`, `X-Amz-Signature`, `client_secret`, `password`, …
    private static let secretWords = ["auth", "token", "key", "secret", "cookie", "passw", "signature", "credential", "session"]
    /// Parameter names that are secrets only as whole words (`sig` but not `design`).
    private static let secretNames: Set<String> = ["sig", "pwd", "pass", "code", "jwt", "ticket"]

    public static func isSecretName(_ name: String) -> Bool {
        let lower = name.lowercased()
        return secretNames.contains(lower) || secretWords.contains { lower.contains($0) }
    }

    /// The URL with its userinfo and credential-like query values replaced:
    /// `https://<redacted>@host/f?token=<redacted>&page=2`. Text that is not
    /// a URL is returned with any `user:pass@` prefix hidden all the same.
    /// A URL inside it (a parameter's value, a proxy's path), plain or
    /// percent-encoded at any depth, is held to the same rules.
    public static func url(_ text: String) -> String { url(text, depth: 0) }

    /// URLs nested deeper than this are hidden whole rather than read on: a
    /// URL of a few KiB cannot make the redaction recurse without end.
    private static let deepestNesting = 4

    private static func url(_ text: String, depth: Int) -> String {
        // Without userinfo, query, fragment or an escape there is nothing to hide:
        // the common case, and the agent logs a URL for every job it takes.
        guard text.utf8.contains(where: { $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#")
                                          || $0 == UInt8(ascii: "%") }) else { return text }
        guard let schemeEnd = text.range(of: "://") else {
            // No scheme (a proxy written `user:password@host:3128`, curl's http): its userinfo all the same.
            let authority = text.prefix { $0 != "/" }
            guard let at = authority.lastIndex(of: "@") else { return text }
            return placeholder + text[at...]
        }
        let afterScheme = text[schemeEnd.upperBound...]
        let authorityEnd = afterScheme.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? afterScheme.endIndex
        var out = String(text[..<schemeEnd.upperBound])
        let authority = afterScheme[..<authorityEnd]
        if let at = authority.lastIndex(of: "@") {
            out += placeholder + "@" + authority[authority.index(after: at)...]
        } else {
            out += authority
        }
        let rest = afterScheme[authorityEnd...]
        // The query, and a fragment written like one (OAuth puts access_token there).
        let fragmentStart = rest.firstIndex(of: "#") ?? rest.endIndex
        var path = rest[..<fragmentStart]
        if let question = path.firstIndex(of: "?") {
            out += redactNested(inPath: path[..<question], depth: depth) + "?" + redactPairs(path[path.index(after: question)...], depth: depth)
        } else {
            out += redactNested(inPath: path, depth: depth)
        }
        path = rest[fragmentStart...]
        if !path.isEmpty { out += "#" + redactPairs(path.dropFirst(), depth: depth) }
        return out
    }

    /// A path that carries a URL (`/fetch/https%3A%2F%2Fh%2F%3Ftoken%3D…`, a
    /// proxy's or a CDN's way): from that URL on it is hidden when the URL,
    /// decoded, holds anything to hide; otherwise it is kept as it was.
    private static func redactNested(inPath path: Substring, depth: Int) -> String {
        guard let start = nestedURLStart(in: path) else { return String(path) }
        let nested = String(path[start...])
        let decoded = decodedFully(nested)
        return String(path[..<start]) + (hidesSomething(decoded, depth: depth) ? placeholder : nested)
    }

    /// Percent-decoded until nothing changes (at most `deepestNesting` times):
    /// a URL escaped twice (`http%253A%252F%252F…`) is read as the URL it is.
    private static func decodedFully(_ text: String) -> String {
        var current = text
        for _ in 0..<deepestNesting {
            guard current.contains("%"), let decoded = current.removingPercentEncoding, decoded != current else { break }
            current = decoded
        }
        return current
    }

    /// Where a URL starts inside `text`: the scheme before a `://`, written plainly or percent-encoded (once or twice).
    private static func nestedURLStart(in text: Substring) -> Substring.Index? {
        let marks = ["://", "%3a%2f%2f", "%253a%252f%252f"].compactMap { text.range(of: $0, options: .caseInsensitive) }
        guard let mark = marks.min(by: { $0.lowerBound < $1.lowerBound }) else { return nil }
        // Backed up over the scheme's letters.
        var start = mark.lowerBound
        while start > text.startIndex, text[text.index(before: start)].isLetter { start = text.index(before: start) }
        return start
    }

    /// Whether the URL (decoded) holds a secret the rules above would hide, looked at `depth + 1` deep.
    private static func hidesSomething(_ decoded: String, depth: Int) -> Bool {
        guard depth < deepestNesting else { return true }
        return url(decoded, depth: depth + 1) != decoded
    }

    /// `a=1&token=2` → `a=1&token=<redacted>`; a URL as a value
    /// (`?next=http://bob:pw@h/?token=t`) is redacted by the same rules,
    /// escaped (`next=https%3A%2F%2Fh%2F%3Fapi_key%3D…`) or not.
    private static func redactPairs(_ text: Substring, depth: Int) -> String {
        text.split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            guard let equals = pair.firstIndex(of: "=") else { return String(pair) }
            let name = String(pair[..<equals])
            let decoded = decodedFully(name)
            if isSecretName(decoded) { return name + "=" + placeholder }
            let value = String(pair[pair.index(after: equals)...])
            let decodedValue = decodedFully(value)
            guard decodedValue.contains("://") else { return String(pair) }
            guard hidesSomething(decodedValue, depth: depth) else { return String(pair) }
            // Written plainly, it stays readable with its secrets hidden; escaped, it goes whole.
            return name + "=" + (decodedValue == value && depth < deepestNesting ? url(value, depth: depth + 1) : placeholder)
        }.joined(separator: "&")
    }

    /// Every URL inside a sentence (a failure reason, an error) redacted.
    public static func text(_ sentence: String) -> String {
        guard sentence.contains("://") else { return sentence }
        var out = ""
        var rest = Substring(sentence)
        while let schemeEnd = rest.range(of: "://") {
            // Back up over the scheme's letters.
            var start = schemeEnd.lowerBound
            while start > rest.startIndex, rest[rest.index(before: start)].isLetter { start = rest.index(before: start) }
            let end = rest[schemeEnd.upperBound...].firstIndex { $0 == " " || $0 == "\"" || $0 == ")" || $0 == "\n" } ?? rest.endIndex
            out += rest[..<start]
            out += url(String(rest[start..<end]))
            rest = rest[end...]
        }
        return out + rest
    }
}

/// Text from outside (a URL's name, a job's dest, a server's reason) as it
/// may reach a terminal: control characters shown as `\x1B`, never sent
/// raw, so no job can draw fake lines or colours in `status`.
public enum Printable {
    public static func escaping(_ text: String) -> String {
        // Printable ASCII, most of what is shown, has nothing to escape: known from its bytes.
        if everyByte(of: text, isIn: 0x20...0x7E) { return text }
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if isControl(scalar) {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                // Past a byte, braced: "\x2066" would read as "\x20" and "66".
                out += scalar.value > 0xFF ? "\\u{" + hex + "}" : "\\x" + (hex.count < 2 ? "0" + hex : hex)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// JSON text safe to print: the characters `isControl` names that JSON
    /// allows raw in a string (DEL, C1, bidirectional overrides …) become
    /// `\uXXXX` escapes, which decode to the same string. (Those below
    /// U+0020 a JSON writer escapes already; outside strings they are layout.)
    public static func jsonSafe(_ json: String) -> String {
        if everyByte(of: json, isIn: 0...0x7E) { return json }
        var out = ""
        out.reserveCapacity(json.utf8.count)
        for scalar in json.unicodeScalars {
            if scalar.value >= 0x7F, isControl(scalar) {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Whether each UTF-8 byte of `text` is in `range`, read from the
    /// string's storage: `utf8.allSatisfy` with a closure took 250–400
    /// instructions a table cell, a tenth of `replay`'s table (callgrind).
    private static func everyByte(of text: String, isIn range: ClosedRange<UInt8>) -> Bool {
        let inStorage = text.utf8.withContiguousStorageIfAvailable { bytes in
            for byte in bytes where !range.contains(byte) { return false }
            return true
        }
        return inStorage ?? text.utf8.allSatisfy(range.contains)
    }

    /// C0 and C1 controls, and the format characters that make text read
    /// other than it is: bidirectional overrides and isolates (a name that
    /// shows as "exe.txt" but is "txt.exe"), line and paragraph separators,
    /// zero-width spaces and joiners' look-alikes, the byte-order mark.
    public static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7F...0x9F: true
        // Zero-width and bidirectional marks (U+061C, Arabic letter mark, among them): they reorder or hide what is shown.
        case 0x061C, 0x200B...0x200F, 0x2028...0x202E, 0x2060...0x2069, 0xFEFF: true
        default: false
        }
    }

    /// Terminal cells a text takes: wide (East Asian, emoji) characters two,
    /// combining marks and zero-width characters none, the rest one.
    public static func cells(_ text: String) -> Int {
        // Most of what status prints is ASCII: one cell a byte, no Unicode tables asked.
        if everyByte(of: text, isIn: 0...0x7F) { return text.utf8.count }
        var total = 0
        for character in text { total += cells(character) }
        return total
    }

    public static func cells(_ character: Character) -> Int {
        var width = 0
        for scalar in character.unicodeScalars {
            let properties = scalar.properties
            if properties.isEmojiPresentation || isWide(scalar.value) { return 2 }
            switch properties.generalCategory {
            case .nonspacingMark, .enclosingMark, .format: continue
            default: width = 1
            }
        }
        return width
    }

    /// Unicode's East Asian Wide and Fullwidth blocks, in short.
    private static func isWide(_ value: UInt32) -> Bool {
        switch value {
        case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
             0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6,
             0x1F300...0x1F64F, 0x1F900...0x1F9FF, 0x20000...0x3FFFD: true
        default: false
        }
    }
}

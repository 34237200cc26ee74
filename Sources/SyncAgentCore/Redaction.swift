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
    public static func url(_ text: String) -> String {
        guard let schemeEnd = text.range(of: "://") else { return text }
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
            out += path[...question] + redactPairs(path[path.index(after: question)...])
        } else {
            out += path
        }
        path = rest[fragmentStart...]
        if !path.isEmpty { out += "#" + redactPairs(path.dropFirst()) }
        return out
    }

    /// `a=1&token=2` → `a=1&token=<redacted>`.
    private static func redactPairs(_ text: Substring) -> String {
        text.split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            guard let equals = pair.firstIndex(of: "=") else { return String(pair) }
            let name = String(pair[..<equals])
            let decoded = name.removingPercentEncoding ?? name
            return isSecretName(decoded) ? name + "=" + placeholder : String(pair)
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
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if isControl(scalar) {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                out += "\\x" + (hex.count < 2 ? "0" + hex : hex)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    public static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }
}

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
        guard let question = rest.firstIndex(of: "?") else { return out + rest }
        out += rest[...question]
        let afterQuestion = rest[rest.index(after: question)...]
        let fragmentStart = afterQuestion.firstIndex(of: "#") ?? afterQuestion.endIndex
        let pairs = afterQuestion[..<fragmentStart].split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
            guard let equals = pair.firstIndex(of: "=") else { return String(pair) }
            let name = String(pair[..<equals])
            let decoded = name.removingPercentEncoding ?? name
            return isSecretName(decoded) ? name + "=" + placeholder : String(pair)
        }
        return out + pairs.joined(separator: "&") + afterQuestion[fragmentStart...]
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

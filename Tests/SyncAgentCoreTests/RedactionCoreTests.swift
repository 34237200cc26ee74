import Foundation
import Testing
@testable import SyncAgentCore

/// What is printed of what the agent was given or sent: secrets redacted
/// (userinfo, credential parameters, credential headers), control
/// characters escaped.
@Suite("Redaction and escaping")
struct RedactionCoreTests {
    @Test func urlsLoseTheirUserinfoAndCredentialParameters() {
        #expect(Redaction.url("https://user:pass@example.com/f.iso?access_token=abc&page=2&sig=x#frag")
                == "https://<redacted>@example.com/f.iso?access_token=<redacted>&page=2&sig=<redacted>#frag")
        #expect(Redaction.url("https://s3.example.com/b/k?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA&X-Amz-Date=1")
                == "https://s3.example.com/b/k?X-Amz-Signature=<redacted>&X-Amz-Credential=<redacted>&X-Amz-Date=1")
        #expect(Redaction.url("http://example.com/design?key=1&password=2&token=3")
                == "http://example.com/design?key=<redacted>&password=<redacted>&token=<redacted>")
        #expect(Redaction.url("http://example.com/plain") == "http://example.com/plain")
        // Nothing to hide without userinfo, query or fragment: the text comes back as it was.
        for plain in ["http://example.com/a/b.iso", "https://[::1]:8443/x", "ftp://h/%40", "not a url", "http://h/a;b=c"] {
            #expect(Redaction.url(plain) == plain)
        }
        #expect(Redaction.url("http://h/p@q/f?key=1") == "http://h/p@q/f?key=<redacted>")
        // Credentials inside a parameter's value (a URL in a URL) are hidden too.
        #expect(Redaction.url("http://h/login?redirect_to=http://bob:pw2@other/x&page=2")
                == "http://h/login?redirect_to=http://<redacted>@other/x&page=2")
        #expect(Redaction.url("http://h/login?next=http%3A%2F%2Fbob%3Apw2%40other%2F&page=2")
                == "http://h/login?next=<redacted>&page=2")
        #expect(Redaction.url("http://h/go?to=http://other/x") == "http://h/go?to=http://other/x")
        #expect(Redaction.text("server answered 404 Not Found for http://u:p@h/x?token=t (retrying)")
                == "server answered 404 Not Found for http://<redacted>@h/x?token=<redacted> (retrying)")
    }

    /// A URL carried percent-encoded inside another (a login's `next`, a
    /// proxy's path) kept its credentials in plain sight until a redirect
    /// made it the current URL (issue 42): it is read decoded, at any depth.
    @Test func credentialsInAnEscapedNestedURLAreRedacted() {
        #expect(Redaction.url("https://h/login?next=https%3A%2F%2Fx%2F%3Fapi_key%3DSECRET&page=2")
                == "https://h/login?next=<redacted>&page=2")
        // Twice escaped, a URL in a URL in a URL.
        #expect(Redaction.url("https://h/a?next=https%3A%2F%2Fx%2F%3Fthen%3Dhttps%253A%252F%252Fy%252F%253Ftoken%253DDEEP")
                == "https://h/a?next=<redacted>")
        // A URL itself escaped twice, in a value and in a path (found by an adversary).
        #expect(Redaction.url("http://h/a?next=http%253A%252F%252Fh%252F%253Fpassword%253DSEC") == "http://h/a?next=<redacted>")
        #expect(Redaction.url("https://proxy/fetch/https%253A%252F%252Fx%252F%253Fsig%253DSEC") == "https://proxy/fetch/<redacted>")
        // Plain, it stays readable with the secret hidden.
        #expect(Redaction.url("https://h/a?next=https://x/?api_key=SECRET") == "https://h/a?next=https://x/?api_key=<redacted>")
        // In a path (a proxy's way): from the nested URL on.
        #expect(Redaction.url("https://proxy/fetch/https%3A%2F%2Fx%2Ff%3Fsig%3DSECRET") == "https://proxy/fetch/<redacted>")
        #expect(Redaction.url("https://proxy/fetch/HTTPS%3a%2f%2fbob%3Apw%40x%2Ff") == "https://proxy/fetch/<redacted>")
        #expect(Redaction.url("https://proxy/fetch/https://bob:pw@x/f") == "https://proxy/fetch/<redacted>")
        // In a fragment, and in a sentence.
        #expect(Redaction.url("https://h/cb#next=https%3A%2F%2Fx%2F%3Ftoken%3DT") == "https://h/cb#next=<redacted>")
        #expect(Redaction.text("server answered 404 for https://h/a?next=https%3A%2F%2Fx%2F%3Fapi_key%3DS (retrying)")
                == "server answered 404 for https://h/a?next=<redacted> (retrying)")
        // A nested URL with nothing to hide is left as it was, escaped or not.
        for kept in ["https://h/login?next=https%3A%2F%2Fx%2Fpage%3Fn%3D2", "https://proxy/fetch/https%3A%2F%2Fx%2Ff.iso",
                     "https://h/a%20b/c.iso", "https://h/go?to=http://other/x"] {
            #expect(Redaction.url(kept) == kept)
        }
        // However deep the nesting, redaction ends: past four levels a nested URL goes whole.
        var deep = "https://x/?token=T"
        for _ in 0..<40 { deep = "https://h/?u=" + deep.addingPercentEncoding(withAllowedCharacters: .alphanumerics)! }
        #expect(Redaction.url(deep) == "https://h/?u=<redacted>")
    }

    @Test func aFragmentWrittenLikeAQueryIsRedactedToo() {
        #expect(Redaction.url("https://h/cb#access_token=abc&state=1") == "https://h/cb#access_token=<redacted>&state=1")
        #expect(Redaction.url("https://h/page#section-2") == "https://h/page#section-2")
    }

    @Test func credentialHeadersAreSecretByTheirNames() {
        for name in ["Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key", "X-Auth-Token",
                     "Client-Secret", "X-Session-Id"] {
            #expect(Header(name: name, value: "v").isSecret, "\(name)")
        }
        for name in ["Accept", "Content-Type", "User-Agent", "Range"] {
            #expect(!Header(name: name, value: "v").isSecret, "\(name)")
        }
    }

    /// `status --task` prints a response's headers: a server's escape
    /// sequence (clear screen, window title) reaches no terminal raw.
    @Test func aHeaderIsPrintedWithItsControlCharactersEscaped() {
        #expect(Header(name: "X-Bad", value: "\u{1B}[2J zz").printable == "X-Bad: \\x1B[2J zz")
        #expect(Header(name: "ETag", value: "\"\u{1B}]0;pwned\u{07}\"").printable == "ETag: \"\\x1B]0;pwned\\x07\"")
        #expect(Header(name: "X-Api-Key", value: "\u{1B}secret").printable == "X-Api-Key: <redacted>")
        #expect(Header(name: "Content-Type", value: "text/plain").printable == "Content-Type: text/plain")
    }

    @Test func controlCharactersAreShownNotSent() throws {
        #expect(Printable.escaping("evil\u{1B}[31m\nname\u{7F}") == "evil\\x1B[31m\\x0Aname\\x7F")
        #expect(Printable.escaping("plain naïve") == "plain naïve")
        // The edges of printable ASCII, which is passed through without a look at its scalars.
        #expect(Printable.escaping(" ~\u{7F}\u{1F}") == " ~\\x7F\\x1F")
        #expect(Printable.escaping("a\u{202E}b") == "a\\u{202E}b")
        #expect(Printable.escaping("a\u{2066}b\u{61C}") == "a\\u{2066}b\\u{61C}")
        // JSON keeps its meaning: the escapes decode to the same string.
        let json = "{\"a\" : \"x\u{202E}y\u{7F}\u{85}é\u{1F600}\"}"
        let safe = Printable.jsonSafe(json)
        #expect(safe == "{\"a\" : \"x\\u202Ey\\u007F\\u0085é\u{1F600}\"}")
        let decode = { (text: String) in try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: String] }
        #expect(try decode(safe) == decode(json))
        #expect(Printable.jsonSafe("{\n  \"plain\" : 1\n}") == "{\n  \"plain\" : 1\n}")
        #expect(URLRules.fileName(from: "http://h/evil%1B%5B31m%0Aevil.bin") == "evil_[31m_evil.bin")
        #expect(throws: KeyError.self) { try JobParser(downloadDir: "/dl").parse(Array("url = \"http://h/x\"\ndest = \"a\\nb\"\n".utf8)) }
    }
}

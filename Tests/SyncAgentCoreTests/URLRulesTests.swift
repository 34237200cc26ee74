import Foundation
import Testing
@testable import SyncAgentCore

/// A URL's host as `max_per_host` counts it, and the URLs curl would
/// refuse, refused at intake instead.
@Suite("URL rules: host keys, and what curl would refuse")
struct URLRulesTests {
    /// `max_per_host` counts by `hostKey`: its fast path for plain URLs must
    /// say what URLComponents says, and leave every other URL to it.
    @Test(arguments: [
        "http://127.0.0.1:8080/f.bin", "https://Example.COM/a?b=c#d", "http://h", "http://h:/x", "https://h:08443/",
        "http://user:pa:ss@host.example:81/p", "http://user@h/", "HTTP://H.example/x", "http://h?q=1", "http://h#frag",
        "http://a-b.c-d.example:65535/", "http://h:65536/", "http://h:99999/", "http://h:8x/", "http://[::1]:8080/x",
        "http://ex%41mple.com/", "http://bücher.example/", "http://h:-1/", "ftp://h/x", "http:/h/x", "http://@/x",
    ])
    func aPlainURLsHostKeyIsURLComponentsOne(_ url: String) {
        guard let plain = URLRules.plainHostKey(url) else { return }
        let components = URLComponents(string: url)
        let port = components?.port ?? (components?.scheme?.lowercased() == "https" ? 443 : 80)
        #expect(plain == "\(URLRules.canonicalHost(components?.host ?? "")):\(port)")
    }

    /// Every spelling of one IPv4 address is one host: under `max_per_host = 1`
    /// they get one slot between them (curl connects them all to 127.0.0.1).
    @Test func everySpellingOfOneAddressIsOneHost() {
        for host in ["127.0.0.1", "127.1", "2130706433", "0x7f.0.0.1", "0x7F000001", "0177.0.0.1", "127.0.0.1.",
                     "%31%32%37.0.0.1", "127.0.0.%31", "127.0.1"] {
            #expect(URLRules.hostKey("http://\(host):8080/x") == "127.0.0.1:8080", "\(host)")
        }
        #expect(URLRules.hostKey("http://Example.COM./x") == "example.com:80")
        #expect(URLRules.hostKey("http://1.2.3.4.5/x") == "1.2.3.4.5:80")
        #expect(URLRules.hostKey("http://256.0.0.1/x") == "256.0.0.1:80")
        #expect(URLRules.hostKey("https://h1/x") == "h1:443")
        // IPv6: one text form per address, and a mapped IPv4 address is that address.
        for host in ["[::ffff:7f00:1]", "[0:0:0:0:0:ffff:7f00:1]", "[::ffff:7f00:0001]", "[::ffff:127.0.0.1]", "[::FFFF:7F00:1]"] {
            #expect(URLRules.hostKey("http://\(host):8080/x") == "127.0.0.1:8080", "\(host)")
        }
        #expect(URLRules.hostKey("http://[0:0:0:0:0:0:0:1]:8080/") == URLRules.hostKey("http://[::1]:8080/"))
        #expect(URLRules.hostKey("http://[fe80::1%25lo]:8080/") != URLRules.hostKey("http://[fe80::1]:8080/"))
    }

    /// The fast path's test of an address inet_ntoa would write: anything else goes the canonical way.
    @Test func aDottedQuadIsFourPlainNumbersUpTo255() {
        for quad in ["127.0.0.1", "0.0.0.0", "255.255.255.255", "10.20.30.40", "1.0.10.100"] {
            #expect(URLRules.isDottedQuad(ArraySlice(quad.utf8)), "\(quad)")
        }
        for other in ["", ".", "1.2.3", "1.2.3.4.5", "1.2.3.", ".1.2.3", "1..2.3", "256.0.0.1", "01.2.3.4", "1.2.3.00",
                      "1.2.3.0255", "1.2.3.a", "0x7f.0.0.1", "1.2.3.4 ", "999.1.1.1"] {
            #expect(!URLRules.isDottedQuad(ArraySlice(other.utf8)), "\(other)")
        }
    }

    /// What curl would refuse at the first attempt is refused at intake, with the reason.
    @Test(arguments: [
        ("http://127.0.0.1:0/a", "has port 0"), ("http://127.0.0.1:65536/a", "has port 65536"),
        ("http://127.0.0.1:99999999999999999999999/a", "has port 99999999999999999999999"),
        ("http://[::1]:65536/a", "has port 65536"), ("http://[]:8080/a", "has no host"),
        ("http://user:pa@ss@127.0.0.1/a", "more than one '@'"), ("http://u@v@w@h/a", "more than one '@'"),
        ("http://[127.0.0.1]:8080/a", "which is no IPv6 address"), ("http://[::1:]:8080/a", "which is no IPv6 address"),
        ("http://[1:2:3:4:5:6:7:8:9]/a", "which is no IPv6 address"), ("http://[fe80::1%]:8080/a", "which is no IPv6 address"),
        ("http://127.0.0.1:1x/a", "is not a valid URL"),
    ])
    func urlsCurlWouldRefuseAreRefusedAtIntake(_ url: String, _ words: String) {
        do {
            try URLRules.checkTransferURL(url, key: "url")
            Issue.record("accepted \(url)")
        } catch {
            #expect("\(error)".contains(words), "\(error)")
            #expect("\(error)".hasPrefix("key \"url\""))
        }
    }

    /// The URL is quoted once, its control characters escaped so the
    /// message stays one line.
    @Test(arguments: [
        ("http://x y/", #"key "url" must not contain spaces or control characters: "http://x y/""#),
        ("http://h/a\nb", #"key "url" must not contain spaces or control characters: "http://h/a\nb""#),
        ("http://u:s3cret@h/a b", #"key "url" must not contain spaces or control characters: "http://<redacted>@h/a b""#),
    ])
    func aURLWithASpaceIsQuotedOnce(_ url: String, _ message: String) {
        #expect(throws: KeyError.self) { try URLRules.checkTransferURL(url, key: "url") }
        do { try URLRules.checkTransferURL(url, key: "url") } catch { #expect("\(error)" == message) }
    }

    /// What `submit` takes as an https URL when no scheme was typed, and what it leaves alone.
    @Test(arguments: [
        ("example.com/a.iso", "https://example.com/a.iso"), ("example.com", "https://example.com"),
        ("localhost:8443/x?y=1", "https://localhost:8443/x?y=1"), ("user@example.com/f", "https://user@example.com/f"),
        ("http://example.com/a", nil), ("ftp://example.com/a", nil), ("/home/me/a.iso", nil), ("./a.iso", nil),
        ("mailto:me@example.com", nil), ("example.com:http/x", nil), ("a b/c", nil), ("", nil),
    ])
    func noSchemeIsTakenAsHTTPS(_ typed: String, _ url: String?) {
        #expect(URLRules.assumingHTTPS(typed) == url)
    }

    @Test(arguments: ["http://h:/x", "http://[::1]:8080/x", "http://u%40x:p@h/x", "https://h:65535", "http://h/a@b?c=@#@",
                      "http://127.0.0.1:018232/x", "http://h:0000000000018232/x", "http://[fe80::1%25lo]:8080/x"])
    func unusualButValidURLsAreTaken(_ url: String) throws {
        try URLRules.checkTransferURL(url, key: "url")
    }
}

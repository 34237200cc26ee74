import Testing
@testable import SyncAgentCore

/// `proxy` and `no_proxy` in the config, and what a proxy's refusal means
/// (issue 38 item 6): never a credential in a sentence, never a retry that
/// cannot change the proxy's mind.
@Suite("Proxies: the config's keys and a proxy's refusals")
struct ProxyRulesTests {
    @Test func aProxyTheConfigMayNameIsTaken() throws {
        for proxy in ["socks5h://127.0.0.1:1080", "SOCKS5://u:p@h:1080", "http://proxy:3128", "https://proxy", "socks4a://h:1",
                      "proxy.lan:3128", "user:pw@proxy.lan:3128"] {
            #expect(try AgentConfig.parse("proxy = \"\(proxy)\"").proxy == proxy)
        }
        #expect(try AgentConfig.parse("no_proxy = \"localhost, .lan,10.0.0.0/8\"").noProxy == "localhost, .lan,10.0.0.0/8")
        #expect(try AgentConfig.parse("").noProxy == nil)
        #expect(AgentConfig.changes(from: AgentConfig(), to: try AgentConfig.parse("no_proxy = \"*\"")) == ["no_proxy"])
    }

    @Test(arguments: [
        ("proxy = \"sock5h://alice:hunter2@h:1080\"",
         "key \"proxy\" has the scheme \"sock5h\", which is none of http, https, socks4, socks4a, socks5, socks5h (sock5h://<redacted>@h:1080)"),
        ("proxy = \"socks5h://alice:hunter2@:1080\"", "key \"proxy\" names no host (socks5h://<redacted>@:1080)"),
        ("proxy = \"socks5h://\"", "key \"proxy\" names no host (socks5h://)"),
        ("proxy = \"socks5h://alice:hunter 2@h:1080\"",
         "key \"proxy\" must not contain spaces or control characters (socks5h://<redacted>@h:1080)"),
        ("no_proxy = \"a\\nb\"", "key \"no_proxy\" must not contain control characters"),
    ])
    func aProxyTheConfigCannotMeanIsRefusedWithoutItsLogin(_ text: String, _ message: String) {
        #expect(throws: KeyError.self) { try AgentConfig.parse(text) }
        do { _ = try AgentConfig.parse(text) } catch { #expect("\(error)" == message) }
    }

    /// A proxy written without a scheme (curl takes it for http) kept its password in sight:
    /// `Redaction.url` read no userinfo without `://`, and the aria2 RPC showed it in `all-proxy`.
    @Test func aProxyWithoutASchemeLosesItsLoginToo() {
        #expect(Redaction.url("alice:hunter2@proxy.lan:3128") == "<redacted>@proxy.lan:3128")
        #expect(ProxyRules.shown("alice:hunter2@proxy.lan:3128") == "http://<redacted>@proxy.lan:3128")
        #expect(ProxyRules.shown("socks5h://a%40b:p%3Aw@h:1080") == "socks5h://<redacted>@h:1080")
        #expect(Redaction.url("relative/p@th.ts") == "relative/p@th.ts")
    }

    @Test(arguments: [
        (ProxyRules.Refusal.credentials, false), (.noAcceptableLogin, false), (.notAllowed, false),
        (.serverUnreachable, true), (.other, true),
    ])
    func aRefusalNoRetryChangesFailsAtOnce(_ refusal: ProxyRules.Refusal, _ retried: Bool) {
        let outcome = ProxyRules.outcome(of: refusal, proxy: "socks5h://bob:s3cret@h:1080", url: "http://x/f?token=T",
                                         curlWords: "User was rejected by the SOCKS5 server (1 1).")
        let reason = outcome.failureReason ?? ""
        #expect(reason.hasPrefix("the proxy socks5h://<redacted>@h:1080 "), "\(reason)")
        #expect(!reason.contains("s3cret") && !reason.contains("=T"))
        if retried {
            guard case .transient = outcome else { Issue.record("\(refusal) is not retried"); return }
        } else {
            #expect(outcome == .permanent(reason: reason, code: .proxyRefused))
        }
        #expect(FailureCode(rawValue: "proxy_refused") == .proxyRefused)
    }
}

import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `proxy = "socks5h://…"` and `no_proxy` (issue 38 item 6) against a real
/// SOCKS5 server, Debian's dante, run by each test on an address of its own
/// with a config the test writes; its log says what went through it.
@Suite("SOCKS proxies: dante between the agent and nginx", .serialized)
struct ProxyTests {
    /// A network namespace of the test's own, or nil (the test skips, saying why) where none can be made.
    func makeLab() throws -> NetworkLab? {
        do { return try NetworkLab() } catch let unavailable as NetworkLab.Unavailable {
            print("skipped: \(unavailable)")
            return nil
        }
    }

    /// Everything a user or a script can read of the agent's doings: its output, every view
    /// of the log, the hooks' log and the rejected jobs' reasons.
    func everythingPrinted(_ harness: AgentHarness, agent: ChildProcess) throws -> String {
        var outputs = [agent.stdout, agent.stderr]
        for command in [["status"], ["status", "--json"], ["status", "--all"], ["status", "--task", "p"], ["events"], ["events", "--json"],
                        ["replay"], ["replay", "--json"], ["replay", "--verify"]] {
            let result = try harness.run(command)
            outputs += [result.stdout, result.stderr]
        }
        outputs.append((try? String(contentsOfFile: harness.stateDir + "/hooks.log", encoding: .utf8)) ?? "")
        return outputs.joined(separator: "\n")
    }

    /// The agent runs in a namespace where the only way out is dante (on the lab's host
    /// address): nginx listens on this side's 127.0.0.1, which inside is the namespace's own,
    /// with nothing on it. A direct request cannot reach it; through the proxy it can, and the
    /// name `localhost` goes to dante unresolved, as `socks5h` asks.
    @Test func aDownloadGoesThroughSOCKS5hAndNoOtherWay() throws {
        guard let lab = try makeLab() else { return }
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("f.bin", size: 3 << 20)
        let dante = try SocksProxy(in: harness.directory, host: lab.hostAddress, login: false)
        try harness.drop("p.job", "id = \"p\"\nurl = \"http://localhost:\(nginx.port)/f.bin\"\n")
        // Without the proxy the same file cannot be fetched from inside: nothing listens there.
        try harness.drop("d.job", "id = \"d\"\nurl = \"http://127.0.0.1:\(nginx.port)/f.bin\"\ndest = \"direct.bin\"\n")
        try "download_dir = \"\(harness.downloads)\"\nproxy = \"\(dante.url())\"\nno_proxy = \"127.0.0.1\"\nretries = 0\n"
            .write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        let (executable, arguments) = lab.command([syncagentBinary, "run", "--exit-when-idle"] + harness.globalFlags)
        let agent = try ChildProcess(executable, arguments, environment: harness.environment, outputIn: harness.directory.path)
        #expect(agent.wait(seconds: 60) == 4, "\(agent.stderr.suffix(2000))")
        let tasks = try harness.tasksByID()
        #expect(tasks["p"]?["state"] as? String == "finished", "\(tasks["p"]?["error"] ?? "")")
        #expect(FileManager.default.contents(atPath: harness.downloads + "/f.bin") == data)
        // The job no_proxy sent direct found nothing: there is no way around the proxy.
        #expect(tasks["d"]?["state"] as? String == "failed")
        #expect((tasks["d"]?["error"] as? String)?.contains("127.0.0.1") == true, "\(tasks["d"]?["error"] ?? "")")
        // dante passed exactly one connection, from the namespace, and was asked for the name.
        #expect(dante.connectionsPassed.count == 1, "\(dante.log.suffix(2000))")
        #expect(dante.connectionsPassed.first?.contains(lab.innerAddress) == true)
        #expect(dante.namesAskedFor == ["localhost.\(nginx.port)"], "\(dante.log.suffix(2000))")
        #expect(nginx.requests.map(\.uri) == ["/f.bin"])
        try expectVerifyClean(harness)
    }

    /// SOCKS5 with a user name and password (RFC 1929), checked by dante against a local user
    /// made for the test. The password (with an `@`, a `:` and a `/`, percent-encoded in the
    /// URL) is nowhere in what the agent prints or records, nor in the hooks' log, nor in what
    /// its aria2 RPC says of its options.
    @Test func aLoginIsUsedAndNeverShown() throws {
        let user = try LocalUser(prefix: "sa-socks-")
        let password = "Pw@\(UInt32.random(in: 100_000...999_999)):x/y"
        try user.setPassword(password)
        let records = TempDirectory()
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("f.bin", size: 1 << 20)
        let dante = try SocksProxy(in: harness.directory, login: true)
        let rpcPort = freePort()
        let proxy = dante.url(user: user.name, password: password)
        try """
            download_dir = "\(harness.downloads)"
            proxy = "\(proxy)"
            on_task_end = ["/bin/sh", "-c", "env; echo \\"error: $SYNCAGENT_ERROR\\"; cat '\(harness.configFile)' >/dev/null"]
            rpc = true
            rpc_listen = "127.0.0.1:\(rpcPort)"
            rpc_secret = "rpc-secret-1"

            """.write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        try harness.drop("p.job", "id = \"p\"\nurl = \"http://localhost:\(nginx.port)/f.bin\"\n")
        let agent = try harness.startAgent()
        defer {
            agent.signal(SIGTERM)
            _ = agent.wait(seconds: 10)
        }
        #expect(harness.waitForEvent("hook_ended", task: "p", within: 60), "\(agent.stderr.suffix(2000))")
        #expect(FileManager.default.contents(atPath: harness.downloads + "/f.bin") == data)
        #expect(dante.connectionsPassed.count == 1 && dante.connectionsPassed[0].contains("username%\(user.name)@"),
                "\(dante.log.suffix(2000))")
        // What the RPC tells of the agent's options names the proxy, its login hidden.
        let call = #"{"jsonrpc":"2.0","id":"1","method":"aria2.getGlobalOption","params":["token:rpc-secret-1"]}"#
        let answer = try ChildProcess("/usr/bin/curl", ["-sS", "--noproxy", "*", "-d", call, "http://127.0.0.1:\(rpcPort)/jsonrpc"],
                                      environment: [:], outputIn: records.path, name: "rpc")
        #expect(answer.wait(seconds: 30) == 0)
        #expect(answer.stdout.contains(#""all-proxy":"socks5h:\/\/<redacted>@127.0.0.1:\#(dante.port)""#)
                || answer.stdout.contains("\"all-proxy\":\"socks5h://<redacted>@127.0.0.1:\(dante.port)\""), "\(answer.stdout)")
        // A reload with another password records that the proxy changed, not what it is.
        try String(contentsOfFile: harness.configFile, encoding: .utf8)
            .replacingOccurrences(of: proxy, with: dante.url(user: user.name, password: password + "2"))
            .write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        #expect(harness.waitForEvent("config_reloaded") { ($0.data["applied"] as? [String]) == ["proxy"] })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let printed = try everythingPrinted(harness, agent: agent) + answer.stdout
        let encoded = password.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        for secret in [password, encoded, String(password.dropFirst(3).prefix(6))] {
            #expect(!printed.contains(secret), "the password leaked as \(secret)")
        }
    }

    /// A wrong password ends the task at once (retrying would not change dante's mind), saying
    /// which proxy refused it, its login hidden; so does a proxy that wants a login and got none.
    @Test func aRefusedLoginFailsAtOnceNamingTheProxy() throws {
        let user = try LocalUser(prefix: "sa-socks-")
        let password = "right-\(UInt32.random(in: 100_000...999_999))"
        try user.setPassword(password)
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("f.bin", size: 1000)
        let dante = try SocksProxy(in: harness.directory, login: true)
        let wrong = "wrong-\(UInt32.random(in: 100_000...999_999))"
        try """
            download_dir = "\(harness.downloads)"
            proxy = "\(dante.url(user: user.name, password: wrong))"
            retries = 5
            on_task_end = ["/bin/sh", "-c", "echo \\"error: $SYNCAGENT_ERROR\\""]

            """.write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        try harness.drop("p.job", "id = \"p\"\nurl = \"http://localhost:\(nginx.port)/f.bin\"\n")
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 4, "\(agent.stderr.suffix(2000))")
        let task = try #require(try harness.tasksByID()["p"])
        #expect(task["state"] as? String == "failed")
        #expect(task["attempts"] as? Int == 1)
        #expect(task["error_code"] as? String == "proxy_refused")
        let error = task["error"] as? String ?? ""
        #expect(error.hasPrefix("the proxy socks5h://<redacted>@127.0.0.1:\(dante.port) refused the user name and password"), "\(error)")
        #expect(dante.log.contains("system password authentication failed for user \"\(user.name)\""), "\(dante.log.suffix(2000))")
        #expect(dante.connectionsPassed.isEmpty && nginx.requests.isEmpty)
        let printed = try everythingPrinted(harness, agent: agent)
        #expect(printed.contains("refused the user name and password"))
        #expect(!printed.contains(wrong) && !printed.contains(password))

        // No login at all, to a proxy that wants one.
        let bare = try AgentHarness(config: "proxy = \"\(dante.url())\"\nretries = 5\n")
        try bare.drop("p.job", "id = \"p\"\nurl = \"http://localhost:\(nginx.port)/f.bin\"\n")
        #expect(try bare.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
        let refused = try #require(try bare.tasksByID()["p"])
        #expect(refused["attempts"] as? Int == 1 && refused["error_code"] as? String == "proxy_refused")
        #expect((refused["error"] as? String)?.hasPrefix("the proxy socks5h://127.0.0.1:\(dante.port) accepts none of the ways to log in") == true,
                "\(refused["error"] ?? "")")
    }

    /// `no_proxy` (the config's, or the environment's when the config sets none) sends its
    /// hosts direct; the rest go through dante, whose log counts them.
    @Test(arguments: [true, false])
    func noProxyHostsGoDirect(fromConfig: Bool) throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        let data = try nginx.serve("f.bin", size: 200_000)
        let dante = try SocksProxy(in: harness.directory, login: false)
        var config = "download_dir = \"\(harness.downloads)\"\nproxy = \"\(dante.url())\"\n"
        if fromConfig {
            config += "no_proxy = \"example.invalid, 127.0.0.1\"\n"
        } else {
            harness.extraEnvironment["no_proxy"] = "example.invalid,127.0.0.1"
        }
        try config.write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        try harness.drop("direct.job", "id = \"direct\"\nurl = \"http://127.0.0.1:\(nginx.port)/f.bin\"\ndest = \"direct.bin\"\n")
        try harness.drop("proxied.job", "id = \"proxied\"\nurl = \"http://localhost:\(nginx.port)/f.bin\"\ndest = \"proxied.bin\"\n")
        try harness.runUntilIdle()
        #expect(FileManager.default.contents(atPath: harness.downloads + "/direct.bin") == data)
        #expect(FileManager.default.contents(atPath: harness.downloads + "/proxied.bin") == data)
        // One connection through dante, asked for by name: the proxied job's; the direct one never reached it.
        #expect(dante.connectionsPassed.count == 1, "\(dante.log.suffix(2000))")
        #expect(dante.namesAskedFor == ["localhost.\(nginx.port)"])
        #expect(nginx.requests.count == 2)
    }

    /// A proxy the config cannot mean (a misspelt scheme) is refused as every other bad key is,
    /// its login hidden in the sentence.
    @Test func aMisspeltProxySchemeIsRefusedWithoutItsLogin() throws {
        let harness = try AgentHarness(config: "proxy = \"sock5h://alice:hunter2@127.0.0.1:1080\"\n")
        let run = try harness.run(["run", "--exit-when-idle"], seconds: 30)
        #expect(run.status != 0)
        #expect(run.stderr.contains("key \"proxy\" has the scheme \"sock5h\", which is none of http, https, socks4, socks4a, socks5, socks5h"),
                "\(run.stderr)")
        #expect(!run.stderr.contains("hunter2"))
    }
}

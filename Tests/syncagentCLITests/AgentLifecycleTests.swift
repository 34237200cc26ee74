import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The running agent's hold on its world: the state dir's lock, its log,
/// download_dir and the inbox taken away or replaced under it, a damaged
/// log, and the signals it is sent.
@Suite("The running agent: its lock, log, folders and signals", .serialized)
struct AgentLifecycleTests {
    @Test func aDamagedLogIsAnErrorNeverAnEmptyLog() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("g.bin", size: 3000)
        for index in 0..<30 { try harness.drop("g\(index).job", "url = \"\(nginx.url("g.bin"))\"\ndest = \"g\(index).bin\"\n") }
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let log = harness.stateDir + "/events.sqlite"
        let whole = try #require(contents(log))
        for damaged in [Data("this is not a database, just some text\n".utf8) + Data(repeating: 7, count: 5000),
                        whole.prefix(whole.count / 2)] {
            try damaged.write(to: URL(fileURLWithPath: log))
            for command in [["status"], ["status", "--json"], ["replay", "--verify"], ["events"]] {
                let result = try harness.run(command)
                #expect(result.status != 0, "\(command) on a damaged log: \(result.stdout.prefix(300))")
                #expect(result.stderr.contains(log), "\(command): \(result.stderr)")
            }
            let agent = try harness.startAgent(exitWhenIdle: true)
            #expect(agent.wait(seconds: 30) != 0)
            #expect(agent.stderr.contains(log))
            #expect(contents(log) == damaged, "run must not start a fresh log over a damaged one")
        }
    }

    @Test func sighupReloadsTheConfigAndKeepsTheOldOneIfItIsBroken() throws {
        let harness = try AgentHarness(config: "retries = 3\n")
        let agent = try harness.startAgent()
        #expect(eventually { (try? harness.events().contains { $0.type == "agent_started" }) ?? false })
        try "download_dir = \"\(harness.downloads)\"\nretries = 7\nmax_speed = \"1M\"\ninbox = \"/elsewhere\"\n"
            .write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        #expect(eventually { (try? harness.events().contains { $0.type == "config_reloaded" }) ?? false })
        try "download_dir = \"\(harness.downloads)\"\ncolour = \"red\"\n".write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        // The CLI reads the same (now broken) config: read the log without it.
        let reloads = { () -> [[String: Any]] in
            let result = try? harness.run(["events", "--json", "--state-dir", harness.stateDir], flags: false)
            return (result?.stdout ?? "").split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }.filter { $0["type"] as? String == "config_reloaded" }.compactMap { $0["data"] as? [String: Any] }
        }
        #expect(eventually { reloads().count == 2 })
        #expect(agent.isRunning)
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let reloaded = reloads()
        try #require(reloaded.count == 2)
        #expect(reloaded[0]["applied"] as? [String] == ["retries", "max_speed"])
        #expect(reloaded[0]["need_restart"] as? [String] == ["inbox"])
        #expect(reloaded[0]["error"] == nil)
        #expect((reloaded[1]["error"] as? String)?.contains("key \"colour\" is not a known key") == true)
    }
}

import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 14 §3: tasks wait for the network (NSURLSession's
/// waitsForConnectivity) and keep off a metered link when told to
/// (allowsExpensiveNetworkAccess). The agent runs in a network namespace
/// of the test's own whose link is taken down and up; NetworkManager is
/// python-dbusmock's, on a private bus standing in for the system bus.
@Suite("The network comes and goes", .serialized)
struct NetworkTests {
    /// The agent inside `lab`'s namespace.
    func startAgent(_ harness: AgentHarness, in lab: NetworkLab, exitWhenIdle: Bool = false) throws -> ChildProcess {
        let (executable, arguments) = lab.command([syncagentBinary, "run"] + (exitWhenIdle ? ["--exit-when-idle"] : []) + harness.globalFlags)
        return try ChildProcess(executable, arguments, environment: harness.environment, outputIn: harness.directory.path)
    }

    /// A network namespace of the test's own, or nil (the test skips, saying why) where none can be made.
    func makeLab() throws -> NetworkLab? {
        do { return try NetworkLab() } catch let unavailable as NetworkLab.Unavailable {
            print("skipped: \(unavailable)")
            return nil
        }
    }

    /// Some bytes of `task` are logged as durable.
    func hasMadeProgress(_ harness: AgentHarness, task: String) -> Bool {
        harness.hasEvent("progressed", task: task) { ($0.data["bytes"] as? Int ?? 0) > 0 }
    }

    @Test func offlineTasksWaitForTheNetworkWithoutSpendingARetry() throws {
        guard let lab = try makeLab() else { return }
        // No retry at all: an attempt that met no network and spent one would fail the task.
        let harness = try AgentHarness(config: "retries = 0\nidle_timeout = 2\n")
        let server = try FaultServer(in: harness.directory, host: lab.hostAddress)
        let first = try server.serve("a.bin", size: 3 << 20)
        let second = try server.serve("b.bin", size: 1 << 20, seed: 3)
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(server.url("a.bin", "rate=1000000"))\"\ndest = \"a.bin\"\n")
        let agent = try startAgent(harness, in: lab)
        defer {
            agent.signal(SIGTERM)
            _ = agent.wait(seconds: 10)
        }
        #expect(eventually(within: 30) { hasMadeProgress(harness, task: "a") })

        // Offline mid-transfer: the connection stalls, idle_timeout ends the attempt, and the task waits.
        try lab.setLink(up: false)
        #expect(harness.waitForEvent("paused", task: "a", within: 30) { $0.data["reason"] as? String == "waiting_for_network" },
                "\(agent.stderr.suffix(2000))")
        // A job dropped while offline cannot connect: it waits too.
        try harness.drop("b.job", "id = \"b\"\nurl = \"\(server.url("b.bin"))\"\ndest = \"b.bin\"\n")
        #expect(harness.waitForEvent("paused", task: "b", within: 30) { $0.data["reason"] as? String == "waiting_for_network" },
                "\(agent.stderr.suffix(2000))")
        let waiting = try harness.tasksByID()
        #expect(waiting["a"]?["pause_reason"] as? String == "waiting_for_network")
        #expect(try harness.run(["status"]).stdout.contains("waiting for the network"))

        // Back online: both go on (from a's durable bytes), with no retry spent and none failed.
        let backAt = Date()
        try lab.setLink(up: true)
        #expect(eventually(within: 60) {
            let tasks = (try? harness.tasksByID()) ?? [:]
            return tasks["a"]?["state"] as? String == "finished" && tasks["b"]?["state"] as? String == "finished"
        }, "\(agent.stderr.suffix(2000))")
        if let resumed = harness.events("resumed", task: "a").last, resumed.data["reason"] as? String == "the network is back" {
            print("network back → resumed after \(Int(Date(timeIntervalSince1970: Double(resumed.atMs) / 1000).timeIntervalSince(backAt) * 1000)) ms")
        }
        #expect(harness.events("resumed", task: "a").contains { $0.data["reason"] as? String == "the network is back" })
        #expect(harness.events("resumed", task: "b").contains { $0.data["reason"] as? String == "the network is back" })
        let all = try harness.events()
        #expect(!all.contains { $0.type == "retrying" || $0.type == "failed" })
        #expect(FileManager.default.contents(atPath: harness.downloads + "/a.bin") == first)
        #expect(FileManager.default.contents(atPath: harness.downloads + "/b.bin") == second)
        // The bytes a had before the link went down were not fetched again.
        let resumedFrom = harness.events("started", task: "a").last?.data["offset"] as? Int ?? 0
        #expect(resumedFrom > 0)
    }

    /// The ninth adversary: link up, address set, no default route (DHCP not done, a route
    /// deleted). A connect then fails at once, and curl names no address: the task spent its
    /// retries and failed, or waited and was resumed with the route still missing.
    @Test func noDefaultRouteIsOfflineForAServerBeyondIt() throws {
        guard let lab = try makeLab() else { return }
        // Still waiting a while later: nothing took the subnet's route for a way to the server.
        try expectAJobWaitsOfflineThenFinishes(lab, server: lab.remoteAddress, waitingFor: 4) { try lab.setDefaultRoute(present: $0) }
    }

    /// A job dropped while `network(false)` holds the machine offline waits (its agent told to exit
    /// when idle still runs `waitingFor` seconds later, the task not resumed), then finishes with
    /// `network(true)`, spending no retry.
    func expectAJobWaitsOfflineThenFinishes(_ lab: NetworkLab, server host: String, waitingFor seconds: UInt32,
                                            network: (Bool) throws -> Void,
                                            sourceLocation: SourceLocation = #_sourceLocation) throws {
        let harness = try AgentHarness(config: "retries = 0\nidle_timeout = 2\nconnect_timeout = 2\n")
        let server = try FaultServer(in: harness.directory, host: host)
        let data = try server.serve("w.bin", size: 1 << 20)
        try network(false)
        try harness.drop("w.job", "id = \"w\"\nurl = \"\(server.url("w.bin"))\"\ndest = \"w.bin\"\n")
        let agent = try startAgent(harness, in: lab, exitWhenIdle: true)
        defer {
            agent.signal(SIGTERM)
            _ = agent.wait(seconds: 10)
        }
        #expect(harness.waitForEvent("paused", task: "w", within: 30) { $0.data["reason"] as? String == "waiting_for_network" },
                "\(agent.stderr.suffix(2000))", sourceLocation: sourceLocation)
        // Time passing is the point: still waiting, and still running, `seconds` later.
        usleep(seconds * 1_000_000)
        #expect(harness.events("resumed", task: "w").isEmpty, "\(agent.stderr.suffix(2000))", sourceLocation: sourceLocation)
        #expect(agent.isRunning, "an agent told to exit when idle still waits for the network", sourceLocation: sourceLocation)
        try network(true)
        #expect(agent.wait(seconds: 60) == 0, "\(agent.stderr.suffix(2000))", sourceLocation: sourceLocation)
        #expect(FileManager.default.contents(atPath: harness.downloads + "/w.bin") == data, sourceLocation: sourceLocation)
        #expect(!(try harness.events()).contains { $0.type == "retrying" || $0.type == "failed" }, sourceLocation: sourceLocation)
    }

    /// A link that goes and comes back while a transfer runs (Wi-Fi in a
    /// lift): an attempt it breaks starts again at once and spends no retry.
    @Test func aFlappingLinkSpendsNoRetry() throws {
        guard let lab = try makeLab() else { return }
        let harness = try AgentHarness(config: "retries = 0\nidle_timeout = 2\nconnect_timeout = 2\n")
        let server = try FaultServer(in: harness.directory, host: lab.hostAddress)
        let data = try server.serve("f.bin", size: 1_500_000)
        try harness.drop("f.job", "id = \"f\"\nurl = \"\(server.url("f.bin", "rate=150000"))\"\ndest = \"f.bin\"\n")
        let agent = try startAgent(harness, in: lab)
        defer {
            agent.signal(SIGTERM)
            _ = agent.wait(seconds: 10)
        }
        #expect(eventually(within: 30) { hasMadeProgress(harness, task: "f") })
        // Short outages in a row: TCP backs off its retransmissions, and idle_timeout (2 s)
        // can end the attempt after the link is back. (Slept: the outages' lengths are the test.)
        for flap in 0..<24 {
            try lab.setLink(up: false)
            usleep(UInt32(100_000 * (1 + flap % 4)))
            try lab.setLink(up: true)
            usleep(UInt32(100_000 * (1 + (flap + 2) % 4)))
        }
        #expect(eventually(within: 60) { harness.state(of: "f") == "finished" }, "\(agent.stderr.suffix(2000))")
        let all = try harness.events()
        #expect(!all.contains { $0.type == "retrying" || $0.type == "failed" })
        // The outages did break attempts: each went on at once or when the link came back.
        let resumed = all.filter { $0.type == "resumed" }.compactMap { $0.data["reason"] as? String }
        #expect(!resumed.isEmpty && resumed.allSatisfy { $0.hasPrefix("the network") }, "\(resumed)")
        #expect(FileManager.default.contents(atPath: harness.downloads + "/f.bin") == data)
    }

    /// A stall with the network up is the server's: it is retried (and counted), even in the
    /// agent's first seconds, when the routes it read at start were taken for a change.
    @Test func aStallWithTheNetworkUpIsRetried() throws {
        guard let lab = try makeLab() else { return }
        let harness = try AgentHarness(config: "retries = 1\nidle_timeout = 1\n")
        let server = try FaultServer(in: harness.directory, host: lab.hostAddress)
        try server.serve("s.bin", size: 100_000)
        try harness.drop("s.job", "id = \"s\"\nurl = \"\(server.url("s.bin", "stall_after=0&stall=30"))\"\ndest = \"s.bin\"\n")
        let agent = try startAgent(harness, in: lab)
        defer {
            agent.signal(SIGTERM)
            _ = agent.wait(seconds: 10)
        }
        #expect(harness.waitForEvent("retrying", task: "s", within: 20), "\(agent.stderr.suffix(2000))")
        #expect(harness.events("paused", task: "s").isEmpty, "\(agent.stderr.suffix(3000))")
    }

    /// A cable pulled out keeps the address and the routes (marked linkdown):
    /// that is offline too. And `--exit-when-idle` waits for such a task
    /// rather than leaving it behind.
    @Test func noCarrierIsOfflineAndExitWhenIdleWaitsForTheNetwork() throws {
        guard let lab = try makeLab() else { return }
        try expectAJobWaitsOfflineThenFinishes(lab, server: lab.hostAddress, waitingFor: 1) { try lab.setCarrier(up: $0) }
    }

    @Test func aReloadThatAllowsMeteredLinksLetsWaitingTasksGo() throws {
        let harness = try AgentHarness(config: "allow_metered = false\n")
        let manager = try NetworkManagerMock(in: harness.directory, metered: 1)
        harness.extraEnvironment["DBUS_SYSTEM_BUS_ADDRESS"] = manager.busAddress
        let server = try FaultServer(in: harness.directory)
        let data = try server.serve("r.bin", size: 100_000)
        try harness.drop("r.job", "id = \"r\"\nurl = \"\(server.url("r.bin"))\"\n")
        let agent = try harness.startAgent()
        defer {
            agent.signal(SIGTERM)
            _ = agent.wait(seconds: 10)
        }
        #expect(eventually(within: 20) { (try? harness.tasksByID())?["r"]?["pause_reason"] as? String == "metered" })
        try "download_dir = \"\(harness.downloads)\"\nallow_metered = true\n".write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        #expect(eventually(within: 20) { harness.state(of: "r") == "finished" }, "\(agent.stderr.suffix(2000))")
        #expect(FileManager.default.contents(atPath: harness.downloads + "/r.bin") == data)
    }

    @Test func aMeteredLinkHoldsTheTasksThatMayNotUseIt() throws {
        let harness = try AgentHarness()
        let manager = try NetworkManagerMock(in: harness.directory, metered: 1)
        harness.extraEnvironment["DBUS_SYSTEM_BUS_ADDRESS"] = manager.busAddress
        let server = try FaultServer(in: harness.directory)
        let held = try server.serve("held.bin", size: 1 << 20)
        let free = try server.serve("free.bin", size: 1 << 20, seed: 2)
        let slow = try server.serve("slow.bin", size: 3 << 20, seed: 4)
        // As submit writes it (and as a job file would).
        let submitted = try harness.run(["submit", "--id", "held", "--allow-metered", "false", server.url("held.bin")])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        try harness.drop("free.job", "id = \"free\"\nurl = \"\(server.url("free.bin"))\"\n")
        let agent = try harness.startAgent()
        defer {
            agent.signal(SIGTERM)
            _ = agent.wait(seconds: 10)
        }
        // Metered: the one that may use it finishes; the other waits, and says why.
        #expect(eventually(within: 30) { harness.state(of: "free") == "finished" })
        #expect(eventually(within: 10) { (try? harness.tasksByID())?["held"]?["pause_reason"] as? String == "metered" },
                "\(agent.stderr.suffix(2000))")
        #expect(try harness.run(["status"]).stdout.contains("the link is metered"))

        // No longer metered: it goes on.
        try manager.setMetered(2)
        #expect(eventually(within: 30) { harness.state(of: "held") == "finished" },
                "\(agent.stderr.suffix(2000))")
        #expect(harness.events("resumed", task: "held").contains { $0.data["reason"] as? String == "the link is no longer metered" })

        // Metered again while one runs: it pauses at its durable bytes, then finishes when allowed.
        try harness.drop("slow.job", "id = \"slow\"\nurl = \"\(server.url("slow.bin", "rate=1000000"))\"\nallow_metered = false\n")
        #expect(eventually(within: 30) { hasMadeProgress(harness, task: "slow") })
        try manager.setMetered(1)
        #expect(eventually(within: 10) { (try? harness.tasksByID())?["slow"]?["pause_reason"] as? String == "metered" })
        try manager.setMetered(2)
        #expect(eventually(within: 30) { harness.state(of: "slow") == "finished" })
        #expect(FileManager.default.contents(atPath: harness.downloads + "/held.bin") == held)
        #expect(FileManager.default.contents(atPath: harness.downloads + "/free.bin") == free)
        #expect(FileManager.default.contents(atPath: harness.downloads + "/slow.bin") == slow)
        #expect(!(try harness.events()).contains { $0.type == "retrying" || $0.type == "failed" })
    }

    @Test func withoutNetworkManagerAllowMeteredIsSaidToDoNothingOnce() throws {
        let harness = try AgentHarness()
        // A system bus nobody listens on.
        harness.extraEnvironment["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=\(harness.directory.file("no-bus"))"
        let server = try FaultServer(in: harness.directory)
        for name in ["x", "y"] {
            try server.serve("\(name).bin", size: 10_000)
            try harness.drop("\(name).job", "id = \"\(name)\"\nurl = \"\(server.url("\(name).bin"))\"\nallow_metered = false\n")
        }
        let agent = try harness.startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: 60) == 0)
        let warnings = agent.stderr.components(separatedBy: "allow_metered = false has no effect").count - 1
        #expect(warnings == 1, "\(agent.stderr.suffix(2000))")
    }
}

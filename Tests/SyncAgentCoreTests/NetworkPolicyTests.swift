import Foundation
import Testing
@testable import SyncAgentCore

/// Issue 14 §3 in the pure core: which failures wait for the network, what
/// a wait costs in retries, and which tasks a metered link holds.
@Suite("Network policy")
struct NetworkPolicyTests {
    @Test func onlyAWireFailureOfAnUnreachableRemoteServerWaits() {
        let remote = "https://example.com/x"
        #expect(NetworkPolicy.verdict(failedOnTheWire: true, url: remote, reachable: false, attemptStartedMs: 10_000, routesChangedMs: 0)
            == .waitForNetwork)
        #expect(NetworkPolicy.verdict(failedOnTheWire: true, url: remote, reachable: true, attemptStartedMs: 10_000, routesChangedMs: 0) == .retry)
        // The link went and came back while it ran: again at once, no retry spent.
        #expect(NetworkPolicy.verdict(failedOnTheWire: true, url: remote, reachable: true, attemptStartedMs: 10_000, routesChangedMs: 10_500)
            == .retryAtOnce)
        // Right after a change the new link may not carry traffic yet: wait for the next look, no retry spent.
        #expect(NetworkPolicy.verdict(failedOnTheWire: true, url: remote, reachable: true, attemptStartedMs: 10_000, routesChangedMs: 9_000) == .waitForNetwork)
        // An answer (a 503, a refused connection) is the server's, not the network's.
        #expect(NetworkPolicy.verdict(failedOnTheWire: false, url: remote, reachable: false, attemptStartedMs: 10_000, routesChangedMs: 10_500) == .retry)
        for local in ["http://127.0.0.1:8080/x", "http://localhost/x", "http://[::1]:80/x", "http://a.localhost/x"] {
            #expect(NetworkPolicy.verdict(failedOnTheWire: true, url: local, reachable: false, attemptStartedMs: 10_000, routesChangedMs: 10_500) == .retry,
                    "\(local)")
        }
    }

    /// Real /proc text: an IPv4 table with a default route, a subnet on a
    /// link without carrier, and an `unreachable default` (a kill switch),
    /// and IPv6 with link-local and multicast routes only.
    @Test func routesThatCannotCarryTrafficDoNotCount() {
        let ipv4 = """
            Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
            eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
            eth0\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0
            wlan0\t0002000A\t00000000\t0001\t0\t0\t600\t00FFFFFF\t0\t0\t0
            *\t00000000\t00000000\t0201\t0\t0\t0\t00000000\t0\t0\t0
            """
        let ipv6 = """
            fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
            ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000002 00000000 00000001     eth0
            00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
            """
        let everyLinkUp = RouteTable.parse(ipv4: ipv4, ipv6: ipv6, linkIsUp: { _ in true })
        #expect(everyLinkUp.online)
        #expect(everyLinkUp.reaches([93, 184, 216, 34]))
        #expect(everyLinkUp.reaches([192, 168, 1, 20]))
        #expect(everyLinkUp.reaches([10, 0, 2, 15]))
        // eth0 without carrier: only wlan0's subnet is left, and the reject route counts for nothing.
        let unplugged = RouteTable.parse(ipv4: ipv4, ipv6: ipv6, linkIsUp: { $0 != "eth0" })
        #expect(unplugged.online)
        #expect(!unplugged.reaches([93, 184, 216, 34]))
        #expect(unplugged.reaches([10, 0, 2, 15]))
        #expect(!unplugged.reaches([192, 168, 1, 20]))
        // A subnet is no way to anywhere: only a default route is (or a VPN's 0/1 and 128/1).
        #expect(everyLinkUp.hasDefaultRoute && !unplugged.hasDefaultRoute)
        let vpn = RouteTable.parse(ipv4: ipv4.replacingOccurrences(of: "eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000",
                                                                   with: "tun0\t00000000\t00000000\t0001\t0\t0\t0\t00000080"),
                                   ipv6: "", linkIsUp: { _ in true })
        #expect(vpn.hasDefaultRoute)
        // Nothing but link-local and multicast routes: offline.
        let nothing = RouteTable.parse(ipv4: "", ipv6: ipv6, linkIsUp: { _ in true })
        #expect(!nothing.online)
        #expect(nothing.outward.isEmpty && nothing.routes.count == 2)
        #expect(everyLinkUp.outward.count == 3)
        #expect(!nothing.reaches([UInt8](repeating: 0x20, count: 16)))
    }

    @Test func anAttemptThatFoundNoNetworkSpendsNoRetry() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        _ = log.add(.paused(Paused(bytes: 0, reason: .offline)), task: "t")
        var task = log.state["t"]!
        #expect(task.phase == .paused && task.pauseReason == .offline)
        #expect(task.attempts == 1 && task.attemptsUsed == 0)
        // Waiting again while already waiting is no attempt either.
        _ = log.add(.paused(Paused(bytes: 0, reason: .offline)), task: "t")
        _ = log.add(.resumed(Resumed(bytes: 0, reason: "the network is back")), task: "t")
        _ = log.add(.started(Started(attempt: 2, offset: 0, url: "http://h/x")), task: "t")
        _ = log.add(.retrying(Retrying(attempt: 2, reason: "503", delayMs: 0, bytes: 0)), task: "t")
        task = log.state["t"]!
        #expect(task.attemptsUsed == 1)
        // A restart does not leave it waiting for the user.
        #expect(RecoveryPlan.plan(for: log.state["t"]!, nowMs: 1 << 50) == .startFromZero)
        _ = log.add(.paused(Paused(bytes: 0, reason: .metered)), task: "t")
        #expect(RecoveryPlan.plan(for: log.state["t"]!, nowMs: 1 << 50) == .startFromZero)
    }

    /// The address a failed connect is judged by: curl's, else a literal host with no proxy between.
    @Test func theAddressAFailedConnectWentFor() {
        #expect(NetworkPolicy.connectAddress(reported: "10.0.0.9", url: "http://h/x", viaProxy: false) == "10.0.0.9")
        #expect(NetworkPolicy.connectAddress(reported: nil, url: "http://10.214.3.1:8080/x", viaProxy: false) == "10.214.3.1")
        #expect(NetworkPolicy.connectAddress(reported: nil, url: "http://[2001:DB8::1]/x", viaProxy: false) == "2001:db8::1")
        #expect(NetworkPolicy.connectAddress(reported: nil, url: "http://10.214.3.1/x", viaProxy: true) == nil)
        #expect(NetworkPolicy.connectAddress(reported: nil, url: "https://example.com/x", viaProxy: false) == nil)
        #expect(NetworkPolicy.addressBytes("2001:db8::1")?.count == 16 && NetworkPolicy.addressBytes("example.com") == nil)
    }

    /// A segmented download falling back to one connection is the agent's choice: no retry.
    @Test func aFreeRetrySpendsNoRetry() {
        var log = LogBuilder()
        log.create("t")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://h/x")), task: "t")
        _ = log.add(.retrying(Retrying(attempt: 1, reason: "one connection from now on", delayMs: 0, bytes: 0, free: true)), task: "t")
        _ = log.add(.started(Started(attempt: 2, offset: 0, url: "http://h/x")), task: "t")
        #expect(log.state["t"]!.attempts == 2 && log.state["t"]!.attemptsUsed == 1)
        _ = log.add(.retrying(Retrying(attempt: 2, reason: "503", delayMs: 0, bytes: 0)), task: "t")
        #expect(log.state["t"]!.attemptsUsed == 1)
    }

    @Test func aMeteredLinkHoldsTasksThatMayNotUseItAndReleasesThem() {
        var log = LogBuilder()
        var held = TaskSpec(url: "http://h/held", dest: "/downloads/held.bin", allowMetered: false)
        held.source = JobSource(file: "held.job", identity: "held")
        _ = log.add(.created(held), task: "held")
        log.create("free")
        log.create("done")
        _ = log.add(.finished(Finished(bytes: 1, dest: "/downloads/done.bin")), task: "done")
        #expect(NetworkPolicy.pauseForMetered(in: log.state, configDefault: true) == ["held"])
        // The config says no for every job that does not say yes.
        #expect(NetworkPolicy.pauseForMetered(in: log.state, configDefault: false) == ["held", "free"])
        _ = log.add(.paused(Paused(bytes: 0, reason: .metered)), task: "held")
        _ = log.add(.paused(Paused(bytes: 0, reason: .user)), task: "free")
        #expect(NetworkPolicy.resumable(in: log.state, reachable: { _ in true }, metered: true, configDefault: true).isEmpty)
        #expect(NetworkPolicy.resumable(in: log.state, reachable: { _ in true }, metered: nil, configDefault: true).map(\.id) == ["held"])
        // A task that may use a metered link (after a reload) goes on while it is metered.
        log.create("offline")
        _ = log.add(.paused(Paused(bytes: 0, reason: .offline)), task: "offline")
        #expect(NetworkPolicy.resumable(in: log.state, reachable: { _ in true }, metered: true, configDefault: true).map(\.id)
            == ["offline"])
        #expect(NetworkPolicy.resumable(in: log.state, reachable: { _ in false }, metered: false, configDefault: true).map(\.id)
            == ["held"])
        // …but not one a metered link would stop again at once.
        #expect(NetworkPolicy.resumable(in: log.state, reachable: { _ in true }, metered: true, configDefault: false).isEmpty)
        #expect(NetworkPolicy.waitingWords(.metered)?.contains("metered") == true)
        #expect(NetworkPolicy.waitingWords(.user) == nil)
    }

    @Test func aChildFollowsItsVideosJobNotTheConfig() {
        var log = LogBuilder()
        var video = TaskSpec(url: "http://h/v.m3u8", kind: .hls, dest: "/downloads/v", allowMetered: true)
        video.source = JobSource(file: "v.job", identity: "v")
        _ = log.add(.created(video), task: "v")
        _ = log.add(.created(TaskSpec(url: "http://h/s0.ts", dest: "/downloads/v.part/0.ts", parent: "v")), task: "v.s0")
        let child = log.state["v.s0"]!
        #expect(NetworkPolicy.allowsMetered(child, in: log.state, configDefault: false))
        #expect(NetworkPolicy.pauseForMetered(in: log.state, configDefault: false).isEmpty)
    }

    @Test func allowMeteredIsABooleanKey() throws {
        let parser = JobParser(downloadDir: "/d")
        guard case .transfer(_, let spec) = try parser.parse(Array("url = \"http://h/x\"\nallow_metered = false\n".utf8)) else {
            Issue.record("not a transfer")
            return
        }
        #expect(spec.allowMetered == false)
        #expect { try parser.parse(Array("url = \"http://h/x\"\nallow_metered = \"no\"\n".utf8)) } throws: {
            "\($0)".contains("allow_metered") && "\($0)".contains("true or false")
        }
        #expect(try AgentConfig.parse("allow_metered = false").allowMetered == false)
        let coded = EventCoding.data(of: .created(spec))
        #expect(coded.contains("\"allow_metered\":false"))
        #expect(try EventCoding.body(type: "created", data: coded) == .created(spec))
    }
}

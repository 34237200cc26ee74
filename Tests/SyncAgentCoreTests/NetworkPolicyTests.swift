import Foundation
import Testing
@testable import SyncAgentCore

/// Issue 14 §3 in the pure core: which failures wait for the network, what
/// a wait costs in retries, and which tasks a metered link holds.
@Suite("Network policy")
struct NetworkPolicyTests {
    @Test func onlyAWireFailureOfARemoteServerWhileOfflineWaits() {
        #expect(NetworkPolicy.waitsForNetwork(online: false, failedOnTheWire: true, url: "https://example.com/x"))
        #expect(!NetworkPolicy.waitsForNetwork(online: true, failedOnTheWire: true, url: "https://example.com/x"))
        // An answer (a 503, a refused connection) is the server's, not the network's.
        #expect(!NetworkPolicy.waitsForNetwork(online: false, failedOnTheWire: false, url: "https://example.com/x"))
        for local in ["http://127.0.0.1:8080/x", "http://localhost/x", "http://[::1]:80/x", "http://a.localhost/x"] {
            #expect(!NetworkPolicy.waitsForNetwork(online: false, failedOnTheWire: true, url: local), "\(local)")
        }
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
        #expect(NetworkPolicy.resumable(in: log.state, online: true, metered: true).isEmpty)
        #expect(NetworkPolicy.resumable(in: log.state, online: true, metered: nil).map(\.id) == ["held"])
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

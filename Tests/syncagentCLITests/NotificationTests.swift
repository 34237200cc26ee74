import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Desktop notices through the real libnotify, to python-dbusmock's
/// notification daemon on a private bus.
@Suite("Notifications", .serialized)
struct NotificationTests {
    @Test func notificationsCarryACategoryAnIconAndTheFailedNames() throws {
        let world = try NotificationWorld()
        let (harness, daemon) = (world.harness, world.daemon)
        try world.dropOneGoodAndOneMissing()
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
        #expect(daemon.notifyCalls.count == 1, "\(daemon.notifyCalls)")
        // The whole call as dbusmock logged it (the body spans lines): icon, body, hints.
        let call = daemon.calls
        #expect(call.contains("\"dialog-error\"") && call.contains("\"category\": \"transfer.error\""), "\(call)")
        #expect(call.contains("✗ gone.bin: server answered 404") && call.contains("✓ ok.bin"), "\(call)")
    }

    /// Three 404s dropped beside a slow download are told while it still
    /// runs, in one or two notices (the first at once, those within the
    /// next seconds together), not when the batch ends; the batch's notice
    /// at its end names them among the rest, as before.
    @Test func aFailureTheUserMustMendIsToldAsItHappens() throws {
        let world = try NotificationWorld()
        let (harness, daemon, nginx) = (world.harness, world.daemon, world.nginx)
        try nginx.serve("slow.bin", size: 2_500_000)
        try harness.drop("slow.job", "id = \"slow\"\nurl = \"\(nginx.url("slow.bin"))\"\nmax_speed = \"300K\"\n")
        for index in 1...3 { try harness.drop("gone\(index).job", "id = \"gone\(index)\"\nurl = \"\(nginx.url("gone\(index).bin"))\"\n") }
        let agent = try harness.startAgent(exitWhenIdle: true)
        defer { agent.signal(SIGKILL) }
        #expect(eventually(within: 20) { (1...3).allSatisfy { daemon.calls.contains("gone\($0).bin") } }, "\(daemon.calls)")
        #expect(harness.state(of: "slow") == "running", "told before the batch ended")
        let early = daemon.notifyCalls
        #expect((1...2).contains(early.count), "collapsed, not one per failure: \(early)")
        #expect(daemon.calls.contains("server answered 404") && daemon.calls.contains("\"category\": \"transfer.error\""), "\(daemon.calls)")

        #expect(agent.wait(seconds: 60) == 4)
        #expect(daemon.notifyCalls.count == early.count + 1, "the batch's own notice at its end: \(daemon.notifyCalls)")
        #expect(daemon.notifyCalls.last?.contains("1 finished, 3 failed") == true, "\(daemon.notifyCalls)")
        let notified = try harness.events().filter { $0.type == "notified" }
        #expect(Set(notified.compactMap(\.task)) == ["gone1", "gone2", "gone3"], "each told once, recorded first")
    }

    /// A notification server answering only at D-Bus's timeout must not freeze the agent (no job
    /// taken, no byte written, SIGTERM after 44 s), and a kill -9 while it waits must not post the
    /// notice again: notices go out on a thread of their own, recorded first.
    @Test func aSlowNotificationServerHoldsNothingUpAndIsNeverPostedTwice() throws {
        let world = try NotificationWorld(answerAfter: 20)
        let (harness, daemon, nginx) = (world.harness, world.daemon, world.nginx)
        try nginx.serve("a.bin", size: 1000)
        try nginx.serve("b.bin", size: 1000)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        try harness.drop("a.job", "url = \"\(nginx.url("a.bin"))\"\nid = \"a\"\n")
        #expect(eventually(within: 20) { daemon.notifyCalls.count == 1 })
        // The server sits on a's notice: b is taken and finished all the same.
        try harness.drop("b.job", "url = \"\(nginx.url("b.bin"))\"\nid = \"b\"\n")
        #expect(eventually(within: 10) { harness.state(of: "b") == "finished" })
        agent.signal(SIGKILL)
        agent.wait(seconds: 5)
        let again = try harness.startAgent()
        defer { again.signal(SIGKILL) }
        #expect(eventually(within: 10) { harness.statusSaysAgentRuns })
        again.signal(SIGTERM)
        #expect(again.wait(seconds: 5) == 0, "a stop waits for no notification server")
        // Each notice the log says was posted went out once at most: a's exactly once.
        let notified = try harness.events().filter { $0.type == "notified" }.count
        #expect(daemon.notifyCalls.count >= 1 && daemon.notifyCalls.count <= notified, "\(daemon.notifyCalls)")
    }
}

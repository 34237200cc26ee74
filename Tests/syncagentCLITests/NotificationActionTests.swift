import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A notice's buttons, through the real libnotify to python-dbusmock's
/// notification daemon on a private bus; the clicks are the `ActionInvoked`
/// signals the daemon sends. dbusmock numbers notifications 1, 2, … in the
/// order of the Notify calls.
@Suite("Notification actions", .serialized)
struct NotificationActionTests {
    private static let withActions = ["body", "actions"]

    private func text(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    /// `controlled` events the notices' "Retry" caused (its job files are named `retry-…`).
    private func retries(_ harness: AgentHarness) throws -> [AgentHarness.LoggedEvent] {
        try harness.events().filter { $0.type == "controlled" && ($0.data["file"] as? String)?.hasPrefix("retry-") == true }
    }

    /// A finished download's notice offers "Open folder"; clicked, the
    /// session's file manager is asked to show the file, selected.
    @Test func openFolderShowsTheFileInTheFileManager() throws {
        let world = try NotificationWorld(capabilities: Self.withActions)
        let (harness, daemon, nginx) = (world.harness, world.daemon, world.nginx)
        let shownLog = try daemon.startFileManager()
        try nginx.serve("a.bin", size: 1000)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(nginx.url("a.bin"))\"\ndest = \"my report #1.bin\"\n")
        let id = try daemon.awaitNotice(saying: "1 transfer finished")
        let call = daemon.calls
        #expect(call.contains("\"open-folder\", \"Open folder\"") && call.contains("\"default\", \"Open folder\""), "\(call)")
        #expect(!call.contains("\"retry\""), "nothing failed: \(call)")

        try daemon.invoke(action: "open-folder", of: id)
        let uri = "file://" + harness.downloads.replacingOccurrences(of: " ", with: "%20") + "/my%20report%20%231.bin"
        #expect(eventually(within: 20) { text(shownLog).contains("ShowItems [\"\(uri)\"]") }, "\(text(shownLog)) \(agent.stderr)")
    }

    /// Without a file manager on the session bus, `xdg-open` opens the folder
    /// (here a stub early on PATH that writes down what it was given); a
    /// click on the notice's body does what "Open folder" does.
    @Test func withoutAFileManagerXdgOpenOpensTheFolder() throws {
        let world = try NotificationWorld(capabilities: Self.withActions)
        let (harness, daemon, nginx) = (world.harness, world.daemon, world.nginx)
        let bin = harness.directory.file("bin")
        let opened = harness.directory.file("xdg-open.log")
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '\(opened)'\n".write(toFile: bin + "/xdg-open", atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: bin + "/xdg-open")
        harness.extraEnvironment["PATH"] = bin + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        try nginx.serve("a.bin", size: 1000)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        try harness.drop("a.job", "id = \"a\"\nurl = \"\(nginx.url("a.bin"))\"\ndest = \"sub/a.bin\"\n")
        let id = try daemon.awaitNotice(saying: "1 transfer finished")

        try daemon.invoke(action: "default", of: id)
        #expect(eventually(within: 20) { text(opened) == harness.downloads + "/sub\n" }, "\(text(opened)) \(agent.stderr)")
    }

    /// A failure's notice offers "Retry"; clicked once the server has the
    /// file, the task runs again, through a `resume` control job, and finishes.
    @Test func retryRunsTheFailedTaskAgain() throws {
        let world = try NotificationWorld(capabilities: Self.withActions)
        let (harness, daemon, nginx) = (world.harness, world.daemon, world.nginx)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        try harness.drop("late.job", "id = \"late\"\nurl = \"\(nginx.url("late.bin"))\"\n")
        let id = try daemon.awaitNotice(saying: "1 transfer failed")
        let call = daemon.calls
        #expect(call.contains("\"retry\", \"Retry\"") && !call.contains("\"default\""), "a stray click retries nothing: \(call)")
        #expect(harness.state(of: "late") == "failed")

        try nginx.serve("late.bin", size: 5000)
        try daemon.invoke(action: "retry", of: id)
        #expect(eventually(within: 20) { harness.state(of: "late") == "finished" }, "\(agent.stderr)")
        let controlled = try retries(harness)
        #expect(controlled.count == 1 && controlled.first?.task == "late", "\(controlled.map(\.data))")
        #expect(controlled.first?.data["action"] as? String == "resume")
    }

    /// No "actions" among the server's capabilities (dbusmock's defaults),
    /// or `notify_actions = false`: no buttons are asked for.
    @Test func noButtonsWhereTheServerHasNoneOrTheConfigSaysNo() throws {
        for (capabilities, config) in [(nil, ""), (Self.withActions, "notify_actions = false\n")] as [([String]?, String)] {
            let world = try NotificationWorld(config: config, capabilities: capabilities)
            let (harness, daemon) = (world.harness, world.daemon)
            try world.dropOneGoodAndOneMissing()
            #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 4)
            let call = daemon.calls
            #expect(call.contains("1 finished, 1 failed"), "\(call)")
            // The actions array comes after the body, empty.
            #expect(call.contains("✓ ok.bin\" [] {") && !call.contains("\"retry\""), "\(capabilities ?? []) \(config): \(call)")
        }
    }

    /// What a notification server may send: a click on a notice never posted,
    /// an action no notice has, the same click twice, ten thousand clicks at
    /// once. The agent goes on taking and finishing jobs, and the notice's
    /// "Retry" writes its control job once.
    @Test func clicksFromAHostileServerRetryOnceAndHoldNothingUp() throws {
        let world = try NotificationWorld(capabilities: Self.withActions)
        let (harness, daemon, nginx) = (world.harness, world.daemon, world.nginx)
        let shownLog = try daemon.startFileManager()
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        try harness.drop("gone.job", "id = \"gone\"\nurl = \"\(nginx.url("gone.bin"))\"\n")
        let failed = try daemon.awaitNotice(saying: "1 transfer failed")

        try daemon.invoke(action: "retry", of: failed + 100)
        try daemon.invoke(action: "explode", of: failed)
        try daemon.invoke(action: "open-folder", of: failed)
        try daemon.invoke(action: "retry", of: failed)
        try daemon.invoke(action: "retry", of: failed)
        try daemon.flood(action: "retry", of: failed, count: 10_000)
        try daemon.flood(action: "retry", of: failed + 1_000, count: 10_000)
        #expect(harness.statusSaysAgentRuns)

        // A job dropped now is taken and finished, and its notice's button
        // works: the clicks before it have all been dealt with by then.
        try nginx.serve("after.bin", size: 1000)
        try harness.drop("after.job", "id = \"after\"\nurl = \"\(nginx.url("after.bin"))\"\n")
        #expect(eventually(within: 30) { harness.state(of: "after") == "finished" })
        let finished = try daemon.awaitNotice(saying: "✓ after.bin")
        try daemon.invoke(action: "open-folder", of: finished)
        #expect(eventually(within: 30) { text(shownLog).contains("after.bin") }, "\(text(shownLog))")

        let controlled = try retries(harness)
        #expect(controlled.count == 1 && controlled.first?.task == "gone", "one retry for the one real click: \(controlled.map(\.data))")
        #expect(text(shownLog).components(separatedBy: "ShowItems").count == 2, "only the finished notice opens: \(text(shownLog))")
        #expect(!agent.stderr.contains("Received unknown action"), "\(agent.stderr.suffix(2000))")
        #expect(agent.isRunning)
    }

    /// A notice's buttons belong to the agent that posted it: clicked after
    /// a restart (the notice still on screen), they do nothing.
    @Test func aClickAfterARestartDoesNothing() throws {
        let world = try NotificationWorld(capabilities: Self.withActions)
        let (harness, daemon, nginx) = (world.harness, world.daemon, world.nginx)
        let shownLog = try daemon.startFileManager()
        let first = try harness.startAgent()
        defer { first.signal(SIGKILL) }
        try harness.drop("gone.job", "id = \"gone\"\nurl = \"\(nginx.url("gone.bin"))\"\n")
        let failed = try daemon.awaitNotice(saying: "1 transfer failed")
        first.signal(SIGKILL)
        first.wait(seconds: 10)

        let again = try harness.startAgent()
        defer { again.signal(SIGKILL) }
        #expect(eventually(within: 20) { harness.statusSaysAgentRuns })
        try daemon.invoke(action: "retry", of: failed)
        try nginx.serve("after.bin", size: 1000)
        try harness.drop("after.job", "id = \"after\"\nurl = \"\(nginx.url("after.bin"))\"\n")
        let finished = try daemon.awaitNotice(saying: "✓ after.bin")
        try daemon.invoke(action: "open-folder", of: finished)
        #expect(eventually(within: 20) { text(shownLog).contains("after.bin") }, "\(text(shownLog))")
        #expect(try retries(harness).isEmpty)
        #expect(harness.state(of: "gone") == "failed")
    }
}

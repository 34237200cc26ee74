import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `on_task_end` and `on_batch_end`: run at most once per end, across
/// kill -9; kept apart from the agent (its file descriptors, its output)
/// and stopped with it; armed by SIGHUP for the ends that follow.
@Suite("Hooks", .serialized)
struct HooksTests {
    /// Three downloads, q0–q2, with `notify = "none"` in the config (but for job `notifying`, which
    /// says "batch") and an `on_batch_end` hook, run to idle: the hook has run once for all three.
    func runThreeDownloadsWithABatchEndHook(notifying: Int?, sourceLocation: SourceLocation = #_sourceLocation)
        throws -> (AgentHarness, NotificationDaemon) {
        let records = TempDirectory()
        let record = records.file("ran.txt")
        let harness = try AgentHarness(config: """
            notify = "none"
            on_batch_end = ["/bin/sh", "-c", "echo \\"batch $SYNCAGENT_FINISHED $SYNCAGENT_FAILED\\" >> '\(record)'"]
            """)
        let daemon = try NotificationDaemon(in: harness.directory)
        harness.busAddress = daemon.busAddress
        let nginx = try Nginx(in: harness.directory)
        for index in 0..<3 {
            try nginx.serve("q\(index).bin", size: 1000)
            try harness.drop("q\(index).job", "url = \"\(nginx.url("q\(index).bin"))\"\n" + (index == notifying ? "notify = \"batch\"\n" : ""))
        }
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0, sourceLocation: sourceLocation)
        #expect(eventually(within: 10) { (try? String(contentsOfFile: record, encoding: .utf8)) == "batch 3 0\n" },
                sourceLocation: sourceLocation)
        return (harness, daemon)
    }

    /// With `notify = "none"` (a headless machine's setting) a batch is still made for
    /// `on_batch_end`, so the hook runs; no notice is shown.
    @Test func aBatchEndHookRunsWithNotificationsOff() throws {
        let (harness, daemon) = try runThreeDownloadsWithABatchEndHook(notifying: nil)
        #expect(daemon.notifyCalls.isEmpty, "\(daemon.notifyCalls)")
        let notified = try harness.events().filter { $0.type == "notified" }
        #expect(notified.count == 1 && notified.first?.data["delivered"] as? Bool == false)
    }

    /// The hook is told of every task; the notice, of those that want one. Before, arming
    /// `on_batch_end` put the quiet tasks in the notice too ("3 transfers finished").
    @Test func aBatchEndHookLeavesQuietTasksOutOfTheNotice() throws {
        let (harness, daemon) = try runThreeDownloadsWithABatchEndHook(notifying: 1)
        // The daemon's call log lives in the harness's folder.
        defer { withExtendedLifetime(harness) {} }
        #expect(eventually(within: 10) { daemon.notifyCalls.count == 1 }, "\(daemon.notifyCalls)")
        let call = try String(contentsOfFile: daemon.callLog, encoding: .utf8)
        #expect(call.contains("1 transfer finished") && call.contains("✓ q1.bin"), "\(call)")
        #expect(!call.contains("q0.bin") && !call.contains("q2.bin"), "\(call)")
    }

    /// 16 downloads, the agent killed with SIGKILL midway and started again:
    /// the hook has run once for each task, with its id, state and dest, but for
    /// a run the kill caught between its commit and its spawn, which is lost.
    @Test func aTaskEndHookRunsOncePerTaskAcrossKill9() throws {
        let records = TempDirectory()
        let record = records.file("ran.txt")
        let harness = try AgentHarness(config: """
            max_active = 2
            on_task_end = ["/bin/sh", "-c", "echo \\"$SYNCAGENT_TASK_ID $SYNCAGENT_STATE $SYNCAGENT_DEST\\" >> '\(record)'"]
            on_batch_end = ["/bin/sh", "-c", "echo \\"batch $SYNCAGENT_FINISHED $SYNCAGENT_FAILED\\" >> '\(record)'"]
            """)
        let nginx = try Nginx(in: harness.directory)
        for index in 0..<16 {
            try nginx.serve("h\(index).bin", size: 600_000, seed: UInt64(index))
            try harness.drop("h\(index).job", "id = \"h\(index)\"\nurl = \"\(nginx.url("slow/h\(index).bin"))\"\nmax_speed = \"2M\"\n")
        }
        let first = try harness.startAgent()
        #expect(eventually(within: 60) {
            ((try? String(contentsOfFile: record, encoding: .utf8)) ?? "").split(separator: "\n").count >= 5
        })
        first.signal(SIGKILL)
        _ = first.wait(seconds: 10)
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 120) == 0)

        let lines = try String(contentsOfFile: record, encoding: .utf8).split(separator: "\n").map(String.init)
        let taskLines = lines.filter { !$0.hasPrefix("batch ") }
        let events = try harness.events()
        let started = events.filter { $0.type == "hook_started" && $0.task != nil }
        #expect(started.count == 16 && Set(started.compactMap(\.task)).count == 16, "each task's hook started once: \(started.map(\.task))")
        // At most once (SPEC §6.3): a run the killed agent had committed but not yet
        // spawned (the kill can land inside that commit's fsync) is lost, never repeated.
        // Only such a run may be missing; every other ran exactly once.
        let secondStart = events.last { $0.type == "agent_started" }?.seq ?? 0
        let endedRuns = Set(events.filter { $0.type == "hook_ended" && $0.data["may_not_have_run"] == nil }.compactMap(\.task))
        let mayBeLost = Set(started.filter { $0.seq < secondStart && !endedRuns.contains($0.task!) }.compactMap(\.task))
        for index in 0..<16 {
            let ran = taskLines.filter { $0.hasPrefix("h\(index) ") }
            let once = ["h\(index) finished \(harness.downloads)/h\(index).bin"]
            if mayBeLost.contains("h\(index)") {
                #expect(ran.isEmpty || ran == once, "\(lines)")
            } else {
                #expect(ran == once, "\(lines)")
            }
        }
        // At most four hooks run at once: no more can be caught between commit and spawn.
        #expect(taskLines.count >= 16 - mayBeLost.count && mayBeLost.count <= 4, "\(lines)")
        #expect(lines.filter { $0.hasPrefix("batch ") } == ["batch 16 0"])
        // Hooks the kill caught between their start and their end are recorded by the next start as
        // runs that may not have run, once each; the others ended well.
        let ended = events.filter { $0.type == "hook_ended" }
        let unknown = ended.filter { $0.data["may_not_have_run"] as? Bool == true && $0.task != nil }
        #expect(ended.filter { $0.data["may_not_have_run"] == nil }.allSatisfy { $0.data["exit_status"] as? Int == 0 })
        #expect(unknown.allSatisfy { $0.seq > secondStart } && Set(unknown.compactMap(\.task)).count == unknown.count)
        #expect(Set(unknown.compactMap(\.task)) == mayBeLost, "\(mayBeLost) \(unknown.map(\.task))")
    }

    /// A crash between recording `hook_started` and spawning loses that run
    /// (at most once), never repeats it, and says so: `status` (text and
    /// JSON) before and after the next start, that start's log (one line),
    /// a `hook_ended` it records once (`may_not_have_run`), `replay`.
    @Test func aCrashAfterRecordingAHookNeverRunsItTwiceAndSaysItMayNotHaveRun() throws {
        let records = TempDirectory()
        let record = records.file("ran.txt")
        let harness = try AgentHarness(config: "on_task_end = [\"/bin/sh\", \"-c\", \"echo $SYNCAGENT_TASK_ID >> '\(record)'\"]\n")
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("c.bin", size: 1000)
        try harness.drop("c.job", "id = \"c\"\nurl = \"\(nginx.url("c.bin"))\"\n")
        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = "hook-start-committed"
        #expect(try harness.startAgent().wait(seconds: 30) == 137)
        harness.extraEnvironment["SYNCAGENT_CRASHPOINT"] = nil
        let said = "on_task_end may not have run for task c"
        func saysItMayNotHaveRun(_ moment: String) throws {
            let status = try harness.run(["status"])
            #expect(status.stdout.contains(said), "status \(moment): \(status.stdout)")
            let json = try harness.run(["status", "--json"])
            let document = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
            let task = (document?["tasks"] as? [[String: Any]])?.first { $0["id"] as? String == "c" }
            #expect(task?["hook_may_not_have_run"] as? String == "on_task_end", "status --json \(moment): \(json.stdout)")
            let runs = document?["hooks_may_not_have_run"] as? [[String: Any]]
            #expect(runs?.count == 1 && runs?.first?["task"] as? String == "c" && runs?.first?["hook"] as? String == "on_task_end",
                    "status --json \(moment): \(json.stdout)")
            #expect(try harness.run(["status", "--task", "c"]).stdout.contains(said), "status --task \(moment)")
        }
        // The agent is gone: no end will come.
        try saysItMayNotHaveRun("before the next start")

        let next = try harness.startAgent(exitWhenIdle: true)
        #expect(next.wait(seconds: 30) == 0)
        #expect(next.stderr.components(separatedBy: said).count == 2, "one line at start: \(next.stderr)")
        #expect(!FileManager.default.fileExists(atPath: record))
        var events = try harness.events()
        #expect(events.filter { $0.type == "hook_started" }.count == 1)
        let ended = events.filter { $0.type == "hook_ended" }
        #expect(ended.count == 1 && ended.first?.task == "c" && ended.first?.data["may_not_have_run"] as? Bool == true, "\(ended.map(\.data))")
        try saysItMayNotHaveRun("after the next start")
        #expect(try harness.run(["replay"]).stdout.contains(said))
        let replay = try JSONSerialization.jsonObject(with: Data(try harness.run(["replay", "--json"]).stdout.utf8)) as? [String: Any]
        #expect((replay?["tasks"] as? [[String: Any]])?.first?["hook_may_not_have_run"] as? String == "on_task_end")
        #expect(try harness.run(["events"]).stdout.contains("\"may_not_have_run\":true"))

        // Recorded once: a third start neither records nor says it again.
        let third = try harness.startAgent(exitWhenIdle: true)
        #expect(third.wait(seconds: 30) == 0)
        #expect(!third.stderr.contains(said), "\(third.stderr)")
        events = try harness.events()
        #expect(events.filter { $0.type == "hook_ended" }.count == 1)
        #expect(!FileManager.default.fileExists(atPath: record))
    }

    /// A hook program that is not there fails every run at once; the runs
    /// still owed must not wait for an unrelated wake-up (the agent hung in
    /// --exit-when-idle).
    @Test func aHookThatCannotStartHoldsNothingUp() throws {
        let harness = try AgentHarness(config: "on_task_end = [\"no-such-hook-program\"]\n")
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("m.bin", size: 100)
        for index in 0..<10 {
            try harness.drop("m\(index).job", "url = \"\(nginx.url("m.bin"))\"\ndest = \"m\(index).bin\"\n")
        }
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        let ended = try harness.events().filter { $0.type == "hook_ended" }
        #expect(ended.count == 10 && ended.allSatisfy { ($0.data["error"] as? String)?.contains("cannot start no-such-hook-program") == true })
        // submit made the inbox as the agent does: only its owner reads jobs (they may carry credentials).
        let fresh = try AgentHarness()
        try FileManager.default.removeItem(atPath: fresh.inbox)
        #expect(try fresh.run(["submit", "http://127.0.0.1:9/x", "--header", "Authorization: Bearer t"]).status == 0)
        #expect((try FileManager.default.attributesOfItem(atPath: fresh.inbox)[.posixPermissions] as? Int) == 0o700)
    }

    @Test func hooksThatHangOrCannotStartAreRecorded() throws {
        let harness = try AgentHarness(config: """
            hook_timeout = 1
            on_task_end = ["/bin/sh", "-c", "sleep 60"]
            on_batch_end = ["/nonexistent/hook"]
            """)
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("t.bin", size: 1000)
        try harness.drop("t.job", "id = \"t\"\nurl = \"\(nginx.url("t.bin"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        let ended = try harness.events().filter { $0.type == "hook_ended" }
        let hung = ended.first { $0.task == "t" }
        #expect(hung?.data["timed_out"] as? Bool == true && hung?.data["signal"] as? Int == 9, "\(ended.map(\.data))")
        let missing = ended.first { $0.task == nil }
        #expect((missing?.data["error"] as? String)?.contains("cannot start /nonexistent/hook") == true)
        // A job file cannot set a hook.
        try harness.drop("sneaky.job", "url = \"\(nginx.url("t.bin"))\"\non_task_end = [\"/bin/true\"]\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 30) == 0)
        #expect(FileManager.default.fileExists(atPath: harness.inbox + "/rejected/sneaky.job"))
    }

    @Test func hooksAreStoppedWithTheAgentRecordedAndKeptOutOfItsLog() throws {
        let records = TempDirectory()
        let marker = records.file("fds.txt")
        let harness = try AgentHarness(config: """
            on_task_end = ["/bin/sh", "-c", "trap '' TERM; echo hook-says-hello; ls /proc/self/fd > '\(marker).tmp'; mv '\(marker).tmp' '\(marker)'; sleep 30"]
            """)
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("k.bin", size: 1000)
        try harness.drop("k.job", "id = \"k\"\nurl = \"\(nginx.url("k.bin"))\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { FileManager.default.fileExists(atPath: marker) })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        let ended = try harness.events().first { $0.type == "hook_ended" }
        #expect(ended?.data["signal"] as? Int == 9, "a hook ignoring SIGTERM is killed when the agent stops: \(ended?.data ?? [:])")
        #expect(!agent.stderr.contains("hook-says-hello") && !agent.stdout.contains("hook-says-hello"))
        #expect(try String(contentsOfFile: harness.stateDir + "/hooks.log", encoding: .utf8).contains("hook-says-hello"))
        // (The marker is written last: once it is there, the hook ignores SIGTERM and has spoken.)
        // Only stdin, stdout, stderr (and ls's own directory fd) are open in a hook.
        let fds = try String(contentsOfFile: marker, encoding: .utf8).split(separator: "\n").compactMap { Int($0) }
        #expect(fds.filter { $0 > 3 }.isEmpty, "\(fds)")

        let relative = try AgentHarness(config: "on_task_end = [\"hooks/done.sh\"]\n")
        let refused = try relative.run(["status"])
        #expect(refused.status != 0 && refused.stderr.contains("on_task_end") && refused.stderr.contains("absolute path"))
    }

    /// A hook that writes 10 MB in one run: hooks.log is held to its 4 MiB,
    /// the previous part kept as hooks.log.1. (Rotated only as the next hook
    /// started, one chatty run grew the file without bound: 1 GB seen.)
    @Test func aChattyHookKeepsHooksLogToItsLimit() throws {
        let written = 10_000_000
        let harness = try AgentHarness(config: """
            on_task_end = ["/bin/sh", "-c", "head -c \(written) /dev/zero | tr '\\\\0' x; echo last-line"]
            """)
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("w.bin", size: 100)
        try harness.drop("w.job", "id = \"w\"\nurl = \"\(nginx.url("w.bin"))\"\n")
        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let ended = try harness.events().first { $0.type == "hook_ended" }
        #expect(ended?.data["exit_status"] as? Int == 0, "\(ended?.data ?? [:])")
        let limit = 4 << 20
        func size(_ name: String) -> Int { (try? FileManager.default.attributesOfItem(atPath: harness.stateDir + "/" + name)[.size] as? Int) ?? 0 }
        let (log, previous) = (size("hooks.log"), size("hooks.log.1"))
        // (A file is rotated before a write would take it past the limit: it may end a pipe's read short of it.)
        #expect(log <= limit && previous <= limit && previous > limit - (64 << 10), "hooks.log \(log) bytes, hooks.log.1 \(previous)")
        // What is kept is the newest output, to the hook's last line.
        #expect(try String(contentsOfFile: harness.stateDir + "/hooks.log", encoding: .utf8).hasSuffix("xlast-line\n"))
    }

    /// SIGHUP arms a hook (and a cap) for the ends that follow, logged.
    @Test func sighupSetsHooksAndCapsForWhatFollows() throws {
        let records = TempDirectory()
        let record = records.file("ran.txt")
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("r.bin", size: 1000)
        let agent = try harness.startAgent()
        try harness.drop("before.job", "id = \"before\"\nurl = \"\(nginx.url("r.bin"))\"\ndest = \"before.bin\"\n")
        #expect(eventually(within: 20) { harness.state(of: "before") == "finished" })
        let config = try String(contentsOfFile: harness.configFile, encoding: .utf8)
        try (config + "max_overall_speed = \"4M\"\non_task_end = [\"/bin/sh\", \"-c\", \"echo $SYNCAGENT_TASK_ID >> '\(record)'\"]\n")
            .write(toFile: harness.configFile, atomically: true, encoding: .utf8)
        agent.signal(SIGHUP)
        #expect(harness.waitForEvent("config_reloaded", within: 10))
        let reload = try harness.events().first { $0.type == "config_reloaded" }
        #expect(Set(reload?.data["applied"] as? [String] ?? []) == ["max_overall_speed", "on_task_end"])
        #expect(reload?.data["hooks"] as? [String] == ["task_end"])
        try harness.drop("after.job", "id = \"after\"\nurl = \"\(nginx.url("r.bin"))\"\ndest = \"after.bin\"\n")
        #expect(eventually(within: 20) { ((try? String(contentsOfFile: record, encoding: .utf8)) ?? "") == "after\n" })
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        #expect(try String(contentsOfFile: record, encoding: .utf8) == "after\n", "an end before the reload owes nothing")
    }
}

import Foundation
import Testing
@testable import SyncAgentCore

/// The decision on a job's destination against the live tasks' reserved
/// names and the disk: use it, a free name beside it, skip, or refuse.
@Suite("Destinations: reserved names and renames")
struct DestinationCoreTests {
    func state(with dests: [String: String], phases: [String: EventBody] = [:]) -> AgentState {
        var log = LogBuilder()
        for (id, dest) in dests.sorted(by: { $0.key < $1.key }) {
            _ = log.add(.created(TaskSpec(url: "http://h/\(id)", dest: dest)), task: id)
            if let body = phases[id] { _ = log.add(body, task: id) }
        }
        return log.state
    }

    @Test func renamePicksAFreeNameAgainstLiveTasksAndTheDisk() {
        let live = state(with: ["a": "/dl/same.bin", "b": "/dl/same.1.bin"])
        #expect(Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: live, exists: { _ in false }) == .use("/dl/same.2.bin"))
        #expect(Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: live, exists: { $0 == "/dl/same.2.bin" })
                == .use("/dl/same.3.bin"))
        // Another task's partial file is a reserved name too.
        #expect(Destinations.decide(dest: "/dl/same.bin.part", overwrite: .rename, in: live, exists: { _ in false })
                == .use("/dl/same.bin.1.part"))
        // A stray partial file on disk is not clobbered.
        #expect(Destinations.decide(dest: "/dl/new.bin", overwrite: .rename, in: live, exists: { $0 == "/dl/new.bin.part" })
                == .use("/dl/new.1.bin"))
        #expect(Destinations.candidate("/dl/.hidden", number: 2) == "/dl/.hidden.2")
        #expect(Destinations.candidate("/dl/v1.0/archive.tar.gz", number: 1) == "/dl/v1.0/archive.tar.1.gz")
    }

    /// Many jobs for one file name: each `rename` goes on from where the last
    /// stopped, so 1,000 of them make a linear number of probes, not a
    /// quadratic one (6,000 once took 10 s of one loop turn), and get the
    /// names a walk from 1 would have given.
    @Test func manyJobsForOneNameAreRenamedWithoutProbingEveryNumberAgain() {
        var state = AgentState()
        var hints = Destinations.RenameHints()
        var probes = 0
        var userFiles: Set<String> = ["/dl/same.bin"]
        var onDisk = userFiles
        var chosen: [String] = []
        for index in 0..<2_000 {
            // A user's file takes a number now and then, ahead of the walk.
            if index % 100 == 50 {
                let ahead = Destinations.candidate("/dl/same.bin", number: index + 20)
                userFiles.insert(ahead)
                onDisk.insert(ahead)
            }
            let decision = Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: state, hints: &hints,
                                               exists: { probes += 1; return onDisk.contains($0) })
            guard case .use(let path) = decision else { Issue.record("\(decision)"); return }
            chosen.append(path)
            // Half of them live tasks, half files on disk already (their tasks long ended).
            if index % 2 == 1 { onDisk.insert(path); continue }
            state.apply(Event(seq: Int64(index + 1), atMs: 1_000, task: "t\(index)", body: .created(TaskSpec(url: "http://h/\(index)", dest: path))))
        }
        #expect(Set(chosen).count == chosen.count, "each its own name")
        #expect(Set(chosen).isDisjoint(with: userFiles), "no user's file")
        #expect(chosen.prefix(3) == ["/dl/same.1.bin", "/dl/same.2.bin", "/dl/same.3.bin"])
        #expect(probes < 10 * chosen.count, "\(probes) probes")
        // Without hints, the same state gives the same next name.
        let fresh = Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: state, exists: { onDisk.contains($0) })
        #expect(fresh == Destinations.decide(dest: "/dl/same.bin", overwrite: .rename, in: state, hints: &hints,
                                             exists: { onDisk.contains($0) }))
    }

    @Test func replaceFailAndSkipAreDecidedAgainstReservedNames() {
        let live = state(with: ["a": "/dl/x.bin"])
        guard case .refuse(_, let reason) = Destinations.decide(dest: "/dl/x.bin", overwrite: .replace, in: live, exists: { _ in false }) else {
            Issue.record("replace over a live task's file must be refused"); return
        }
        #expect(reason.contains("task a (queued)"))
        guard case .refuse = Destinations.decide(dest: "/dl/x.bin", overwrite: .fail, in: live, exists: { _ in false }) else {
            Issue.record(); return
        }
        guard case .skip(_, let why) = Destinations.decide(dest: "/dl/x.bin", overwrite: .skip, in: live, exists: { _ in false }) else {
            Issue.record(); return
        }
        #expect(why == "skipped: task a (queued) already brings /dl/x.bin")
        // The disk alone decides nothing at creation for these three.
        #expect(Destinations.decide(dest: "/dl/y.bin", overwrite: .replace, in: live, exists: { $0 == "/dl/y.bin" }) == .use("/dl/y.bin"))
    }

    @Test func aPartialFileNoLiveTaskHoldsIsRefusedUnlessRenamed() {
        var log = LogBuilder()
        _ = log.add(.created(TaskSpec(url: "http://h/a", dest: "/dl/a.bin")), task: "a")
        _ = log.add(.failed(Failed(reason: "disk full", code: .diskFull, bytes: 10)), task: "a")
        let onDisk = { (path: String) in path == "/dl/a.bin.part" }
        guard case .refuse(_, let reason) = Destinations.decide(dest: "/dl/a.bin", overwrite: .replace, in: log.state, exists: onDisk) else {
            Issue.record("a failed task's kept bytes were handed to a new task"); return
        }
        #expect(reason.contains("the bytes task a kept when it failed (resume or cancel it)"))
        #expect(Destinations.decide(dest: "/dl/a.bin", overwrite: .rename, in: log.state, exists: onDisk) == .use("/dl/a.1.bin"))
    }

    @Test func reservationsEndWithTheTaskAndComeBackWhenAFailedTaskRunsAgain() {
        var log = LogBuilder()
        _ = log.add(.created(TaskSpec(url: "http://h/a", dest: "/dl/a.bin")), task: "a")
        #expect(log.state.reservedPaths == ["/dl/a.bin": "a"])
        _ = log.add(.failed(Failed(reason: "disk full", code: .diskFull, bytes: 10)), task: "a")
        #expect(log.state.reservedPaths.isEmpty)
        _ = log.add(.resumed(Resumed(bytes: 10, reason: "run again")), task: "a")
        #expect(log.state.reservedPaths["/dl/a.bin"] == "a")
        _ = log.add(.finished(Finished(bytes: 20, dest: "/dl/a.bin")), task: "a")
        #expect(log.state.reservedPaths.isEmpty)
        // A log from before reservations may name one file twice: the first holder keeps it.
        _ = log.add(.created(TaskSpec(url: "http://h/b", dest: "/dl/b.bin")), task: "b")
        _ = log.add(.created(TaskSpec(url: "http://h/c", dest: "/dl/b.bin")), task: "c")
        _ = log.add(.cancelled(Cancelled(bytes: 0)), task: "c")
        #expect(log.state.reservedPaths["/dl/b.bin"] == "b")
    }
}

/// A task read from the log is held to the rules a job is held to when it
/// is taken (SPEC §6 rule 3): a log another hand wrote must not send a
/// download outside download_dir, into the agent's own folders, or up a `..`.
@Suite("Destinations read from the log")
struct RecordedDestinationTests {
    let rules = JobParser(downloadDir: "/home/me/Downloads", forbiddenDirs: ["/home/me/Downloads/.state"])

    func refusal(dest: String? = nil, bodyFile: String? = nil) -> (reason: String, code: FailureCode)? {
        rules.refusal(ofRecorded: TaskSpec(url: "http://h/x", kind: bodyFile == nil ? .download : .upload, dest: dest, bodyFile: bodyFile))
    }

    @Test func whatAJobCouldNameIsAccepted() {
        #expect(refusal(dest: "/home/me/Downloads/isos/a.iso") == nil)
        // As long as a file system holds: a rename's `.N` and an HLS video's `DEST.part/` go past a job's 240 bytes.
        #expect(refusal(dest: "/home/me/Downloads/" + String(repeating: "n", count: 250) + ".part/seg1.ts") == nil)
        #expect(refusal(bodyFile: "/home/me/video.mp4") == nil)
        #expect(refusal() == nil)
    }

    @Test func whatNoJobCouldNameFailsTheTask() {
        let outside = refusal(dest: "/home/me/.ssh/authorized_keys")
        #expect(outside?.code == .destRefused)
        #expect(outside?.reason == "the log's dest \"/home/me/.ssh/authorized_keys\" is outside download_dir /home/me/Downloads")
        #expect(refusal(dest: "/home/me/Downloads/../.bashrc")?.reason.contains("outside download_dir") == true)
        #expect(refusal(dest: "/home/me/Downloads/a/../b.bin")?.reason
                == "the log's dest \"/home/me/Downloads/a/../b.bin\" is not a plain path (it means /home/me/Downloads/b.bin)")
        #expect(refusal(dest: "/home/me/Downloads//b.bin")?.code == .destRefused)
        #expect(refusal(dest: "/home/me/Downloads/.state/events.sqlite")?.reason.contains("inside the agent's own folder") == true)
        #expect(refusal(dest: "/home/me/Downloads")?.code == .destRefused)
        #expect(refusal(dest: "/home/me/Downloads/" + String(repeating: "n", count: 256))?.code == .destRefused)
        let body = refusal(bodyFile: "etc/shadow")
        #expect(body?.code == .bodyUnreadable)
        #expect(body?.reason == "the log's body_file must be an absolute path, not \"etc/shadow\"")
    }
}

import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// SPEC §6 rule 4 for a power cut, not only kill -9 (issue 41): the agent's
/// state dir, inbox and download_dir on forgetfs, jobs of every kind, and at
/// random instants the agent SIGKILLed and the power cut at once, then the
/// file system mounted again and the agent restarted. After every cut the
/// checks of `PowerCutChecks` run on what survived.
///
/// `SYNCAGENT_POWER_CUTS=N` sets the number of cuts (default 12, under two
/// minutes); `make torture` runs 100. Every violation fails the test; what
/// each check found is printed either way.
@Suite("power cuts at any instant", .serialized)
struct PowerCutTests {
    static var cuts: Int { Int(ProcessInfo.processInfo.environment["SYNCAGENT_POWER_CUTS"] ?? "") ?? 12 }


    @Test func everyJobSurvivesPowerCutsExactlyOnce() throws {
        let started = Date()
        let hooksRan = TempDirectory()
        let record = hooksRan.file("hooks-ran.log")
        let config = """
            max_active = 6
            on_task_end = ["/bin/sh", "-c", "echo \\"$SYNCAGENT_TASK_ID $SYNCAGENT_STATE\\" >> '\(record)'"]

            """
        guard let world = try PowerCutWorld(config: config) else { return }
        let harness = world.harness
        let nginx = try Nginx(in: harness.directory)
        let tus = try TusServer(in: harness.directory)
        let uploads = try FaultServer(in: harness.directory)
        let daemon = try NotificationDaemon(in: harness.directory)
        harness.busAddress = daemon.busAddress
        let workload = try PowerCutWorkload(harness: harness, nginx: nginx, tus: tus, uploads: uploads)
        var checks = PowerCutChecks(world: world, workload: workload, hooksRan: record, daemon: daemon)

        var random = SplitMix64(seed: UInt64(ProcessInfo.processInfo.environment["SYNCAGENT_POWER_CUT_SEED"] ?? "") ?? 20261128)
        var pending = workload.jobs[...]
        var cuts = 0
        while cuts < Self.cuts {
            let agent = try harness.startAgent()
            // Jobs arrive while the agent starts, runs and dies: each durable once dropped.
            for job in pending.prefix(cuts == 0 ? 12 : 6) { try checks.drop(job.name, job.text) }
            pending = pending.dropFirst(cuts == 0 ? 12 : 6)
            if cuts == 1 { try checks.submit([workload.submitURLs[0], workload.submitURLs[1]]) }
            if cuts == 3 { try checks.submit(Array(workload.submitURLs[2...])) }
            if cuts == 2 { try checks.drop("pause-held.job", "action = \"pause\"\ntask = \"held\"\n") }
            if cuts == 4 { try checks.drop("resume-held.job", "action = \"resume\"\ntask = \"held\"\n") }
            usleep(UInt32.random(in: 200_000...2_000_000, using: &random))
            agent.signal(SIGKILL)
            #expect(agent.wait(seconds: 10) != nil)
            try world.cut(nil)
            cuts += 1
            try checks.afterCut(cuts)
        }
        // The jobs the cuts left for later, then the last run, uncut.
        for job in pending { try checks.drop(job.name, job.text) }
        if cuts <= 4 { try checks.drop("resume-held.job", "action = \"resume\"\ntask = \"held\"\n") }
        let last = try harness.startAgent(exitWhenIdle: true)
        let status = last.wait(seconds: 240)
        #expect(status != nil, "the last run did not end: \(last.stderr.suffix(2000))")
        try checks.afterCut(cuts + 1)
        try checks.atTheEnd()
        try checks.report(cuts: cuts, seconds: Date().timeIntervalSince(started))
    }
}

/// What the torture asks of the agent: jobs of every kind, and what each
/// must end as.
struct PowerCutWorkload {
    enum Outcome {
        /// A file in download_dir with these bytes (a download, a data task).
        case file(Data)
        /// An upload the fault server received whole at this path.
        case upload(path: String, sha256: String)
        /// A tus upload the tus server holds whole under this name.
        case tus(name: String, data: Data)
        /// An HLS folder: N.ts, each this segment.
        case hls([Data])
        /// A job refused at intake: one `rejected` event.
        case rejected
        /// A control job: one `controlled` event.
        case control
    }

    struct Job {
        var name: String
        var text: String
        var outcome: Outcome
    }

    var jobs: [Job] = []
    /// For `syncagent submit`: URLs of files on nginx, with their bytes.
    var submitURLs: [String] = []
    var submitted: [String: Data] = [:]
    let tusUploadDir: String
    let uploads: FaultServer

    init(harness: AgentHarness, nginx: Nginx, tus: TusServer, uploads: FaultServer) throws {
        tusUploadDir = tus.uploadDir
        self.uploads = uploads
        func download(_ name: String, size: Int, seed: UInt64, slow: Bool = false, keys: String = "") throws {
            let data = try nginx.serve(name + ".bin", size: size, seed: seed)
            let url = nginx.url((slow ? "slow/" : "") + name + ".bin")
            jobs.append(Job(name: name + ".job", text: "url = \"\(url)\"\n\(keys)", outcome: .file(data)))
        }
        // Long enough for cuts to land mid-transfer (8 MB/s per connection).
        for index in 0..<3 { try download("slow\(index)", size: (8 + 4 * index) << 20, seed: UInt64(index), slow: true, keys: "priority = 1\n") }
        try download("seg0", size: 32 << 20, seed: 10, slow: true, keys: "connections = 4\npriority = 1\n")
        try download("seg1", size: 24 << 20, seed: 11, slow: true, keys: "connections = 4\n")
        // Paused and resumed by control jobs, by its id.
        try download("held", size: 16 << 20, seed: 12, slow: true, keys: "id = \"held\"\n")
        for index in 0..<12 { try download("small\(index)", size: 1000 + index * 17_011, seed: UInt64(100 + index)) }
        // Folders made for a destination.
        for index in 0..<2 {
            try download("nested\(index)", size: 70_000 + index, seed: UInt64(200 + index), keys: "dest = \"nested/d\(index)/n\(index).bin\"\n")
        }
        for index in 0..<2 {
            let data = try nginx.serve("api\(index).json", size: 3000 + index, seed: UInt64(300 + index))
            jobs.append(Job(name: "data\(index).job", text: "kind = \"data\"\nurl = \"\(nginx.url("api\(index).json"))\"\ndest = \"api\(index).out\"\n",
                            outcome: .file(data)))
        }
        for index in 0..<2 {
            let (path, data) = try Self.body(harness, "plain\(index).bin", size: (2 + index) << 20, seed: UInt64(400 + index))
            jobs.append(Job(name: "up\(index).job",
                            text: "kind = \"upload\"\nurl = \"\(uploads.url("up/plain\(index)"))\"\nbody_file = \"\(path)\"\n",
                            outcome: .upload(path: "/up/plain\(index)", sha256: sha256Hex(data))))
        }
        for index in 0..<2 {
            let name = "tus\(index).bin"
            let (path, data) = try Self.body(harness, name, size: 10 << 20, seed: UInt64(500 + index))
            jobs.append(Job(name: "tus\(index).job",
                            text: "kind = \"upload\"\nprotocol = \"tus\"\nurl = \"\(tus.url)\"\nbody_file = \"\(path)\"\n"
                                + "chunk_size = \"1M\"\nmax_speed = \"4M\"\n",
                            outcome: .tus(name: name, data: data)))
        }
        let segments = try Self.makeHLS(in: nginx.root + "/hls")
        jobs.append(Job(name: "video.job", text: "kind = \"hls\"\nurl = \"\(nginx.url("hls/index.m3u8"))\"\ndest = \"video\"\n",
                        outcome: .hls(segments)))
        jobs.append(Job(name: "bad.job", text: "url = \"\(nginx.url("small0.bin"))\"\nbogus = 1\n", outcome: .rejected))
        // Mixed, so each cut finds jobs of several kinds arriving.
        var random = SplitMix64(seed: 41)
        jobs.shuffle(using: &random)
        // Two by `submit URL URL`, 34 by `submit -i` (from 32 it syncs the file system, not each file).
        for index in 0..<36 {
            let data = try nginx.serve("sub\(index).bin", size: 500 + index * 3001, seed: UInt64(600 + index))
            submitURLs.append(nginx.url("sub\(index).bin"))
            submitted[nginx.url("sub\(index).bin")] = data
        }
    }

    static func body(_ harness: AgentHarness, _ name: String, size: Int, seed: UInt64) throws -> (String, Data) {
        var generator = SplitMix64(seed: seed)
        let data = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) })
        let path = harness.directory.file(name)
        try data.write(to: URL(fileURLWithPath: path))
        return (path, data)
    }

    /// Eight seconds of ffmpeg's test picture in 2-second segments; their bytes, in order.
    static func makeHLS(in folder: String) throws -> [Data] {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/ffmpeg")
        process.arguments = ["-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=160x120:rate=25:duration=8",
                             "-c:v", "libx264", "-preset", "ultrafast", "-g", "50", "-f", "hls", "-hls_time", "2",
                             "-hls_playlist_type", "vod", "-hls_segment_filename", folder + "/seg%03d.ts", folder + "/index.m3u8"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw TestFailure("ffmpeg could not make the HLS media") }
        let names = try String(contentsOfFile: folder + "/index.m3u8", encoding: .utf8).split(separator: "\n")
            .filter { !$0.hasPrefix("#") && !$0.isEmpty }
        return try names.map { try Data(contentsOf: URL(fileURLWithPath: folder + "/" + $0)) }
    }
}

/// The checks after each cut, and what they found.
struct PowerCutChecks {
    let world: PowerCutWorld
    let workload: PowerCutWorkload
    let hooksRan: String
    let daemon: NotificationDaemon
    /// What `submit` printed: each id is a promise.
    var submittedIDs: [String: Data] = [:]
    var dropped: Set<String> = []
    /// Violations by check, then by what they are about (a file, a job): the first seen and the last.
    var found: [String: [String: Violation]] = [:]
    struct Violation {
        var first: String
        var last: String
        var cuts: Set<Int>
    }
    var checkedCuts = 0

    init(world: PowerCutWorld, workload: PowerCutWorkload, hooksRan: String, daemon: NotificationDaemon) {
        self.world = world
        self.workload = workload
        self.hooksRan = hooksRan
        self.daemon = daemon
    }

    var harness: AgentHarness { world.harness }

    /// A job dropped durably: from now on it must never be lost.
    mutating func drop(_ name: String, _ text: String) throws {
        try world.drop(name, text)
        dropped.insert(name)
    }

    mutating func submit(_ urls: [String]) throws {
        let result: CommandResult
        if urls.count == 1 || urls.count == 2 {
            result = try harness.run(["submit"] + urls)
        } else {
            let list = harness.directory.file("urls-\(urls.count).txt")
            try (urls.joined(separator: "\n") + "\n").write(toFile: list, atomically: true, encoding: .utf8)
            result = try harness.run(["submit", "-i", list])
        }
        let ids = result.stdout.split(separator: "\n").map(String.init)
        guard result.status == 0, ids.count == urls.count else { throw TestFailure("submit: \(result.stderr)") }
        for (id, url) in zip(ids, urls) { submittedIDs[id] = workload.submitted[url] }
    }

    mutating func violation(_ check: String, _ subject: String, _ detail: String, cut: Int) {
        let text = "cut \(cut): \(detail)"
        if var known = found[check]?[subject] {
            known.last = text
            known.cuts.insert(cut)
            found[check]![subject] = known
        } else {
            found[check, default: [:]][subject] = Violation(first: text, last: text, cuts: [cut])
        }
    }

    /// Everything SPEC §6 rule 4 promises, on what the cut left.
    mutating func afterCut(_ cut: Int) throws {
        checkedCuts = cut
        let result = try harness.run(["events", "--json"])
        guard result.status == 0 else {
            violation("log-unreadable", "events", result.stderr, cut: cut)
            return
        }
        let events = try harness.events()
        let inbox = Set((try? FileManager.default.contentsOfDirectory(atPath: harness.inbox)) ?? [])
        let taken = (try? FileManager.default.contentsOfDirectory(atPath: harness.inbox + "/.taken")) ?? []
        var pendingRenames: Set<String> = []
        var ended: [String: String] = [:]
        var finishedDest: [String: String] = [:]
        var createdByID: [String: AgentHarness.LoggedEvent] = [:]
        for event in events {
            guard let task = event.task else { continue }
            switch event.type {
            case "created": createdByID[task] = event
            case "finished", "failed", "cancelled":
                ended[task] = event.type
                if let dest = event.data["dest"] as? String { finishedDest[task] = dest }
            case "resumed", "started": if ended[task] != nil, event.type == "started" { ended[task] = nil }
            default: break
            }
        }

        // 1. A durable job is in the inbox or is one task: never neither, never two.
        for job in workload.jobs where dropped.contains(job.name) {
            let inInbox = inbox.contains(job.name) || taken.contains { $0.hasSuffix("-" + job.name) }
            switch job.outcome {
            case .rejected:
                let rejections = events.filter { $0.type == "rejected" && $0.data["file"] as? String == job.name }.count
                if rejections > 1 { violation("job-taken-twice", job.name, "rejected \(rejections) times", cut: cut) }
                if rejections == 0 && !inInbox { violation("job-lost", job.name, "neither in the inbox nor rejected", cut: cut) }
            case .control:
                break
            default:
                let tasks = events.filter { $0.type == "created" && PowerCutWorld.source(of: $0) == job.name }.count
                if tasks > 1 { violation("job-taken-twice", job.name, "became \(tasks) tasks", cut: cut) }
                if tasks == 0 && !inInbox { violation("job-lost", job.name, "neither in the inbox nor a task", cut: cut) }
                let refused = events.filter { $0.type == "rejected" && $0.data["file"] as? String == job.name }
                for event in refused { violation("job-taken-twice", job.name + " (rejected)", "rejected: \(event.data["error"] ?? "")", cut: cut) }
            }
        }
        for name in ["pause-held.job", "resume-held.job"] {
            let applied = events.filter { $0.type == "controlled" && $0.data["file"] as? String == name }.count
            if applied > 1 { violation("job-taken-twice", name, "control job applied \(applied) times", cut: cut) }
        }
        for id in submittedIDs.keys {
            let tasks = events.filter { $0.type == "created" && $0.task == id }.count
            let queued = inbox.contains { $0.hasSuffix(".job") && jobText(harness.inbox + "/" + $0).contains("\"\(id)\"") }
                || taken.contains { jobText(harness.inbox + "/.taken/" + $0).contains("\"\(id)\"") }
            if tasks == 0 && !queued { violation("job-lost", "submitted \(id)", "neither in the inbox nor a task", cut: cut) }
            for event in events where event.type == "rejected" && "\(event.data["error"] ?? "")".contains("\"\(id)\" is already used") {
                violation("job-taken-twice", "submitted \(id)", "taken again (rejected: id already used) at seq \(event.seq)", cut: cut)
            }
        }

        // 2. A task the log calls finished has its file, with the right bytes.
        for (task, state) in ended where state == "finished" {
            guard let created = createdByID[task], let expected = expectation(of: created) else { continue }
            switch expected {
            case .file(let data):
                let dest = finishedDest[task] ?? created.data["dest"] as? String ?? ""
                guard let onDisk = FileManager.default.contents(atPath: dest) else {
                    // Committed before its rename, by design: the next start renames DEST.part, if it holds the bytes.
                    if FileManager.default.contents(atPath: dest + ".part") == data {
                        pendingRenames.insert(dest)
                        // After the last run, uncut, a rename still pending is one no start will make.
                        if cut > PowerCutTests.cuts {
                            violation("finished-never-published", dest, "\(task): still at DEST.part", cut: cut)
                        }
                    } else {
                        violation("finished-file-missing", dest, "\(task) (\(PowerCutWorld.source(of: created) ?? "submitted"))", cut: cut)
                    }
                    continue
                }
                if onDisk != data { violation("finished-file-wrong", dest, "\(task): holds \(onDisk.count) bytes, not the \(data.count) sent", cut: cut) }
            case .upload(let path, let sha):
                if !workload.uploads.received.contains(where: { $0["path"] as? String == path && $0["sha256"] as? String == sha }) {
                    violation("finished-upload-missing", path, task, cut: cut)
                }
            case .tus(let name, let data):
                if FileManager.default.contents(atPath: workload.tusUploadDir + "/" + name) != data {
                    violation("finished-upload-missing", "tus " + name, task, cut: cut)
                }
            case .hls(let segments):
                let dest = finishedDest[task] ?? created.data["dest"] as? String ?? ""
                for (index, segment) in segments.enumerated() where FileManager.default.contents(atPath: "\(dest)/\(index).ts") != segment {
                    violation("finished-file-missing", "\(dest)/\(index).ts", "\(task): HLS segment", cut: cut)
                }
            case .rejected, .control:
                break
            }
        }

        // 3. No progress claimed beyond what the partial file holds (the bytes compared with the source).
        for (task, created) in createdByID where ended[task] == nil && created.data["kind"] as? String == "download" {
            guard case .file(let data)? = expectation(of: created), let dest = created.data["dest"] as? String else { continue }
            guard let claim = events.last(where: { $0.task == task && ($0.type == "progressed" || $0.type == "started") }) else { continue }
            let part = dest + ".part"
            let held = FileManager.default.contents(atPath: part) ?? Data()
            if let ranges = claim.data["ranges"] as? [[Int]] {
                for range in ranges where range.count == 2 && range[1] > range[0] {
                    if held.count < range[1] || held[range[0]..<range[1]] != data[range[0]..<range[1]] {
                        violation("progress-beyond-part", part, "\(task): range \(range) claimed, \(part) holds \(held.count) bytes"
                                  + (held.count >= range[1] ? " (other bytes)" : ""), cut: cut)
                        break
                    }
                }
            } else if created.data["connections"] == nil {
                let bytes = claim.data[claim.type == "started" ? "offset" : "bytes"] as? Int ?? 0
                if held.count < bytes || held.prefix(bytes) != data.prefix(bytes) {
                    violation("progress-beyond-part", part, "\(task): \(claim.type) claims \(bytes) bytes at seq \(claim.seq), \(part) holds \(held.count)"
                              + (held.count >= bytes ? " (other bytes)" : ""), cut: cut)
                }
            }
        }

        // 4. No hook and no notification twice for one ending.
        let hookLines = ((try? String(contentsOfFile: hooksRan, encoding: .utf8)) ?? "").split(separator: "\n")
        for (line, count) in Dictionary(grouping: hookLines, by: { $0 }).mapValues(\.count) where count > 1 {
            violation("hook-ran-twice", String(line), "ran \(count) times", cut: cut)
        }
        let notified = events.filter { $0.type == "notified" }.count
        if daemon.notifyCalls.count > notified {
            violation("notified-twice", "notifications", "\(daemon.notifyCalls.count) posted, \(notified) recorded", cut: cut)
        }

        // 5. The log replays, and what it says is on disk.
        let verify = try harness.run(["replay", "--verify"])
        if verify.status != 0 {
            for line in verify.stdout.split(separator: "\n") where line.hasPrefix("mismatch") {
                let subject = String(line.split(separator: ":").dropFirst(2).joined(separator: ":"))
                let pending = pendingRenames.contains { subject.contains($0 + " is missing") }
                violation(pending ? "verify-failed-rename-pending" : "verify-failed", subject, String(line), cut: cut)
            }
            if !verify.stdout.contains("mismatch") { violation("verify-failed", "replay", verify.stderr, cut: cut) }
        }
    }

    /// The run ends with every task finished and byte-identical.
    mutating func atTheEnd() throws {
        let cut = checkedCuts
        let tasks = try harness.statusTasks(["--all"])
        for task in tasks where task["state"] as? String != "finished" {
            violation("not-finished-at-the-end", "\(task["id"] ?? "")", "\(task["state"] ?? ""): \(task["error"] ?? "")", cut: cut)
        }
        let events = try harness.events()
        let sources = Set(events.filter { $0.type == "created" }.compactMap(PowerCutWorld.source(of:)))
        for job in workload.jobs {
            if case .rejected = job.outcome { continue }
            if !sources.contains(job.name) { violation("job-lost", job.name, "never became a task", cut: cut) }
        }
        let created = Set(events.filter { $0.type == "created" }.compactMap(\.task))
        for id in submittedIDs.keys where !created.contains(id) { violation("job-lost", "submitted \(id)", "never became a task", cut: cut) }
        #expect(!tasks.isEmpty)
    }

    func jobText(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    func expectation(of created: AgentHarness.LoggedEvent) -> PowerCutWorkload.Outcome? {
        if let source = PowerCutWorld.source(of: created), let job = workload.jobs.first(where: { $0.name == source }) { return job.outcome }
        if let task = created.task, let data = submittedIDs[task] { return .file(data) }
        return nil
    }

    static let checks = ["job-lost", "job-taken-twice", "finished-file-missing", "finished-file-wrong", "finished-upload-missing",
                         "finished-never-published", "progress-beyond-part", "hook-ran-twice", "notified-twice", "log-unreadable",
                         "verify-failed", "verify-failed-rename-pending", "not-finished-at-the-end"]

    /// What each check found, printed; every violation a failure.
    func report(cuts: Int, seconds: Double) throws {
        let events = try harness.events()
        let hooks = ((try? String(contentsOfFile: hooksRan, encoding: .utf8)) ?? "").split(separator: "\n").count
        var lines = ["power-cut torture: \(cuts) cuts in \(Int(seconds)) s; \(dropped.count) jobs dropped and \(submittedIDs.count) submitted "
                     + "became \(events.filter { $0.type == "created" }.count) tasks; \(hooks) hooks ran, "
                     + "\(daemon.notifyCalls.count) notifications posted; the mount's st_dev changed at \(world.deviceChanges) cuts"]
        for check in Self.checks + found.keys.filter({ !Self.checks.contains($0) }).sorted() {
            let violations = found[check] ?? [:]
            lines.append("  \(check): \(violations.count)")
            for (subject, violation) in violations.sorted(by: { $0.key < $1.key }).prefix(10) {
                lines.append("    \(subject): \(violation.first)" + (violation.cuts.count > 1 ? "; in \(violation.cuts.count) cuts, last \(violation.last)" : ""))
            }
        }
        print(lines.joined(separator: "\n"))
        for (check, violations) in found.sorted(by: { $0.key < $1.key }) where !violations.isEmpty {
            let texts = violations.sorted(by: { $0.key < $1.key }).map { "\($0.key): \($0.value.first)" }
            Issue.record(Comment(rawValue: "\(check): \(texts.count) violations: " + texts.prefix(5).joined(separator: " | ")))
        }
    }
}

import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `submit` as wget and aria2c users reach for it: lists of URLs from a
/// file, standard input or a FIFO, thousands of URLs on one line, and ids
/// printed only once every job is written.
@Suite("submit", .serialized)
struct SubmitTests {
    @Test func submitListMakesOneTaskPerURLAndPrintsTheirIDs() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        for name in ["a", "b", "c"] { try nginx.serve("\(name).bin", size: 10_000) }
        let list = harness.directory.file("urls.txt")
        try """
            # three files, aria2c-style
            \(nginx.url("a.bin"))
              out=first.bin
            \(nginx.url("b.bin"))
              dir=fetched
              priority=7

            \(nginx.url("c.bin"))
            """.write(toFile: list, atomically: true, encoding: .utf8)
        let submitted = try harness.run(["submit", "-i", list, "--batch", "three"])
        #expect(submitted.status == 0, "\(submitted.stderr)")
        let ids = submitted.stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 3 && Set(ids).count == 3, "\(submitted.stdout)")
        #expect(harness.jobFiles().count == 3)

        // Several URLs on the command line, with --dir; and from standard input.
        let more = try harness.run(["submit", "--dir", "many", nginx.url("a.bin"), nginx.url("b.bin")])
        #expect(more.stdout.split(separator: "\n").count == 2)
        let flags = harness.globalFlags.map { "'\($0)'" }.joined(separator: " ")
        let piped = try ChildProcess("/bin/sh", ["-c", "printf '\(nginx.url("c.bin"))\\n  out=stdin.bin\\n' | '\(syncagentBinary)' submit \(flags) -i - --id from-stdin"],
                                     environment: harness.environment, outputIn: harness.directory.path)
        #expect(piped.wait(seconds: 30) == 0, "\(piped.stderr)")
        #expect(piped.stdout == "from-stdin\n")

        // A mistake anywhere writes nothing.
        try "\(nginx.url("a.bin"))\n  sha256=nothex\n".write(toFile: list, atomically: true, encoding: .utf8)
        let bad = try harness.run(["submit", "-i", list])
        #expect(bad.status != 0 && bad.stderr.contains("urls.txt line 2: key \"sha256\""), "\(bad.stderr)")
        // A header or form option without its separator is named by its list and line, not as a flag it was not.
        try "\(nginx.url("a.bin"))\n  out=a.bin\n\(nginx.url("b.bin"))\n  header=X-Only\n".write(toFile: list, atomically: true, encoding: .utf8)
        let headerless = try harness.run(["submit", "-i", list])
        #expect(headerless.status != 0 && headerless.stderr == "syncagent: \(list) line 4: header=X-Only must look like 'Name: value'\n",
                "\(headerless.stderr)")
        let fromStdin = try ChildProcess("/bin/sh", ["-c", "printf '\(nginx.url("c.bin"))\\n  form=title\\n' | '\(syncagentBinary)' submit \(flags) -i -"],
                                         environment: harness.environment, outputIn: harness.directory.path)
        #expect(fromStdin.wait(seconds: 30) != 0)
        #expect(fromStdin.stderr == "syncagent: standard input line 2: form=title must look like 'name=value'\n", "\(fromStdin.stderr)")
        let flag = try harness.run(["submit", nginx.url("a.bin"), "--header", "X-Only"])
        #expect(flag.status != 0 && flag.stderr == "syncagent: --header \"X-Only\" must look like 'Name: value'\n", "\(flag.stderr)")
        let twoDests = try harness.run(["submit", "--dest", "x.bin", nginx.url("a.bin"), nginx.url("b.bin")])
        #expect(twoDests.status != 0 && twoDests.stderr.contains("use --dir"))
        #expect(harness.jobFiles().count == 6)

        #expect(try harness.startAgent(exitWhenIdle: true).wait(seconds: 60) == 0)
        let tasks = try harness.tasksByID()
        #expect(tasks.count == 6)
        #expect(tasks[ids[0]]?["dest"] as? String == harness.downloads + "/first.bin")
        #expect(tasks[ids[1]]?["dest"] as? String == harness.downloads + "/fetched/b.bin")
        #expect(tasks[ids[1]]?["priority"] as? Int == 7)
        #expect(tasks[ids[2]]?["batch"] as? String == "three")
        #expect(tasks["from-stdin"]?["dest"] as? String == harness.downloads + "/stdin.bin")
        #expect(FileManager.default.fileExists(atPath: harness.downloads + "/many/a.bin"))
    }

    /// A URL typed without a scheme is taken as https, and said so; -d and
    /// -o name the folder and the file, as aria2c's do.
    @Test func noSchemeMeansHTTPSAndDashDAndDashONameTheFolderAndFile() throws {
        let harness = try AgentHarness()
        let bare = try harness.run(["submit", "--id", "bare", "example.com/isos/a.iso"])
        #expect(bare.status == 0 && bare.stdout == "bare\n", "\(bare.stderr)")
        #expect(bare.stderr.hasPrefix("syncagent: no scheme in \"example.com/isos/a.iso\": taken as https://example.com/isos/a.iso\n"),
                "\(bare.stderr)")
        let named = try harness.run(["submit", "--id", "named", "-d", "isos", "-o", "debian.iso", "https://example.com/d-13.iso"])
        #expect(named.status == 0, "\(named.stderr)")
        let waiting = try harness.run(["status", "--json"])
        let jobs = (try JSONSerialization.jsonObject(with: Data(waiting.stdout.utf8)) as? [String: Any])?["waiting"] as? [[String: Any]] ?? []
        let byID = Dictionary(uniqueKeysWithValues: jobs.map { ($0["id"] as? String ?? "", $0) })
        #expect(byID["bare"]?["url"] as? String == "https://example.com/isos/a.iso", "\(jobs)")
        #expect(byID["bare"]?["dest"] as? String == harness.downloads + "/a.iso")
        #expect(byID["named"]?["dest"] as? String == harness.downloads + "/isos/debian.iso", "\(jobs)")
        let two = try harness.run(["submit", "-o", "one.iso", "https://example.com/a", "https://example.com/b"])
        #expect(two.status != 0 && two.stderr.contains("-o/--out names one file, but 2 URLs were given; use -d/--dir"), "\(two.stderr)")
        let path = try harness.run(["submit", "-o", "a/b.iso", "https://example.com/a"])
        #expect(path.status != 0 && path.stderr.contains("-o/--out takes a file name"), "\(path.stderr)")
    }

    /// `submit --wait` stays until its tasks end and exits as aria2c
    /// would: 0 when all finished, 3 for a 404. On a terminal each task has
    /// a line redrawn in place; piped, a line as each ends. The ids still
    /// go to stdout, alone.
    @Test func submitWaitFollowsItsTasksAndExitsAsAria2cDoes() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("ok.bin", size: 100_000)
        try nginx.serve("slow.bin", size: 1_000_000)
        let agent = try harness.startAgent()
        defer { agent.signal(SIGKILL) }
        #expect(eventually(within: 20) { harness.statusSaysAgentRuns })

        let mixed = try harness.run(["submit", "--wait", "--id", "good", nginx.url("ok.bin")])
        #expect(mixed.status == 0 && mixed.stdout == "good\n", "\(mixed.stderr)")
        #expect(mixed.stderr.contains("good  finished  97.7 KiB/97.7 KiB  \(harness.downloads)/ok.bin\n"), "\(mixed.stderr)")
        #expect(mixed.stderr.hasSuffix("syncagent: 1 finished\n"), "\(mixed.stderr)")
        let failing = try harness.run(["submit", "--wait", "-d", "again", nginx.url("ok.bin"), nginx.url("absent.bin")])
        #expect(failing.status == 3, "aria2c's \"resource not found\": \(failing.stderr)")
        let ids = failing.stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 2)
        #expect(failing.stderr.contains("\(ids.last ?? "?")  failed  absent.bin: server answered 404 Not Found"), "\(failing.stderr)")
        #expect(failing.stderr.contains("syncagent: 1 finished, 1 failed\n  \(ids.last ?? "?"): server answered 404"), "\(failing.stderr)")

        // On a terminal: a line per task, redrawn while it runs (five seconds of it, so a
        // loaded machine still draws it running).
        let drawn = try harness.printedOnTerminal(["submit", "--wait", "--max-speed", "200K", "--id", "slow", nginx.url("slow.bin")],
                                                  columns: 100)
        #expect(drawn.contains { $0.hasPrefix("slow  running  ") && $0.contains("%") && $0.contains("/s") }, "\(drawn)")
        #expect(drawn.contains { $0.hasPrefix("slow  finished  976.6 KiB/976.6 KiB") }, "\(drawn)")
        #expect(drawn.last == "syncagent: 1 finished", "\(drawn)")
    }

    @Test func submitWritesEveryJobBeforeItsIDsAndSaysWhenTheyCannotBePrinted() throws {
        let harness = try AgentHarness()
        let list = (0..<300).map { "http://127.0.0.1:9/f\($0).bin" }.joined(separator: "\n")
        try list.write(toFile: harness.directory.file("many.txt"), atomically: true, encoding: .utf8)
        let flags = harness.globalFlags.map { "'\($0)'" }.joined(separator: " ")
        let headed = try ChildProcess("/bin/bash", ["-c", "'\(syncagentBinary)' submit \(flags) -i '\(harness.directory.file("many.txt"))' | head -1"],
                                      environment: harness.environment, outputIn: harness.directory.path)
        #expect(headed.wait(seconds: 60) == 0)
        #expect(harness.jobFiles().count == 300, "a reader that leaves early stops nothing half-way")
        let full = try ChildProcess("/bin/bash", ["-c", "'\(syncagentBinary)' submit \(flags) http://127.0.0.1:9/g.bin > /dev/full"],
                                    environment: harness.environment, outputIn: harness.directory.path)
        #expect(full.wait(seconds: 30) == 1)
        #expect(full.stderr.contains("1 jobs were written, but their ids could not be printed"), "\(full.stderr)")

        // Four submits racing with one --id: exactly one wins.
        let racers = try (0..<4).map { index in
            try ChildProcess(syncagentBinary, ["submit"] + harness.globalFlags + ["--id", "race", "--dest", "r\(index).bin", "http://127.0.0.1:9/r"],
                             environment: harness.environment, outputIn: harness.directory.path)
        }
        let statuses = racers.map { $0.wait(seconds: 30) }
        #expect(statuses.filter { $0 == 0 }.count == 1, "\(statuses)")

        // A FIFO (or <(…)) is read as a stream; a folder is named as one.
        let fifo = harness.directory.file("list.fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        let fromFIFO = try ChildProcess(syncagentBinary, ["submit"] + harness.globalFlags + ["-i", fifo],
                                        environment: harness.environment, outputIn: harness.directory.path)
        try "http://127.0.0.1:9/from-fifo.bin\n".write(toFile: fifo, atomically: false, encoding: .utf8)
        #expect(fromFIFO.wait(seconds: 30) == 0, "\(fromFIFO.stderr)")
        #expect(fromFIFO.stdout.split(separator: "\n").count == 1)
        let folder = try harness.run(["submit", "-i", harness.directory.path])
        #expect(folder.stderr.contains("is a folder, not a URL list"))

        // Parser errors are one line too; names that would read other than they are never pass.
        let missing = try harness.run(["submit", "--retries"])
        #expect(missing.stderr.split(separator: "\n").count == 1 && missing.stderr.contains("--retries"), "\(missing.stderr)")
        let bidi = try harness.run(["submit", "http://127.0.0.1:9/x", "--dest", "invoice\u{202E}fdp.exe"])
        #expect(bidi.status != 0 && bidi.stderr.contains("dest"), "\(bidi.stderr)")
    }

    /// 20,000 URLs on the command line once took 18 s in the argument
    /// parser. A long line is split before it is parsed: every
    /// URL keeps its place, every option (before, between and after the
    /// URLs, with values that look like URLs) still applies.
    @Test func aLongSubmitLineKeepsItsURLsInOrderAndItsOptions() throws {
        let harness = try AgentHarness()
        let urls = (0..<2_000).map { "http://127.0.0.1:9/f\($0).bin" }
        let line = ["submit", "--dir", "long"] + urls[..<1_000] + ["--header", "Referer: https://example.com/x", "--update"]
            + urls[1_000...] + ["--priority=3"] + harness.globalFlags + ["--", "http://127.0.0.1:9/after-dashes.bin"]
        let result = try harness.run(Array(line))
        #expect(result.status == 0, "\(result.stderr)")
        let ids = result.stdout.split(separator: "\n").map(String.init)
        #expect(ids.count == 2_001)
        for (index, url) in (urls + ["http://127.0.0.1:9/after-dashes.bin"]).enumerated() where index % 250 == 0 || index == 2_000 {
            let file = harness.inbox + "/" + harness.jobFiles().first { $0.contains("-\(ids[index])-") }!
            let text = try String(contentsOfFile: file, encoding: .utf8)
            #expect(text.contains("url = \"\(url)\"") && text.contains("dest = \"long/")
                    && text.contains("\"Referer\" = \"https://example.com/x\"") && text.contains("overwrite = \"update\"")
                    && text.contains("priority = 3"), "\(text)")
        }
        // A flag the split does not know leaves a URL to the parser, which then reads the whole line itself.
        let help = try harness.run(["submit"] + urls[..<100] + ["--help"] + harness.globalFlags)
        #expect(help.status == 0 && help.stdout.contains("USAGE"))
        let bad = try harness.run(["submit"] + urls[..<100] + ["--connections", "99"] + harness.globalFlags)
        #expect(bad.status != 0 && bad.stderr.contains("connections"), "\(bad.stderr)")
    }
}

import Foundation
import Testing
import TestSupport

/// Logs written by one commit's code, and what that commit's binary printed
/// for them (Tests/Fixtures/logs/README.md): a later build must print the
/// same, byte for byte. One log has every event type, the others replay
/// from a snapshot of each format this build reads, plus events after it.
///
/// A golden file is never captured again to make this pass: a difference is
/// either a bug, or a change of output to be argued for on its own (and the
/// golden edited by hand, in the commit that makes it).
@Suite("FixtureLog")
struct FixtureLogTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../Fixtures/logs").standardizedFileURL.path

    static let fixtures = ["all-events", "snapshot-format-2", "snapshot-format-3", "snapshot-format-4", "snapshot-format-5", "snapshot-format-6",
                           "snapshot-format-7", "snapshot-format-8", "retargeted", "renditions"]

    /// The golden file of each command, as `capture_golden.sh` names them.
    static let goldens = [
        "replay --json": "replay.json",
        "replay": "replay.txt",
        "events --json": "events.jsonl",
        "events": "events.txt",
        "status --json": "status.json",
        "status": "status.txt",
    ]

    @Test func everyFixtureHereIsChecked() throws {
        let found = try FileManager.default.contentsOfDirectory(atPath: Self.folder).filter { name in
            var isFolder: ObjCBool = false
            return FileManager.default.fileExists(atPath: Self.folder + "/" + name, isDirectory: &isFolder) && isFolder.boolValue
        }
        #expect(found.sorted() == Self.fixtures.sorted(), "fixture folders in \(Self.folder)")
    }

    @Test(arguments: fixtures, ["replay --json", "replay", "events --json", "events", "status --json", "status"])
    func printsWhatTheBinaryThatWroteItPrinted(fixture: String, command: String) throws {
        let source = Self.folder + "/" + fixture
        let log = source + "/events.sqlite"
        let original = try Data(contentsOf: URL(fileURLWithPath: log))
        let harness = try AgentHarness()
        try FileManager.default.createDirectory(atPath: harness.stateDir, withIntermediateDirectories: true)
        // A copy: opening the log (WAL mode) writes -wal and -shm files beside it.
        try FileManager.default.copyItem(atPath: log, toPath: harness.stateDir + "/events.sqlite")

        let result = try harness.run(command.split(separator: " ").map(String.init))
        #expect(result.status == 0, "syncagent \(command) on \(fixture): \(result.stderr)")
        let golden = source + "/" + Self.goldens[command]!
        let stderrGolden = golden + ".stderr"
        let expectedStderr = FileManager.default.fileExists(atPath: stderrGolden) ? try String(contentsOfFile: stderrGolden, encoding: .utf8) : ""
        compare(normalized(result.stdout, harness), with: try String(contentsOfFile: golden, encoding: .utf8),
                golden: golden, scratch: harness.directory, what: "syncagent \(command) on \(fixture)")
        compare(normalized(result.stderr, harness), with: expectedStderr,
                golden: stderrGolden, scratch: harness.directory, what: "stderr of syncagent \(command) on \(fixture)")

        #expect(try Data(contentsOf: URL(fileURLWithPath: log)) == original, "\(log) was modified")
        for suffix in ["-wal", "-shm", "-journal"] {
            #expect(!FileManager.default.fileExists(atPath: log + suffix), "\(log + suffix) was made beside the fixture")
        }
    }

    /// The state folder is a new temporary one each run: `replay` names it.
    func normalized(_ output: String, _ harness: AgentHarness) -> String {
        output.replacingOccurrences(of: harness.stateDir, with: "$STATE_DIR")
    }

    /// Equal, or an issue with `diff -u` of the golden against what was printed.
    func compare(_ actual: String, with expected: String, golden: String, scratch: TempDirectory, what: String,
                 sourceLocation: SourceLocation = #_sourceLocation) {
        guard actual != expected else { return }
        let printed = scratch.file("printed-" + (golden as NSString).lastPathComponent)
        try? actual.write(toFile: printed, atomically: true, encoding: .utf8)
        var diff = "(diff could not run)"
        if let child = try? ChildProcess("/usr/bin/diff", ["-u", golden, printed], environment: [:], outputIn: scratch.path) {
            _ = child.wait(seconds: 30)
            diff = child.stdout
        }
        if diff.count > 6_000 { diff = String(diff.prefix(6_000)) + "\n… (diff cut at 6000 characters)" }
        Issue.record("\(what) differs from \(golden) (- golden, + printed now):\n\(diff)", sourceLocation: sourceLocation)
    }
}

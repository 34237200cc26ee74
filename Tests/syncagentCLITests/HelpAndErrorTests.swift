import Foundation
import Testing
import TestSupport

/// What the command line says to a person: help that reads as prose, and
/// errors that say what was meant and what would do.
@Suite("Help and error words", .serialized)
struct HelpAndErrorTests {
    static let commands = ["", "run", "submit", "status", "replay", "events", "pause", "resume", "cancel", "forget", "compact"]

    /// Each paragraph of every command's help is filled to the width it is
    /// printed at (80 columns piped, of which swift-argument-parser fills
    /// 79): no line ends while the next one's first word would have fit on it.
    @Test func helpBreaksLinesOnlyAtTheWidth() throws {
        let harness = try AgentHarness()
        for command in Self.commands {
            let help = try harness.run(command.isEmpty ? ["--help"] : [command, "--help"], flags: false)
            #expect(help.status == 0, "\(command): \(help.stderr)")
            // The overview and discussion: before the usage line.
            let prose = help.stdout.components(separatedBy: "\nUSAGE:").first ?? ""
            let lines = prose.components(separatedBy: "\n")
            for (index, line) in lines.enumerated().dropLast() {
                let next = lines[index + 1]
                // Examples are indented, and a heading ("Example:") ends its line on purpose.
                guard !line.isEmpty, !next.isEmpty, !line.hasPrefix(" "), !next.hasPrefix(" "), !line.hasSuffix(":") else { continue }
                let word = next.prefix { $0 != " " }
                #expect(line.count + 1 + word.count > 79, "\(command) --help breaks early: \"\(line)\" / \"\(next)\"")
            }
        }
    }

    /// A URL refused for a space is quoted once, in submit's error and in
    /// the rejected job's .error file.
    @Test func aRefusedURLIsQuotedOnce() throws {
        let harness = try AgentHarness()
        let submit = try harness.run(["submit", "http://example.com/a b.iso"])
        #expect(submit.status != 0)
        #expect(submit.stderr == "syncagent: key \"url\" must not contain spaces or control characters: \"http://example.com/a b.iso\"\n",
                "\(submit.stderr)")
        try harness.drop("space.job", "url = \"http://example.com/a b.iso\"\n")
        try harness.runUntilIdle()
        let error = try String(contentsOfFile: harness.inbox + "/rejected/space.job.error", encoding: .utf8)
        #expect(error.contains(": key \"url\" must not contain spaces or control characters: \"http://example.com/a b.iso\""), "\(error)")
        #expect(!error.contains("\"\""), "\(error)")
    }

    /// A mistyped command is named with the one meant; one far from every
    /// command is only said to be none.
    @Test func aMistypedCommandSuggestsTheOneMeant() throws {
        let harness = try AgentHarness()
        let typo = try harness.run(["stauts"], flags: false)
        #expect(typo.status == 64 && typo.stdout.isEmpty, "\(typo.stderr)")
        #expect(typo.stderr == "syncagent: \"stauts\" is not a command; did you mean \"status\"? (see syncagent --help)\n", "\(typo.stderr)")
        let withFlags = try harness.run(["sumbit", "--dir", "x", "http://example.com/a"], flags: false)
        #expect(withFlags.status == 64 && withFlags.stderr.contains("did you mean \"submit\"?"), "\(withFlags.stderr)")
        let far = try harness.run(["download", "http://example.com/a"], flags: false)
        #expect(far.status == 64 && far.stderr == "syncagent: \"download\" is not a command (see syncagent --help)\n", "\(far.stderr)")
        #expect(try harness.run(["help", "status"], flags: false).status == 0)
    }

    /// `--max-speed 2MB` is refused, not read as 2 MiB: the error says
    /// which units are taken and what to write; nothing is submitted.
    @Test func anAmbiguousUnitIsRefusedNamingTheUnitsTaken() throws {
        let harness = try AgentHarness()
        let ambiguous = try harness.run(["submit", "--max-speed", "2MB", "http://example.com/a.iso"])
        #expect(ambiguous.status != 0 && ambiguous.stdout.isEmpty, "\(ambiguous.stdout)")
        #expect(ambiguous.stderr.hasPrefix("syncagent: key \"max_speed\" must not be \"2MB\": "), "\(ambiguous.stderr)")
        #expect(ambiguous.stderr.contains("write \"2M\" or \"2MiB\" (2097152 bytes)")
                && ambiguous.stderr.contains("K, M and G are powers of 1024"), "\(ambiguous.stderr)")
        #expect(harness.jobFiles().isEmpty)
        let config = try AgentHarness(config: "max_speed = \"1GB\"\n")
        let status = try config.run(["status"])
        #expect(status.status != 0 && status.stderr.contains("max_speed") && status.stderr.contains("\"1G\" or \"1GiB\""), "\(status.stderr)")
        #expect(try harness.run(["submit", "--max-speed", "2M", "http://example.com/a.iso"]).status == 0)
    }
}

import Foundation
import SyncAgentCore
import Testing
import TestSupport

/// The man pages in docs/man, read as man-db reads them (`man -l`): each
/// renders without a warning, and names everything the binary and the
/// parsers take, so a command, flag, exit status or key added later cannot
/// go unwritten.
@Suite("Man pages")
struct ManPageTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let pages = ["syncagent.1", "syncagent.job.5", "syncagent.toml.5"]

    /// `man -l --warnings` at 80 columns: what it printed, and its warnings.
    static func render(_ page: String, width: Int = 80) throws -> (text: String, warnings: String, status: Int32) {
        let world = TempDirectory()
        let child = try ChildProcess("/usr/bin/man", ["-l", "--warnings", root + "/docs/man/" + page],
                                     environment: ["MANWIDTH": "\(width)", "MANPAGER": "cat", "LANG": "C.UTF-8",
                                                   "PATH": "/usr/bin:/bin", "HOME": world.path],
                                     outputIn: world.path)
        guard let status = child.wait(seconds: 60) else { throw TestFailure("man -l \(page) still running") }
        return (child.stdout, child.stderr, status)
    }

    /// The lines of section `name` of a rendered page (up to the next heading).
    static func section(_ name: String, of text: String) -> [Substring] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(of: Substring(name)) else { return [] }
        let rest = lines[(start + 1)...]
        let end = rest.firstIndex { $0.first.map { $0.isUppercase } ?? false } ?? rest.endIndex
        return Array(rest[..<end])
    }

    /// The words a rendered section defines: each entry's tag (`.TP`) at
    /// the start of a line indented 7, its text on the same line from
    /// column 14 or on the next line indented 14; split at ", " ("sha256, md5").
    static func tags(in lines: [Substring]) -> Set<String> {
        var tags: Set<String> = []
        let body = String(repeating: " ", count: 14)
        for (index, line) in lines.enumerated() where line.hasPrefix("       ") && !line.hasPrefix("        ") {
            let tagText = line.dropFirst(7)
            let sameLine = tagText.count > 7 && tagText.prefix(7).contains(" ")
                && line.dropFirst(13).first == " " && line.dropFirst(14).first.map({ $0 != " " }) == true
            let nextLine = index + 1 < lines.count && lines[index + 1].hasPrefix(body)
            guard sameLine || nextLine else { continue }
            let tag = sameLine ? tagText.prefix(7).trimmingCharacters(in: .whitespaces) : String(tagText)
            for part in tag.components(separatedBy: ", ") {
                if let word = part.split(separator: " ").first { tags.insert(String(word)) }
            }
        }
        return tags
    }

    @Test(arguments: pages)
    func rendersWithoutAWarningUnderItsOwnTitle(page: String) throws {
        let (text, warnings, status) = try Self.render(page)
        #expect(status == 0 && warnings.isEmpty, "man -l --warnings \(page): \(warnings)")
        let title = text.split(separator: "\n").first.map(String.init) ?? ""
        let name = page.uppercased().split(separator: ".").dropLast().joined(separator: ".")
        let section = page.split(separator: ".").last!
        #expect(title.hasPrefix("\(name)(\(section))") && title.hasSuffix("\(name)(\(section))"), "\(title)")
        #expect(title.contains(section == "1" ? "User Commands" : "File Formats") && !title.contains("BSD"), "\(title)")
        // The version in the footer is the binary's.
        let version = try AgentHarness().run(["--version"], flags: false).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let footer = text.split(separator: "\n").last.map(String.init) ?? ""
        #expect(!version.isEmpty && footer.hasPrefix("syncagent \(version) "), "\(footer) (binary: \(version))")
        // Nothing broken across lines by hyphenation: every flag, key and path stays whole.
        #expect(!text.contains("\u{2010}\n"), "\(page) hyphenates")
    }

    @Test func syncagent1HasTheSectionsAUserLooksFor() throws {
        let text = try Self.render("syncagent.1").text
        for name in ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES", "SEE ALSO"] {
            #expect(!Self.section(name, of: text).isEmpty, "no \(name) section")
        }
        // Every example is a command this binary takes.
        let examples = Self.section("EXAMPLES", of: text).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.hasPrefix("syncagent ") }
        #expect(examples.count >= 8)
        let commands = try Self.commandTree().map(\.name)
        for example in examples {
            let command = example.split(separator: " ")[1]
            #expect(commands.contains(String(command)), "\(example)")
        }
    }

    /// `--experimental-dump-help`: every command and the flags each takes, as the binary parses them.
    static func commandTree() throws -> [(name: String, flags: [String])] {
        let dump = try AgentHarness().run(["--experimental-dump-help"], flags: false)
        let document = try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any]
        let top = try #require(document?["command"] as? [String: Any], "\(dump.stdout.prefix(300))")
        func flags(of command: [String: Any]) -> [String] {
            ((command["arguments"] as? [[String: Any]]) ?? []).flatMap { argument in
                ((argument["names"] as? [[String: Any]]) ?? []).compactMap { name in
                    guard let word = name["name"] as? String else { return nil }
                    return (name["kind"] as? String == "short" ? "-" : "--") + word
                }
            }
        }
        let subcommands = (top["subcommands"] as? [[String: Any]]) ?? []
        return [("syncagent", flags(of: top))] + subcommands.compactMap { command in
            (command["commandName"] as? String).map { ($0, flags(of: command)) }
        }.filter { $0.name != "help" }
    }

    @Test func syncagent1NamesEveryCommandAndFlagTheBinaryTakes() throws {
        let text = try Self.render("syncagent.1").text
        let commands = Self.tags(in: Self.section("COMMANDS", of: text))
        let options = Self.section("OPTIONS", of: text)
        let tree = try Self.commandTree()
        #expect(tree.count >= 10, "\(tree.map(\.name))")
        // Each command's flags are listed under it in COMMANDS, or (the global ones) under OPTIONS.
        let globalFlags = Self.tags(in: options).union(options.flatMap { line in
            line.split(separator: " ").map(String.init).filter { $0.hasPrefix("-") }
        })
        let commandText = Self.section("COMMANDS", of: text).joined(separator: "\n")
        for (name, flags) in tree {
            if name != "syncagent" { #expect(commands.contains(name), "command \(name) is not an entry of COMMANDS") }
            for flag in flags where !globalFlags.contains(flag) {
                let pattern = "(^|[\\s,|(\\[])" + NSRegularExpression.escapedPattern(for: flag) + "($|[\\s,|)\\]])"
                #expect(commandText.range(of: pattern, options: .regularExpression) != nil, "\(name) \(flag) is not in COMMANDS")
            }
        }
        for flag in ["--config", "--state-dir", "--inbox", "-h", "--help", "--version"] {
            #expect(Self.tags(in: options).contains(flag), "\(flag) is not an entry of OPTIONS")
        }
    }

    /// The exit statuses the sources give, found where each is set: `fail(…,
    /// code:)`, `ExitCode(N)` and `exit(N)` in the CLI, the agent's own, and
    /// aria2c's for `submit --wait` (`FailureCode.aria2ExitStatus`, `WaitVerdict`).
    static func exitStatusesInTheSources() throws -> Set<Int> {
        func numbers(_ pattern: String, in text: String) -> [Int] {
            let expression = try! NSRegularExpression(pattern: pattern, options: [.anchorsMatchLines])
            return expression.matches(in: text, range: NSRange(text.startIndex..., in: text)).flatMap { match in
                (1..<match.numberOfRanges).compactMap { Range(match.range(at: $0), in: text).flatMap { Int(text[$0]) } }
            }
        }
        func source(_ path: String) throws -> String { try String(contentsOfFile: root + "/" + path, encoding: .utf8) }
        var found: Set<Int> = []
        let cli = try FileManager.default.contentsOfDirectory(atPath: root + "/Sources/syncagent").filter { $0.hasSuffix(".swift") }
        for file in cli {
            let text = try source("Sources/syncagent/" + file)
            found.formUnion(numbers(#"code: (?:Int32 = )?(\d+)"#, in: text))
            found.formUnion(numbers(#"ExitCode\((\d+)\)"#, in: text))
            found.formUnion(numbers(#"\bexit\((\d+)\)"#, in: text))
        }
        found.formUnion(numbers(#"static let exit\w+: Int32 = (\d+)"#, in: try source("Sources/SyncAgent/Agent.swift")))
        let failureCodes = try source("Sources/SyncAgentCore/Log/FailureCode.swift")
        let aria2Start = try #require(failureCodes.range(of: "var aria2ExitStatus"), "no aria2ExitStatus in FailureCode.swift")
        let aria2End = failureCodes.range(of: "\n    }\n", range: aria2Start.upperBound..<failureCodes.endIndex)?.lowerBound ?? failureCodes.endIndex
        found.formUnion(numbers(#"^\s*(?:case [^\n]*|default): (\d+)$"#, in: String(failureCodes[aria2Start.lowerBound..<aria2End])))
        let status = try source("Sources/SyncAgentCore/Status/StatusView.swift")
        let verdict = try #require(status.range(of: "enum WaitVerdict").map { String(status[$0.lowerBound...]) })
        found.formUnion(numbers(#"\? (\d+) : (\d+)"#, in: verdict))
        found.formUnion(numbers(#"\?\? (\d+)"#, in: verdict))
        return found
    }

    @Test func exitStatusListsEveryStatusTheCLIGives() throws {
        var given = try Self.exitStatusesInTheSources()
        // Found, not assumed: the scan sees the agent's, replay's, submit --wait's and aria2c's.
        #expect(given.isSuperset(of: [1, 3, 4, 5, 7, 32]), "\(given.sorted())")
        // ArgumentParser's usage error, as the binary really exits with it.
        let harness = try AgentHarness()
        for wrong in [["stauts"], ["status", "--no-such-flag"], ["events", "-n"]] {
            let result = try harness.run(wrong, flags: false)
            #expect(result.status != 0, "\(wrong)")
            given.insert(Int(result.status))
        }
        given.insert(0)
        let documented = Self.tags(in: Self.section("EXIT STATUS", of: try Self.render("syncagent.1").text)).compactMap { Int($0) }
        #expect(Set(documented) == given, "documented \(Set(documented).sorted()), given \(given.sorted())")
    }

    @Test func syncagentJob5NamesEveryKeyAndValueTheParserTakes() throws {
        let text = try Self.render("syncagent.job.5").text
        // The section runs on through its subsections (uploads, HLS videos), whose headings are indented.
        let defined = Self.tags(in: Self.section("TRANSFER JOBS", of: text))
        for key in JobParser.transferKeys { #expect(defined.contains(key), "transfer key \(key) is not an entry of syncagent.job(5)") }
        let control = Self.tags(in: Self.section("CONTROL JOBS", of: text))
        for key in JobParser.controlKeys { #expect(control.contains(key), "control key \(key) is not an entry of syncagent.job(5)") }
        let values = TransferKind.allCases.map(\.rawValue) + OverwriteMode.allCases.map(\.rawValue) + NotifyMode.allCases.map(\.rawValue)
            + UploadProtocol.allCases.map(\.rawValue) + HLSOutput.allCases.map(\.rawValue) + ControlJob.Action.allCases.map(\.rawValue)
        for value in values {
            #expect(text.range(of: "\\b\(value)\\b", options: .regularExpression) != nil, "value \(value) is not in syncagent.job(5)")
        }
    }

    @Test func syncagentToml5NamesEveryKeyTheConfigTakes() throws {
        let text = try Self.render("syncagent.toml.5").text
        let defined = Self.tags(in: text.split(separator: "\n", omittingEmptySubsequences: false))
        for key in AgentConfig.keys { #expect(defined.contains(key), "config key \(key) is not an entry of syncagent.toml(5)") }
        for value in CookieMode.allCases.map(\.rawValue) + NotifyMode.allCases.map(\.rawValue) {
            #expect(text.range(of: "\\b\(value)\\b", options: .regularExpression) != nil, "value \(value) is not in syncagent.toml(5)")
        }
        // Each key a running agent cannot change says so.
        for key in AgentConfig.restartKeys {
            let entry = Self.entry(key, in: text)
            #expect(entry.contains("Restart."), "\(key): \(entry)")
        }
    }

    /// The text of a `.TP` entry: its tag line and the lines indented under it.
    static func entry(_ tag: String, in text: String) -> String {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(where: { $0 == "       \(tag)" || $0.hasPrefix("       \(tag) ") }) else { return "" }
        let body = lines[(start + 1)...].prefix { $0.hasPrefix(String(repeating: " ", count: 14)) }
        return ([lines[start]] + body).joined(separator: "\n")
    }
}

import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

struct SubmitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "submit",
        abstract: "Write a job file into the inbox and print its path.",
        discussion: """
            The file is written under a temporary name and renamed, so the agent never sees half
            a job. Works whether or not the agent runs; it takes the job when it (next) runs.

            Example:
              syncagent submit https://example.com/a.iso --dest isos/a.iso --sha256 3a7b… --priority 5
            """)

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The http or https URL to transfer.")
    var url: String

    @Option(help: "Destination, relative to download_dir (default: the URL's file name).")
    var dest: String?

    @Option(help: "download (default).")
    var kind: String?

    @Option(help: "Expected SHA-256 of the file, verified before it is published.")
    var sha256: String?

    @Option(name: .customLong("header"), help: ArgumentHelp("A request header, 'Name: value'; repeatable.", valueName: "K: V"))
    var headers: [String] = []

    @Option(help: "Higher starts first.")
    var priority: Int?

    func run() throws {
        let resolved = try global.resolve()
        var lines = ["url = \(tomlString(url))"]
        if let kind { lines.append("kind = \(tomlString(kind))") }
        if let dest { lines.append("dest = \(tomlString(dest))") }
        if let sha256 { lines.append("sha256 = \(tomlString(sha256))") }
        if let priority { lines.append("priority = \(priority)") }
        if !headers.isEmpty {
            lines.append("[headers]")
            for header in headers {
                guard let colon = header.firstIndex(of: ":") else {
                    throw fail("--header \"\(header)\" must look like 'Name: value'")
                }
                let name = header[..<colon].trimmingCharacters(in: .whitespaces)
                let value = header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                lines.append("\(tomlString(name)) = \(tomlString(value))")
            }
        }
        let text = lines.joined(separator: "\n") + "\n"
        // The agent would reject it; say so now, naming the key.
        do {
            _ = try JobParser(downloadDir: resolved.paths.downloadDir).parse(Array(text.utf8))
        } catch let error as KeyError {
            throw fail(error.description)
        }
        do {
            print(try InboxWriter(inbox: resolved.paths.inbox).write(text, prefix: "submit"))
        } catch {
            throw fail("cannot write into the inbox \(resolved.paths.inbox): \(error)")
        }
    }
}

/// A TOML basic string with the escapes TOML requires.
func tomlString(_ value: String) -> String {
    var out = "\""
    for scalar in value.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        default:
            if scalar.value < 0x20 || scalar.value == 0x7F {
                out += String(format: "\\u%04X", scalar.value)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}

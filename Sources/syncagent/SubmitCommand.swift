import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

struct SubmitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "submit",
        abstract: "Write a job file into the inbox and print its path.",
        discussion: """
            The file is written under a temporary name and renamed, so the agent
            never sees half a job. Works whether or not the agent runs; it takes
            the job when it (next) runs.

            Examples:
              syncagent submit https://example.com/a.iso --dest isos/a.iso \\
                --sha256 3a7b… --priority 5
              syncagent submit https://example.com/videos --kind upload \\
                --body-file clip.mp4 --form-field file --form title=holiday
              syncagent submit https://example.com/talk/master.m3u8 --kind hls \\
                --dest videos/talk --variant 1280x720 --output file
              syncagent submit https://example.com/api/items --kind data \\
                --method POST --body-file item.json --dest answers/item.json \\
                --header 'Content-Type: application/json'
            """)

    @OptionGroup var global: GlobalOptions

    @Argument(help: "The http or https URL to transfer.")
    var url: String

    @Option(help: "Destination, relative to download_dir (default: the URL's file name).")
    var dest: String?

    @Option(help: "download (default), upload, data or hls.")
    var kind: String?

    @Option(help: "HLS jobs: best (default), worst, a BANDWIDTH or a resolution such as 1280x720.")
    var variant: String?

    @Option(help: "HLS jobs: directory (default: DEST/index.m3u8 and its segments) or file (one DEST.ts or DEST.mp4).")
    var output: String?

    @Option(name: .customLong("max-duration"), help: "HLS jobs: seconds of media to take from a live playlist.")
    var maxDuration: Int?

    @Option(help: "Upload and data jobs: the request method (default GET, or PUT for an upload).")
    var method: String?

    @Option(help: "Upload and data jobs: a file sent as the request body, streamed from disk.")
    var bodyFile: String?

    @Option(help: "Upload jobs: send the file as multipart/form-data under this field name.")
    var formField: String?

    @Option(name: .customLong("form"), help: ArgumentHelp("An extra form field, 'name=value'; repeatable.", valueName: "K=V"))
    var formFields: [String] = []

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
        if let method { lines.append("method = \(tomlString(method))") }
        if let bodyFile {
            // The agent runs elsewhere: a relative path means this shell's directory.
            let absolute = URL(fileURLWithPath: bodyFile, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
            lines.append("body_file = \(tomlString(absolute.standardizedFileURL.path))")
        }
        if let formField { lines.append("form_field = \(tomlString(formField))") }
        if let variant { lines.append("variant = \(tomlString(variant))") }
        if let output { lines.append("output = \(tomlString(output))") }
        if let maxDuration { lines.append("max_duration = \(maxDuration)") }
        try appendTable("headers", headers, separator: ":", option: "--header", shape: "'Name: value'", to: &lines)
        try appendTable("form", formFields, separator: "=", option: "--form", shape: "'name=value'", to: &lines)
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

/// `[name]` with one `key = "value"` per `key<separator>value` given.
private func appendTable(_ name: String, _ pairs: [String], separator: Character, option: String, shape: String,
                         to lines: inout [String]) throws {
    guard !pairs.isEmpty else { return }
    lines.append("[\(name)]")
    for pair in pairs {
        guard let split = pair.firstIndex(of: separator) else {
            throw fail("\(option) \"\(pair)\" must look like \(shape)")
        }
        let key = pair[..<split].trimmingCharacters(in: .whitespaces)
        let value = pair[pair.index(after: split)...].trimmingCharacters(in: .whitespaces)
        lines.append("\(tomlString(key)) = \(tomlString(value))")
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

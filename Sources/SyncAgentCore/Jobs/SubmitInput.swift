import Foundation

/// One URL of `submit -i FILE` with the options written below it.
public struct SubmitEntry: Equatable, Sendable {
    public var url: String
    /// `key=value` lines, in order; keys with `-` written as `_`.
    public var options: [SubmitOption]
    /// 1-based, for errors.
    public var line: Int
    /// The list it was read from, as errors name it ("urls.txt", "standard input"); nil for a URL on the command line.
    public var input: String?
    /// How errors about a URL on the command line name it ("URL 2 (…): "); set by the caller.
    private var commandLineOrigin = ""

    public init(url: String, options: [SubmitOption], line: Int, origin: String = "") {
        self.url = url; self.options = options; self.line = line; self.commandLineOrigin = origin
    }

    /// How errors name it: "urls.txt line 3: ", or what the caller set for a URL on the command line.
    public var origin: String { origin(ofLine: line) }

    /// How errors name one of its lines (an option's): the list and that line.
    public func origin(ofLine number: Int) -> String {
        guard let input else { return commandLineOrigin }
        return "\(input) line \(number): "
    }
}

public struct SubmitOption: Equatable, Sendable {
    public var key: String
    public var value: String
    public var line: Int
}

/// `submit -i`'s list, the way aria2c reads `-i`: one URL per line, its
/// options on indented `key=value` lines below it, blank lines and `#`
/// comments skipped.
///
///     https://example.com/a.iso
///       dest=isos/a.iso
///       sha256=3a7b…
///     https://example.com/b.iso
public enum SubmitInput {
    public struct Malformed: Error, CustomStringConvertible, Equatable {
        public var line: Int
        public var problem: String
        public var description: String { "line \(line): \(problem)" }
    }

    public static func parse(_ text: String) throws -> [SubmitEntry] {
        var entries: [SubmitEntry] = []
        // "\r\n" is one Character in Swift: lines are split on scalars.
        let unixText = text.replacingOccurrences(of: "\r\n", with: "\n")
        for (index, line) in unixText.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = index + 1
            let content = line.trimmingCharacters(in: .whitespaces)
            if content.isEmpty || content.hasPrefix("#") { continue }
            if line.first == " " || line.first == "\t" {
                guard !entries.isEmpty else {
                    throw Malformed(line: number, problem: "an indented option \"\(content)\" comes before any URL")
                }
                guard let equals = content.firstIndex(of: "="), equals != content.startIndex else {
                    throw Malformed(line: number, problem: "an option must look like key=value, not \"\(content)\"")
                }
                let key = content[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
                    .replacingOccurrences(of: "-", with: "_")
                let value = content[content.index(after: equals)...].trimmingCharacters(in: .whitespaces)
                entries[entries.count - 1].options.append(SubmitOption(key: key, value: value, line: number))
                continue
            }
            // aria2c allows mirrors separated by tabs; a job has one URL.
            guard !content.contains(where: { $0 == " " || $0 == "\t" }) else {
                throw Malformed(line: number, problem: "one URL per line (options go on indented key=value lines below it)")
            }
            entries.append(SubmitEntry(url: content, options: [], line: number))
        }
        return entries
    }
}

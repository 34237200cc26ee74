import Foundation
import Testing

/// The README is the front door and `docs/` the reference behind it: every
/// relative link in them leads somewhere, a file or folder that is there
/// and, with a `#fragment`, a heading of the target page as GitHub names
/// its anchors.
@Suite("README and docs/ links")
struct DocsLinkTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The Markdown files of the repository, relative to its root (none from
    /// build trees, the virtualenv or other dot folders).
    static func markdownFiles() -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: root)
        var found: [String] = []
        while let path = enumerator?.nextObject() as? String {
            let name = (path as NSString).lastPathComponent
            if name.hasPrefix(".") { enumerator?.skipDescendants(); continue }
            if path.hasSuffix(".md") { found.append(path) }
        }
        return found.sorted()
    }

    /// A heading's anchor as GitHub makes it: lower case, only letters,
    /// digits, `_`, `-` and spaces kept, each space a `-`.
    static func slug(_ heading: String) -> String {
        String(heading.lowercased().unicodeScalars.compactMap { scalar -> Character? in
            if scalar == " " { return "-" }
            if scalar == "-" || scalar == "_" || CharacterSet.alphanumerics.contains(scalar) { return Character(scalar) }
            return nil
        })
    }

    /// Lines outside fenced code blocks, with inline code spans blanked.
    static func prose(_ text: String) -> [String] {
        var inFence = false
        var lines: [String] = []
        for line in text.components(separatedBy: "\n") {
            if line.trimmingCharacters(in: .whitespaces).hasPrefix("```") { inFence.toggle(); continue }
            if inFence { continue }
            lines.append(line.replacingOccurrences(of: "`[^`]*`", with: "``", options: .regularExpression))
        }
        return lines
    }

    /// The anchors of a page's headings, a repeated one numbered as GitHub numbers it.
    static func anchors(of text: String) -> Set<String> {
        var seen: [String: Int] = [:]
        var anchors: Set<String> = []
        var inFence = false
        for line in text.components(separatedBy: "\n") {
            if line.hasPrefix("```") { inFence.toggle(); continue }
            guard !inFence, let hashes = line.firstIndex(where: { $0 != "#" }), line.hasPrefix("#"),
                  line[hashes] == " " else { continue }
            let base = slug(line[line.index(after: hashes)...].trimmingCharacters(in: .whitespaces))
            let count = seen[base, default: 0]
            seen[base] = count + 1
            anchors.insert(count == 0 ? base : "\(base)-\(count)")
        }
        return anchors
    }

    /// Every relative link of `file` (a path from the root) that leads nowhere, in words.
    static func brokenLinks(in file: String, text: String, read: (String) -> String?, exists: (String) -> Bool) -> [String] {
        let folder = (file as NSString).deletingLastPathComponent
        var broken: [String] = []
        let link = try! NSRegularExpression(pattern: #"\]\(([^)\s]+)\)"#)
        for (number, line) in prose(text).enumerated() {
            for match in link.matches(in: line, range: NSRange(line.startIndex..., in: line)) {
                let target = String(line[Range(match.range(at: 1), in: line)!])
                if target.contains("://") || target.hasPrefix("mailto:") { continue }
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
                let path = parts[0].isEmpty ? file : (folder.isEmpty ? parts[0] : folder + "/" + parts[0])
                let normalized = URL(fileURLWithPath: "/" + path).standardizedFileURL.path.dropFirst()
                let shown = "\(file):\(number + 1): (\(target))"
                guard exists(String(normalized)) else { broken.append("\(shown): no \(normalized)"); continue }
                guard parts.count == 2 else { continue }
                guard normalized.hasSuffix(".md"), let page = read(String(normalized)) else {
                    broken.append("\(shown): a #fragment into \(normalized), which is not a Markdown page")
                    continue
                }
                if !anchors(of: page).contains(parts[1]) { broken.append("\(shown): \(normalized) has no heading #\(parts[1])") }
            }
        }
        return broken
    }

    @Test func slugsAreGitHubs() {
        #expect(Self.slug("A 30-second tour") == "a-30-second-tour")
        #expect(Self.slug("`download_dir` and `more_dirs`") == "download_dir-and-more_dirs")
        #expect(Self.slug("Resumable uploads (tus, IETF)") == "resumable-uploads-tus-ietf")
        #expect(Self.slug("Beside aria2c, wget and yt-dlp") == "beside-aria2c-wget-and-yt-dlp")
        #expect(Self.anchors(of: "# A\n## A\n```\n# not a heading\n```\n### A\n") == ["a", "a-1", "a-2"])
    }

    /// The checker itself finds what it is for: a missing file, a missing
    /// heading, a fragment into what is no page; code is not read for links.
    @Test func aBrokenLinkIsFound() {
        let pages = ["docs/a.md": "# Title\n## Two words\n"]
        let text = """
            [ok](a.md) [ok](a.md#two-words) [ok](#here) [ok](../README.md) [web](https://example.com/x#y)
            [gone](b.md) [no heading](a.md#three) [not a page](../Makefile#x) `[code](c.md)`
            ```
            [fenced](d.md)
            ```
            # Here
            """
        let exists = { (path: String) in pages[path] != nil || path == "docs/x.md" || path == "README.md" || path == "Makefile" }
        let broken = Self.brokenLinks(in: "docs/x.md", text: text, read: { $0 == "docs/x.md" ? text : pages[$0] }, exists: exists)
        #expect(broken.count == 3, "\(broken)")
        #expect(broken.contains { $0.contains("(b.md): no docs/b.md") })
        #expect(broken.contains { $0.contains("has no heading #three") })
        #expect(broken.contains { $0.contains("(../Makefile#x)") })
    }

    @Test func everyRelativeLinkResolves() throws {
        let files = Self.markdownFiles()
        #expect(files.contains("README.md") && files.contains("docs/README.md"), "\(files)")
        var broken: [String] = []
        var links = 0
        for file in files {
            let text = try String(contentsOfFile: Self.root + "/" + file, encoding: .utf8)
            links += Self.prose(text).joined().components(separatedBy: "](").count - 1
            broken += Self.brokenLinks(in: file, text: text,
                                       read: { try? String(contentsOfFile: Self.root + "/" + $0, encoding: .utf8) },
                                       exists: { FileManager.default.fileExists(atPath: Self.root + "/" + $0) })
        }
        #expect(links >= 30, "only \(links) links found")
        #expect(broken.isEmpty, "\(broken.joined(separator: "\n"))")
    }

    /// The front door fits in a few screens; the reference is behind it.
    @Test func theReadmeIsAFrontDoorAndLinksEveryReferencePage() throws {
        let readme = try String(contentsOfFile: Self.root + "/README.md", encoding: .utf8)
        let lines = readme.components(separatedBy: "\n").count
        #expect(lines < 300, "README.md has \(lines) lines")
        for heading in ["## Two commands", "## A 30-second tour", "## Beside aria2c, wget and yt-dlp", "## Benchmarks", "## Reference"] {
            #expect(readme.contains("\n\(heading)\n"), "no \(heading)")
        }
        // Every page of docs/ is reached from the README, and listed in docs/README.md.
        let index = try String(contentsOfFile: Self.root + "/docs/README.md", encoding: .utf8)
        let pages = try FileManager.default.contentsOfDirectory(atPath: Self.root + "/docs").filter { $0.hasSuffix(".md") && $0 != "README.md" }
        #expect(pages.count >= 10)
        for page in pages {
            #expect(readme.contains("](docs/\(page))") || readme.contains("](docs/\(page)#"), "README.md does not link docs/\(page)")
            #expect(index.contains("](\(page))"), "docs/README.md does not list \(page)")
        }
    }

    /// docs/install.md names every package `make run`, `make test` and
    /// `make bench` install, as the Makefile lists them.
    @Test func theInstallPageNamesEveryPackageTheMakefileInstalls() throws {
        let makefile = try String(contentsOfFile: Self.root + "/Makefile", encoding: .utf8)
        let page = try String(contentsOfFile: Self.root + "/docs/install.md", encoding: .utf8)
            .replacingOccurrences(of: "\n", with: " ")
        let joined = makefile.replacingOccurrences(of: "\\\n", with: " ")
        var packages: [String] = []
        for list in ["BUILD_PACKAGES", "TEST_PACKAGES", "BENCH_PACKAGES"] {
            let line = try #require(joined.components(separatedBy: "\n").first { $0.hasPrefix(list + " ") || $0.hasPrefix(list + ":") },
                                    "no \(list) in the Makefile")
            packages += line.components(separatedBy: ":=").last?.split(separator: " ").map(String.init) ?? []
        }
        #expect(packages.count > 20)
        for package in packages {
            #expect(page.contains(" \(package) ") || page.contains("`\(package) ") || page.contains(" \(package)`") || page.contains(" \(package),"),
                    "docs/install.md does not name \(package)")
        }
    }
}

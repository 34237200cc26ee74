import Foundation
import Testing
@testable import SyncAgentCore

/// The documented template and the example jobs must stay valid.
@Suite("Files shipped in config/ and contrib/")
struct ShippedFilesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func configTemplateParsesToTheDefaults() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent("config/syncagent.toml"), encoding: .utf8)
        #expect(try AgentConfig.parse(text) == AgentConfig())
        // Every key of SPEC §5 is documented.
        for key in AgentConfig.keys { #expect(text.contains("\(key) =") || text.contains("[\(key)]"), "\(key)") }
    }

    @Test func exampleJobsParse() throws {
        let folder = Self.root.appendingPathComponent("contrib/jobs")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".job") }
        #expect(names.count >= 3)
        for name in names {
            let bytes = try [UInt8](Data(contentsOf: folder.appendingPathComponent(name)))
            #expect(throws: Never.self) { try JobParser(downloadDir: "/home/me/Downloads").parse(bytes) }
        }
    }
}

import Foundation
import SyncAgentFuzzing
import Testing

/// `make fuzz` grows fuzz/corpus with libFuzzer; every saved input (and
/// every crash it ever found, kept there once fixed) runs through all the
/// parsers here, once per `make test`. A trap fails the whole run.
@Suite("Fuzz corpus")
struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../fuzz/corpus").standardizedFileURL.path

    @Test func everySavedInputGoesThroughEveryParser() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.corpus).sorted()
        #expect(names.count >= 20, "the corpus at \(Self.corpus) is missing")
        for name in names {
            let data = try Data(contentsOf: URL(fileURLWithPath: Self.corpus + "/" + name))
            data.withUnsafeBytes { FuzzTargets.run($0) }
        }
    }
}

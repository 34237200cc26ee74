import Foundation

/// A fresh directory per test, removed afterwards.
final class TempDirectory {
    let path: String

    init() {
        var template = Array("\(NSTemporaryDirectory())/syncagent-test-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    func file(_ name: String) -> String { path + "/" + name }

    func write(_ text: String, to name: String) {
        FileManager.default.createFile(atPath: file(name), contents: Data(text.utf8))
    }
}

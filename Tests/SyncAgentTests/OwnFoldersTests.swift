import Foundation
import Testing
import TestSupport
@testable import SyncAgent
@testable import SyncAgentCore

/// Found by the second adversary of this work: the inbox and state dir were
/// kept from destinations by their written paths only, so a symbolic link
/// (download_dir's own, or the folders') let a job download into the inbox
/// (where the file then ran as a job) or over the event log.
@Suite("The agent's own folders, however they are reached")
struct OwnFoldersTests {
    let directory = TempDirectory()

    /// The parser as the agent makes it: its own folders in every spelling beneath download_dir.
    private func parser(downloadDir: String, ownFolders: [String]) -> JobParser {
        JobParser(downloadDir: downloadDir, forbiddenDirs: FileSystem.spellingsBeneath(downloadDir, of: ownFolders))
    }

    private func rejection(_ dest: String, parser: JobParser) -> String? {
        do {
            _ = try parser.parse(Array("url = \"http://h/x\"\ndest = \"\(dest)\"".utf8))
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test func aLinkedDownloadDirStillKeepsTheInboxAndStateOut() throws {
        let base = directory.path
        for folder in ["inbox", "state"] { try FileManager.default.createDirectory(atPath: base + "/" + folder, withIntermediateDirectories: true) }
        #expect(symlink(".", base + "/link") == 0)
        let parser = parser(downloadDir: base + "/link", ownFolders: [base + "/state", base + "/inbox"])
        #expect(rejection("inbox/x.job", parser: parser)?.contains("inside the agent's own folder") == true)
        #expect(rejection("state/events.sqlite", parser: parser)?.contains("inside the agent's own folder") == true)
        #expect(rejection("elsewhere/x.bin", parser: parser) == nil)
    }

    @Test func aStateDirLinkedIntoDownloadDirIsKeptOut() throws {
        let base = directory.path
        try FileManager.default.createDirectory(atPath: base + "/dl/st", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: base + "/dl/inbox2", withIntermediateDirectories: true)
        #expect(symlink("dl/st", base + "/stl") == 0)
        #expect(symlink("dl/inbox2", base + "/inl") == 0)
        let parser = parser(downloadDir: base + "/dl", ownFolders: [base + "/stl", base + "/inl"])
        #expect(rejection("st/events.sqlite", parser: parser)?.contains("inside the agent's own folder") == true)
        #expect(rejection("inbox2/x.job", parser: parser)?.contains("inside the agent's own folder") == true)
        #expect(rejection("other/x.bin", parser: parser) == nil)
    }
}

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

    /// sshd's StrictModes on the disk, followed as the kernel follows a path:
    /// a folder others may write on the way (not sticky), even reached through
    /// a symbolic link, is refused; under a sticky one the folder is made.
    @Test func everyFolderOnTheWayIsLookedAtThroughItsLinks() throws {
        let base = directory.path
        for (folder, mode) in [("open", 0o777), ("sticky", 0o1777), ("tight", 0o755)] as [(String, mode_t)] {
            try FileManager.default.createDirectory(atPath: base + "/" + folder, withIntermediateDirectories: true)
            #expect(chmod(base + "/" + folder, mode) == 0)
        }
        #expect(symlink("../open/deeper", base + "/tight/link") == 0)
        #expect(symlink("../open", base + "/tight/up") == 0)
        for path in [base + "/open/inbox", base + "/tight/link/inbox", base + "/tight/up/x/inbox"] {
            #expect(throws: StrictModes.Refused.self, "\(path)") { try StrictModes.makeTrusted(path, what: "inbox") }
        }
        #expect(!FileManager.default.fileExists(atPath: base + "/open/inbox"), "refused before anything is made")
        try StrictModes.makeTrusted(base + "/sticky/inbox", what: "inbox")
        try StrictModes.makeTrusted(base + "/tight/inbox", what: "inbox")
        let made = try FileManager.default.attributesOfItem(atPath: base + "/sticky/inbox")[.posixPermissions] as? Int
        #expect(made == 0o700)
        // The folder itself: its user's alone.
        #expect(chmod(base + "/tight/inbox", 0o707) == 0)
        #expect(throws: StrictModes.Refused.self) { try StrictModes.makeTrusted(base + "/tight/inbox", what: "inbox") }
    }
}

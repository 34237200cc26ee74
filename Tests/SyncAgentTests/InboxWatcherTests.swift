import Foundation
import Testing
import TestSupport
@testable import SyncAgent

@Suite("inotify on the inbox")
struct InboxWatcherTests {
    let directory = TempDirectory()

    /// inotify delivers asynchronously: read until the names arrive or 2 s pass.
    func drainUntil(_ watcher: InboxWatcher, count: Int) -> [String] {
        var names: [String] = []
        _ = eventually(within: 2) {
            names += watcher.drain().names.map(\.text)
            return names.count >= count
        }
        return names
    }

    @Test func closedAndMovedInJobsAreReportedTempNamesAreNot() throws {
        let inbox = directory.file("inbox")
        let watcher = try InboxWatcher(directory: inbox)
        try Data("url = \"http://h/x\"".utf8).write(to: URL(fileURLWithPath: inbox + "/written.job"))
        try Data().write(to: URL(fileURLWithPath: inbox + "/.hidden.job"))
        try Data().write(to: URL(fileURLWithPath: inbox + "/moving.job.tmp"))
        try Data().write(to: URL(fileURLWithPath: inbox + "/notes.txt"))
        #expect(rename(inbox + "/moving.job.tmp", inbox + "/moved.job") == 0)
        let names = drainUntil(watcher, count: 2)
        #expect(names == ["written.job", "moved.job"])
    }

    /// `submit` reads the ids of its waiting jobs from their names, not their text.
    @Test func aWrittenJobsNameGivesBackItsPrefix() throws {
        let inbox = directory.file("inbox")
        for prefix in ["submit-abc234", "submit-a-b-c", "pause", "submit-x.y_z"] {
            let path = try InboxWriter(inbox: inbox).write("action = \"pause\"\ntask = \"*\"\n", prefix: prefix)
            #expect(InboxWriter.prefix(ofName: (path as NSString).lastPathComponent) == prefix)
        }
        for name in ["x.job", "a-1-2.job", "submit-x-1-2-y.job", "submit-x-1-2-3.job.tmp", "-1-2-3.job"] {
            #expect(InboxWriter.prefix(ofName: name) == (name == "-1-2-3.job" ? "" : nil), "\(name)")
        }
    }

    @Test func scanListsJobsOldestFirst() throws {
        let inbox = directory.file("inbox")
        let watcher = try InboxWatcher(directory: inbox)
        for (index, name) in ["b.job", "a.job", "c.job.tmp"].enumerated() {
            let path = inbox + "/" + name
            try Data().write(to: URL(fileURLWithPath: path))
            var times = [timespec(tv_sec: 1_000_000 + index, tv_nsec: 0), timespec(tv_sec: 1_000_000 + index, tv_nsec: 0)]
            utimensat(AT_FDCWD, path, &times, 0)
        }
        #expect(watcher.scan().map(\.text) == ["b.job", "a.job"])
    }
}

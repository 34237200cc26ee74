import Foundation
import Testing
@testable import SyncAgentCore

/// What a notice offers to do: "Retry" for its failures, "Open folder" for
/// its published files, and which folders one click opens.
@Suite("Notice actions")
struct NoticeActionsTests {
    private func failing(_ log: inout LogBuilder, _ id: String) {
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://127.0.0.1:8080/\(id)")), task: id)
        _ = log.add(.failed(Failed(reason: "server answered 404", code: .http(404), bytes: 0)), task: id)
    }

    @Test func aBatchOffersRetryForItsFailuresAndOpenFolderForItsFiles() {
        var log = LogBuilder()
        for id in ["a", "b", "gone", "lost"] { log.create(id) }
        log.runToEnd("a")
        log.runToEnd("b")
        failing(&log, "gone")
        failing(&log, "lost")
        let batch = BatchFinished(batch: nil, finished: ["a", "b"], failed: ["gone", "lost"])
        let notice = Notices.notice(for: batch, in: log.state)
        #expect(notice.actions == [.retry(tasks: ["gone", "lost"]), .openFolder(files: ["/downloads/a.bin", "/downloads/b.bin"])])
        #expect(notice.actions.map(\.key) == ["retry", "open-folder"] && notice.actions.map(\.label) == ["Retry", "Open folder"])
        // A click on the body opens; a retry goes by its own button only.
        #expect(notice.actions.filter(\.isDefault).map(\.key) == ["open-folder"])

        let allWell = Notices.notice(for: BatchFinished(batch: nil, finished: ["a"], failed: []), in: log.state)
        #expect(allWell.actions == [.openFolder(files: ["/downloads/a.bin"])])
        let allFailed = Notices.notice(for: BatchFinished(batch: nil, finished: [], failed: ["gone", "gone"]), in: log.state)
        #expect(allFailed.actions == [.retry(tasks: ["gone"])])
        // An id the state does not know is not asked to resume.
        #expect(Notices.actions(finished: [], failed: ["unknown"], in: log.state).isEmpty)
    }

    @Test func aTaskOwnNoticeAndTheFailuresToldAtOnce() throws {
        var log = LogBuilder()
        log.create("done", notify: .each)
        log.runToEnd("done")
        log.create("f1")
        log.create("f2")
        failing(&log, "f1")
        failing(&log, "f2")
        let state = log.state
        #expect(Notices.ownNotice(for: try #require(state["done"])).actions == [.openFolder(files: ["/downloads/done.bin"])])
        #expect(Notices.ownNotice(for: try #require(state["f1"])).actions == [.retry(tasks: ["f1"])])
        let tasks = [try #require(state["f1"]), try #require(state["f2"])]
        #expect(Notices.failureNotice(for: tasks).actions == [.retry(tasks: ["f1", "f2"])])
        // Nothing published (an upload, a data task without dest): nothing to open.
        log.create("sent")
        _ = log.add(.started(Started(attempt: 1, offset: 0, url: "http://127.0.0.1:8080/sent")), task: "sent")
        _ = log.add(.finished(Finished(bytes: 10, dest: nil)), task: "sent")
        #expect(Notices.ownNotice(for: try #require(log.state["sent"])).actions.isEmpty)
    }

    /// A batch spread over many folders opens three of them, not fifty windows.
    @Test func oneClickOpensAtMostThreeFolders() {
        let files = ["/d/1/a", "/d/2/b", "/d/1/c", "/d/3/d", "/d/4/e", "/d/2/f", "relative/g", "/d/1/a", "/top"]
        #expect(FolderOpening.shown(files) == ["/d/1/a", "/d/2/b", "/d/1/c", "/d/3/d", "/d/2/f"])
        #expect(FolderOpening.folders(of: FolderOpening.shown(files)) == ["/d/1", "/d/2", "/d/3"])
        #expect(FolderOpening.folder(of: "/top") == "/")
    }

    /// The file manager gets the name as it is on disk, whatever it holds.
    @Test func fileURIsArePercentEncoded() {
        #expect(FolderOpening.fileURI("/home/me/Downloads/a.iso") == "file:///home/me/Downloads/a.iso")
        #expect(FolderOpening.fileURI("/d/a b#c%d?e.bin") == "file:///d/a%20b%23c%25d%3Fe.bin")
        #expect(FolderOpening.fileURI("/d/été") == "file:///d/%C3%A9t%C3%A9")
        #expect(FolderOpening.fileURI("/d/\n") == "file:///d/%0A")
    }

    /// What "Retry" writes is what `syncagent resume` writes, and parses back.
    @Test func aRetryIsAResumeControlJob() throws {
        let text = ControlJob(action: .resume, task: "odd \"id\"\n").fileText
        #expect(text == "action = \"resume\"\ntask = \"odd \\\"id\\\"\\n\"\n")
        let parsed = try JobParser(downloadDir: "/dl").parse(Array(ControlJob(action: .resume, task: "debian-13").fileText.utf8))
        #expect(parsed == .control(ControlJob(action: .resume, task: "debian-13")))
    }
}

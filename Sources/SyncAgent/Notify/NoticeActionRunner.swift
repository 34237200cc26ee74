import Foundation
import Logging
import SyncAgentCore

/// What a notice's buttons do (`NoticeAction`), on the notification loop's
/// thread: nothing here touches the agent's state or waits for its loop.
struct NoticeActionRunner: Sendable {
    /// Where "Retry" writes its control jobs.
    let inbox: String
    let logger: Logger

    func perform(_ action: NoticeAction, on loop: NotificationLoop) {
        switch action {
        case .retry(let tasks): retry(tasks)
        case .openFolder(let files): open(files, on: loop)
        }
    }

    /// One `resume` control job per task, into the inbox as `syncagent
    /// resume` writes them: the agent applies each once and logs a
    /// `controlled` event, a task already running again is "nothing to
    /// do", and jobs written as the agent stops wait for its next start.
    private func retry(_ tasks: [String]) {
        let jobs = tasks.map { (text: ControlJob(action: .resume, task: $0).fileText, prefix: "retry") }
        do {
            _ = try InboxWriter(inbox: inbox).write(jobs)
            logger.info("retry asked from a notification", metadata: ["tasks": "\(tasks.joined(separator: " "))"])
        } catch {
            logger.warning("cannot ask for a retry from a notification: \(error)", metadata: ["tasks": "\(tasks.joined(separator: " "))"])
        }
    }

    /// The session's file manager shows the files, selected, in their
    /// folders (`org.freedesktop.FileManager1.ShowItems`, which D-Bus may
    /// start). Without one, `xdg-open` opens each folder.
    private func open(_ files: [String], on loop: NotificationLoop) {
        let folders = FolderOpening.folders(of: files)
        guard let failure = loop.library.call("org.freedesktop.FileManager1", path: "/org/freedesktop/FileManager1",
                                              interface: "org.freedesktop.FileManager1", method: "ShowItems",
                                              strings: files.map(FolderOpening.fileURI), string: "",
                                              timeoutMs: NotificationLoop.fileManagerTimeoutMs) else {
            logger.info("folder opened from a notification", metadata: ["folders": "\(folders.joined(separator: " "))"])
            return
        }
        // A file manager slow to start may yet show them: xdg-open would open a second window.
        guard !failure.timedOut else {
            logger.warning("the file manager did not answer: \(failure)")
            return
        }
        logger.debug("no file manager on the session bus: \(failure); xdg-open instead")
        for folder in folders { loop.spawnOpener(["xdg-open", folder], logger: logger) }
    }
}

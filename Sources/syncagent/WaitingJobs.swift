import Foundation
import SyncAgent
import SyncAgentCore

/// Transfer jobs still in the inbox: what the agent will take when it
/// (next) runs. `submit` printed their ids, so `status` and the control
/// commands know them before the log does.
struct WaitingJobs {
    struct Job {
        /// The job file's name in the inbox.
        var file: String
        /// The id the job names; nil when the agent is to choose one.
        var id: String?
        var spec: TaskSpec
    }

    var jobs: [Job] = []
    /// Job files past `limit`, not read.
    var notRead = 0

    /// The inbox's transfer jobs in name order, at most `limit` of them read:
    /// only what the agent would take (a regular file with a job's name that
    /// parses as a transfer; it refuses a symbolic link, a FIFO or a device).
    static func read(_ paths: AgentPaths, limit: Int = .max) -> WaitingJobs {
        let inbox = paths.inbox
        let parser = JobParser(downloadDir: paths.downloadDir, moreDirs: paths.moreDirs)
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: inbox)) ?? []).filter(InboxRules.isJobFileName).sorted()
        var waiting = WaitingJobs()
        for (index, name) in names.enumerated() {
            guard waiting.jobs.count < limit else {
                waiting.notRead = names.count - index
                break
            }
            guard let info = try? Posix.status(of: inbox + "/" + name, flags: AT_SYMLINK_NOFOLLOW), info.st_mode & S_IFMT == S_IFREG,
                  let data = FileManager.default.contents(atPath: inbox + "/" + name),
                  case .transfer(let id, let spec)? = try? parser.parse([UInt8](data)) else { continue }
            waiting.jobs.append(Job(file: name, id: id, spec: spec))
        }
        return waiting
    }

    /// Leaves out the jobs whose id the log knows (looked up by its index):
    /// one taken between reading the inbox and reading the log is shown
    /// once, as the log's.
    mutating func dropTaken(by store: EventStore) {
        guard jobs.contains(where: { $0.id != nil }) else { return }
        let known = (try? store.lookingUpTasks { lookup in Set(jobs.compactMap(\.id).filter { (try? lookup.knows($0)) ?? false }) }) ?? []
        jobs.removeAll { $0.id.map(known.contains) ?? false }
    }

    /// Jobs and job files not read: what the summary line counts.
    var count: Int { jobs.count + notRead }

    /// Each job as a task that has not begun, for the table.
    var asTasks: [TaskState] {
        jobs.map { TaskState(id: $0.id ?? "-", spec: $0.spec, seq: 0, atMs: 0) }
    }
}

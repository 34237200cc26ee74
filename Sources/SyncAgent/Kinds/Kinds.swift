import SyncAgentCore

/// Which runner carries out a task: the one place that asks a task's kind.
/// A new kind is a runner, its parser keys, its event payloads, its tests,
/// and a line here.
enum Kinds {
    static func runnerType(for spec: TaskSpec) -> TaskRunner.Type {
        switch spec.kind {
        case .download: DownloadRunner.self
        case .upload: spec.upload == nil ? TransferRunner.self : ResumableUploadRunner.self
        case .data: TransferRunner.self
        case .hls: HLSVideoRunner.self
        }
    }

    static func runner(for task: TaskState, context: RunnerContext) -> TaskRunner {
        runnerType(for: task.spec).init(taskID: task.id, context: context)
    }
}

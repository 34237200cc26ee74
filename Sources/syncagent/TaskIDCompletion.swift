import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

/// Shell completion of task ids (`pause`, `resume`, `cancel`, `retarget`, `forget`,
/// `status --task`, `events --task`, `replay --task`): the shell calls the
/// binary back with the words typed so far, and the ids come from the log
/// those words name (`--config`, `--state-dir`), or the default one, and
/// from the jobs waiting in its inbox.
enum TaskIDCompletion {
    /// The ids the command being typed can act on: a control command's only
    /// those it would change (`pause` no ended task, `forget` only ended
    /// ones), `--task` every one. Every one whatever was typed of the id:
    /// the shell keeps those that begin with it (bash's `compgen`, zsh's
    /// `_describe`, fish), as it does for every other word.
    static let kind = CompletionKind.custom { words, _, _ in ids(words: words) }

    static func ids(words: [String]) -> [String] {
        func value(of flag: String) -> String? {
            guard let index = words.firstIndex(of: flag), index + 1 < words.count else {
                return words.first { $0.hasPrefix(flag + "=") }.map { String($0.dropFirst(flag.count + 1)) }
            }
            return words[index + 1]
        }
        guard let resolved = try? ResolvedConfig.load(configFile: value(of: "--config"), stateDir: value(of: "--state-dir"),
                                                      inbox: value(of: "--inbox")) else { return [] }
        // The command is the first word after the program's name; only a control command filters.
        let action = words.dropFirst().first.flatMap(ControlJob.Action.init(rawValue:))
        let waiting = WaitingJobs.read(resolved.paths).jobs.compactMap(\.id)
        let state = (try? EventStore(readingFrom: resolved.paths.eventLog).replay()) ?? AgentState()
        let logged = state.orderedTasks.filter { task in action.map { $0.changes(task) } ?? (task.parentID == nil) }.map(\.id)
        // A job not yet taken becomes a queued task: pause, cancel and retarget apply to it, resume and forget do not.
        let pending = action == nil || action == .pause || action == .cancel || action == .retarget ? waiting.filter { state[$0] == nil } : []
        return logged + pending
    }
}

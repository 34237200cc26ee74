import ArgumentParser
import Foundation
import SyncAgent
import SyncAgentCore

/// Shell completion of task ids (`pause`, `resume`, `cancel`, `forget`,
/// `status --task`, `events --task`, `replay --task`): the shell calls the
/// binary back with the words typed so far, and the ids come from the log
/// those words name (`--config`, `--state-dir`), or the default one.
enum TaskIDCompletion {
    static let kind = CompletionKind.custom { words, _, prefix in ids(words: words, prefix: prefix) }

    static func ids(words: [String], prefix: String) -> [String] {
        func value(of flag: String) -> String? {
            guard let index = words.firstIndex(of: flag), index + 1 < words.count else {
                return words.first { $0.hasPrefix(flag + "=") }.map { String($0.dropFirst(flag.count + 1)) }
            }
            return words[index + 1]
        }
        guard let resolved = try? ResolvedConfig.load(configFile: value(of: "--config"), stateDir: value(of: "--state-dir"),
                                                      inbox: value(of: "--inbox")),
              let state = try? EventStore(readingFrom: resolved.paths.eventLog).replay() else { return [] }
        // A video's segments are not controlled one by one: only top-level tasks are offered.
        return state.orderedTasks.filter { $0.spec.parent == nil && $0.id.hasPrefix(prefix) }.map(\.id)
    }
}

import Dispatch
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Runs `HLSPublisher.prepare` off the event loop: decrypting and joining a
/// video reads and writes all of it, and the other transfers must not wait.
/// Like `DataSyncer`, only values cross threads — the parent and a copy of
/// the folded state go in, a result comes back through a pipe the loop
/// polls — and the loop alone records what came of it.
final class HLSAssembler {
    typealias Outcome = Result<HLSPublisher.Prepared, Error>

    /// Readable when an assembly has finished: poll it beside curl's sockets.
    var fd: Int32 { finished.fd }
    private let finished: WorkerResults<(id: String, outcome: Outcome)>
    private let queue = DispatchQueue(label: "syncagent.hls-assembly")
    /// Parents being assembled now (touched by the loop only).
    private(set) var busy: Set<String> = []

    init() throws {
        finished = try WorkerResults()
    }

    deinit {
        // An assembly still running posts when it ends: the pipe stays open
        // (the process is stopping) rather than be reused for another file.
        if busy.isEmpty { finished.close() }
    }

    func assemble(_ parent: TaskState, in state: AgentState, root: DownloadRoot) {
        busy.insert(parent.id)
        queue.async { [finished] in
            finished.post((parent.id, Outcome {
                // A holder's job read back here as a placeholder would make its path look free.
                try SpecArchive.checkingReads { try HLSPublisher.prepare(parent, in: state, root: root) }
            }))
        }
    }

    /// Assemblies finished since the last call.
    func drain() -> [(id: String, outcome: Outcome)] {
        let done = finished.drain()
        for item in done { busy.remove(item.id) }
        return done
    }
}

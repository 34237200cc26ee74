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
    let fd: Int32
    private let wakeWriter: Int32
    private let lock = NSLock()
    private var finished: [(id: String, outcome: Outcome)] = []
    private let queue = DispatchQueue(label: "syncagent.hls-assembly")
    /// Parents being assembled now (touched by the loop only).
    private(set) var busy: Set<String> = []

    init() throws {
        var ends: [Int32] = [0, 0]
        try syscall("pipe") { pipe(&ends) }
        for end in ends {
            try syscall("fcntl on the wake-up pipe") { fcntl(end, F_SETFL, O_NONBLOCK) }
            try syscall("fcntl on the wake-up pipe") { fcntl(end, F_SETFD, FD_CLOEXEC) }
        }
        fd = ends[0]
        wakeWriter = ends[1]
    }

    deinit {
        // An assembly still running writes to the pipe when it ends: its
        // descriptors stay open (the process is stopping) rather than be
        // reused for another file under it.
        guard busy.isEmpty else { return }
        close(fd)
        close(wakeWriter)
    }

    func assemble(_ parent: TaskState, in state: AgentState, root: DownloadRoot) {
        busy.insert(parent.id)
        queue.async { [self] in
            let outcome = Outcome { try HLSPublisher.prepare(parent, in: state, root: root) }
            lock.lock()
            finished.append((parent.id, outcome))
            lock.unlock()
            var byte: UInt8 = 1
            _ = write(wakeWriter, &byte, 1)
        }
    }

    /// Assemblies finished since the last call.
    func drain() -> [(id: String, outcome: Outcome)] {
        var sink = [UInt8](repeating: 0, count: 64)
        while read(fd, &sink, sink.count) > 0 {}
        lock.lock()
        defer { lock.unlock() }
        let done = finished
        finished.removeAll()
        for item in done { busy.remove(item.id) }
        return done
    }

}

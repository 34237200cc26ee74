import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// How work done on another thread (a flush, a video's assembly) reaches
/// the event loop: workers `post` results under a lock and write a byte to
/// a pipe; the loop polls `fd` beside curl's sockets and `drain`s. Only
/// values cross threads; the loop alone acts on them.
final class WorkerResults<Result> {
    /// Readable when results are waiting.
    let fd: Int32
    private let wakeWriter: Int32
    private let lock = NSLock()
    private var results: [Result] = []

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

    /// The owner closes the pipe only when no worker can still post to it
    /// (a descriptor closed under a worker could be reused for another file).
    func close() {
        Glibc.close(fd)
        Glibc.close(wakeWriter)
    }

    /// From any thread.
    func post(_ result: Result) {
        lock.lock()
        results.append(result)
        lock.unlock()
        // The pipe is non-blocking: a full pipe already holds a wake-up.
        var byte: UInt8 = 1
        _ = write(wakeWriter, &byte, 1)
    }

    /// On the loop: every result posted since the last call.
    func drain() -> [Result] {
        var sink = [UInt8](repeating: 0, count: 256)
        while read(fd, &sink, sink.count) > 0 {}
        lock.lock()
        defer { lock.unlock() }
        let drained = results
        results.removeAll()
        return drained
    }
}

import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Makes completed bodies durable off the event loop. `fdatasync` blocks for
/// a disk flush; run one at a time on the loop, 2,000 small files wait for
/// 2,000 flushes in a row. Run concurrently, the file system's journal
/// merges them and transfers go on meanwhile.
///
/// Only file descriptors cross threads. The worker reports a finished sync
/// by appending the task id under a lock and writing a byte to a pipe the
/// loop polls; the loop alone touches agent state.
final class DataSyncer {
    /// Readable when syncs have finished: poll it beside curl's sockets.
    let fd: Int32
    private let wakeWriter: Int32
    private let lock = NSLock()
    private var finished: [String] = []
    private let group = DispatchGroup()
    private let queue = DispatchQueue(label: "syncagent.fdatasync", attributes: .concurrent)

    init() throws {
        var ends: [Int32] = [0, 0]
        try syscall("pipe") { pipe(&ends) }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        fd = ends[0]
        wakeWriter = ends[1]
    }

    deinit {
        group.wait()
        close(fd)
        close(wakeWriter)
    }

    /// Flushes `descriptor` in the background; `taskID` comes back from `drain()`.
    /// The caller keeps the descriptor open until then.
    func sync(_ descriptor: Int32, taskID: String) {
        group.enter()
        queue.async { [self] in
            fdatasync(descriptor)
            lock.lock()
            finished.append(taskID)
            lock.unlock()
            var byte: UInt8 = 1
            _ = write(wakeWriter, &byte, 1)
            group.leave()
        }
    }

    /// Task ids whose data is durable since the last call.
    func drain() -> [String] {
        var sink = [UInt8](repeating: 0, count: 256)
        while read(fd, &sink, sink.count) > 0 {}
        lock.lock()
        defer { lock.unlock() }
        let done = finished
        finished.removeAll()
        return done
    }

    /// Blocks until every sync handed over so far is done (on stop).
    func waitForAll() { group.wait() }
}

import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How work done on another thread (a flush, a video's assembly) reaches
/// the event loop: workers `post` results under a lock and write a byte to
/// a pipe; the loop polls `fd` beside curl's sockets and `drain`s. Only
/// values cross threads; the loop alone acts on them.
final class WorkerResults<Result: Sendable>: Sendable {
    /// Readable when results are waiting.
    let fd: Int32
    private let wakeWriter: Int32
    private let results = Mutex<[Result]>([])

    init() throws {
        (fd, wakeWriter) = try Posix.pipe(shown: "the wake-up pipe")
    }

    /// The owner closes the pipe only when no worker can still post to it
    /// (a descriptor closed under a worker could be reused for another file).
    func close() {
        Posix.close(fd)
        Posix.close(wakeWriter)
    }

    /// From any thread.
    func post(_ result: Result) {
        results.withLock { $0.append(result) }
        let byte: [UInt8] = [1]
        do {
            // nil: the pipe is full, and so already holds a wake-up.
            _ = try byte.withUnsafeBytes { try Posix.writeAvailable(wakeWriter, $0, shown: "the wake-up pipe") }
        } catch {
            // Only a closed pipe (a bug: see `close`) fails here; the result
            // is kept all the same, and the loop's next wake-up drains it.
            assertionFailure("\(error)")
        }
    }

    /// On the loop: every result posted since the last call.
    func drain() -> [Result] {
        var sink = [UInt8](repeating: 0, count: 256)
        do {
            // Until it is empty (nil) or, never for a pipe whose writer is open, at its end (0).
            while let count = try sink.withUnsafeMutableBytes({ try Posix.readAvailable(fd, into: $0, shown: "the wake-up pipe") }),
                  count > 0 {}
        } catch {
            // As for `post`: only a closed pipe fails; the results are there all the same.
            assertionFailure("\(error)")
        }
        return results.withLock { results in
            defer { results.removeAll() }
            return results
        }
    }
}

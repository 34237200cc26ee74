import CCurlShims
import Foundation

/// The one libcurl multi handle: all transfers share its connection cache
/// and are driven from the agent's single event loop.
final class CurlMulti {
    private let multi: UnsafeMutableRawPointer
    static let globalInit: CURLcode = sa_curl_global_init(Int(CURL_GLOBAL_DEFAULT))

    /// Why libcurl cannot be used, said before the agent takes any job.
    struct Unavailable: Error, CustomStringConvertible {
        var description: String
    }

    init() throws {
        if let error = sa_curl_load() { throw Unavailable(description: String(cString: error)) }
        guard Self.globalInit == CURLE_OK, let multi = sa_curl_multi_init() else {
            throw Unavailable(description: "libcurl would not start: \(String(cString: sa_curl_easy_strerror(Self.globalInit)))")
        }
        self.multi = multi
    }

    deinit { sa_curl_multi_cleanup(multi) }

    func add(_ easy: UnsafeMutableRawPointer) {
        sa_curl_multi_add_handle(multi, easy)
    }

    func remove(_ easy: UnsafeMutableRawPointer) {
        sa_curl_multi_remove_handle(multi, easy)
    }

    /// Moves every transfer forward as far as it can go without blocking;
    /// data and header callbacks run inside this call.
    func perform() {
        var running: Int32 = 0
        sa_curl_multi_perform(multi, &running)
    }

    /// Sleeps until a socket or one of `extraFds` is ready, or the timeout.
    /// Returns the extra fds that became readable.
    func poll(extraFds: [Int32], timeoutMs: Int32) -> Set<Int32> {
        var waits = extraFds.map { curl_waitfd(fd: $0, events: Int16(CURL_WAIT_POLLIN), revents: 0) }
        var ready: Int32 = 0
        waits.withUnsafeMutableBufferPointer { buffer in
            _ = sa_curl_multi_poll(multi, buffer.baseAddress, UInt32(buffer.count), timeoutMs, &ready)
        }
        return Set(waits.filter { $0.revents != 0 }.map(\.fd))
    }

    /// Transfers that ended since the last call, with curl's result code.
    func completed() -> [(easy: UnsafeMutableRawPointer, result: CURLcode)] {
        var done: [(UnsafeMutableRawPointer, CURLcode)] = []
        var left: Int32 = 0
        while let message = sa_curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            done.append((easy, sa_msg_result(message)))
        }
        return done
    }
}

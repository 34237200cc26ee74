import CCurlShims
import Foundation

/// The one libcurl multi handle: all transfers share its connection cache
/// and are driven from the agent's single event loop. Every CURLMcode is
/// checked: a handle curl did not take would be an exchange that never runs.
final class CurlMulti {
    private let multi: UnsafeMutableRawPointer
    static let globalInit: CURLcode = sa_curl_global_init(Int(CURL_GLOBAL_DEFAULT))

    /// Why libcurl cannot be used, said before the agent takes any job.
    struct Unavailable: Error, CustomStringConvertible {
        var description: String
    }

    /// A multi call that failed: which, and curl's words for its code.
    struct Failure: Error, CustomStringConvertible {
        var call: String
        var code: CURLMcode
        var description: String { "\(call) failed: \(String(cString: sa_curl_multi_strerror(code)))" }
    }

    init() throws {
        if let error = sa_curl_load() { throw Unavailable(description: String(cString: error)) }
        guard Self.globalInit == CURLE_OK, let multi = sa_curl_multi_init() else {
            throw Unavailable(description: "libcurl would not start: \(String(cString: sa_curl_easy_strerror(Self.globalInit)))")
        }
        self.multi = multi
    }

    deinit {
        // Nothing can be done about a failed cleanup of a handle that goes with the process.
        let result = sa_curl_multi_cleanup(multi)
        assert(result == CURLM_OK, "curl_multi_cleanup: \(result)")
    }

    private func check(_ call: String, _ code: CURLMcode) throws {
        guard code == CURLM_OK else { throw Failure(call: call, code: code) }
    }

    func add(_ easy: UnsafeMutableRawPointer) throws {
        try check("curl_multi_add_handle", sa_curl_multi_add_handle(multi, easy))
    }

    func remove(_ easy: UnsafeMutableRawPointer) throws {
        try check("curl_multi_remove_handle", sa_curl_multi_remove_handle(multi, easy))
    }

    /// Moves every transfer forward as far as it can go without blocking;
    /// data and header callbacks run inside this call.
    func perform() throws {
        var running: Int32 = 0
        try check("curl_multi_perform", sa_curl_multi_perform(multi, &running))
    }

    /// Sleeps until a socket or one of `extraFds` is ready, or the timeout.
    /// Returns the extra fds that became readable.
    func poll(extraFds: [Int32], timeoutMs: Int32) throws -> Set<Int32> {
        var waits = extraFds.map { curl_waitfd(fd: $0, events: Int16(CURL_WAIT_POLLIN), revents: 0) }
        var ready: Int32 = 0
        let code = waits.withUnsafeMutableBufferPointer { buffer in
            sa_curl_multi_poll(multi, buffer.baseAddress, UInt32(buffer.count), timeoutMs, &ready)
        }
        try check("curl_multi_poll", code)
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

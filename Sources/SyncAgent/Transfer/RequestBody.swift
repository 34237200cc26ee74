import CCurlShims
import Crypto
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Where a job's body file may be read from (`BodyFileRules`), asked of
/// the file actually opened: its path and file system as the kernel has
/// them for the descriptor, whatever a link on the way was swapped for
/// since the job was taken.
struct BodyFileCheck {
    var rules: BodyFileRules
    var fromRPC: Bool

    /// The job's file may not be sent.
    struct Refused: Error, CustomStringConvertible {
        var description: String
    }

    func check(opened descriptor: Int32, path: String) throws {
        let own = "/proc/self/fd/\(descriptor)"
        // Without /proc there is nothing to ask: the checks when the job was taken stand.
        guard let actual = try? Posix.linkTarget(own) else { return }
        let shown = PathRules.isSame(actual, path) ? nil : "\(Printable.escaping(path)) (now \(Printable.escaping(actual)))"
        if let problem = rules.problem(actual, fromRPC: fromRPC, shown: shown)
            ?? BodyFileRules.problem(actual, fileSystemType: (try? Posix.fileSystemType(of: own)) ?? 0, shown: shown) {
            throw Refused(description: "body_file \(problem)")
        }
    }
}

/// A request body streamed from a file (`body_file`): curl pulls it through
/// `read` a buffer at a time, so memory does not grow with the file — the
/// lesson of `uploadTask(fromFile:)` over `fromData:`.
final class RequestBody {
    let path: String
    /// Size when the attempt began (or of the slice); it goes out as Content-Length.
    let size: Int64
    /// Where in the file the body starts: a chunk of a resumable upload is a slice of it.
    private let start: Int64
    private let fd: Int32
    /// Bytes handed to curl so far (rewinds move it back).
    private(set) var position: Int64 = 0
    /// Called after every read with the new position.
    var onRead: ((Int64) -> Void)?

    /// - Parameters:
    ///   - slice: only these bytes of the file (nil: all of it).
    ///   - rules: where the job may read from, checked on the file opened.
    init(path: String, slice: ByteSpan? = nil, rules: BodyFileCheck) throws {
        // A FIFO named as body_file must not hold the loop until someone writes to it.
        let (file, fileSize, _) = try FileSystem.openRegular(path, O_RDONLY, shown: "body_file \(path)")
        do {
            try rules.check(opened: file, path: path)
        } catch {
            Posix.close(file)
            throw error
        }
        if let slice, slice.end > fileSize {
            Posix.close(file)
            throw SystemError(operation: "body_file \(path) has \(fileSize) bytes, fewer than the upload needs (\(slice.end))",
                              errno: EINVAL)
        }
        self.path = path
        fd = file
        start = slice?.start ?? 0
        size = slice?.length ?? fileSize
        do {
            opened = try BodyIdentity(descriptor: file, shown: path)
        } catch {
            Posix.close(file)
            throw error
        }
    }

    /// The file as it was opened: written to while being sent, it would
    /// reach the server as a mix of two versions.
    private let opened: BodyIdentity

    /// The file was written to (or grew, or shrank) since the attempt opened it.
    var changedSinceOpened: Bool { (try? BodyIdentity(descriptor: fd, shown: path)) != opened }

    deinit { Posix.close(fd) }

    /// Set when the file ended before the size announced as Content-Length
    /// (it shrank while being sent): the attempt was aborted, not finished.
    private(set) var shrank = false
    /// Set when reading the file failed (EIO, say): the attempt was aborted, not finished.
    private(set) var readFailure: SystemError?

    /// curl's read callback: fills `buffer`, returns 0 at the end, or aborts.
    /// Never more than the size announced, never fewer without aborting.
    func read(into buffer: UnsafeMutablePointer<CChar>, capacity: Int) -> Int {
        let wanted = Int(min(Int64(capacity), max(0, size - position)))
        guard wanted > 0 else { return 0 }
        let got: Int
        do {
            got = try Posix.read(fd, into: UnsafeMutableRawBufferPointer(start: buffer, count: wanted), at: start + position,
                                 shown: "body_file \(path)")
        } catch {
            readFailure = error as? SystemError ?? SystemError(operation: "read body_file \(path)", errno: EIO)
            return Int(CURL_READFUNC_ABORT)
        }
        guard got > 0 else {
            shrank = true
            return Int(CURL_READFUNC_ABORT)
        }
        position += Int64(got)
        onRead?(position)
        return got
    }

    /// False: curl may not rewind and send the body again by itself (it does, on a
    /// reused connection that died). A chunk of a resumable upload is then
    /// ended, and the server asked how far it got, rather than sent whole again.
    var rewindable = true
    /// curl asked for a rewind that `rewindable` refused.
    private(set) var refusedRewind = false

    /// curl's seek callback: 0 on success, 1 (CURL_SEEKFUNC_FAIL) for a place
    /// outside the body, 2 (CURL_SEEKFUNC_CANTSEEK) for a rewind not allowed.
    func seek(to offset: Int64, origin: Int32) -> Int32 {
        // Reads are positional: a seek only moves where the next one starts.
        let target: Int64
        switch origin {
        case SEEK_SET: target = offset
        case SEEK_CUR: target = position + offset
        case SEEK_END: target = size + offset
        default: return 1
        }
        guard target >= 0, target <= size else { return 1 }
        // CURL_SEEKFUNC_CANTSEEK: curl gives up the request instead of repeating it.
        if !rewindable, target != position {
            refusedRewind = true
            return 2
        }
        position = target
        return 0
    }

    /// The SHA-1 of the body's bytes as they are on disk now (tus
    /// `checksum`: the server compares what arrived with it).
    func sha1() throws -> [UInt8] {
        var hash = Insecure.SHA1()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var done: Int64 = 0
        while done < size {
            let wanted = Int(min(Int64(buffer.count), size - done))
            let got = try buffer.withUnsafeMutableBytes {
                try Posix.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: $0[..<wanted]), at: start + done, shown: "body_file \(path)")
            }
            // The file ended early: it shrank since the attempt opened it.
            guard got > 0 else { throw SystemError(operation: "read body_file \(path)", errno: EIO) }
            hash.update(data: buffer[0..<got])
            done += Int64(got)
        }
        return Array(hash.finalize())
    }

    /// Plugs this body into `easy` as curl's read and seek callbacks.
    func attach(to easy: UnsafeMutableRawPointer) throws {
        let context = Unmanaged.passUnretained(self).toOpaque()
        try Self.check(sa_easy_set_read_callback(easy, Self.readCallback, context))
        try Self.check(sa_easy_set_seek_callback(easy, Self.seekCallback, context))
    }

    /// Adds the file as the multipart part `field`, streamed the same way.
    func attach(to part: OpaquePointer, field: String) throws {
        try Self.check(sa_curl_mime_name(part, field))
        try Self.check(sa_curl_mime_filename(part, (path as NSString).lastPathComponent))
        try Self.check(sa_curl_mime_type(part, "application/octet-stream"))
        try Self.check(sa_curl_mime_data_cb(part, curl_off_t(size), Self.readCallback, Self.seekCallback, nil,
                                         Unmanaged.passUnretained(self).toOpaque()))
    }

    private static func check(_ code: CURLcode) throws {
        guard code == CURLE_OK else {
            throw Exchange.SetupError(what: "cannot attach the request body: \(String(cString: sa_curl_easy_strerror(code)))")
        }
    }

    private static let readCallback: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
        buffer, size, count, context in
        let body = Unmanaged<RequestBody>.fromOpaque(context!).takeUnretainedValue()
        return body.read(into: buffer!, capacity: size * count)
    }

    private static let seekCallback: @convention(c) (UnsafeMutableRawPointer?, curl_off_t, Int32) -> Int32 = {
        context, offset, origin in
        let body = Unmanaged<RequestBody>.fromOpaque(context!).takeUnretainedValue()
        return body.seek(to: Int64(offset), origin: origin)
    }
}

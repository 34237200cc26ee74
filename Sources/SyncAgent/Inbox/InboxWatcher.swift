import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// inotify on the inbox: names of job files that were closed after writing
/// or moved in. A queue overflow asks the caller for a full rescan.
final class InboxWatcher {
    let directory: String
    /// Polled by the event loop beside curl's sockets.
    let fd: Int32
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

    struct Changes {
        var names: [String] = []
        var overflowed = false
    }

    init(directory: String) throws {
        self.directory = directory
        try FileSystem.makeDirectory(directory)
        fd = try syscall("inotify_init1") { inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) }
        let mask = UInt32(IN_CLOSE_WRITE) | UInt32(IN_MOVED_TO) | UInt32(IN_ONLYDIR)
        do {
            try syscall("watch \(directory)") { inotify_add_watch(fd, directory, mask) }
        } catch {
            close(fd)
            throw error
        }
    }

    deinit { close(fd) }

    /// Everything inotify has queued, without blocking.
    func drain() -> Changes {
        var changes = Changes()
        var seen = Set<String>()
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return changes }
            var offset = 0
            buffer.withUnsafeBytes { raw in
                while offset + MemoryLayout<inotify_event>.size <= count {
                    let base = raw.baseAddress! + offset
                    let mask = base.loadUnaligned(fromByteOffset: 4, as: UInt32.self)
                    let nameLength = Int(base.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
                    let headerSize = MemoryLayout<inotify_event>.size
                    if mask & UInt32(IN_Q_OVERFLOW) != 0 { changes.overflowed = true }
                    if nameLength > 0 {
                        let nameBytes = UnsafeRawBufferPointer(start: base + headerSize, count: nameLength)
                        let name = String(decoding: nameBytes.prefix { $0 != 0 }, as: UTF8.self)
                        // One name can come twice (closed, then renamed over): once is enough.
                        if InboxRules.isJobFileName(name), seen.insert(name).inserted { changes.names.append(name) }
                    }
                    offset += headerSize + nameLength
                }
            }
        }
    }

    /// Job files present now, oldest first (then by name): the order they were dropped.
    func scan() -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var found: [(mtime: Int64, name: String)] = []
        for name in names where InboxRules.isJobFileName(name) {
            var info = stat()
            guard lstat(directory + "/" + name, &info) == 0 else { continue }
            let mtime = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
            found.append((mtime, name))
        }
        return found.sorted { ($0.mtime, $0.name) < ($1.mtime, $1.name) }.map(\.name)
    }
}

import Foundation
import Testing

/// The rule of DESIGN.md §3 and §5: every system call is made in
/// `Sources/SyncAgent/Posix/Posix.swift`, where its EINTR policy, its
/// result check and the seam that injects errno live. This reads every
/// Swift file under Sources/ (comments and string literals left out) and
/// names each direct call of a system call anywhere else.
///
/// The same check without a build: `make check-syscalls`.
@Suite("Every system call goes through Posix")
struct SyscallRuleTests {
    /// Files allowed to make their own system calls while they are being
    /// converted: none. `make check-syscalls` reads this list; the second
    /// test fails for a file on it that no longer needs to be there.
    static let exempt: Set<String> = []

    static let home = "Sources/SyncAgent/Posix/Posix.swift"

    /// System calls (and the C shims that make them) by the names Swift calls them.
    static let names: Set<String> = [
        // Descriptors and data.
        "open", "openat", "openat2", "creat", "close", "close_range", "dup", "dup2", "dup3", "pipe", "pipe2", "fcntl", "ioctl",
        "read", "readv", "pread", "preadv", "write", "writev", "pwrite", "pwritev", "lseek", "ftruncate", "truncate",
        "fsync", "fdatasync", "sync_file_range", "syncfs", "sync", "flock", "fallocate", "posix_fallocate", "sendfile",
        "copy_file_range", "isatty",
        // Names.
        "stat", "fstat", "lstat", "fstatat", "statx", "statfs", "fstatfs", "access", "faccessat", "rename", "renameat", "renameat2",
        "link", "linkat", "symlink", "symlinkat", "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir", "chmod", "fchmod",
        "fchmodat", "chown", "fchown", "readlink", "readlinkat", "realpath", "opendir", "fdopendir", "readdir", "closedir",
        "rewinddir", "dirfd", "mkstemp", "mkdtemp",
        // Processes and signals.
        "getpid", "getppid", "fork", "vfork", "execv", "execve", "execvp", "posix_spawn", "posix_spawnp", "_exit",
        "kill", "killpg", "wait", "waitpid", "waitid", "signal", "sigaction", "sigprocmask", "pthread_sigmask", "signalfd",
        "raise",
        // Watching, waiting, time, memory, network.
        "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "poll", "ppoll", "select", "epoll_create1",
        "epoll_ctl", "epoll_wait", "eventfd", "usleep", "sleep", "nanosleep", "clock_nanosleep", "clock_gettime",
        "gettimeofday", "mmap", "munmap", "madvise", "mallopt", "getifaddrs", "freeifaddrs", "socket", "recv", "recvfrom",
        "recvmsg", "sendto", "sendmsg",
        // The C shims around system calls (CLinuxShims, and CCurlShims' signalfd pair).
        "sa_openat_beneath", "sa_rename_noreplace", "sa_pidfd_open", "sa_open_for_writing", "sa_syncfs", "sa_spawn_hook",
        "sa_netlink_route_socket", "sa_netlink_drain", "sa_nm_open", "sa_nm_close", "sa_nm_process", "sa_nm_read",
        "sa_set_mmap_threshold", "sa_stop_signal_fd", "sa_read_signal", "sa_file_system_type",
    ]

    /// The fewest arguments each takes (1 unless said): a call with fewer,
    /// or with a labelled one, cannot be the C function and is Swift's own
    /// (`stat()`, `close()`, `write("{")`, `open(flags:)`, `rename(name, toTaken:)`).
    static let fewestArguments: [String: Int] = [
        "getpid": 0, "getppid": 0, "fork": 0, "vfork": 0, "sync": 0, "inotify_init": 0, "sa_stop_signal_fd": 0,
        "sa_netlink_route_socket": 0, "sa_nm_open": 0, "sa_nm_close": 0, "sa_nm_process": 0,
        "open": 2, "openat": 3, "creat": 2, "read": 3, "write": 3, "pread": 4, "pwrite": 4, "readv": 3, "writev": 3,
        "lseek": 3, "ftruncate": 2, "truncate": 2, "flock": 2, "fcntl": 2, "ioctl": 2, "dup2": 2, "dup3": 3,
        "stat": 2, "fstat": 2, "lstat": 2, "fstatat": 4, "statfs": 2, "fstatfs": 2, "access": 2, "faccessat": 4, "rename": 2, "renameat": 4,
        "link": 2, "linkat": 5, "symlink": 2, "symlinkat": 3, "unlinkat": 3, "mkdir": 2, "mkdirat": 3, "chmod": 2,
        "fchmod": 2, "fchmodat": 4, "readlink": 3, "readlinkat": 4, "realpath": 2, "kill": 2, "killpg": 2,
        "waitpid": 3, "waitid": 4, "signal": 2, "sigaction": 3, "sigprocmask": 3, "pthread_sigmask": 3, "signalfd": 3,
        "inotify_add_watch": 3, "inotify_rm_watch": 2, "poll": 3, "select": 5, "nanosleep": 2, "clock_gettime": 2,
        "mmap": 6, "munmap": 2, "madvise": 3, "mallopt": 2, "socket": 3, "recv": 4, "sendto": 6,
        "sa_openat_beneath": 4, "sa_rename_noreplace": 4, "sa_file_system_type": 2, "sa_spawn_hook": 4, "sa_nm_read": 2,
    ]

    /// Module names that only qualify a C function (`Glibc.close(fd)` is the call itself).
    static let cModules: Set<String> = ["Glibc", "Foundation", "Darwin", "Musl", "SwiftGlibc"]

    @Test func noSystemCallIsMadeOutsidePosix() throws {
        var found: [String] = []
        for file in try Self.sourceFiles() where file != Self.home && !Self.exempt.contains(file) {
            found += try Self.calls(in: file).map { "\(file):\($0.line): \($0.text)" }
        }
        #expect(found.isEmpty, "system calls outside \(Self.home) (use a Posix wrapper, or add one there):\n\(found.joined(separator: "\n"))")
    }

    @Test func everyExemptFileStillNeedsToBe() throws {
        let files = Set(try Self.sourceFiles())
        for file in Self.exempt.sorted() {
            #expect(files.contains(file), "\(file) is gone: take it off SyscallRuleTests.exempt")
            if files.contains(file) {
                #expect(try !Self.calls(in: file).isEmpty,
                        "\(file) makes no system call of its own now: take it off SyscallRuleTests.exempt")
            }
        }
    }

    /// The checker itself, on what it must and must not report.
    @Test func theCheckerTellsCallsFromLookalikes() {
        let source = """
            let fd = open(path, O_RDONLY)                 // 1: a call
            Glibc.close(fd)                               // 2: a call, qualified by its module
            try Posix.close(fd)
            store.read(row)
            var info = stat()
            func read(_ id: String) {}
            try open(flags: SQLITE_OPEN_READONLY)
            reader.close()
            // close(fd) in a comment
            let text = "unlink(\\(path))"
            /* fsync(fd) in /* a nested */ block */
            let pid = getpid()                            // 12: a call with no argument
            let n = "\\(read(fd, &b, 1))"                  // 13: a call inside an interpolation
            let s = \"\"\"
                rename(a, b)
                \"\"\"
            write("{")
            switch rename(name, toTaken: taken) {}
            let count = pread(fd,                         // 19: a call over two lines
                              buffer, 4, 0)
            """
        let lines = Self.calls(inSource: source).map(\.line)
        #expect(lines == [1, 2, 12, 13, 19])
    }

    // MARK: - The scan

    static func packageRoot() -> URL {
        // Tests/SyncAgentTests/SyscallRuleTests.swift
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// Every .swift file under Sources/, relative to the package root, sorted.
    static func sourceFiles() throws -> [String] {
        let root = packageRoot().path
        guard let walker = FileManager.default.enumerator(atPath: root + "/Sources") else { return [] }
        return walker.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }.map { "Sources/" + $0 }.sorted()
    }

    static func calls(in file: String) throws -> [(line: Int, text: String)] {
        calls(inSource: try String(contentsOfFile: packageRoot().path + "/" + file, encoding: .utf8))
    }

    static func calls(inSource source: String) -> [(line: Int, text: String)] {
        let original = source.split(separator: "\n", omittingEmptySubsequences: false)
        var lines: [Int] = []
        for offset in systemCalls(in: codeOnly(Array(source.utf8))) {
            let line = source.utf8.prefix(offset).reduce(1) { $0 + ($1 == UInt8(ascii: "\n") ? 1 : 0) }
            if lines.last != line { lines.append(line) }
        }
        return lines.map { ($0, original[$0 - 1].trimmingCharacters(in: .whitespaces)) }
    }

    private static func isIdentifier(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
    }

    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0A || byte == 0x09 || byte == 0x0D }

    /// Where each call of a system call starts, in code with comments and strings blanked.
    private static func systemCalls(in code: [UInt8]) -> [Int] {
        var found: [Int] = []
        var index = 0
        while index < code.count {
            guard isIdentifier(code[index]), index == 0 || !isIdentifier(code[index - 1]) else { index += 1; continue }
            var end = index
            while end < code.count, isIdentifier(code[end]) { end += 1 }
            defer { index = end }
            let name = String(decoding: code[index..<end], as: UTF8.self)
            guard names.contains(name) else { continue }
            var open = end
            while open < code.count, code[open] == 0x20 { open += 1 }
            guard open < code.count, code[open] == UInt8(ascii: "(") else { continue }
            // Before it: `x.name(` is a method (or Posix's), unless x is a C module; `func name(` declares one.
            var before = index
            while before > 0, isSpace(code[before - 1]) { before -= 1 }
            if before > 0, code[before - 1] == UInt8(ascii: ".") {
                var start = before - 1
                while start > 0, isIdentifier(code[start - 1]) { start -= 1 }
                guard cModules.contains(String(decoding: code[start..<(before - 1)], as: UTF8.self)) else { continue }
            }
            if before >= 4, code[(before - 4)..<before].elementsEqual("func".utf8),
               before == 4 || !isIdentifier(code[before - 5]) { continue }
            // Its arguments: fewer than the C function takes, or one labelled, and it is Swift's own.
            let (count, labelled) = arguments(in: code, from: open)
            if labelled || count < fewestArguments[name, default: 1] { continue }
            found.append(index)
        }
        return found
    }

    /// How many arguments the call whose "(" is at `open` passes, and whether one has a label.
    private static func arguments(in code: [UInt8], from open: Int) -> (count: Int, labelled: Bool) {
        var depth = 0, count = 0, labelled = false, argumentStarts = true, index = open + 1
        while index < code.count {
            let byte = code[index]
            switch byte {
            case UInt8(ascii: "("), UInt8(ascii: "["), UInt8(ascii: "{"): depth += 1
            case UInt8(ascii: ")"), UInt8(ascii: "]"), UInt8(ascii: "}"):
                if depth == 0 { return (count, labelled) }
                depth -= 1
            case UInt8(ascii: ","): if depth == 0 { argumentStarts = true }
            default:
                if depth == 0, argumentStarts, !isSpace(byte) {
                    argumentStarts = false
                    count += 1
                    var end = index
                    while end < code.count, isIdentifier(code[end]) { end += 1 }
                    var colon = end
                    while colon < code.count, code[colon] == 0x20 { colon += 1 }
                    if end > index, colon < code.count, code[colon] == UInt8(ascii: ":"),
                       colon + 1 >= code.count || code[colon + 1] != UInt8(ascii: ":") { labelled = true }
                }
            }
            index += 1
        }
        return (count, labelled)
    }

    /// `source` with every comment and string literal (but the code of its
    /// interpolations) blanked to spaces, lines kept where they were.
    static func codeOnly(_ source: [UInt8]) -> [UInt8] {
        enum Context { case code(parens: Int), string(multiline: Bool, hashes: Int) }
        let quote = UInt8(ascii: "\""), slash = UInt8(ascii: "/"), star = UInt8(ascii: "*"), hash = UInt8(ascii: "#")
        let newline = UInt8(ascii: "\n"), backslash = UInt8(ascii: "\\")
        var out = source
        var stack: [Context] = [.code(parens: 0)]
        var index = 0
        func at(_ offset: Int) -> UInt8? { index + offset < source.count ? source[index + offset] : nil }
        func blank(_ count: Int) {
            for offset in 0..<count where index + offset < source.count && source[index + offset] != newline { out[index + offset] = 0x20 }
            index += count
        }
        func hashes(from start: Int) -> Int {
            var count = 0
            while start + count < source.count, source[start + count] == hash { count += 1 }
            return count
        }
        while index < source.count {
            switch stack.last! {
            case .code(let parens):
                let byte = source[index]
                if byte == slash, at(1) == slash {
                    while index < source.count, source[index] != newline { blank(1) }
                } else if byte == slash, at(1) == star {
                    var depth = 0
                    repeat {
                        if at(0) == slash, at(1) == star { depth += 1; blank(2) }
                        else if at(0) == star, at(1) == slash { depth -= 1; blank(2) }
                        else { blank(1) }
                    } while depth > 0 && index < source.count
                } else if byte == quote || (byte == hash && source.indices.contains(index + hashes(from: index)) && source[index + hashes(from: index)] == quote) {
                    let count = byte == hash ? hashes(from: index) : 0
                    index += count
                    let multiline = at(0) == quote && at(1) == quote && at(2) == quote
                    index += multiline ? 3 : 1
                    stack.append(.string(multiline: multiline, hashes: count))
                } else if byte == UInt8(ascii: "(") {
                    stack[stack.count - 1] = .code(parens: parens + 1)
                    index += 1
                } else if byte == UInt8(ascii: ")") {
                    if parens == 0, stack.count > 1 {
                        // The end of an interpolation: back into its string.
                        stack.removeLast()
                        blank(1)
                    } else {
                        stack[stack.count - 1] = .code(parens: max(0, parens - 1))
                        index += 1
                    }
                } else {
                    index += 1
                }
            case .string(let multiline, let count):
                let byte = source[index]
                if byte == backslash, hashes(from: index + 1) == count {
                    if index + 1 + count < source.count, source[index + 1 + count] == UInt8(ascii: "(") {
                        blank(2 + count)
                        stack.append(.code(parens: 0))
                    } else {
                        blank(2 + count)
                    }
                } else if byte == quote, !multiline || (at(1) == quote && at(2) == quote) {
                    let closing = multiline ? 3 : 1
                    if hashes(from: index + closing) >= count {
                        index += closing + count
                        stack.removeLast()
                    } else {
                        blank(1)
                    }
                } else if byte == newline, !multiline {
                    // An unterminated literal: end it with its line.
                    stack.removeLast()
                    index += 1
                } else {
                    blank(1)
                }
            }
        }
        return out
    }
}

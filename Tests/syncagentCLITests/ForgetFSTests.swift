import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The rules of forgetfs, the test file system that forgets at a power cut
/// what was never made durable (issue 41), one test each: what the power-cut
/// torture relies on is shown here first.
@Suite("forgetfs: strict POSIX durability at a power cut", .serialized)
struct ForgetFSTests {
    let directory = TempDirectory()

    func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }
    func contents(_ path: String) -> String? {
        FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
    }

    @Test func aWrittenFileNeverSyncedIsGoneOrEmptyAfterACut() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        // Its name was made durable (the folder synced), its bytes were not: there, empty.
        try Durably.write(Data(), to: fs.path + "/b.txt")
        try Durably.syncDirectory(fs.path)
        try Durably.write(Data("lost too".utf8), to: fs.path + "/b.txt")
        // Neither its bytes nor its name were: gone.
        try Durably.write(Data("lost".utf8), to: fs.path + "/a.txt")
        #expect(contents(fs.path + "/a.txt") == "lost")
        try fs.powerCycle()
        #expect(!exists(fs.path + "/a.txt"))
        #expect(contents(fs.path + "/b.txt") == "")
    }

    @Test func anFdatasyncedFileKeepsItsBytesButLosesItsNameWithoutADirectorySync() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        try Durably.write(Data("flushed".utf8), to: fs.path + "/named.bin", flush: .data)
        try Durably.syncDirectory(fs.path)
        // Bytes appended after the flush are not durable.
        let fd = open(fs.path + "/named.bin", O_WRONLY | O_APPEND)
        #expect(Glibc.write(fd, "+more", 5) == 5)
        close(fd)
        // Flushed, but created after the folder's last fsync.
        try Durably.write(Data("flushed".utf8), to: fs.path + "/nameless.bin", flush: .data)
        try fs.powerCycle()
        #expect(contents(fs.path + "/named.bin") == "flushed")
        #expect(!exists(fs.path + "/nameless.bin"))
    }

    @Test func aRenameIsUndoneUntilItsDirectoryIsSynced() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        try Durably.write(Data("x".utf8), to: fs.path + "/x", flush: .full)
        try Durably.syncDirectory(fs.path)
        #expect(rename(fs.path + "/x", fs.path + "/y") == 0)
        try fs.powerCycle()
        #expect(contents(fs.path + "/x") == "x")
        #expect(!exists(fs.path + "/y"))

        #expect(rename(fs.path + "/x", fs.path + "/y") == 0)
        try Durably.syncDirectory(fs.path)
        try fs.powerCycle()
        #expect(!exists(fs.path + "/x"))
        #expect(contents(fs.path + "/y") == "x")
    }

    /// A rename between folders is an entry gone from one and an entry added
    /// to the other, each durable when its own folder is synced.
    @Test func aRenameAcrossDirectoriesIsWholeOnlyOnceBothAreSynced() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        let from = fs.path + "/from", to = fs.path + "/to"
        try Durably.makeDirectory(from)
        try Durably.makeDirectory(to)
        for name in ["target-synced", "source-synced", "both-synced"] {
            try Durably.write(Data(name.utf8), to: from + "/" + name, flush: .full)
        }
        try Durably.syncDirectory(from)

        #expect(rename(from + "/target-synced", to + "/target-synced") == 0)
        try Durably.syncDirectory(to)
        try fs.powerCycle()
        #expect(contents(from + "/target-synced") == "target-synced", "its old name is still durable")
        #expect(contents(to + "/target-synced") == "target-synced")

        #expect(rename(from + "/source-synced", to + "/source-synced") == 0)
        try Durably.syncDirectory(from)
        try fs.powerCycle()
        #expect(!exists(from + "/source-synced") && !exists(to + "/source-synced"), "neither name is durable")

        #expect(rename(from + "/both-synced", to + "/both-synced") == 0)
        try Durably.syncDirectory(to)
        try Durably.syncDirectory(from)
        try fs.powerCycle()
        #expect(!exists(from + "/both-synced"))
        #expect(contents(to + "/both-synced") == "both-synced")
    }

    @Test func anUnlinkComesBackUntilItsDirectoryIsSynced() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        try Durably.write(Data("undead".utf8), to: fs.path + "/u", flush: .full)
        try Durably.syncDirectory(fs.path)
        #expect(unlink(fs.path + "/u") == 0)
        try fs.powerCycle()
        #expect(contents(fs.path + "/u") == "undead")
        #expect(unlink(fs.path + "/u") == 0)
        try Durably.syncDirectory(fs.path)
        try fs.powerCycle()
        #expect(!exists(fs.path + "/u"))
    }

    @Test func syncfsMakesEverythingDurable() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        try Durably.write(Data("old".utf8), to: fs.path + "/gone", flush: .full)
        try Durably.write(Data("old".utf8), to: fs.path + "/moved", flush: .full)
        try Durably.syncDirectory(fs.path)
        #expect(mkdir(fs.path + "/deep", 0o755) == 0 && mkdir(fs.path + "/deep/er", 0o755) == 0)
        try Durably.write(Data("new".utf8), to: fs.path + "/deep/er/file")
        #expect(unlink(fs.path + "/gone") == 0)
        #expect(rename(fs.path + "/moved", fs.path + "/deep/moved") == 0)
        try fs.syncfs()
        try fs.powerCycle()
        #expect(contents(fs.path + "/deep/er/file") == "new")
        #expect(contents(fs.path + "/deep/moved") == "old")
        #expect(!exists(fs.path + "/gone") && !exists(fs.path + "/moved"))

        // A program's own syncfs(2), as `sync -f` makes it, through the preload library.
        try Durably.write(Data("by sync -f".utf8), to: fs.path + "/deep/er/other")
        let sync = try ChildProcess("/usr/bin/sync", ["-f", fs.path + "/deep"],
                                    environment: ["LD_PRELOAD": try #require(ForgetFS.preloadLibrary)], outputIn: directory.path)
        #expect(sync.wait(seconds: 10) == 0, "\(sync.stderr)")
        try fs.powerCycle()
        #expect(contents(fs.path + "/deep/er/other") == "by sync -f")
    }

    /// A size change is data: durable at the next fsync or fdatasync.
    @Test func truncationIsDurableOnlyWithTheNextFlush() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        let file = fs.path + "/t"
        try Durably.write(Data("abcdef".utf8), to: file, flush: .data)
        try Durably.syncDirectory(fs.path)
        try Durably.write(Data("xy".utf8), to: file)  // O_TRUNC, no flush
        try fs.powerCycle()
        #expect(contents(file) == "abcdef")

        #expect(truncate(file, 2) == 0)
        try fs.powerCycle()
        #expect(contents(file) == "abcdef")

        let fd = open(file, O_WRONLY)
        #expect(ftruncate(fd, 2) == 0 && fdatasync(fd) == 0)
        close(fd)
        try fs.powerCycle()
        #expect(contents(file) == "ab")
    }

    /// The inbox's link(2) and the agent's renameat2(RENAME_NOREPLACE).
    @Test func hardLinksAndRenamesThatReplaceNothing() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        let a = fs.path + "/a", b = fs.path + "/b", c = fs.path + "/c"
        try Durably.write(Data("linked".utf8), to: a, flush: .full)
        try Durably.syncDirectory(fs.path)
        #expect(link(a, b) == 0)
        try fs.powerCycle()
        #expect(!exists(b))
        #expect(link(a, b) == 0)
        try Durably.syncDirectory(fs.path)
        try fs.powerCycle()
        var sa = stat(), sb = stat()
        #expect(stat(a, &sa) == 0 && stat(b, &sb) == 0)
        #expect(sa.st_ino == sb.st_ino && sa.st_nlink == 2)

        let script = """
            import ctypes, os, sys
            libc = ctypes.CDLL(None, use_errno=True)
            def noreplace(a, b):
                r = libc.renameat2(-100, a.encode(), -100, b.encode(), 1)
                return 0 if r == 0 else ctypes.get_errno()
            print(noreplace(sys.argv[1], sys.argv[2]), noreplace(sys.argv[1], sys.argv[3]))
            """
        let out = try python(script, [a, b, c])
        #expect(out == "\(EEXIST) 0", "renameat2 onto a name fails with EEXIST, onto none it moves")
        #expect(!exists(a) && contents(c) == "linked")
    }

    /// flock (files and folders), the mmapped -shm of SQLite's WAL mode, and
    /// inotify all work on it.
    @Test func locksSQLiteInWALModeAndInotifyWork() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        for path in [fs.path, fs.path + "/lockfile"] {
            if path.hasSuffix("lockfile") { try Durably.write(Data(), to: path) }
            let first = open(path, O_RDONLY), second = open(path, O_RDONLY)
            defer { close(first); close(second) }
            #expect(flock(first, LOCK_EX | LOCK_NB) == 0)
            #expect(flock(second, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK, "\(path)")
        }

        let inotify = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        defer { close(inotify) }
        #expect(inotify_add_watch(inotify, fs.path, UInt32(IN_CLOSE_WRITE | IN_MOVED_TO)) >= 0)
        try Durably.write(Data("job".utf8), to: fs.path + "/seen.job")
        var buffer = [UInt8](repeating: 0, count: 4096)
        let got = read(inotify, &buffer, buffer.count)
        #expect(got > 16 && String(decoding: buffer[16..<got], as: UTF8.self).contains("seen.job"))

        // A writer in WAL mode with synchronous=FULL killed after 100 commits;
        // a second connection reads them meanwhile through the shared -shm.
        let database = fs.path + "/log.sqlite"
        let out = try python("""
            import os, sqlite3, sys
            c = sqlite3.connect(sys.argv[1], isolation_level=None)
            c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA synchronous=FULL")
            c.execute("CREATE TABLE events(seq INTEGER PRIMARY KEY, data TEXT)")
            for i in range(100): c.execute("INSERT INTO events(data) VALUES (?)", (str(i),))
            r = sqlite3.connect(sys.argv[1])
            print(r.execute("SELECT count(*) FROM events").fetchone()[0], flush=True)
            os._exit(0)
            """, [database])
        #expect(out == "100")
        try fs.powerCycle()
        #expect(try python("import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM events').fetchone()[0])",
                           [database]) == "100")
    }

    /// A cut keeps what a disk keeps: the inode numbers of what survives.
    @Test func inodeNumbersSurviveACut() throws {
        guard let fs = try ForgetFS(in: directory) else { return }
        try Durably.write(Data("i".utf8), to: fs.path + "/i", flush: .full)
        try Durably.syncDirectory(fs.path)
        var before = stat(), after = stat()
        #expect(stat(fs.path + "/i", &before) == 0)
        try fs.powerCycle()
        #expect(stat(fs.path + "/i", &after) == 0)
        #expect(before.st_ino == after.st_ino)
        #expect(before.st_ctim.tv_sec == after.st_ctim.tv_sec && before.st_ctim.tv_nsec == after.st_ctim.tv_nsec)
    }

    func python(_ script: String, _ arguments: [String]) throws -> String {
        let child = try ChildProcess("/usr/bin/python3", ["-c", script] + arguments, environment: [:], outputIn: directory.path)
        guard child.wait(seconds: 30) == 0 else { throw TestFailure("python3: \(child.stderr)") }
        return child.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

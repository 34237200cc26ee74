import Synchronization
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// `FolderTrust` on the disk: the agent refuses to run (SPEC §4.1, like
/// sshd's `StrictModes`) from a state dir or an inbox that another local
/// user could write, or replace through a folder or a symbolic link on the
/// way to it. Every entry is looked at with lstat, and links are followed
/// the way the kernel follows them, so what is checked is what the agent
/// then opens.
public enum StrictModes {
    /// A place the agent will not use, in one line naming it, what is wrong and the fix.
    public struct Refused: Error, CustomStringConvertible {
        public let description: String
    }

    static let me = UInt32(Posix.effectiveUserID)

    /// Checks `path` (the state dir or the inbox) and everything on the way
    /// to it. A part of the path that is not there yet is fine: the agent
    /// makes it, 0700, its own.
    /// - Parameter shownAs: the place named in a refusal, when it is not `path` itself (a file in it).
    static func checkPath(_ path: String, what: String, lastAs lastRole: FolderTrust.Role = .own, shownAs: String? = nil) throws {
        let named = shownAs ?? path
        var pending = components(of: path)
        // The folder names resolved so far: the folder the next name is looked up in.
        var resolved: [String] = []
        var checkedAbove: Set<[String]> = []
        var links = 0
        while !pending.isEmpty {
            let name = pending.removeFirst()
            if name == "." { continue }
            if name == ".." {
                _ = resolved.popLast()
                continue
            }
            // Another user who may rename entries in this folder could swap the next one.
            if checkedAbove.insert(resolved).inserted {
                try check(absolute(resolved), role: .above, what: what, target: named)
            }
            let current = absolute(resolved + [name])
            guard let info = try Posix.statusIfPresent(of: current, flags: AT_SYMLINK_NOFOLLOW) else { return }
            if (info.st_mode & S_IFMT) == S_IFLNK {
                try judge(info, at: current, role: .link, what: what, target: named)
                links += 1
                guard links <= 40 else { throw SystemError(operation: "resolve \(path)", errno: ELOOP) }
                // A relative target goes on from the link's own folder, as the kernel takes it.
                let target = try Posix.linkTarget(current)
                if target.hasPrefix("/") { resolved = [] }
                pending = names(of: target) + pending
                continue
            }
            // A file where a folder should be: the agent's own open says so, in its words.
            guard (info.st_mode & S_IFMT) == S_IFDIR else { return }
            resolved.append(name)
        }
        if lastRole == .own {
            try checkOwn(absolute(resolved), what: what, shown: path)
        } else {
            try check(absolute(resolved), role: lastRole, what: what, target: named)
        }
    }

    /// The config file (and the folders on the way to it, which may be
    /// root's, as /etc is): refused when another user could change it,
    /// as sshd refuses an authorized_keys others may write.
    static func checkConfigFile(_ path: String) throws {
        let folder = path.hasPrefix("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
        try checkPath(folder.isEmpty ? "/" : folder, what: "config file", lastAs: .above, shownAs: path)
        guard let info = try Posix.statusIfPresent(of: path, flags: AT_SYMLINK_NOFOLLOW) else { return }
        var named = info
        if (info.st_mode & S_IFMT) == S_IFLNK {
            // A dotfile manager's link: its owner could point it elsewhere, and what it names is what is read.
            try judge(info, at: path, role: .link, what: "config file", target: path)
            guard let target = try Posix.statusIfPresent(of: path) else { return }
            named = target
        }
        let gid = named.st_gid
        let problem = (named.st_mode & S_IFMT) != S_IFREG ? .notAFolder
            : FolderTrust.configProblem(owner: UInt32(named.st_uid), mode: UInt32(named.st_mode & 0o7777), me: me,
                                        groupIsPrivate: { isPrivate(gid) })
        guard let problem else { return }
        throw Refused(description: FolderTrust.configSentence(problem, path: path, me: me) { Posix.userName(of: uid_t($0)) })
    }

    /// The state dir or the inbox, made (0700, the agent's own) where
    /// missing once nothing on the way to it is another user's to change.
    static func makeTrusted(_ path: String, what: String) throws {
        try checkPath(path, what: what)
        try FileSystem.makeDirectory(path)
        try checkPath(path, what: what)
    }

    /// The state dir, made where missing, and every file in it checked:
    /// what `run` (and `compact`, which writes the log too) starts from.
    static func makeTrustedStateDir(_ stateDir: String) throws {
        try makeTrusted(stateDir, what: "state dir")
        try checkEntries(of: stateDir)
    }

    /// One of the agent's own folders (a subfolder of the inbox), looked at
    /// itself: no link is followed to it.
    static func checkOwnFolder(_ path: String, what: String) throws {
        try checkOwn(path, what: what, shown: path, followingLinks: false)
    }

    /// As above, for a folder made later: checked only if a folder is there
    /// (a symbolic link there is removed when the folder is made).
    static func checkOwnFolderIfThere(_ path: String, what: String) throws {
        guard let info = try Posix.statusIfPresent(of: path, flags: AT_SYMLINK_NOFOLLOW), (info.st_mode & S_IFMT) == S_IFDIR else { return }
        try checkOwn(info, at: path, what: what)
    }

    /// Every entry of the state dir (the log, its -wal and -shm, the lock,
    /// cookies, the hooks' log): a file another user owns, or may write,
    /// could be a log they wrote, or one they write into later.
    static func checkEntries(of stateDir: String) throws {
        let folder = try Posix.open(stateDir, O_RDONLY | O_DIRECTORY, shown: "state dir \(stateDir)")
        defer { Posix.close(folder) }
        for entry in try Posix.rawEntries(of: folder, shown: "state dir \(stateDir)") {
            let shown = stateDir + "/" + InboxName(bytes: entry.name).text
            let info: stat
            do {
                info = try Posix.status(of: entry.name, at: folder, flags: AT_SYMLINK_NOFOLLOW, shown: shown)
            } catch let error as SystemError where error.errno == ENOENT {
                // Gone since it was listed: nothing to trust.
                continue
            }
            guard (info.st_mode & S_IFMT) == S_IFLNK else {
                try judge(info, at: shown, role: .own, what: "file in the state dir", target: stateDir)
                continue
            }
            // A link of the user's (the log kept on another disk, say): what it names is opened, and judged.
            try judge(info, at: shown, role: .link, what: "file in the state dir", target: stateDir)
            do {
                let named = try Posix.status(of: entry.name, at: folder, shown: shown)
                try judge(named, at: shown, role: .own, what: "file in the state dir", target: stateDir)
            } catch let error as SystemError where error.errno == ENOENT {
                // Dangling: nothing is opened through it.
            }
        }
    }

    /// Whether the state dir and its files are as `run` wants them, for the
    /// commands that only read the log: what is wrong, in the words `run`
    /// would refuse with (empty when nothing is). Never throws: they go on,
    /// reading only, and say it.
    public static func problems(ofStateDir stateDir: String) -> [String] {
        do {
            try checkPath(stateDir, what: "state dir")
            if FileSystem.exists(stateDir) { try checkEntries(of: stateDir) }
            return []
        } catch {
            return ["\(error)"]
        }
    }

    /// The same rules for an entry already looked at (what the agent holds,
    /// checked again while it runs).
    static func checkOwn(_ info: stat, at path: String, what: String, isFolder: Bool = true) throws {
        guard !isFolder || (info.st_mode & S_IFMT) == S_IFDIR else {
            throw refusal(.notAFolder, role: .own, what: what, path: path, target: path)
        }
        try judge(info, at: path, role: .own, what: what, target: path)
    }

    private static func checkOwn(_ path: String, what: String, shown: String, followingLinks: Bool = true) throws {
        let info = try Posix.status(of: path, flags: followingLinks ? 0 : AT_SYMLINK_NOFOLLOW, shown: "\(what) \(shown)")
        try checkOwn(info, at: shown, what: what)
    }

    private static func check(_ path: String, role: FolderTrust.Role, what: String, target: String) throws {
        try judge(try Posix.status(of: path, flags: AT_SYMLINK_NOFOLLOW), at: path, role: role, what: what, target: target)
    }

    private static func judge(_ info: stat, at path: String, role: FolderTrust.Role, what: String, target: String) throws {
        let gid = info.st_gid
        guard let problem = FolderTrust.problem(role, owner: UInt32(info.st_uid), mode: UInt32(info.st_mode & 0o7777), me: me,
                                                groupIsPrivate: { isPrivate(gid) }) else { return }
        throw refusal(problem, role: role, what: what, path: path, target: target, isFolder: (info.st_mode & S_IFMT) == S_IFDIR)
    }

    private static func refusal(_ problem: FolderTrust.Problem, role: FolderTrust.Role, what: String, path: String,
                                target: String, isFolder: Bool = true) -> Refused {
        Refused(description: FolderTrust.sentence(problem, role: role, what: what, path: path, target: target, isFolder: isFolder,
                                                  me: me) { Posix.userName(of: uid_t($0)) })
    }

    /// Whether the group `gid` has the user for its only member. Asked once
    /// per group in a run: the answer walks the whole user database, and
    /// the held folders are checked again every 2 s.
    private static func isPrivate(_ gid: gid_t) -> Bool {
        if let known = privateGroups.withLock({ $0[gid] }) { return known }
        let members = Posix.groupMembers(gid).map { FolderTrust.Group(primaryMembers: $0.primary.map { UInt32($0) },
                                                                      listedMembers: $0.listed) }
        let answer = FolderTrust.isPrivate(members, to: me, named: Posix.userName(of: uid_t(me)))
        privateGroups.withLock { $0[gid] = answer }
        return answer
    }

    private static let privateGroups = Mutex<[gid_t: Bool]>([:])

    /// The names of an absolute path; a relative one is taken from the working directory.
    private static func components(of path: String) -> [String] {
        names(of: path.hasPrefix("/") ? path : ((try? Posix.resolved(".")) ?? "/") + "/" + path)
    }

    /// Split on the byte '/', as the kernel reads a path.
    private static func names(of path: String) -> [String] {
        path.utf8.split(separator: UInt8(ascii: "/")).map { String(decoding: $0, as: UTF8.self) }
    }

    private static func absolute(_ names: [String]) -> String { "/" + names.joined(separator: "/") }
}

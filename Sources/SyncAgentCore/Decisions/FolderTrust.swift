/// sshd's `StrictModes` for the agent's own places (SPEC §4.1): a job in
/// the inbox runs with the agent's rights, and the log in the state dir is
/// replayed as the truth, so another local user who can write either — or
/// replace them through a folder above — could act as the agent's user.
/// Each place is judged from its owner and mode; the engine gathers them
/// (lstat, following symbolic links the way the kernel would) and says the
/// sentence this builds.
public enum FolderTrust {
    /// What a checked entry is to the agent.
    public enum Role: Equatable, Sendable {
        /// The state dir, the inbox, the folders the agent keeps in them, the
        /// files in the state dir: its user's alone, written by no one else.
        case own
        /// A folder on the way to one of those: whoever may rename entries in
        /// it could put another folder in the agent's place. Root's and the
        /// user's are trusted; a folder others may write only with the sticky
        /// bit (`/tmp`), where no one renames or removes another's entry.
        case above
        /// A symbolic link on the way: whoever owns it could point it elsewhere
        /// (a link of another user's in a sticky folder is theirs to replace).
        case link
    }

    public enum Problem: Equatable, Sendable {
        case ownedBy(uid: UInt32)
        /// Writable by its group, by others, or both; `mode` is the permission bits.
        case writable(mode: UInt32)
        case notAFolder
    }

    static let groupWrite: UInt32 = 0o020
    static let othersWrite: UInt32 = 0o002
    static let sticky: UInt32 = 0o1000

    /// What is wrong with an entry of `owner` and `mode` (permission bits,
    /// sticky bit included) in `role`, for the agent running as `me`.
    /// - Parameter groupIsPrivate: whether the entry's group is the user's
    ///   alone (`isPrivate`); asked only of an entry its group may write.
    public static func problem(_ role: Role, owner: UInt32, mode: UInt32, me: UInt32,
                               groupIsPrivate: () -> Bool = { false }) -> Problem? {
        let trustedOwner = owner == me || (role != .own && owner == 0)
        guard trustedOwner else { return .ownedBy(uid: owner) }
        // A link's own mode is always 0777 and means nothing.
        guard role != .link, mode & (groupWrite | othersWrite) != 0 else { return nil }
        if role == .above, mode & sticky != 0 { return nil }
        if mode & othersWrite == 0, groupIsPrivate() { return nil }
        return .writable(mode: mode & 0o7777)
    }

    /// The members of a group: the users whose primary group it is, and
    /// those listed in it.
    public struct Group: Sendable {
        public var primaryMembers: [UInt32]
        public var listedMembers: [String]
        public init(primaryMembers: [UInt32], listedMembers: [String]) {
            self.primaryMembers = primaryMembers; self.listedMembers = listedMembers
        }
    }

    /// A group whose only member is the user (a user private group, where
    /// umask 002 makes every folder group-writable) lets no other user in:
    /// Debian's sshd accepts such folders the same way. A group with no
    /// member at all is no one's own (setgid programs use those).
    public static func isPrivate(_ group: Group?, to me: UInt32, named name: String?) -> Bool {
        guard let group, !group.primaryMembers.isEmpty || !group.listedMembers.isEmpty else { return false }
        return group.primaryMembers.allSatisfy { $0 == me } && group.listedMembers.allSatisfy { $0 == name }
    }

    /// A job file is taken only when it is the agent's user's and no one
    /// else may write it: whatever another user could write into it (a file
    /// writable by others, which with `fs.protected_hardlinks` is also the
    /// only kind of another's file a user may hard-link into a folder) would
    /// run with the agent's rights. A file its group may write is taken:
    /// with user private groups (umask 002) every file a user writes is so,
    /// and the inbox a group member would need to reach it is refused.
    public static func jobProblem(owner: UInt32, mode: UInt32, me: UInt32) -> Problem? {
        guard owner == me else { return .ownedBy(uid: owner) }
        return mode & othersWrite != 0 ? .writable(mode: mode & 0o7777) : nil
    }

    /// The config file names the commands hooks run, the proxy, the CA and
    /// the folders: whoever may write it acts as the agent's user. It is
    /// the user's own or root's (a system-wide file), written by no one
    /// else (its group only where that group is the user's alone).
    public static func configProblem(owner: UInt32, mode: UInt32, me: UInt32, groupIsPrivate: () -> Bool = { false }) -> Problem? {
        guard owner == me || owner == 0 else { return .ownedBy(uid: owner) }
        guard mode & (groupWrite | othersWrite) != 0 else { return nil }
        if mode & othersWrite == 0, groupIsPrivate() { return nil }
        return .writable(mode: mode & 0o7777)
    }

    /// Why the config file at `path` is not read, with the fix.
    public static func configSentence(_ problem: Problem, path: String, me: UInt32, userName: (UInt32) -> String?) -> String {
        let stake = "it names the commands hooks run, the proxy and the folders the agent writes"
        switch problem {
        case .ownedBy(let uid):
            let owner = userName(uid).map { "user \($0) (uid \(uid))" } ?? "uid \(uid)"
            return "config file \(path) is owned by \(owner), not by you or root: \(stake), and they could change it; "
                + "fix: chown it to \(userName(me) ?? "uid \(me)"), or use another with --config"
        case .writable(let mode):
            let whom = writers(of: mode)
            return "config file \(path) is writable by \(whom) (mode 0\(String(mode, radix: 8))): \(stake), "
                + "and another user could change it; fix: chmod go-w \(path)"
        case .notAFolder:
            return "config file \(path) is not a regular file; fix: put the config in a file"
        }
    }

    /// Who may write an entry of `mode`, besides its owner, in words.
    private static func writers(of mode: UInt32) -> String {
        mode & groupWrite != 0 && mode & othersWrite != 0 ? "its group and others" : mode & groupWrite != 0 ? "its group" : "others"
    }

    /// Why a job file at `path` is left where it is, unread.
    public static func jobSentence(_ problem: Problem, path: String, userName: (UInt32) -> String?) -> String {
        switch problem {
        case .ownedBy(let uid):
            let owner = userName(uid).map { "user \($0) (uid \(uid))" } ?? "uid \(uid)"
            return "not taking \(path): it is owned by \(owner), not by you (a job runs with your rights); left where it is"
        case .writable(let mode):
            return "not taking \(path): others may write it (mode 0\(String(mode, radix: 8))), and a job runs with your rights; "
                + "left where it is; fix: chmod o-w \(path)"
        case .notAFolder:
            return "not taking \(path); left where it is"
        }
    }

    /// One line naming the place, what is wrong and the fix.
    /// - Parameters:
    ///   - what: the place in words ("inbox", "state dir", "the inbox's .taken folder").
    ///   - path: the entry at fault.
    ///   - target: the place checked, when `path` is a folder or link on the way to it.
    ///   - isFolder: whether `path` is a folder (else a file in the state dir).
    ///   - userName: the name of a uid, when the system knows it.
    public static func sentence(_ problem: Problem, role: Role, what: String, path: String, target: String, isFolder: Bool = true,
                                me: UInt32, userName: (UInt32) -> String?) -> String {
        func user(_ uid: UInt32) -> String { userName(uid).map { "user \($0) (uid \(uid))" } ?? "uid \(uid)" }
        let place = role == .own
            ? "\(what) \(path)"
            : "\(path), \(role == .link ? "a symbolic link" : "a folder") on the way to the \(what) \(target),"
        let stake = what.hasSuffix("rejected folder") ? "rejected jobs are kept there, credentials and all"
            : what == "inbox" || what.hasPrefix("the inbox") ? "jobs there run with your rights"
            : "the agent replays and writes what is there"
        switch problem {
        case .notAFolder:
            return "\(place) is not a folder; fix: move it away and let syncagent make the folder"
        case .ownedBy(let uid):
            let fix = role == .own
                ? "remove it and let syncagent make its own, or chown it to \(userName(me) ?? "uid \(me)")"
                : "use another \(what), or have its owner give it to you or root"
            return "\(place) is owned by \(user(uid)), not by you: \(stake), and they could change it; fix: \(fix)"
        case .writable(let mode):
            let whom = writers(of: mode)
            let octal = "0" + String(mode, radix: 8)
            let why = role != .own ? "without the sticky bit, another user could replace the \(what) with their own"
                : isFolder ? "another user could put or replace files there: \(stake)" : "another user could change it: \(stake)"
            return "\(place) is writable by \(whom) (mode \(octal)): \(why); fix: chmod go-w \(path)"
        }
    }
}

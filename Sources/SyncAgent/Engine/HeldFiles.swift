/// The event log, the inbox, its `.taken/` and download_dir as the agent
/// opened them (device, inode). One deleted, moved or replaced under the
/// agent would have it go on with what it holds open: events written where
/// no `status` and no next start reads them (and the state directory's lock
/// gone with them, letting a second agent start), jobs dropped into a new
/// inbox never seen, files published into a folder moved away. It stops
/// instead; the next start (systemd restarts it) opens what is there.
/// Those of them another user must not write (SPEC §4.1) are checked
/// again as at the start: a folder made writable by others while the agent
/// runs stops it with the refusal a start would give.
struct HeldFiles {
    /// `trusted`: the place in words, when it is one of the agent's own (and whether it is a folder).
    private var held: [(name: String, path: String, identity: FileIdentity, trusted: (what: String, isFolder: Bool)?)] = []
    private let inbox: String
    /// When they are next looked for at their paths (monotonic ms).
    private var nextCheckMs: Int64 = 0
    /// Every 2 s, and before a commit that removes a taken job's file or publishes one.
    private static let checkIntervalMs: Int64 = 2000

    init(inbox: String) { self.inbox = inbox }

    mutating func hold(_ name: String, at path: String, identity: FileIdentity, trusted: (what: String, isFolder: Bool)? = nil) {
        held.append((name, path, identity, trusted))
    }

    var isDue: Bool { Posix.monotonicMs >= nextCheckMs }

    mutating func checked() throws {
        try check()
        nextCheckMs = Posix.monotonicMs + Self.checkIntervalMs
    }

    func check() throws {
        for file in held {
            guard let info = try? Posix.status(of: file.path), FileIdentity(info) == file.identity else {
                throw Replaced(name: file.name, path: file.path, inbox: inbox)
            }
            if let trusted = file.trusted { try StrictModes.checkOwn(info, at: file.path, what: trusted.what, isFolder: trusted.isFolder) }
        }
    }

    struct Replaced: Error, CustomStringConvertible {
        var name: String
        var path: String
        var inbox: String
        var description: String {
            // A moved inbox took its `.taken/` along: say where to look.
            let waiting = path == inbox ? ".taken/ of the folder that was moved away (move them into the inbox)" : "\(inbox)/.taken/ for it"
            return "\(name) \(path) was deleted, moved or replaced while the agent ran; stopped so nothing is written where "
                + "the log does not say. Start the agent again to use what is there now; jobs taken but not yet "
                + "recorded wait in " + waiting
        }
    }
}

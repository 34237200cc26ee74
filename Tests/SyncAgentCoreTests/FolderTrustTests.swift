import Testing
@testable import SyncAgentCore

/// sshd's StrictModes for the agent's places (SPEC §4.1), as a table: who
/// may own what, and which modes let another user in.
@Suite("Folder trust")
struct FolderTrustTests {
    static let me: UInt32 = 1000, other: UInt32 = 1001, root: UInt32 = 0

    @Test(arguments: [
        // The agent's own folders and files: the user's alone, written by no one else.
        (FolderTrust.Role.own, me, 0o700, nil),
        (.own, me, 0o755, nil),
        (.own, me, 0o600, nil),
        (.own, me, 0o775, FolderTrust.Problem.writable(mode: 0o775)),
        (.own, me, 0o757, .writable(mode: 0o757)),
        (.own, me, 0o1777, .writable(mode: 0o1777)),
        (.own, other, 0o700, .ownedBy(uid: other)),
        (.own, root, 0o755, .ownedBy(uid: root)),
        // Folders on the way: root's or the user's; others may write one only with the sticky bit.
        (.above, root, 0o755, nil),
        (.above, me, 0o700, nil),
        (.above, root, 0o1777, nil),
        (.above, me, 0o1770, nil),
        (.above, root, 0o777, .writable(mode: 0o777)),
        (.above, me, 0o775, .writable(mode: 0o775)),
        (.above, other, 0o755, .ownedBy(uid: other)),
        (.above, other, 0o1777, .ownedBy(uid: other)),
        // Links: only whose they are (their mode is always 0777).
        (.link, me, 0o777, nil),
        (.link, root, 0o777, nil),
        (.link, other, 0o777, .ownedBy(uid: other)),
    ] as [(FolderTrust.Role, UInt32, UInt32, FolderTrust.Problem?)])
    func whoMayOwnAndWriteWhat(role: FolderTrust.Role, owner: UInt32, mode: UInt32, expected: FolderTrust.Problem?) {
        #expect(FolderTrust.problem(role, owner: owner, mode: mode, me: Self.me) == expected)
    }

    /// User private groups (umask 002): a folder its group may write is the
    /// user's alone when that group has no other member, as Debian's sshd has it.
    @Test func aGroupWhoseOnlyMemberIsTheUserLetsNoOneIn() {
        let mine = FolderTrust.Group(primaryMembers: [Self.me], listedMembers: [])
        #expect(FolderTrust.isPrivate(mine, to: Self.me, named: "alice"))
        let listedToo = FolderTrust.Group(primaryMembers: [Self.me], listedMembers: ["alice"])
        #expect(FolderTrust.isPrivate(listedToo, to: Self.me, named: "alice"))
        let shared = FolderTrust.Group(primaryMembers: [Self.me, Self.other], listedMembers: [])
        #expect(FolderTrust.isPrivate(shared, to: Self.me, named: "alice") == false)
        let listed = FolderTrust.Group(primaryMembers: [Self.me], listedMembers: ["mallory"])
        #expect(FolderTrust.isPrivate(listed, to: Self.me, named: "alice") == false)
        let empty = FolderTrust.Group(primaryMembers: [], listedMembers: [])
        #expect(FolderTrust.isPrivate(empty, to: Self.me, named: "alice") == false)
        #expect(FolderTrust.isPrivate(nil, to: Self.me, named: "alice") == false)
        #expect(FolderTrust.problem(.own, owner: Self.me, mode: 0o770, me: Self.me, groupIsPrivate: { true }) == nil)
        #expect(FolderTrust.problem(.above, owner: Self.me, mode: 0o775, me: Self.me, groupIsPrivate: { true }) == nil)
        // Others may write it: the group does not matter.
        #expect(FolderTrust.problem(.own, owner: Self.me, mode: 0o777, me: Self.me, groupIsPrivate: { true }) == .writable(mode: 0o777))
        #expect(FolderTrust.problem(.own, owner: Self.me, mode: 0o770, me: Self.me, groupIsPrivate: { false }) == .writable(mode: 0o770))
    }

    @Test func theAgentRunningAsRootTrustsOnlyRootsOwnFolders() {
        #expect(FolderTrust.problem(.own, owner: Self.root, mode: 0o700, me: Self.root) == nil)
        #expect(FolderTrust.problem(.own, owner: Self.other, mode: 0o700, me: Self.root) == .ownedBy(uid: Self.other))
    }

    @Test func aJobIsTakenOnlyFromItsUserAndWhenNoOneElseMayWriteIt() {
        #expect(FolderTrust.jobProblem(owner: Self.me, mode: 0o600, me: Self.me) == nil)
        #expect(FolderTrust.jobProblem(owner: Self.me, mode: 0o644, me: Self.me) == nil)
        // User private groups (umask 002): the group is the user's own.
        #expect(FolderTrust.jobProblem(owner: Self.me, mode: 0o664, me: Self.me) == nil)
        #expect(FolderTrust.jobProblem(owner: Self.me, mode: 0o666, me: Self.me) == .writable(mode: 0o666))
        #expect(FolderTrust.jobProblem(owner: Self.other, mode: 0o600, me: Self.me) == .ownedBy(uid: Self.other))
        #expect(FolderTrust.jobProblem(owner: Self.root, mode: 0o600, me: Self.me) == .ownedBy(uid: Self.root))
    }

    @Test func theSentenceNamesThePlaceWhatIsWrongAndTheFix() {
        let names: (UInt32) -> String? = { $0 == Self.other ? "mallory" : $0 == Self.me ? "alice" : nil }
        let loose = FolderTrust.sentence(.writable(mode: 0o1777), role: .own, what: "inbox", path: "/srv/in", target: "/srv/in",
                                         me: Self.me, userName: names)
        #expect(loose == "inbox /srv/in is writable by its group and others (mode 01777): another user could put or replace "
                + "files there: jobs there run with your rights; fix: chmod go-w /srv/in")
        let taken = FolderTrust.sentence(.ownedBy(uid: Self.other), role: .own, what: "the inbox's rejected folder",
                                         path: "/srv/in/rejected", target: "/srv/in/rejected", me: Self.me, userName: names)
        #expect(taken.hasPrefix("the inbox's rejected folder /srv/in/rejected is owned by user mallory (uid 1001), not by you: "
                                + "rejected jobs are kept there"))
        #expect(taken.hasSuffix("fix: remove it and let syncagent make its own, or chown it to alice"))
        let above = FolderTrust.sentence(.writable(mode: 0o777), role: .above, what: "state dir", path: "/srv",
                                         target: "/srv/state", me: Self.me, userName: names)
        #expect(above == "/srv, a folder on the way to the state dir /srv/state, is writable by its group and others (mode 0777): "
                + "without the sticky bit, another user could replace the state dir with their own; fix: chmod go-w /srv")
        let file = FolderTrust.sentence(.writable(mode: 0o620), role: .own, what: "file in the state dir",
                                        path: "/s/events.sqlite", target: "/s", isFolder: false, me: Self.me, userName: names)
        #expect(file.contains("is writable by its group (mode 0620): another user could change it"))
        let unknown = FolderTrust.jobSentence(.ownedBy(uid: 4242), path: "/in/x.job", userName: names)
        #expect(unknown == "not taking /in/x.job: it is owned by uid 4242, not by you (a job runs with your rights); left where it is")
    }
}

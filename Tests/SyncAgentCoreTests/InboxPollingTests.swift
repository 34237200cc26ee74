import Testing
@testable import SyncAgentCore

/// When the inbox is scanned beside inotify, and which polled files are taken.
@Suite("Inbox polling: a network inbox, and files that stand still")
struct InboxPollingTests {
    static let nfs: Int64 = 0x6969, fuse: Int64 = 0x6573_5546, ext4: Int64 = 0xEF53, tmpfs: Int64 = 0x0102_1994

    @Test(arguments: [
        // (inbox_poll, file system, interval or nil)
        (nil, ext4, nil), (nil, tmpfs, nil), (nil, nfs, 5), (nil, fuse, 5), (nil, 0xFF53_4D42, 5),
        (0, nfs, nil), (0, ext4, nil), (30, ext4, 30), (2, fuse, 2),
    ] as [(Int64?, Int64, Int64?)])
    func anInboxIsPolledWhereInotifyCannotSeeEverythingOrWhenAsked(configured: Int64?, type: Int64, interval: Int64?) {
        #expect(InboxPolling.plan(configuredS: configured, fileSystemType: type)?.intervalS == interval)
    }

    @Test func theReasonNamesTheFileSystemOrTheKey() {
        #expect(InboxPolling.plan(configuredS: nil, fileSystemType: Self.nfs)?.reason.contains("NFS") == true)
        #expect(InboxPolling.plan(configuredS: 7, fileSystemType: Self.ext4)?.reason == "inbox_poll = 7")
        // f_type sign-extended to 64 bits (CIFS's magic has its top bit set) is still CIFS.
        #expect(InboxPolling.plan(configuredS: nil, fileSystemType: Int64(Int32(bitPattern: 0xFF53_4D42)))?.reason.contains("CIFS") == true)
    }

    @Test func aPolledJobIsTakenOnceTwoScansSawItTheSame() {
        var settling = PollSettling<String>()
        let a = ScannedJob(name: "a.job", size: 40, mtimeNs: 1_000, inode: 7)
        let b = ScannedJob(name: "b.job", size: 10, mtimeNs: 2_000, inode: 8)
        #expect(settling.settled([a]).isEmpty, "first seen: its writer may still be at it")
        #expect(settling.settled([a, b]) == ["a.job"])
        var grown = b
        grown.size = 60
        #expect(settling.settled([grown]).isEmpty, "b grew: still being written; a is gone (taken)")
        #expect(settling.settled([grown]) == ["b.job"])
        var replaced = grown
        replaced.inode = 9
        #expect(settling.settled([replaced]).isEmpty, "another file under the name starts its own wait")
        var touched = replaced
        touched.mtimeNs += 1
        #expect(settling.settled([touched]).isEmpty, "written again at the same size")
        #expect(settling.settled([touched]) == ["b.job"])
    }

    @Test func inboxPollIsADuration() throws {
        #expect(try AgentConfig.parse("inbox_poll = \"30s\"").inboxPollS == 30)
        #expect(try AgentConfig.parse("inbox_poll = 0").inboxPollS == 0)
        #expect(try AgentConfig.parse("").inboxPollS == nil)
        #expect(throws: (any Error).self) { try AgentConfig.parse("inbox_poll = \"soon\"") }
        #expect(AgentConfig.changes(from: AgentConfig(), to: try AgentConfig.parse("inbox_poll = 10")) == ["inbox_poll"])
    }
}

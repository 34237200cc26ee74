/// inotify reports only what this machine's kernel does to the inbox: a job
/// another machine writes into an NFS, CIFS or sshfs inbox raises no event
/// here. Such an inbox is also scanned on an interval (SPEC §5
/// `inbox_poll`), as transmission's `watch-dir-force-generic` does.
public enum InboxPolling {
    /// The interval for an inbox on a network or FUSE file system when
    /// `inbox_poll` is not set: a job waits at most about twice this.
    public static let automaticIntervalS: Int64 = 5

    /// `statfs` `f_type` magic numbers (linux/magic.h and the file systems'
    /// own) of file systems whose files another machine, or a user-space
    /// daemon, can change without this kernel's inotify seeing it.
    public static let remoteFileSystems: [Int64: String] = [
        0x6969: "NFS",
        0xFF53_4D42: "CIFS",
        0xFE53_4D42: "SMB2",
        0x517B: "SMB",
        0x6573_5546: "FUSE",
        0x0102_1997: "9P",
        0x00C3_6400: "Ceph",
        0x5346_414F: "AFS",
        0x6B41_4653: "AFS",
        0x7375_7245: "Coda",
        0x564C: "NCP",
        0x4750_4653: "GPFS",
        0x0BD0_0BD0: "Lustre",
        0x1983_0326: "BeeGFS",
        0x7461_636F: "OCFS2",
    ]

    /// How often to scan, and why: nil when inotify sees everything.
    /// `configuredS`: `inbox_poll` (nil: not set, 0: never).
    public static func plan(configuredS: Int64?, fileSystemType: Int64) -> (intervalS: Int64, reason: String)? {
        // statfs's f_type is a signed word on some ABIs: compare its low 32 bits.
        let name = remoteFileSystems[fileSystemType & 0xFFFF_FFFF]
        switch configuredS {
        case 0?:
            return nil
        case let seconds?:
            return (seconds, "inbox_poll = \(seconds)")
        case nil:
            guard let name else { return nil }
            return (automaticIntervalS, "the inbox is on \(name), whose changes from elsewhere inotify does not see")
        }
    }
}

/// What a scan of the inbox saw of one job file.
public struct ScannedJob<Name: Hashable>: Equatable {
    public var name: Name
    public var size: Int64
    public var mtimeNs: Int64
    public var inode: UInt64
    public init(name: Name, size: Int64, mtimeNs: Int64, inode: UInt64) {
        self.name = name; self.size = size; self.mtimeNs = mtimeNs; self.inode = inode
    }
}

/// A scan sees no close: a job file another machine is still writing looks
/// like any other, and a half-written one may even parse. A polled job is
/// taken once two scans in a row saw it the same (inode, size and
/// modification time): its writer has left it alone for a whole interval.
public struct PollSettling<Name: Hashable> {
    private var lastSeen: [Name: ScannedJob<Name>] = [:]

    public init() {}

    /// The jobs of `scan` that the scan before saw the same, in the scan's
    /// order; remembers this scan for the next.
    public mutating func settled(_ scan: [ScannedJob<Name>]) -> [Name] {
        let settled = scan.filter { lastSeen[$0.name] == $0 }.map(\.name)
        lastSeen = Dictionary(scan.map { ($0.name, $0) }, uniquingKeysWith: { _, latest in latest })
        return settled
    }
}

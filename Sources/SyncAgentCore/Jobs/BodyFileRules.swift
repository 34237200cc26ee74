/// Where a `body_file` may be read from. Its bytes go to a server, so a
/// job must not be able to send the agent's own secrets (the event log
/// with every job's headers, the RPC secret, the cookie jar, jobs waiting
/// in the inbox) or the kernel's views of processes and devices
/// (`/proc/self/environ`): these hold for every job, from the inbox or the
/// RPC alike. A download added over the RPC may read only beneath
/// `download_dir`: its client holds the RPC secret, not the user's shell,
/// and may run on a web page or another machine.
///
/// Checked on the path as written when the job is parsed, on the path with
/// its links resolved when it is taken, and on the file actually opened
/// (its own path and file system) before each attempt reads it.
public struct BodyFileRules: Equatable, Sendable {
    /// The agent's own folders: the state dir and the inbox.
    public var forbiddenDirs: [String]
    /// Where an RPC download's body file must lie (`download_dir`).
    public var rpcRoot: String

    /// The kernel's own trees: processes, devices and the kernel itself.
    public static let systemDirs = ["/proc", "/sys", "/dev"]
    /// `statfs` magic numbers of the kernel's pseudo file systems, wherever
    /// they are mounted: proc, sysfs, debugfs, tracefs, securityfs,
    /// configfs, efivarfs, cgroup, cgroup2, bpf, pstore.
    public static let pseudoFileSystems: Set<Int64> = [
        0x9fa0, 0x6265_6572, 0x6462_6720, 0x7472_6163, 0x7363_6673, 0x6265_6570, 0xde5e_81e4, 0x0027_e0eb,
        0x6367_7270, 0xcafe_4a11, 0x6165_676c,
    ]

    public init(forbiddenDirs: [String], rpcRoot: String) {
        self.forbiddenDirs = forbiddenDirs.map(PathRules.normalize)
        self.rpcRoot = PathRules.normalize(rpcRoot)
    }

    /// What is wrong with reading `path` as a body file, if anything.
    /// - Parameters:
    ///   - fromRPC: the job came over the RPC (`JobSource.isRPC`).
    ///   - shown: how the sentence names the file (the job's own path, when `path` is where its links lead).
    public func problem(_ path: String, fromRPC: Bool, shown: String? = nil) -> String? {
        guard path.hasPrefix("/"), !path.contains("\0") else { return "must be an absolute path, not \"\(Printable.escaping(path))\"" }
        let normalized = PathRules.normalize(path)
        let shown = shown ?? Printable.escaping(path)
        for folder in forbiddenDirs where PathRules.isSame(normalized, folder) || PathRules.isInside(normalized, folder) {
            return "names \(shown), inside the agent's own folder \(folder), which no job may send"
        }
        for folder in Self.systemDirs where PathRules.isSame(normalized, folder) || PathRules.isInside(normalized, folder) {
            return "names \(shown), inside \(folder), the kernel's, which no job may send"
        }
        if fromRPC, !PathRules.isInside(normalized, rpcRoot) {
            return "names \(shown), outside download_dir \(rpcRoot), where a download added over the RPC must find its body"
        }
        return nil
    }

    /// What is wrong with a body file on a file system of this type, if anything.
    public static func problem(_ path: String, fileSystemType: Int64, shown: String? = nil) -> String? {
        pseudoFileSystems.contains(fileSystemType)
            ? "names \(shown ?? Printable.escaping(path)), on one of the kernel's own file systems, which no job may send" : nil
    }
}

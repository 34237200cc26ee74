import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A small file system mounted for a test (tmpfs, or ext4 on a loop device),
/// unmounted when the test is done. Mounting needs root: where it fails the
/// initialiser returns nil and prints why, and the test skips.
public final class TestMount {
    public let path: String
    private var unmountOrder: [String] = []

    /// A tmpfs of `size` (e.g. "2m") at `path` (created if missing).
    public init?(tmpfsAt path: String, size: String) {
        self.path = path
        guard Self.run("/bin/mkdir", ["-p", path]), Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size),mode=0755", "tmpfs", path]) else {
            print("skipped: cannot mount a tmpfs at \(path) (needs root and mount(8))")
            return nil
        }
        unmountOrder = [path]
    }

    /// `source` seen through bindfs (FUSE) at `path`: what is written into
    /// `source` directly reaches `path` as a file another machine wrote
    /// reaches an NFS or sshfs mount — with no inotify event at `path`.
    /// In the foreground, as a child of the test: a daemon bindfs keeps
    /// Foundation's Process waiting on the descriptors it inherits.
    public init?(bindfsOf source: String, at path: String, outputIn directory: String) throws {
        self.path = path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let daemon = try ChildProcess("/usr/bin/bindfs", ["-f", "--no-allow-other", source, path], environment: [:],
                                      outputIn: directory, name: "bindfs")
        let mounted = eventually(within: 10) {
            ((try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) ?? "").contains(" \(path) fuse")
                || !daemon.isRunning
        }
        guard mounted, daemon.isRunning else {
            print("skipped: cannot mount bindfs at \(path) (needs root, /dev/fuse and bindfs): \(daemon.stderr)")
            return nil
        }
        self.daemon = daemon
        unmountOrder = [path]
    }

    /// bindfs, until the unmount ends it.
    private var daemon: ChildProcess?

    /// An ext4 image of `imageSize` on a tmpfs of `backingSize`, loop-mounted
    /// at `path`: ext4 accepts writes into the page cache, and flushing
    /// them fails once the tmpfs under the image is full — a failing disk.
    public init?(failingExt4At path: String, backing: String, imageSize: String, backingSize: String) {
        self.path = path
        let image = backing + "/disk.img"
        guard Self.run("/bin/mkdir", ["-p", path, backing]),
              Self.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(backingSize)", "tmpfs", backing]) else {
            print("skipped: cannot mount a tmpfs at \(backing) (needs root and mount(8))")
            return nil
        }
        unmountOrder = [backing]
        guard Self.run("/usr/bin/truncate", ["-s", imageSize, image]),
              Self.run("/sbin/mkfs.ext4", ["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", image]),
              Self.run("/bin/mount", ["-o", "loop", image, path]) else {
            print("skipped: cannot loop-mount an ext4 image at \(path) (needs root, mkfs.ext4 and loop devices)")
            return nil
        }
        unmountOrder = [path, backing]
        self.image = image
    }

    /// The ext4 image of a failing disk.
    private var image: String?

    /// Unmounts the failing disk and mounts it again: what it reads then is
    /// what reached the image, not the page cache (pages whose writeback
    /// failed are gone).
    public func mountAgain() -> Bool {
        guard let image else { return false }
        return Self.run("/bin/umount", [path]) && Self.run("/bin/mount", ["-o", "loop", image, path])
    }

    /// `mount -o remount,size=…`: more room, as a user who freed space.
    @discardableResult
    public func resize(_ size: String) -> Bool {
        Self.run("/bin/mount", ["-o", "remount,size=\(size)", path])
    }

    private var frozen = false

    /// `fsfreeze -f`: every write to the file system waits, in the kernel,
    /// until `thaw` — a disk that stalls (reads still answer).
    public func freeze() -> Bool {
        frozen = Self.run("/usr/sbin/fsfreeze", ["-f", path])
        return frozen
    }

    @discardableResult
    public func thaw() -> Bool {
        guard frozen else { return true }
        frozen = !Self.run("/usr/sbin/fsfreeze", ["-u", path])
        return !frozen
    }

    deinit {
        // A frozen file system is never left behind: its writers would wait for ever.
        thaw()
        // Lazy: a file still open elsewhere must not keep the mount busy.
        for mount in unmountOrder { _ = Self.run("/bin/umount", ["-l", mount]) }
    }

    @discardableResult
    static func run(_ tool: String, _ arguments: [String]) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
}

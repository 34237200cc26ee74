import Foundation
import Testing
import TestSupport
@testable import SyncAgent
@testable import SyncAgentCore

/// Failures no disk gives on demand, injected through `Posix.inject`: each
/// test names what it breaks by its own temporary folder (`matching:`), so a
/// test running beside these never meets their faults, and the suite runs
/// one test at a time because `removeFaults` clears every fault.
@Suite("Posix: system calls that fail", .serialized)
final class PosixFaultTests {
    let directory = TempDirectory()

    init() { Posix.removeFaults() }
    deinit { Posix.removeFaults() }

    private func file(_ name: String, bytes: Int = 0) throws -> String {
        let path = directory.file(name)
        #expect(FileManager.default.createFile(atPath: path, contents: Data(repeating: 7, count: bytes)))
        return path
    }

    private func failure(_ body: () throws -> Void) -> Error? {
        do {
            try body()
            return nil
        } catch {
            return error
        }
    }

    // MARK: - The policy

    @Test func anInterruptedCallIsRetriedAndSucceeds() throws {
        let path = try file("data", bytes: 10)
        let fd = try Posix.open(path, O_RDWR)
        defer { Posix.close(fd) }
        Posix.inject(.init(.fdatasync, errno: EINTR, matching: directory.path, times: 3))
        try Posix.dataSync(fd, shown: path)
        #expect(Posix.faultsLeft == 0, "each EINTR was met, and the call tried again")
    }

    @Test func aFailedCallIsASystemErrorNamingWhatAndWhere() throws {
        let path = try file("data", bytes: 10)
        let fd = try Posix.open(path, O_RDWR)
        defer { Posix.close(fd) }
        Posix.inject(.init(.fdatasync, errno: EIO, matching: directory.path, times: 1))
        let error = failure { try Posix.dataSync(fd, shown: path) } as? SystemError
        #expect(error?.errno == EIO)
        #expect(error?.description == "flush \(path): Input/output error")
        // Spent: the next one goes to the disk, which is fine.
        try Posix.dataSync(fd, shown: path)
    }

    @Test func aSecondListingOfOneDescriptorFindsEveryNameAgain() throws {
        for name in ["a", "b", "c"] { _ = try file(name) }
        let fd = try Posix.open(directory.path, O_RDONLY | O_DIRECTORY)
        defer { Posix.close(fd) }
        let first = try Posix.entries(of: fd, shown: directory.path).map(\.name).sorted()
        let second = try Posix.entries(of: fd, shown: directory.path).map(\.name).sorted()
        #expect(first == ["a", "b", "c"])
        #expect(second == first, "a listing through a dup shared the read position, and the second found nothing")
    }
}

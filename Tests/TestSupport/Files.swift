import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The bytes at `path`, or nil if there is nothing to read there.
public func contents(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

/// `chattr FLAG PATH`: "+i" makes a folder immutable (nothing in it is created, renamed or
/// removed, root or not), "-i" lets go. True when it took.
@discardableResult
public func chattr(_ flag: String, _ path: String) -> Bool {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
    process.arguments = [flag, path]
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    do { try process.run() } catch { return false }
    process.waitUntilExit()
    return process.terminationStatus == 0
}

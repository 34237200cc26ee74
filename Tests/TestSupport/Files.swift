import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The bytes at `path`, or nil if there is nothing to read there.
public func contents(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }

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

/// Runs `statements` (separated by `;`) on the SQLite file `database` with Python's sqlite3, a
/// client independent of the agent's code, each statement committed as it runs, the file
/// closed after. Returns the first column of the first row the last statement gave ("" when
/// it gave none).
@discardableResult
public func pythonSQLite(_ database: String, _ statements: String) throws -> String {
    let script = """
        import sqlite3, sys
        db = sqlite3.connect(sys.argv[1], isolation_level=None)
        rows = []
        for statement in sys.argv[2].split(';'):
            if statement.strip(): rows = db.execute(statement).fetchall()
        print(rows[0][0] if rows else '')
        db.close()
        """
    let scratch = TempDirectory()
    let child = try ChildProcess("/usr/bin/python3", ["-c", script, database, statements],
                                 environment: ProcessInfo.processInfo.environment, outputIn: scratch.path)
    guard child.wait(seconds: 30) == 0 else { throw TestFailure("python sqlite3 on \(database): \(child.stderr)") }
    return child.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
}

import Foundation

/// Commands run under a pseudo-terminal (Python's `pty`), for what only a
/// terminal sees: `status --watch` redrawing in place, output fitted to a width.
extension AgentHarness {
    /// Runs a command under a pseudo-terminal of the given size for a while
    /// and returns the frames it drew (split at cursor-home), each as lines
    /// with escape codes removed unless `keepEscapes`.
    public func underTerminal(_ arguments: [String], columns: Int, rows: Int, seconds: Double,
                              environment: [String: String]? = nil, keepEscapes: Bool = false) throws -> [[String]] {
        let text = try terminalOutput(arguments, columns: columns, rows: rows, seconds: seconds, environment: environment)
        let frames = text.components(separatedBy: "\u{1B}[H").dropFirst().filter { !$0.isEmpty }
        // The last frame may be cut mid-draw by the kill: keep whole ones (ended by clear-to-end).
        let whole = frames.filter { $0.hasSuffix("\u{1B}[J") }
        return whole.map { frame in
            let lines = frame.replacingOccurrences(of: "\r", with: "").components(separatedBy: "\n")
            return keepEscapes ? lines : lines.map(stripEscapes)
        }
    }

    /// What a command that ends by itself prints on a terminal of the given
    /// size: its lines, escape codes removed.
    public func printedOnTerminal(_ arguments: [String], columns: Int, rows: Int = 24,
                                  environment: [String: String]? = nil) throws -> [String] {
        let text = try terminalOutput(arguments, columns: columns, rows: rows, seconds: 30, environment: environment)
        var lines = text.replacingOccurrences(of: "\r", with: "").components(separatedBy: "\n").map(stripEscapes)
        if lines.last == "" { lines.removeLast() }
        return lines
    }

    /// Everything the command wrote to the terminal until it ended or `seconds` passed (then it is killed).
    private func terminalOutput(_ arguments: [String], columns: Int, rows: Int, seconds: Double,
                                environment: [String: String]?) throws -> String {
        let output = directory.file("pty-\(UUID().uuidString).out")
        let script = """
            import fcntl, os, pty, select, struct, sys, termios, time
            out, seconds, rows, cols = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
            pid, fd = pty.fork()
            if pid == 0:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                os.execv(sys.argv[5], sys.argv[5:])
            data, end = b"", time.time() + seconds
            while time.time() < end:
                ready, _, _ = select.select([fd], [], [], 0.1)
                if ready:
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    data += chunk
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            open(out, "wb").write(data)
            """
        let arguments = [arguments[0]] + globalFlags + arguments.dropFirst()
        let child = try ChildProcess("/usr/bin/python3", ["-c", script, output, "\(seconds)", "\(rows)", "\(columns)", syncagentBinary]
                                     + arguments, environment: environment ?? self.environment, outputIn: directory.path)
        guard child.wait(seconds: seconds + 20) == 0 else { throw TestFailure("pty run failed: \(child.stderr)") }
        return try String(contentsOfFile: output, encoding: .utf8)
    }

    public func stripEscapes(_ line: String) -> String {
        line.replacingOccurrences(of: "\u{1B}\\[[0-9;]*[A-Za-z]", with: "", options: .regularExpression)
    }
}

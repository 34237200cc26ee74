import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Shell completion as bash runs it: the generated script sourced, its
/// function called with `COMP_WORDS` as bash sets them on Tab, the binary
/// installed under a prefix of its own (not ~/.local) and found on PATH.
@Suite("Shell completion", .serialized)
struct CompletionTests {
    /// Completes `line` (Tab at its end) with the script `syncagent` generates, as bash would.
    static let bashComplete = #"""
        source "$2"
        function=$(complete -p syncagent | sed -n 's/.* -F \([^ ]*\) .*/\1/p')
        COMP_LINE=$1 COMP_POINT=${#1} COMPREPLY=()
        read -ra COMP_WORDS <<< "$1"
        [[ $1 == *' ' ]] && COMP_WORDS+=('')
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        "$function" syncagent "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
        printf '%s\n' "${COMPREPLY[@]}"
        """#

    /// A log with a task in each phase a control command cares about, and a
    /// job waiting in the inbox; the default config (no flag typed) names it.
    @Test func idsAreThoseTheCommandCanActOnAndValuesAreOffered() throws {
        let harness = try AgentHarness()
        let nginx = try Nginx(in: harness.directory)
        try nginx.serve("fin.bin", size: 1000)
        try nginx.serve("held.bin", size: 4_000_000)
        try harness.drop("fin.job", "id = \"fin\"\nurl = \"\(nginx.url("fin.bin"))\"\n")
        try harness.drop("bad.job", "id = \"bad\"\nurl = \"\(nginx.url("absent.bin"))\"\n")
        try harness.drop("later.job", "id = \"later\"\nurl = \"\(nginx.url("fin.bin"))\"\ndest = \"later.bin\"\nnot_before = 2099-01-01T00:00:00Z\n")
        try harness.drop("held.job", "id = \"held\"\nurl = \"\(nginx.url("held.bin"))\"\nmax_speed = \"100K\"\n")
        let agent = try harness.startAgent()
        #expect(eventually(within: 20) { harness.state(of: "held") == "running" && harness.state(of: "bad") == "failed"
                                         && harness.state(of: "fin") == "finished" })
        #expect(try harness.run(["pause", "held"]).status == 0)
        agent.signal(SIGTERM)
        #expect(agent.wait(seconds: 10) == 0)
        #expect(try harness.run(["submit", "--id", "sub", nginx.url("fin.bin"), "--dest", "sub.bin"]).status == 0)

        // Installed under a prefix of its own, found on PATH; the user's config names the log.
        let prefix = harness.directory.file("opt/syncagent")
        try FileManager.default.createDirectory(atPath: prefix + "/bin", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: prefix + "/bin/syncagent", withDestinationPath: syncagentBinary)
        let script = harness.directory.file("syncagent.bash")
        let generated = try harness.run(["--generate-completion-script", "bash"], flags: false)
        try generated.stdout.write(toFile: script, atomically: true, encoding: .utf8)
        var user = harness.environment
        user["PATH"] = prefix + "/bin:/usr/bin:/bin"
        let configFolder = user["XDG_CONFIG_HOME"]! + "/syncagent"
        try FileManager.default.createDirectory(atPath: configFolder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: harness.configFile, toPath: configFolder + "/config.toml")
        try "state_dir = \"\(harness.stateDir)\"\ninbox = \"\(harness.inbox)\"\n"
            .appendLine(to: configFolder + "/config.toml")

        func bash(_ line: String) throws -> [String] {
            let result = try ChildProcess("/bin/bash", ["-c", Self.bashComplete, "bash", line, script], environment: user,
                                          outputIn: harness.directory.path)
            #expect(result.wait(seconds: 30) == 0, "\(result.stderr)")
            return result.stdout.split(separator: "\n").map(String.init)
        }
        // (In the order the log took them, which need not be the order they were dropped in.)
        #expect(try bash("syncagent pause ").sorted() == ["later", "sub"], "queued, and the job not yet taken")
        #expect(try bash("syncagent resume ").sorted() == ["bad", "held"], "paused or failed")
        #expect(try bash("syncagent cancel ").sorted() == ["bad", "held", "later", "sub"], "not finished")
        #expect(try bash("syncagent forget ").sorted() == ["bad", "fin"], "ended ones only")
        #expect(try bash("syncagent retarget ").sorted() == ["bad", "held", "later", "sub"], "neither finished nor cancelled")
        #expect(try bash("syncagent status --task ").sorted() == ["bad", "fin", "held", "later", "sub"])
        #expect(try bash("syncagent pause l") == ["later"], "what was typed of the id narrows it")
        #expect(try bash("syncagent events --state-dir \(harness.stateDir) --task h") == ["held"])

        #expect(try bash("syncagent submit --overwrite ") == ["rename", "replace", "skip", "fail", "update"])
        #expect(try bash("syncagent submit --kind ") == ["download", "upload", "data", "hls"])
        #expect(try bash("syncagent status --state f") == ["finished", "failed"])
    }
}

private extension String {
    /// Appends this text to the file at `path`.
    func appendLine(to path: String) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(utf8))
    }
}

import Foundation
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `make install` as a user runs it, and each installed file read by the
/// program that reads it on Debian: man, bash-completion, zsh, fish, systemd.
@Suite("make install and make uninstall", .serialized)
struct InstallTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    /// INSTALL_TEST_BUILD of the Makefile, which `make test` builds before the
    /// suite: swift test holds the lock of .build, where a build would wait forever.
    static let releaseBuild = root + "/.build-install-test"

    /// The README's reference pages, installed beside it so its links resolve.
    static let referencePages = ((try? FileManager.default.contentsOfDirectory(atPath: root + "/docs")) ?? [])
        .filter { $0.hasSuffix(".md") }.map { "share/doc/syncagent/docs/" + $0 }

    static let installedFiles = (referencePages + [
        "bin/syncagent",
        "share/bash-completion/completions/syncagent",
        "share/doc/syncagent/README.md",
        "share/fish/vendor_completions.d/syncagent.fish",
        "share/man/man1/syncagent.1",
        "share/man/man5/syncagent.job.5",
        "share/man/man5/syncagent.toml.5",
        "share/syncagent/config.toml.example",
        "share/systemd/user/syncagent.service",
        "share/zsh/site-functions/_syncagent",
    ]).sorted()

    struct Outcome {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// The Makefile of this checkout. Only a cold release tree takes minutes (about 5 on 2 cores).
    func make(_ arguments: [String], in world: TempDirectory) throws -> Outcome {
        var environment = ProcessInfo.processInfo.environment
        for inherited in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PREFIX", "DESTDIR"] { environment[inherited] = nil }
        let child = try ChildProcess("/usr/bin/make", ["-C", Self.root, "RELEASE_BUILD=\(Self.releaseBuild)"] + arguments,
                                     environment: environment, outputIn: world.path)
        guard let status = child.wait(seconds: 900) else { throw TestFailure("make \(arguments) still running after 900 s") }
        return Outcome(status: status, stdout: child.stdout, stderr: child.stderr)
    }

    func run(_ executable: String, _ arguments: [String], _ environment: [String: String], in world: TempDirectory,
             seconds: Double = 60) throws -> Outcome {
        let child = try ChildProcess(executable, arguments, environment: environment, outputIn: world.path)
        guard let status = child.wait(seconds: seconds) else { throw TestFailure("\(executable) \(arguments) still running") }
        return Outcome(status: status, stdout: child.stdout, stderr: child.stderr)
    }

    /// Every file and symlink beneath `folder`, relative to it.
    func files(under folder: String) -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: folder)
        var found: [String] = []
        while let path = enumerator?.nextObject() as? String {
            if enumerator?.fileAttributes?[.type] as? FileAttributeType != .typeDirectory { found.append(path) }
        }
        return found.sorted()
    }

    /// A user whose HOME and XDG folders are in `world`, with PREFIX hooked in
    /// as for /usr/local: its bin on PATH, its share in XDG_DATA_DIRS.
    func userEnvironment(_ world: TempDirectory, prefix: String) throws -> [String: String] {
        let home = world.file("home")
        try FileManager.default.createDirectory(atPath: world.file("runtime"), withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        return [
            "HOME": home,
            "PATH": "\(prefix)/bin:/usr/local/bin:/usr/bin:/bin",
            "XDG_CONFIG_HOME": home + "/.config",
            "XDG_STATE_HOME": home + "/.local/state",
            "XDG_DATA_HOME": home + "/.local/share",
            "XDG_DATA_DIRS": "\(prefix)/share:/usr/local/share:/usr/share",
            "XDG_RUNTIME_DIR": world.file("runtime"),
            "TERM": "dumb",
            "LANG": "C.UTF-8",
        ]
    }

    /// Completes `line` as bash does on Tab, through the loader of the bash-completion package.
    static let bashComplete = #"""
        source /usr/share/bash-completion/bash_completion
        __load_completion syncagent || { echo "bash-completion found no completion for syncagent" >&2; exit 3; }
        function=$(complete -p syncagent | sed -n 's/.* -F \([^ ]*\) .*/\1/p')
        COMP_LINE=$1 COMP_POINT=${#1} COMPREPLY=()
        read -ra COMP_WORDS <<< "$1"
        [[ $1 == *' ' ]] && COMP_WORDS+=('')
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        "$function" syncagent "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
        printf '%s\n' "${COMPREPLY[@]}"
        """#

    /// Types `line` and Tab into an interactive fish on a pseudo-terminal and
    /// prints what fish drew. (`fish -c 'complete -C …'` cannot stand in: fish
    /// 3.6 has no cursor there, which the generated script asks for.) Never Enter.
    static let fishTab = #"""
        import os, pty, select, signal, sys, time
        line, expected = sys.argv[1], sys.argv[2].encode()
        pid, fd = pty.fork()
        if pid == 0:
            os.execvp("fish", ["fish", "--interactive", "--private", "-C", "function fish_prompt; echo 'READY> '; end"])
        def read_until(done, seconds):
            out, deadline = b"", time.monotonic() + seconds
            while not done(out) and time.monotonic() < deadline:
                if select.select([fd], [], [], 0.1)[0]:
                    try: out += os.read(fd, 65536)
                    except OSError: break
            return out
        read_until(lambda out: b"READY> " in out, 30)
        os.write(fd, line.encode())
        read_until(lambda out: line.rstrip().split()[-1].encode() in out, 10)
        os.write(fd, b"\t")
        drawn = read_until(lambda out: expected in out, 30)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        sys.stdout.write(drawn.decode(errors="replace"))
        """#

    @Test func installPutsEachFileWhereItsReaderLooksAndUninstallTakesThemAway() throws {
        let world = TempDirectory()
        let prefix = world.file("prefix")
        // Someone else's file in a shared folder: uninstall must leave it.
        try FileManager.default.createDirectory(atPath: prefix + "/bin", withIntermediateDirectories: true)
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: prefix + "/bin/neighbour"))

        let install = try make(["install", "PREFIX=\(prefix)"], in: world)
        try #require(install.status == 0, "\(install.stdout)\n\(install.stderr)")
        #expect(files(under: prefix) == (Self.installedFiles + ["bin/neighbour"]).sorted())
        for file in Self.installedFiles {
            let mode = try FileManager.default.attributesOfItem(atPath: "\(prefix)/\(file)")[.posixPermissions] as? Int
            #expect(mode == (file.hasPrefix("bin/") ? 0o755 : 0o644), "\(file)")
        }
        #expect(FileManager.default.contents(atPath: "\(prefix)/share/syncagent/config.toml.example")
            == FileManager.default.contents(atPath: Self.root + "/config/syncagent.toml"))
        #expect(FileManager.default.contents(atPath: "\(prefix)/share/doc/syncagent/README.md")
            == FileManager.default.contents(atPath: Self.root + "/README.md"))
        #expect(Self.referencePages.count >= 10)
        for page in Self.referencePages {
            #expect(FileManager.default.contents(atPath: "\(prefix)/\(page)")
                == FileManager.default.contents(atPath: Self.root + "/docs/" + (page as NSString).lastPathComponent), "\(page)")
        }

        let user = try userEnvironment(world, prefix: prefix)
        let binary = prefix + "/bin/syncagent"

        // The release binary runs, and needs no Swift installed.
        let version = try run(binary, ["--version"], user, in: world)
        #expect(version.status == 0 && !version.stdout.isEmpty, "\(version.stderr)")
        let libraries = try run("/usr/bin/ldd", [binary], user, in: world)
        #expect(!libraries.stdout.contains("libswiftCore"), "\(libraries.stdout)")

        // The man pages render, and `man syncagent`, `man syncagent.job` and `man syncagent.toml` find them from PATH.
        var manReader = user
        manReader["MANPAGER"] = "cat"
        manReader["MANWIDTH"] = "100"
        let page = try run("/usr/bin/man", ["-l", "--warnings", "\(prefix)/share/man/man1/syncagent.1"], manReader, in: world)
        #expect(page.status == 0 && page.stderr.isEmpty, "\(page.stderr)")
        for word in ["SYNOPSIS", "run", "submit", "status", "replay", "events", "pause", "resume", "cancel", "--state-dir", "EXIT STATUS"] {
            #expect(page.stdout.contains(word), "\(word) not in the man page")
        }
        for (section, name, path) in [("1", "syncagent", "man1/syncagent.1"), ("5", "syncagent.job", "man5/syncagent.job.5"),
                                      ("5", "syncagent.toml", "man5/syncagent.toml.5")] {
            let found = try run("/usr/bin/man", ["-w", section, name], manReader, in: world)
            #expect(found.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "\(prefix)/share/man/\(path)",
                    "\(found.stdout)\(found.stderr)")
            let shown = try run("/usr/bin/man", ["--warnings", section, name], manReader, in: world)
            #expect(shown.status == 0 && shown.stderr.isEmpty && shown.stdout.contains("SEE ALSO"), "man \(section) \(name): \(shown.stderr)")
        }

        // One failed task in a log of its own; no retry wait (the user's config says so).
        let stateDir = world.file("state")
        let inbox = world.file("inbox")
        try FileManager.default.createDirectory(atPath: user["XDG_CONFIG_HOME"]! + "/syncagent", withIntermediateDirectories: true)
        try "retries = 0\n".write(toFile: user["XDG_CONFIG_HOME"]! + "/syncagent/config.toml", atomically: true, encoding: .utf8)
        let places = ["--state-dir", stateDir, "--inbox", inbox]
        let submit = try run(binary, ["submit", "http://127.0.0.1:\(freePort())/x"] + places, user, in: world)
        #expect(submit.status == 0, "\(submit.stderr)")
        let agent = try run(binary, ["run", "--exit-when-idle"] + places, user, in: world)
        #expect(agent.status == 4, "\(agent.stderr)")
        let status = try run(binary, ["status", "--json"] + places, user, in: world)
        let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        let id = try #require((object?["tasks"] as? [[String: Any]])?.first?["id"] as? String, "\(status.stdout)")

        // bash: subcommands, and the task ids of the log the typed --state-dir names (the failed
        // task is one `resume` can act on; `pause` is not offered it).
        func bash(_ line: String) throws -> [String] {
            let result = try run("/bin/bash", ["-c", Self.bashComplete, "bash", line], user, in: world)
            #expect(result.status == 0, "\(result.stderr)")
            return result.stdout.split(separator: "\n").map(String.init)
        }
        #expect(try bash("syncagent pa") == ["pause"])
        #expect(try bash("syncagent resume --state-dir \(stateDir) ") == [id])
        #expect(try bash("syncagent pause --state-dir \(stateDir) ").isEmpty)
        #expect(try bash("syncagent status --state-dir \(stateDir) --task ") == [id])

        // zsh: parses, and compinit takes it from fpath for syncagent.
        let zshScript = "\(prefix)/share/zsh/site-functions/_syncagent"
        #expect(try run("/usr/bin/zsh", ["-n", zshScript], user, in: world).status == 0)
        let compinit = try run("/usr/bin/zsh", ["-f", "-c", """
            fpath=(\(prefix)/share/zsh/site-functions $fpath); autoload -Uz compinit && compinit -u -d \(world.file("zcompdump")) \
            && print -r -- $_comps[syncagent]
            """], user, in: world)
        #expect(compinit.stdout == "_syncagent\n", "\(compinit.stderr)")

        // fish: parses, finds it among the vendor completions, and completes the ids at a real prompt.
        #expect(try run("/usr/bin/fish", ["-n", "\(prefix)/share/fish/vendor_completions.d/syncagent.fish"], user, in: world).status == 0)
        let subcommands = try run("/usr/bin/fish", ["-c", "complete -C 'syncagent pa'"], user, in: world)
        #expect(subcommands.stdout.hasPrefix("pause\t"), "\(subcommands.stdout)\(subcommands.stderr)")
        let tab = try run("/usr/bin/python3", ["-c", Self.fishTab, "syncagent resume --state-dir \(stateDir) ", id], user, in: world)
        #expect(tab.stdout.contains(id), "fish drew: \(tab.stdout)\(tab.stderr)")

        // systemd: the unit names the installed binary, passes verify (which also
        // looks up man:syncagent(1)), and lies on the user manager's search path.
        let unit = "\(prefix)/share/systemd/user/syncagent.service"
        let unitText = try String(contentsOfFile: unit, encoding: .utf8)
        #expect(unitText.contains("\nExecStart=\(binary) run\n"))
        #expect(unitText.contains("\nDocumentation=man:syncagent(1) file://\(prefix)/share/doc/syncagent/README.md\n"))
        let verify = try run("/usr/bin/systemd-analyze", ["--user", "verify", unit], user, in: world)
        #expect(verify.status == 0 && !verify.stderr.contains("syncagent"), "\(verify.stderr)")
        let unitPaths = try run("/usr/bin/systemd-analyze", ["--user", "unit-paths"], user, in: world)
        #expect(unitPaths.stdout.split(separator: "\n").contains("\(prefix)/share/systemd/user"), "\(unitPaths.stdout)")

        let uninstall = try make(["uninstall", "PREFIX=\(prefix)"], in: world)
        #expect(uninstall.status == 0, "\(uninstall.stderr)")
        #expect(files(under: prefix) == ["bin/neighbour"])
        #expect(!FileManager.default.fileExists(atPath: prefix + "/share/syncagent"))
        #expect(!FileManager.default.fileExists(atPath: prefix + "/share/doc/syncagent"))
    }

    /// A package build: files staged under DESTDIR, every path inside them the final one.
    @Test func destdirStagesTheFilesForTheirFinalPrefix() throws {
        let world = TempDirectory()
        let stage = world.file("stage")
        let install = try make(["install", "DESTDIR=\(stage)", "PREFIX=/opt/syncagent"], in: world)
        try #require(install.status == 0, "\(install.stdout)\n\(install.stderr)")
        #expect(files(under: stage) == Self.installedFiles.map { "opt/syncagent/" + $0 })
        let unit = try String(contentsOfFile: "\(stage)/opt/syncagent/share/systemd/user/syncagent.service", encoding: .utf8)
        #expect(unit.contains("\nExecStart=/opt/syncagent/bin/syncagent run\n"))

        let uninstall = try make(["uninstall", "DESTDIR=\(stage)", "PREFIX=/opt/syncagent"], in: world)
        #expect(uninstall.status == 0, "\(uninstall.stderr)")
        #expect(files(under: stage) == [])
    }

    @Test func aPrefixWithASpaceIsRefusedBeforeAnythingIsBuilt() throws {
        let world = TempDirectory()
        let install = try make(["install", "PREFIX=\(world.file("my apps"))"], in: world)
        #expect(install.status != 0)
        #expect(install.stderr.contains("PREFIX must be one path, without spaces"), "\(install.stderr)")
        #expect(files(under: world.path).allSatisfy { !$0.hasPrefix("my apps") })
    }
}

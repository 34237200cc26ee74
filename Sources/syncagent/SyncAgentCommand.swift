import ArgumentParser
import Foundation
import Logging
import SyncAgent
import SyncAgentCore

@main
struct SyncAgentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "syncagent",
        abstract: "Background HTTP transfers for the Linux desktop: drop a job file, get the file, get told.",
        discussion: """
            Drop a *.job file into the inbox (or use `syncagent submit`) and the agent downloads it, \
            resumes it after a crash, and posts one desktop notification when everything is done.

            Example:
              syncagent run &
              syncagent submit https://example.com/debian.iso --dest isos/debian.iso
              syncagent status
            """,
        version: SyncAgentVersion.current,
        subcommands: [
            RunCommand.self, SubmitCommand.self, StatusCommand.self, ReplayCommand.self, EventsCommand.self,
            PauseCommand.self, ResumeCommand.self, CancelCommand.self, RetargetCommand.self, ForgetCommand.self, CompactCommand.self,
        ]
    )
}

extension SyncAgentCommand {
    /// ArgumentParser's own errors (a missing value, an unknown flag) come
    /// as one line naming the flag, like every other error (SPEC §3), not
    /// with the usage text; help and version print as usual.
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let word = arguments.first, !word.hasPrefix("-"), !word.isEmpty {
            let names = configuration.subcommands.map { $0._commandName } + ["help"]
            if !names.contains(word) {
                // A mistyped command is named with the one meant, not left an "unexpected argument".
                let meant = Suggestion.closest(to: word, among: names).map { "; did you mean \"\($0)\"?" } ?? ""
                FileHandle.standardError.write(Data("syncagent: \"\(word)\" is not a command\(meant) (see syncagent --help)\n".utf8))
                Foundation.exit(ExitCode.validationFailure.rawValue)
            }
        }
        do {
            var command = try parsed(arguments)
            try command.run()
        } catch {
            let code = exitCode(for: error)
            guard code != .success, !(error is ExitCode) else { exit(withError: error) }
            let words = message(for: error).split(separator: "\n").first.map(String.init) ?? "\(error)"
            FileHandle.standardError.write(Data("syncagent: \(words) (see syncagent --help)\n".utf8))
            Foundation.exit(code.rawValue)
        }
    }

    /// `submit` with many URLs: swift-argument-parser copies its array of
    /// positional values once per value, and 20,000 URLs took 18 s before
    /// one was read. They are taken out first and the rest parsed as usual;
    /// if the split missed one (the parser found a URL of its own), the whole
    /// line is parsed the usual way instead.
    static func parsed(_ arguments: [String]) throws -> ParsableCommand {
        guard let (rest, urls) = SubmitCommand.urlsTakenOut(of: arguments),
              var submit = try parseAsRoot(rest) as? SubmitCommand, submit.urls.isEmpty else {
            return try parseAsRoot(arguments)
        }
        submit.urls = urls
        return submit
    }
}

/// `--config`, `--state-dir`, `--inbox`: every command takes them (SPEC §3).
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Config file (default: $XDG_CONFIG_HOME/syncagent/config.toml).", valueName: "file"))
    var config: String?

    @Option(name: .customLong("state-dir"), help: ArgumentHelp("State directory holding events.sqlite (default: $XDG_STATE_HOME/syncagent).", valueName: "dir"))
    var stateDir: String?

    @Option(name: .long, help: ArgumentHelp("Inbox watched for *.job files (default: $XDG_DATA_HOME/syncagent/inbox).", valueName: "dir"))
    var inbox: String?

    func resolve() throws -> ResolvedConfig {
        do {
            return try ResolvedConfig.load(configFile: config, stateDir: stateDir, inbox: inbox)
        } catch let error as ConfigError {
            // One line naming the file and key, not the usage text: the command line was fine.
            throw fail(error.description)
        } catch let refused as StrictModes.Refused {
            throw fail(refused.description)
        }
    }
}

/// Prints one line on stderr and exits non-zero: the CLI's error shape.
func fail(_ message: String, code: Int32 = 1) -> ExitCode {
    FileHandle.standardError.write(Data("syncagent: \(message)\n".utf8))
    return ExitCode(code)
}

func bootstrapLogging() {
    let level = ProcessInfo.processInfo.environment["SYNCAGENT_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = level
        return handler
    }
}

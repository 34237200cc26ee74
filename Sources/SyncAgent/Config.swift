import Foundation
import SyncAgentCore

public struct ConfigError: Error, CustomStringConvertible {
    public var description: String
}

/// Where everything lives: flags beat config.toml, which beats XDG defaults (SPEC §5).
public struct AgentPaths: Equatable, Sendable {
    public var stateDir: String
    public var inbox: String
    public var downloadDir: String
    /// `more_dirs`, absolute and normalized: more folders a `dest` may name.
    public var moreDirs: [String] = []

    public var eventLog: String { stateDir + "/events.sqlite" }
    public var lockFile: String { stateDir + "/agent.lock" }
}

/// The configuration an invocation runs with, resolved once in `main`.
public struct ResolvedConfig: Sendable {
    public var config: AgentConfig
    public var paths: AgentPaths
    /// The config file read (or looked for, when it does not exist).
    public var file: String

    /// - Parameters:
    ///   - configFile: `--config`; a missing file is an error only when named explicitly.
    ///   - stateDir, inbox: the flags of the same names.
    public static func load(configFile: String?, stateDir: String?, inbox: String?,
                            environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ResolvedConfig {
        let home = environment["HOME"] ?? NSHomeDirectory()
        func xdg(_ variable: String, _ fallback: String) -> String {
            if let value = environment[variable], value.hasPrefix("/") { return value }
            return home + "/" + fallback
        }
        func expand(_ path: String) -> String {
            if path == "~" { return home }
            if path.hasPrefix("~/") { return home + path.dropFirst() }
            if path.hasPrefix("/") { return path }
            return FileManager.default.currentDirectoryPath + "/" + path
        }

        let path = configFile.map(expand) ?? xdg("XDG_CONFIG_HOME", ".config") + "/syncagent/config.toml"
        var config = AgentConfig()
        try StrictModes.checkConfigFile(path)
        if let data = FileManager.default.contents(atPath: path) {
            let bytes = [UInt8](data)
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw ConfigError(description: "\(path): the config file is not UTF-8 text "
                                  + "(the first bad byte is at offset \(UTF8Text.firstInvalidOffset(bytes) ?? 0))")
            }
            do {
                config = try AgentConfig.parse(text)
            } catch let error as KeyError {
                throw ConfigError(description: "\(path): \(error)")
            }
        } else if configFile != nil || FileSystem.exists(path) {
            // Named explicitly, or there but unreadable: never silently the defaults.
            let why: String
            do {
                try Posix.access(path, R_OK)
                why = "it is not a readable file"
            } catch {
                why = Posix.words((error as? SystemError)?.errno ?? EIO)
            }
            throw ConfigError(description: "\(path): cannot read the config file: \(why)"
                              + (configFile != nil ? " (named by --config)" : ""))
        }

        let paths = AgentPaths(
            stateDir: PathRules.normalize(expand(stateDir ?? config.stateDir ?? xdg("XDG_STATE_HOME", ".local/state") + "/syncagent")),
            inbox: PathRules.normalize(expand(inbox ?? config.inbox ?? xdg("XDG_DATA_HOME", ".local/share") + "/syncagent/inbox")),
            downloadDir: PathRules.normalize(expand(config.downloadDir ?? home + "/Downloads")),
            moreDirs: config.moreDirs.map { PathRules.normalize(expand($0)) })
        return ResolvedConfig(config: config, paths: paths, file: path)
    }
}

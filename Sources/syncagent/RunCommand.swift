import ArgumentParser
import Foundation
import Logging
import SyncAgent

struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the agent: replay the log, resume unfinished tasks, take jobs from the inbox.",
        discussion: """
            SIGTERM or SIGINT pauses running transfers and exits 0; the next start resumes them.
            With --exit-when-idle the agent exits once the inbox is empty and nothing is queued
            or running: status 0 if every task of this run finished, 4 if any failed.

            Example:
              syncagent run --exit-when-idle --inbox ~/jobs
            """)

    @OptionGroup var global: GlobalOptions

    @Flag(name: .customLong("exit-when-idle"), help: "Exit once the inbox is empty and no task is queued or running.")
    var exitWhenIdle = false

    func run() throws {
        let resolved = try global.resolve()
        bootstrapLogging()
        let status: Int32
        do {
            let agent = try Agent(config: resolved.config, paths: resolved.paths, configFile: global.config,
                                  logger: Logger(label: "syncagent"))
            status = try agent.run(exitWhenIdle: exitWhenIdle)
        } catch let error as AgentAlreadyRunning {
            throw fail(error.description, code: 3)
        } catch {
            throw fail("\(error)")
        }
        if status != 0 { throw ExitCode(status) }
    }
}

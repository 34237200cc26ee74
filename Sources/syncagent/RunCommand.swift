import ArgumentParser
import Foundation
import Logging
import SyncAgent

struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the agent: replay the log, resume unfinished tasks, take jobs from the inbox.",
        discussion: """
            SIGTERM or SIGINT pauses running transfers and exits 0; the next start resumes them. \
            With --exit-when-idle the agent exits once the inbox is empty and nothing is queued \
            or running: status 0 if every task of this run finished, 4 if any failed.

            Example:
              syncagent run --exit-when-idle --inbox ~/jobs
            """)

    @OptionGroup var global: GlobalOptions

    @Flag(name: .customLong("exit-when-idle"), help: "Exit once the inbox is empty and no task is queued or running.")
    var exitWhenIdle = false

    func run() throws {
        // Blocked at once: a SIGHUP during start-up (a reload racing a
        // service start) would otherwise kill the agent before its signalfd exists.
        do {
            try Posix.block(signals: [SIGHUP, SIGTERM, SIGINT])
        } catch {
            throw fail("cannot block stop signals: \(Posix.words((error as? SystemError)?.errno ?? EINVAL))")
        }
        let resolved = try global.resolve()
        bootstrapLogging()
        let logger = Logger(label: "syncagent")
        if !ProcessMemory.returnLargeBlocksPromptly() {
            logger.warning("malloc kept its own threshold for giving memory back (mallopt refused)")
        }
        do {
            let agent = try Agent(config: resolved.config, paths: resolved.paths, configFile: global.config,
                                  logger: logger)
            let status = try agent.run(exitWhenIdle: exitWhenIdle)
            // Stopped, its log closed: exit rather than free every task one
            // by one (5% of a start-and-stop on a log of 10,000 tasks).
            withExtendedLifetime(agent) { Glibc.exit(status) }
        } catch let error as AgentAlreadyRunning {
            throw fail(error.description, code: 3)
        } catch {
            throw fail("\(error)")
        }
    }
}

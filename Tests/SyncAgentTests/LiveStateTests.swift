import Foundation
import Logging
import Testing
import TestSupport
@testable import SyncAgent
@testable import SyncAgentCore

@Suite("The live agent's state is the replay of its log", .serialized)
struct LiveStateTests {
    @Test func replayOfTheRecordedLogGivesTheStateTheAgentHeld() throws {
        let directory = TempDirectory()
        let nginx = try Nginx(in: directory)
        let paths = AgentPaths(stateDir: directory.file("state"), inbox: directory.file("inbox"),
                               downloadDir: directory.file("downloads"))
        try FileManager.default.createDirectory(atPath: paths.inbox, withIntermediateDirectories: true)
        for index in 0..<6 {
            try nginx.serve("f\(index).bin", size: 50_000 * (index + 1))
            try "url = \"\(nginx.url("f\(index).bin"))\"\npriority = \(index % 3)\n"
                .write(toFile: "\(paths.inbox)/j\(index).job", atomically: true, encoding: .utf8)
        }
        try "url = \"\(nginx.url("absent"))\"\n".write(toFile: "\(paths.inbox)/missing.job", atomically: true, encoding: .utf8)

        let agent = try Agent(config: AgentConfig(), paths: paths, logger: Logger(label: "test"))
        let exit = try agent.run(exitWhenIdle: true)
        #expect(exit == Agent.exitSomeFailed)

        let replayed = try EventStore(readingFrom: paths.eventLog).replay()
        #expect(replayed == agent.state)
        #expect(replayed.tasks.count == 7)
        #expect(replayed.tasks.filter { $0.phase == .finished }.count == 6)
        #expect(replayed.tasks.filter { $0.phase == .failed }.count == 1)
    }
}

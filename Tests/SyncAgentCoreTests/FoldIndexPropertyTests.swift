import Foundation
import Testing
@testable import SyncAgentCore

/// The fold keeps indexes (run queue, running counts per host, active counts)
/// so the agent never scans every task. Whatever the event sequence, they
/// must equal what a full scan computes.
@Suite("Fold indexes under random event sequences")
struct FoldIndexPropertyTests {
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            return z ^ (z >> 27)
        }
    }

    func expectIndexesMatchAFullScan(_ state: AgentState) {
        let queued = state.tasks.filter { $0.phase == .queued }
            .sorted { ($0.spec.priority, -$0.createdSeq) > ($1.spec.priority, -$1.createdSeq) }
        #expect(state.runQueue.entries.map { state.tasks[$0.position].id } == queued.map(\.id))
        #expect(state.runQueue.entries.map(\.notBeforeMs) == queued.map(\.notBeforeMs))
        let running = state.tasks.filter { $0.phase == .running }
        #expect(state.runningCount == running.count)
        #expect(state.runningByHost == Dictionary(grouping: running, by: \.hostKey).mapValues(\.count))
        #expect(state.activeCount == state.tasks.filter { $0.phase.isActive }.count)
    }

    @Test(arguments: 1...20)
    func indexesAlwaysMatch(seed: UInt64) {
        var random = Generator(state: seed)
        var log = LogBuilder()
        let hosts = ["http://a.test", "http://b.test:8080", "https://c.test"]
        var ids: [String] = []
        for step in 0..<300 {
            if ids.isEmpty || Int.random(in: 0..<6, using: &random) == 0 {
                let id = "t\(step)"
                ids.append(id)
                log.create(id, url: "\(hosts.randomElement(using: &random)!)/\(id)", priority: Int.random(in: 0...2, using: &random),
                           notBeforeMs: Bool.random(using: &random) ? nil : Int64.random(in: 0...2_000_000, using: &random))
                continue
            }
            let id = ids.randomElement(using: &random)!
            let url = "\(hosts.randomElement(using: &random)!)/\(id)"
            let bodies: [EventBody] = [
                .started(Started(attempt: 1, offset: 0, url: url)),
                .progressed(Progressed(bytes: 10)),
                .paused(Paused(bytes: 10, reason: .user)),
                .resumed(Resumed(bytes: 10, reason: "r")),
                .retrying(Retrying(attempt: 1, reason: "503", delayMs: 1000, bytes: 10)),
                .redirected(Redirected(from: log.state[id]!.currentURL, to: url, status: 302)),
                // A running task moved to another host gives back its old host's slot.
                .retargeted(Retargeted(from: log.state[id]!.currentURL, to: url, bytes: 10)),
                .finished(Finished(bytes: 10, dest: "/d/\(id)")),
                .failed(Failed(reason: "x", code: .other("x"), bytes: 0)),
                .cancelled(Cancelled(bytes: 0)),
            ]
            _ = log.add(bodies.randomElement(using: &random)!, task: id)
            expectIndexesMatchAFullScan(log.state)
        }
        // The live fold and a replay from scratch agree, indexes included.
        #expect(AgentState.replay(log.events) == log.state)
    }
}

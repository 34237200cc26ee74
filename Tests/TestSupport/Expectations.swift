import Foundation
import Testing

/// `replay --verify` after a hostile run: the disk agrees with the log.
public func expectVerifyClean(_ harness: AgentHarness, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let verify = try harness.run(["replay", "--verify"])
    #expect(verify.status == 0, "replay --verify: \(verify.stdout.suffix(1500)) \(verify.stderr)", sourceLocation: sourceLocation)
}

extension AgentHarness {
    /// Starts an agent that exits once idle and expects it to end with `status` within `seconds`.
    public func runUntilIdle(expecting status: Int32 = 0, seconds: Double = 120,
                             sourceLocation: SourceLocation = #_sourceLocation) throws {
        let agent = try startAgent(exitWhenIdle: true)
        #expect(agent.wait(seconds: seconds) == status, "\(agent.stderr.suffix(3000))", sourceLocation: sourceLocation)
    }
}

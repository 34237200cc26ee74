import Foundation
import Testing

/// `replay --verify` after a hostile run: the disk agrees with the log.
public func expectVerifyClean(_ harness: AgentHarness, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let verify = try harness.run(["replay", "--verify"])
    #expect(verify.status == 0, "replay --verify: \(verify.stdout.suffix(1500)) \(verify.stderr)", sourceLocation: sourceLocation)
}

import Foundation
import Logging
import Synchronization
import SyncAgentCore

/// What the RPC server's threads share: the bounds on what clients may
/// ask (calls with the secret a second, guesses a second, requests
/// waiting for the agent's loop) and the way to the loop. Each lock is
/// held for a counter's update, never across a call.
final class RPCGate: Sendable {
    let methods: RPCMethods
    let logger: Logger
    /// Requests that need the agent's state go here; the loop drains it.
    let mailbox: WorkerResults<RPCJob>

    private struct Counters {
        var calls = RPCRateLimit.calls
        var untrusted = RPCRateLimit.untrusted
        var waiting = 0
        /// Refusals not yet logged, and when the last log line was written.
        var unloggedRefusals = 0
        var lastRefusalLogMs: Int64?
    }
    private let counters = Mutex(Counters())

    /// Requests handed to the loop and not yet answered, at most.
    static let maximumWaiting = 256

    init(methods: RPCMethods, logger: Logger) throws {
        self.methods = methods
        self.logger = logger
        mailbox = try WorkerResults()
    }

    /// What a request body comes to: answered here when it needs nothing
    /// of the agent's state, else handed to the loop, which calls `reply`.
    /// A request with guesses (calls that lack the secret a method needs)
    /// is answered when the bucket of guesses has room for them (`later`
    /// waits that long): guessing costs time, and calls with the secret
    /// never pay for it, nor calls that need none.
    /// Returns how the request's calls were counted.
    @discardableResult
    func handle(_ body: some Collection<UInt8>, peer: String,
                later: @escaping @Sendable (_ ms: Int64, _ work: @escaping @Sendable () -> Void) -> Void,
                reply: @escaping @Sendable ([RPCResponse], _ isBatch: Bool) -> Void) -> RPCAdmission {
        let nowMs = Posix.monotonicMs
        let request = RPCRequest.parse(body)
        let calls = request.calls
        let isBatch: Bool
        if case .batch = request { isBatch = true } else { isBatch = false }
        let admission = methods.admission(of: request)
        let (admitted, waitMs): (Bool, Int64) = counters.withLock { counters in
            let waitMs = admission.untrusted > 0 ? counters.untrusted.delay(Double(admission.untrusted), nowMs: nowMs) : 0
            return (admission.trusted == 0 || counters.calls.take(Double(admission.trusted), nowMs: nowMs), waitMs)
        }
        let answer: @Sendable ([RPCResponse], Bool) -> Void
        if waitMs > 0 {
            answer = { responses, isBatch in later(waitMs) { reply(responses, isBatch) } }
        } else {
            answer = reply
        }
        guard admitted else {
            let error = RPCError("Too many requests: try again in a moment.")
            answer(calls.map { RPCResponse(id: Self.id(of: $0), .failure(error)) }, isBatch)
            return admission
        }
        var answers: [RPCResponse] = []
        var needsState = false
        for element in calls {
            switch element {
            case .failure(let failed):
                answers.append(RPCResponse(id: failed.id, .failure(failed.error)))
            case .success(let call):
                if let outcome = methods.statelessAnswer(call) {
                    answers.append(RPCResponse(id: call.id, outcome))
                    if case .failure(let error) = outcome, error == .unauthorized { refused(peer: peer, nowMs: nowMs) }
                } else {
                    needsState = true
                }
            }
        }
        guard needsState else {
            answer(answers, isBatch)
            return admission
        }
        let handed = counters.withLock { counters in
            guard counters.waiting < Self.maximumWaiting else { return false }
            counters.waiting += 1
            return true
        }
        guard handed else {
            let error = RPCError("The agent is busy: try again in a moment.")
            answer(calls.map { RPCResponse(id: Self.id(of: $0), .failure(error)) }, isBatch)
            return admission
        }
        mailbox.post(RPCJob(request: request, peer: peer) { [self] responses in
            counters.withLock { $0.waiting -= 1 }
            answer(responses, isBatch)
        })
        return admission
    }

    /// A call refused for its token: logged (without the token) at most
    /// once a second, with how many there were.
    func refused(peer: String, nowMs: Int64) {
        let report: Int? = counters.withLock { counters in
            counters.unloggedRefusals += 1
            guard counters.lastRefusalLogMs.map({ nowMs - $0 >= 1000 }) ?? true else { return nil }
            defer { counters.unloggedRefusals = 0; counters.lastRefusalLogMs = nowMs }
            return counters.unloggedRefusals
        }
        if let report {
            logger.warning("RPC call refused: no token or a wrong one", metadata: ["rpc.peer": "\(peer)", "rpc.refused": "\(report)"])
        }
    }

    private static func id(of element: Result<RPCCall, RPCFailedCall>) -> JSONValue {
        switch element {
        case .success(let call): call.id
        case .failure(let failed): failed.id
        }
    }
}

/// A request waiting for the agent's loop, and how to answer it (from any thread).
struct RPCJob: Sendable {
    var request: RPCRequest
    var peer: String
    var reply: @Sendable ([RPCResponse]) -> Void
}

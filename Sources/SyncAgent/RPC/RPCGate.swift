import Foundation
import Logging
import Synchronization
import SyncAgentCore

/// What the RPC server's threads share: the bounds on what clients may
/// ask (calls a second, refused tokens a second, connections, requests
/// waiting for the agent's loop) and the way to the loop. Each lock is
/// held for a counter's update, never across a call.
final class RPCGate: Sendable {
    let methods: RPCMethods
    let logger: Logger
    /// Requests that need the agent's state go here; the loop drains it.
    let mailbox: WorkerResults<RPCJob>

    private struct Counters {
        var calls = RPCRateLimit.calls
        var refusals = RPCRateLimit.refusals
        var connections = 0
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

    func openConnection() -> Bool {
        counters.withLock { counters in
            guard counters.connections < RPCHTTPPolicy.maximumConnections else { return false }
            counters.connections += 1
            return true
        }
    }

    func closeConnection() { counters.withLock { $0.connections -= 1 } }

    /// What a request body comes to: answered here when it needs nothing
    /// of the agent's state, else handed to the loop, which calls `reply`.
    func handle(_ body: some Collection<UInt8>, peer: String, reply: @escaping @Sendable ([RPCResponse], _ isBatch: Bool) -> Void) {
        let nowMs = Posix.monotonicMs
        let request = RPCRequest.parse(body)
        let calls = request.calls
        let isBatch: Bool
        if case .batch = request { isBatch = true } else { isBatch = false }
        // A batch costs a call per call in it, a refused guess ten, as long as guesses keep coming.
        let admitted = counters.withLock { counters in
            counters.refusals.allows(nowMs: nowMs) && counters.calls.take(Double(max(1, calls.count)), nowMs: nowMs)
        }
        guard admitted else {
            let error = RPCError("Too many requests: try again in a moment.")
            return reply(calls.map { RPCResponse(id: Self.id(of: $0), .failure(error)) }, isBatch)
        }
        var answers: [RPCResponse] = []
        var needsState = false
        for element in calls {
            switch element {
            case .failure(let failed):
                answers.append(RPCResponse(id: failed.id, .failure(failed.error)))
            case .success(let call):
                if call.method == RPCMethod.multicall.rawValue {
                    needsState = true
                } else if let answer = methods.statelessAnswer(call) {
                    answers.append(RPCResponse(id: call.id, answer))
                    if case .failure(let error) = answer, error == .unauthorized { refused(peer: peer, nowMs: nowMs) }
                } else {
                    needsState = true
                }
            }
        }
        guard needsState else { return reply(answers, isBatch) }
        let handed = counters.withLock { counters in
            guard counters.waiting < Self.maximumWaiting else { return false }
            counters.waiting += 1
            return true
        }
        guard handed else {
            let error = RPCError("The agent is busy: try again in a moment.")
            return reply(calls.map { RPCResponse(id: Self.id(of: $0), .failure(error)) }, isBatch)
        }
        mailbox.post(RPCJob(request: request, peer: peer) { [self] responses in
            counters.withLock { $0.waiting -= 1 }
            reply(responses, isBatch)
        })
    }

    /// A call refused for its token: counted against the refusals a second,
    /// and logged (without the token) at most once a second, with how many.
    func refused(peer: String, nowMs: Int64) {
        let report: Int? = counters.withLock { counters in
            _ = counters.refusals.take(nowMs: nowMs)
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

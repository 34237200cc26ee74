/// An error as aria2 answers it: `{"code": N, "message": "…"}`. aria2
/// gives code 1 to every failure of a method (a GID not found, a bad
/// option, a wrong token) and JSON-RPC's own codes to a request it cannot read.
public struct RPCError: Error, Equatable, Sendable {
    public var code: Int64
    public var message: String

    public init(code: Int64 = 1, _ message: String) {
        self.code = code
        self.message = message
    }

    public static let parseError = RPCError(code: -32700, "Parse error.")
    public static let invalidRequest = RPCError(code: -32600, "Invalid Request.")
    public static let invalidParams = RPCError(code: -32602, "Invalid params.")
    public static let unauthorized = RPCError("Unauthorized")
    /// Never sent: a call that must wait for the agent's loop, said while answering without it.
    static let needsState = RPCError(code: 0, "")

    public static func noSuchMethod(_ name: String) -> RPCError { RPCError("No such method: \(name)") }
    public static func gidNotFound(_ gid: String) -> RPCError { RPCError("GID \(gid) is not found") }
    public static func missing(_ position: Int) -> RPCError { RPCError("The parameter at \(position) is required but missing.") }
    public static func wrongType(_ position: Int) -> RPCError { RPCError("The parameter at \(position) has wrong type.") }

    public var json: JSONValue { .object(["code": .int(code), "message": .string(message)]) }

    /// The HTTP status aria2 sends with a lone error: 500 for a body it could
    /// not read as JSON or params that are not an array, else 400.
    public var httpStatus: Int { code == -32700 || code == -32602 ? 500 : 400 }
}

/// One method call of a request: `{"jsonrpc": "2.0", "id": …, "method": …, "params": […]}`.
public struct RPCCall: Equatable, Sendable {
    public var id: JSONValue
    public var method: String
    public var params: [JSONValue]

    public init(id: JSONValue, method: String, params: [JSONValue]) {
        self.id = id
        self.method = method
        self.params = params
    }
}

/// What a request body holds: one call or a batch (JSON-RPC 2.0 §6), each
/// element read on its own, so one bad call in a batch spoils only its answer.
public enum RPCRequest: Equatable, Sendable {
    case single(Result<RPCCall, RPCFailedCall>)
    case batch([Result<RPCCall, RPCFailedCall>])

    /// The most calls one request may make (a batch, or one `system.multicall`).
    public static let maximumCalls = 1000

    public var calls: [Result<RPCCall, RPCFailedCall>] {
        switch self {
        case .single(let call): [call]
        case .batch(let calls): calls
        }
    }

    /// Reads a body. A body that is no JSON is the one error without an id.
    public static func parse<Bytes: Collection<UInt8>>(_ body: Bytes) -> RPCRequest {
        let document: JSONValue
        var keysTwice = Set<Int>()
        do {
            document = try JSONValue.parse(body, callsWithKeysTwice: &keysTwice)
        } catch {
            return .single(.failure(RPCFailedCall(id: .null, error: .parseError)))
        }
        switch document {
        case .array(let elements):
            // aria2 leaves out what is not an object; so do we (a reply to nothing is no reply).
            let calls = elements.indices.filter { elements[$0].object != nil }
            guard calls.count <= maximumCalls else {
                return .single(.failure(RPCFailedCall(id: .null, error: RPCError("A batch may hold at most \(maximumCalls) calls."))))
            }
            return .batch(calls.map { call(elements[$0], namesAKeyTwice: keysTwice.contains($0)) })
        case .object:
            return .single(call(document, namesAKeyTwice: keysTwice.contains(-1)))
        default:
            return .single(.failure(RPCFailedCall(id: .null, error: .invalidRequest)))
        }
    }

    static func call(_ object: JSONValue, namesAKeyTwice: Bool = false) -> Result<RPCCall, RPCFailedCall> {
        let id = object["id"] ?? .null
        guard let method = object["method"]?.string, object["id"] != nil, !namesAKeyTwice else {
            return .failure(RPCFailedCall(id: id, error: .invalidRequest))
        }
        switch object["params"] {
        case nil: return .success(RPCCall(id: id, method: method, params: []))
        case .array(let params)?: return .success(RPCCall(id: id, method: method, params: params))
        default: return .failure(RPCFailedCall(id: id, error: .invalidParams))
        }
    }
}

/// A call that could not be read, with the id to answer it under.
public struct RPCFailedCall: Error, Equatable, Sendable {
    public var id: JSONValue
    public var error: RPCError
}

/// The answer to one call.
public struct RPCResponse: Equatable, Sendable {
    public var id: JSONValue
    public var outcome: Result<JSONValue, RPCError>

    public init(id: JSONValue, _ outcome: Result<JSONValue, RPCError>) {
        self.id = id
        self.outcome = outcome
    }

    public var json: JSONValue {
        switch outcome {
        case .success(let result): .object(["id": id, "jsonrpc": "2.0", "result": result])
        case .failure(let error): .object(["id": id, "jsonrpc": "2.0", "error": error.json])
        }
    }

    /// A request's answer body and HTTP status: a batch is always 200, as aria2 sends it.
    public static func body(_ responses: [RPCResponse], batch: Bool) -> (status: Int, bytes: [UInt8]) {
        if batch { return (200, JSONValue.array(responses.map(\.json)).serialized) }
        guard let response = responses.first else { return (200, JSONValue.array([]).serialized) }
        switch response.outcome {
        case .success: return (200, response.json.serialized)
        case .failure(let error): return (error.httpStatus, response.json.serialized)
        }
    }
}

/// A notification pushed over WebSocket: a call without an id.
public struct RPCNotification: Equatable, Sendable {
    public enum Method: String, CaseIterable, Sendable {
        case start = "aria2.onDownloadStart"
        case pause = "aria2.onDownloadPause"
        case stop = "aria2.onDownloadStop"
        case complete = "aria2.onDownloadComplete"
        case error = "aria2.onDownloadError"
        /// Never sent (no BitTorrent here), but listed as aria2 lists it.
        case btComplete = "aria2.onBtDownloadComplete"
    }

    public var method: Method
    public var gid: String

    public init(_ method: Method, gid: String) {
        self.method = method
        self.gid = gid
    }

    public var json: JSONValue {
        .object(["jsonrpc": "2.0", "method": .string(method.rawValue), "params": .array([.object(["gid": .string(gid)])])])
    }
}

import Foundation

/// The `data` column: one JSON object per event, snake_case keys.
/// Kept apart from the event types so the log's wire form lives in one place.
public enum EventCoding {
    public struct DecodingFailure: Error, CustomStringConvertible {
        public var seq: Int64
        public var type: String
        public var underlying: String
        public var description: String { "event \(seq) (\(type)): \(underlying)" }
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    private static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return decoder
    }()

    public static func data(of body: EventBody) -> String {
        let bytes: Data
        do {
            switch body {
            case .created(let p): bytes = try encoder.encode(p)
            case .started(let p): bytes = try encoder.encode(p)
            case .progressed(let p): bytes = try encoder.encode(p)
            case .paused(let p): bytes = try encoder.encode(p)
            case .resumed(let p): bytes = try encoder.encode(p)
            case .redirected(let p): bytes = try encoder.encode(p)
            case .retrying(let p): bytes = try encoder.encode(p)
            case .finished(let p): bytes = try encoder.encode(p)
            case .failed(let p): bytes = try encoder.encode(p)
            case .cancelled(let p): bytes = try encoder.encode(p)
            case .rejected(let p): bytes = try encoder.encode(p)
            case .agentStarted(let p): bytes = try encoder.encode(p)
            case .agentStopped(let p): bytes = try encoder.encode(p)
            case .batchFinished(let p): bytes = try encoder.encode(p)
            case .notified(let p): bytes = try encoder.encode(p)
            }
        } catch {
            // Every payload is plain strings and numbers; encoding cannot fail.
            preconditionFailure("event payload failed to encode: \(error)")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    public static func body(type: String, data: String, seq: Int64 = 0) throws -> EventBody {
        let json = Data(data.utf8)
        func decode<T: Decodable>(_: T.Type) throws -> T {
            do { return try decoder.decode(T.self, from: json) } catch {
                throw DecodingFailure(seq: seq, type: type, underlying: String(describing: error))
            }
        }
        switch type {
        case "created": return .created(try decode(TaskSpec.self))
        case "started": return .started(try decode(Started.self))
        case "progressed": return .progressed(try decode(Progressed.self))
        case "paused": return .paused(try decode(Paused.self))
        case "resumed": return .resumed(try decode(Resumed.self))
        case "redirected": return .redirected(try decode(Redirected.self))
        case "retrying": return .retrying(try decode(Retrying.self))
        case "finished": return .finished(try decode(Finished.self))
        case "failed": return .failed(try decode(Failed.self))
        case "cancelled": return .cancelled(try decode(Cancelled.self))
        case "rejected": return .rejected(try decode(Rejected.self))
        case "agent_started": return .agentStarted(try decode(AgentStarted.self))
        case "agent_stopped": return .agentStopped(try decode(AgentStopped.self))
        case "batch_finished": return .batchFinished(try decode(BatchFinished.self))
        case "notified": return .notified(try decode(Notified.self))
        default:
            throw DecodingFailure(seq: seq, type: type, underlying: "unknown event type")
        }
    }
}

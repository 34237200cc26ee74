import SyncAgentCore

/// Builds event sequences the way the agent records them: seq numbered, time moving on.
struct LogBuilder {
    private(set) var events: [Event] = []
    var nowMs: Int64 = 1_000_000

    mutating func add(_ body: EventBody, task: String? = nil, afterMs: Int64 = 10) -> Event {
        nowMs += afterMs
        let event = Event(seq: Int64(events.count + 1), atMs: nowMs, task: task, body: body)
        events.append(event)
        return event
    }

    mutating func create(_ id: String, url: String = "http://127.0.0.1:8080/\(UUID())", batch: String? = nil,
                         notify: NotifyMode = .batch, priority: Int = 0, notBeforeMs: Int64? = nil) {
        var spec = TaskSpec(url: url, dest: "/downloads/\(id).bin", priority: priority, batch: batch, notify: notify)
        spec.notBeforeMs = notBeforeMs
        spec.source = JobSource(file: "\(id).job", identity: "identity-\(id)")
        _ = add(.created(spec), task: id)
    }

    mutating func runToEnd(_ id: String, bytes: Int64 = 100) {
        _ = add(.started(Started(attempt: 1, offset: 0, url: "http://127.0.0.1:8080/\(id)")), task: id)
        _ = add(.progressed(Progressed(bytes: bytes, total: bytes, etag: "\"e-\(id)\"")), task: id)
        _ = add(.finished(Finished(bytes: bytes, dest: "/downloads/\(id).bin", sha256: "ab")), task: id)
    }

    var state: AgentState { AgentState.replay(events) }
}

import Foundation

import Foundation
import SyncAgent
import SyncAgentCore

// Writes a realistic event log for the replay benchmark:
//   syncagent-loggen PATH EVENTS [TASKS]
// Each task: created, started, progressed…, finished — the mix a busy agent records.

let arguments = CommandLine.arguments
guard arguments.count >= 3, let total = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: syncagent-loggen PATH EVENTS [TASKS]\n".utf8))
    exit(2)
}
let path = arguments[1]
let taskCount = arguments.count > 3 ? Int(arguments[3]) ?? 10_000 : 10_000
let perTask = max(4, total / taskCount)
/// Appends events in batches of 10,000, numbering and timing them.
struct LogWriter {
    let store: EventStore
    var seq: Int64
    var atMs: Int64 = 1_795_000_000_000
    var batch: [Event] = []

    init(path: String) throws {
        store = try EventStore(writingTo: path)
        seq = store.lastSeq
        batch.reserveCapacity(10_000)
    }

    mutating func add(_ body: EventBody, task: String?) throws {
        seq += 1
        atMs += 7
        batch.append(Event(seq: seq, atMs: atMs, task: task, body: body))
        if batch.count == 10_000 { try flush() }
    }

    mutating func flush() throws {
        try store.append(batch)
        batch.removeAll(keepingCapacity: true)
    }
}

var log = try LogWriter(path: path)
try log.add(.agentStarted(AgentStarted(pid: 1, version: SyncAgentVersion.current)), task: nil)
// Every task: created, started, progressed × (perTask − 3), finished.
let tasks = max(1, (total - 4 + perTask - 1) / perTask)
for task in 0..<tasks {
    let id = String(format: "t%06d", task)
    let url = "http://127.0.0.1:8080/files/\(id).bin"
    let size: Int64 = 64 << 20
    let spec = TaskSpec(url: url, dest: "/nonexistent/bench/\(id).bin", priority: task % 3,
                        headers: [Header(name: "Authorization", value: "Bearer x")],
                        source: JobSource(file: "\(id).job", identity: "0:\(task):0:bench"))
    try log.add(.created(spec), task: id)
    try log.add(.started(Started(attempt: 1, offset: 0, url: url)), task: id)
    let steps = perTask - 3
    for step in 0..<steps {
        let bytes = size * Int64(step + 1) / Int64(steps + 1)
        try log.add(.progressed(Progressed(bytes: bytes, total: size, etag: step == 0 ? "\"abc-\(task)\"" : nil)), task: id)
    }
    try log.add(.finished(Finished(bytes: size, dest: "/nonexistent/bench/\(id).bin", sha256: String(repeating: "a", count: 64))), task: id)
}
// A real log ends its busy day announced and notified.
let ids = (0..<tasks).map { String(format: "t%06d", $0) }
try log.add(.batchFinished(BatchFinished(batch: nil, finished: ids, failed: [])), task: nil)
try log.add(.notified(Notified(batch: nil, summary: "\(tasks) transfers finished", delivered: true)), task: nil)
try log.add(.agentStopped(AgentStopped(reason: "idle")), task: nil)
try log.flush()
print("wrote \(log.seq) events for \(tasks) tasks to \(path)")

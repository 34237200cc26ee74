import Foundation
import SyncAgentCore

/// A random but plausible log: every event type, every field the fold
/// keeps (ranges, redirects, HLS families, batches and their notices,
/// hooks, rejections, forgotten tasks), in orders a real agent or a
/// damaged log could write. For properties that must hold for any log.
public struct RandomLog {
    var random: SplitMix64
    private(set) var events: [Event] = []
    private var nowMs: Int64 = 1_000_000
    /// The fold so far, kept as events are added (a replay per step would make a long log quadratic).
    private(set) var state = AgentState()
    private var ids: [String] = []
    private var parents: [String] = []

    init(seed: UInt64) { random = SplitMix64(seed: seed) }

    private mutating func add(_ body: EventBody, task: String? = nil, afterMs: Int64 = 10) {
        nowMs += afterMs
        let event = Event(seq: Int64(events.count + 1), atMs: nowMs, task: task, body: body)
        events.append(event)
        state.apply(event)
    }

    private mutating func pick<T>(_ items: [T]) -> T { items.randomElement(using: &random)! }
    private mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &random) < percent }
    private mutating func number(_ range: ClosedRange<Int64>) -> Int64 { Int64.random(in: range, using: &random) }

    private static func digest(_ place: Int) -> SHA256Value {
        SHA256Value(bytes: (0..<32).map { UInt8(truncatingIfNeeded: place &* 31 &+ $0) })!
    }

    private var hosts: [String] { ["http://a.test", "http://b.test:8080", "https://c.test"] }

    mutating func create(parent: String? = nil) {
        let id = parent.map { "\($0).seg\(ids.count)" } ?? "t\(ids.count)"
        let url = "\(pick(hosts))/\(id)"
        var spec = TaskSpec(url: url, kind: .download, dest: "/downloads/\(id).bin", priority: Int(number(0...2)),
                            headers: chance(30) ? [Header(name: "Authorization", value: "Bearer \(id)")] : [],
                            batch: chance(30) ? pick(["nightly", "music"]) : nil, notify: pick([.batch, .each, .none]),
                            retries: chance(20) ? Int(number(0...5)) : nil, maxSpeed: chance(10) ? 1000 : nil,
                            notBeforeMs: chance(20) ? nowMs + number(0...5_000) : nil,
                            source: chance(80) ? JobSource(file: "\(id).job", identity: "ident-\(id)") : nil,
                            parent: parent, connections: chance(20) ? 4 : nil, allowMetered: chance(10) ? false : nil)
        if parent == nil, chance(10) {
            spec.kind = .hls
            spec.hls = HLSOptions(variant: "best", output: pick([.directory, .file]), maxDurationS: chance(50) ? 60 : nil)
            parents.append(id)
        }
        // Now and then a destination another task has: the fold must keep both straight.
        if chance(5), let other = ids.isEmpty ? nil : pick(ids) { spec.dest = state[other]?.spec.dest }
        ids.append(id)
        add(.created(spec), task: id, afterMs: number(1...50))
    }

    mutating func step() {
        if ids.isEmpty || chance(12) { create(); return }
        if chance(4) { agentLevel(); return }
        let id = pick(ids)
        let url = "\(pick(hosts))/\(id)"
        let bytes = number(0...5_000)
        let body: EventBody
        switch number(0...13) {
        case 0, 1: body = .started(Started(attempt: Int(number(1...4)), offset: chance(50) ? 0 : bytes, url: url))
        case 2, 3:
            let ranges: [ByteSpan]? = chance(25) ? [ByteSpan(0, bytes / 2), ByteSpan(bytes, bytes + 100)] : nil
            // The chains of what the claim holds (sometimes more than it holds: the fold keeps only what it vouches
            // for). Chosen by the event's place, not the random stream: the logs stay those the seeds always made.
            let place = events.count
            let digests: [SpanDigest]? = place % 5 < 3
                ? (ranges ?? [ByteSpan(0, bytes)]).map { SpanDigest(from: $0.start, to: $0.end + (place % 7 == 0 ? 7 : 0),
                                                                      sha256: Self.digest(place)) }
                : nil
            body = .progressed(Progressed(bytes: ranges.map { $0.reduce(0) { $0 + $1.length } } ?? bytes, total: chance(70) ? 10_000 : nil,
                                          etag: chance(30) ? "\"e\(number(0...3))\"" : nil,
                                          lastModified: chance(10) ? "Sun, 22 Nov 2026 10:00:00 GMT" : nil,
                                          restartReason: chance(5) ? "the file changed" : nil, ranges: ranges,
                                          fallback: chance(5) ? "no ranges" : nil, digests: digests,
                                          mismatch: place % 31 == 0 ? "bytes 0-10 do not match" : nil))
        case 4: body = .paused(Paused(bytes: bytes, reason: pick([.user, .agentStopping, .offline, .metered])))
        case 5: body = .resumed(Resumed(bytes: bytes, reason: "r"))
        case 6: body = .retrying(Retrying(attempt: Int(number(1...4)), reason: "503", delayMs: number(0...3_000), bytes: bytes))
        case 7: body = .redirected(Redirected(from: state[id]?.currentURL ?? url, to: url, status: 302))
        case 8: body = .finished(Finished(bytes: bytes, dest: chance(90) ? "/downloads/\(id).bin" : nil, sha256: chance(30) ? "ab" : nil,
                                          status: chance(20) ? 200 : nil, skipped: chance(5) ? "exists" : nil,
                                          modifiedNs: chance(50) ? number(1...1_000_000) : nil, unchanged: chance(10) ? true : nil))
        case 9: body = .failed(Failed(reason: "HTTP 404", code: .http(404), bytes: bytes))
        case 10: body = .cancelled(Cancelled(bytes: bytes))
        case 11: body = .forgotten(Forgotten())
        case 12:
            guard let parent = parents.isEmpty ? nil : pick(parents) else { create(); return }
            create(parent: parent)
            let child = ids.last!
            let entry = HLSEntry(child: child, durationMs: number(1_000...4_000), sequence: number(0...100),
                                 discontinuity: chance(10), keyChild: chance(20) ? child : nil, iv: chance(20) ? "00ff" : nil)
            add(.expanded(Expanded(playlist: "\(pick(hosts))/\(parent).m3u8", targetDurationMs: 4_000, ended: chance(30),
                                           entries: [entry])), task: parent, afterMs: number(1...50))
            return
        default: body = .hookStarted(HookStarted(hook: .taskEnd, program: "/bin/true"))
        }
        add(body, task: id, afterMs: number(1...3_000))
    }

    private mutating func agentLevel() {
        switch number(0...7) {
        case 0: add(.agentStarted(AgentStarted(pid: Int32(number(2...9_999)), version: "1.0", hooks: chance(50) ? ["task_end", "batch_end"] : [])))
        case 1: add(.agentStopped(AgentStopped(reason: "SIGTERM")))
        case 2:
            let drained = Notices.drainedBatches(in: state)
            for batch in drained { add(.batchFinished(batch)) }
            // A damaged or older log may announce a batch still running: the fold must take it as it comes.
            if drained.isEmpty, let (key, ended) = state.endedSinceNotice.min(by: { $0.key < $1.key }) {
                add(.batchFinished(BatchFinished(batch: key.name, finished: ended, failed: [])))
            }
        case 3:
            if let key = state.owedNotices.keys.min() {
                add(.notified(Notified(batch: key.name, summary: "done", delivered: chance(80))))
            } else if let id = state.owedOwnNotices.min() {
                add(.notified(Notified(batch: nil, summary: "done", delivered: true)), task: id)
            }
        case 4: add(.rejected(Rejected(file: "bad\(number(0...99)).job", error: "key \"url\": is missing", identity: chance(50) ? "r\(number(0...99))" : nil)))
        case 5: add(.controlled(Controlled(action: "pause", target: "*", outcome: "nothing to do", file: "c.job", identity: "c\(number(0...99))")))
        case 6:
            if let seq = state.owedBatchHooks.keys.min() {
                add(.hookStarted(HookStarted(hook: .batchEnd, batchSeq: seq, program: "/bin/true")))
            } else if let run = state.hooksInFlight.values.min(by: { $0.startedSeq < $1.startedSeq }), chance(60) {
                // Its end; or, as a start after a crash records it, no end seen.
                add(.hookEnded(HookEnded(hook: run.key.hook, batchSeq: run.key.batchSeq, pid: chance(50) ? 77 : nil, exitStatus: 0,
                                         durationMs: 5, mayNotHaveRun: chance(40) ? true : nil)), task: run.key.task)
            } else {
                add(.configReloaded(ConfigReloaded(file: "config.toml", applied: ["max_active"], needRestart: [], hooks: chance(50) ? ["batch_end"] : [])))
            }
        default:
            // An event for a task no log created: kept as an orphan, never thrown.
            add(.progressed(Progressed(bytes: 1)), task: "ghost\(number(0...9))")
        }
    }

    /// A log of `count` events.
    public static func make(seed: UInt64, count: Int) -> (events: [Event], random: SplitMix64) {
        var generator = RandomLog(seed: seed)
        while generator.events.count < count { generator.step() }
        return (Array(generator.events.prefix(count)), generator.random)
    }
}

extension AgentState {
    /// What a restart would do with every task: states that are equal must plan alike.
    public func recoveryPlans(nowMs: Int64) -> [String: RecoveryPlan] {
        Dictionary(uniqueKeysWithValues: tasks.map { ($0.id, RecoveryPlan.plan(for: $0, in: self, nowMs: nowMs)) })
    }
}

/// `SpecArchive` has one reader per process, and every test target runs in
/// one process: a test that installs one (or runs an agent, which does)
/// holds this while it does, so no other test's reader stands in for its.
public enum SpecArchiveUse {
    private static let lock = NSLock()

    public static func exclusively<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { SpecArchive.install(nil); lock.unlock() }
        return try body()
    }
}

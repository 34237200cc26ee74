import CCurlShims
import Logging
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// The rules every kind shares for how an attempt, and a task, ends: a
/// transient failure waits for the network or is retried (`RetryDecision`),
/// a permanent one fails the task, a hop starts the next request, a body is
/// recorded finished. Runners handle their own outcomes first (a complete
/// body, a 304, a connection of several) and hand the rest here.
extension RunnerContext {
    /// An attempt of `task` ended with `outcome` (neither `complete` nor
    /// `notModified`, which only the task's runner can judge).
    /// - Parameters:
    ///   - exchange: the exchange it ended on: how it failed (on the wire, by name) and when it began.
    ///   - durable: the bytes the log vouches for once the attempt is over.
    func attemptEnded(_ task: TaskState, _ outcome: AttemptOutcome, on exchange: Exchange, metrics: AttemptMetrics, durable: Int64) {
        needsScheduling = true
        let id = task.id
        switch outcome {
        case .transient(let reason, let retryAfterMs, let restartFromZero):
            // Only a download keeps what it received; anything else starts over.
            let bytes = restartFromZero || !task.spec.isResumable ? 0 : durable
            switch network.verdict(on: exchange, task: task, metrics: metrics) {
            case .waitForNetwork:
                // No retry is spent; a route to the server coming back resumes it.
                record(.paused(Paused(bytes: bytes, reason: .offline, metrics: metrics)), task: id)
                logger.notice("task waits for the network", metadata: ["task.id": "\(id)", "reason": "\(reason)"])
                return
            case .retryAtOnce:
                // The link went and came back while it ran (a flap): again now, no retry spent.
                record(.paused(Paused(bytes: bytes, reason: .offline, metrics: metrics)), task: id)
                record(.resumed(Resumed(bytes: bytes, reason: "the network changed during the attempt")), task: id)
                return
            case .retry:
                break
            }
            let decision = RetryDecision.decide(
                reason: reason, attemptsUsed: task.attemptsUsed, retriesAllowed: task.spec.retries ?? config.retries,
                retryAfterMs: retryAfterMs, nowMs: Posix.nowMs, deadlineMs: exchange.deadlineMs, totalTimeoutS: config.totalTimeout,
                jitter: Double.random(in: 0...1))
            switch decision {
            case .retry(let delay):
                record(.retrying(Retrying(attempt: task.attempts, reason: reason, delayMs: delay, bytes: bytes, metrics: metrics)), task: id)
                logger.notice("task will retry", metadata: ["task.id": "\(id)", "reason": "\(reason)", "delay_ms": "\(delay)"])
            case .fail(let words, let code):
                // A server outage: what arrived is kept, so `resume` goes on from there.
                fail(task, reason: words, code: code, metrics: metrics, keeping: bytes)
            }
        case .permanent(let reason, let code):
            fail(task, reason: reason, code: code, metrics: metrics, keeping: code.isLinkRefused ? durable : 0)
        case .localFailure(let reason, let code):
            fail(task, reason: reason, code: code, metrics: metrics, keeping: durable)
        case .fallBack(let reason):
            // Not the server failing to serve the file: the agent changing how it asks. Again at once, from 0.
            record(.retrying(Retrying(attempt: task.attempts, reason: reason, delayMs: 0, bytes: 0, metrics: metrics, free: true)), task: id)
            logger.notice("task goes on over one connection", metadata: ["task.id": "\(id)", "reason": "\(reason)"])
        case .rangeRefused(let reason):
            // Only a connection of a segmented download asks for a range of its own, and its runner
            // turns a refusal into a fall-back: one that reaches here is of a task asking nothing else.
            fail(task, reason: reason, code: .rangeIgnored, metrics: metrics)
        case .redirect(let target, let status):
            follow(task, to: target, status: status, metrics: metrics)
        case .complete, .notModified, .skipped:
            assertionFailure("\(outcome) reached the shared rules: its runner judges it")
            logger.error("an attempt's end was not judged by its runner", metadata: ["task.id": "\(id)"])
        }
    }

    /// A hop the exchange left to us: the same checks curl makes (http or
    /// https, at most max_redirects), recorded like curl's own hops; the
    /// next request goes to the new URL without the job's credentials
    /// unless it is the job's own host.
    private func follow(_ task: TaskState, to target: String, status: Int, metrics: AttemptMetrics) {
        do {
            try URLRules.checkTransferURL(target, key: "Location")
        } catch {
            if !URLRules.hasHTTPScheme(target) {
                fail(task, reason: "refused a redirect to a scheme other than http or https (\(Redaction.url(target)))",
                     code: .curl(Int(CURLE_UNSUPPORTED_PROTOCOL.rawValue)), metrics: metrics)
            } else {
                // Whatever else the job URL's rules refuse (a URL too long to ask for, a space …), in their words.
                fail(task, reason: "refused a redirect: its Location \((error as? KeyError)?.problem ?? "\(error)")",
                     code: .curl(Int(CURLE_URL_MALFORMAT.rawValue)), metrics: metrics)
            }
            return
        }
        guard task.redirects < settings.maxRedirects else {
            fail(task, reason: "more than \(settings.maxRedirects) redirects from \(Redaction.url(task.spec.url))",
                 code: .curl(Int(CURLE_TOO_MANY_REDIRECTS.rawValue)), metrics: metrics)
            return
        }
        hop(task, to: target, status: status)
    }

    /// Records a hop (a redirect the agent follows, a master playlist's
    /// variant) and starts the next request at its target.
    func hop(_ task: TaskState, to target: String, status: Int) {
        record(.redirected(Redirected(from: task.currentURL, to: target, status: status)), task: task.id)
        if let moved = state[task.id] { runners.start(moved) }
    }

    /// Tried again at once from byte 0, what the task has so far thrown away (no retry's delay).
    /// - Parameter oneConnection: a segmented download's next attempt takes a single connection.
    func startOverWhole(_ task: TaskState, because reason: String, metrics: AttemptMetrics, oneConnection: Bool = false) {
        let why = reason + "; fetching the whole file"
        if let part = task.partPath { removePartial(part, of: task.id) }
        if oneConnection { record(.progressed(Progressed(bytes: 0, fallback: why)), task: task.id) }
        record(.retrying(Retrying(attempt: task.attempts, reason: why, delayMs: 0, bytes: 0, metrics: metrics)), task: task.id)
        logger.notice("task will retry", metadata: ["task.id": "\(task.id)", "reason": "\(why)", "delay_ms": "0"])
        needsScheduling = true
    }

    /// `finished` with what the exchange learned: where the body went (if
    /// it was kept), and for upload and data tasks the response's status and headers.
    /// - Parameter modifiedNs: the published file's modification time (a rename keeps the partial file's).
    /// - Parameter received: the bytes all connections of a segmented download received.
    /// - Parameter sha256: the published bytes' SHA-256 (nil when no body is kept).
    func recordFinished(_ task: TaskState, _ exchange: Exchange, bytes: Int64, dest: String?, sha256: String? = nil,
                        modifiedNs: Int64? = nil, received: Int64? = nil) {
        var metrics = exchange.metrics
        if let received { metrics.bytesReceived = received }
        let response = task.spec.behaviour.recordsResponse ? exchange.responseHeaders : nil
        record(.finished(Finished(bytes: bytes, dest: dest, sha256: sha256, status: response == nil ? nil : metrics.status,
                                  responseHeaders: response, metrics: metrics, modifiedNs: modifiedNs)), task: task.id)
        sayAfterCommit(.info, "task finished", ["task.id": "\(task.id)", "dest": "\(dest ?? "-")", "bytes": "\(bytes)",
                                                "status": "\(metrics.status)"])
        needsScheduling = true
    }

    /// Records `failed`. `keeping` > 0: the partial file keeps that many
    /// durable bytes (a full disk, a server outage), so that `resume` goes
    /// on from there; otherwise the partial file is removed.
    /// - Parameter removingPartial: false when the partial file is not ours to remove (another process holds it).
    func fail(_ task: TaskState, reason: String, code: FailureCode, metrics: AttemptMetrics? = nil, keeping: Int64 = 0,
              removingPartial: Bool = true) {
        let kept = task.spec.isResumable ? keeping : 0
        // An HLS parent's partial name is its children's folder: their bytes stay for `resume`.
        if kept == 0, removingPartial, task.spec.behaviour.body == .partialFile, let part = task.partPath {
            removePartial(part, of: task.id)
        }
        record(.failed(Failed(reason: reason, code: code, bytes: kept, metrics: metrics)), task: task.id)
        sayAfterCommit(.error, "task failed", ["task.id": "\(task.id)", "reason": "\(reason)"])
        needsScheduling = true
    }

    /// A task whose attempt could not be set up fails, keeping its bytes unless another process holds its partial file.
    func refuseStart(_ task: TaskState, _ error: Error) {
        switch error {
        case let busy as DownloadRoot.Busy:
            fail(task, reason: "cannot start: \(busy)", code: .destBusy, removingPartial: false)
        case let refused as BodyFileCheck.Refused:
            fail(task, reason: "cannot start: \(refused)", code: .bodyUnreadable, keeping: task.bytes)
        case let error as SystemError:
            let failure = DiskFailure(operation: "open", path: task.partPath ?? "", errno: error.errno)
            let code = failure.code == .localError ? FailureCode.cannotStart : failure.code
            fail(task, reason: "cannot start: \(error)", code: code, keeping: task.bytes)
        default:
            fail(task, reason: "cannot start: \(error)", code: .cannotStart, keeping: task.bytes)
        }
    }

    /// `overwrite = "skip"` or `"fail"`, and `path` exists: the task ends
    /// without a transfer (true), skipped or failed.
    func endedByExistingDest(_ task: TaskState, _ path: String) -> Bool {
        guard task.spec.overwrite == .skip || task.spec.overwrite == .fail, root.exists(path) else { return false }
        if task.spec.overwrite == .skip {
            record(.finished(Finished(bytes: root.size(path) ?? 0, dest: path, skipped: "skipped: \(path) already exists")),
                   task: task.id)
        } else {
            fail(task, reason: "\(path) already exists (overwrite = \"fail\")", code: .destExists)
        }
        needsScheduling = true
        return true
    }

    /// Cuts a partial file back to what the log vouches for (a restart); absent is fine.
    func truncate(_ part: String, of id: String, to offset: Int64) {
        do { try root.truncate(part, to: offset) } catch {
            logger.error("cannot cut back a partial file", metadata: ["task.id": "\(id)", "error": "\(error)"])
        }
    }

    func removePartial(_ part: String, of id: String) {
        do { try root.remove(part) } catch {
            logger.error("cannot remove a partial file", metadata: ["task.id": "\(id)", "error": "\(error)"])
        }
    }

    /// Where the next attempt starts: the logged bytes with their `If-Range`
    /// validator, if the recovery plan says resume and the partial file holds
    /// them; else 0 (the attempt then cuts the file to match).
    func resumePoint(for task: TaskState) -> (offset: Int64, ifRange: String?) {
        guard case .resume(let at, let validator) = RecoveryPlan.plan(for: task, nowMs: Posix.nowMs),
              let part = task.partPath, let size = root.size(part), size >= at else { return (0, nil) }
        return (at, validator)
    }
}

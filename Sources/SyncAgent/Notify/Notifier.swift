import Foundation
import Synchronization
import Logging
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// Where notices go. The agent records the outcome either way, so a
/// notice is never posted twice.
protocol NoticePosting: Sendable {
    /// nil when delivered; otherwise why not, in words.
    func post(_ notice: Notice) -> String?
}

/// Posts notices one at a time on a thread of their own: a notification
/// server that answers only at D-Bus's timeout (25 s) holds up no transfer,
/// intake or stop. Only the notices cross threads.
final class BackgroundNoticePoster: Sendable {
    private let notifier: NoticePosting
    private let queue = DispatchQueue(label: "syncagent.notify")
    private let group = DispatchGroup()

    init(_ notifier: NoticePosting) { self.notifier = notifier }

    func post(_ notice: Notice) {
        queue.async(group: group) { [notifier] in _ = notifier.post(notice) }
    }

    /// On stop: notices still going out get `seconds`, then are given up (the log says they were posted).
    func finish(within seconds: Double) {
        _ = group.wait(timeout: .now() + seconds)
    }
}

/// libnotify over the user's D-Bus session. Without a session or a
/// notification server: one warning, and the agent goes on (SPEC §8).
///
/// libnotify is loaded with `dlopen` at the first notification: linked at
/// start, it and glib, gio, gdk-pixbuf… keep ~2 MiB resident in an agent
/// that may run for days before it has anything to say (measured).
final class DesktopNotifier: NoticePosting {
    private let logger: Logger
    private let actions: NoticeActionRunner
    /// Whether a failure to notify was said: once is enough.
    private let warned = Mutex(false)

    /// - Parameter inbox: where a notice's "Retry" writes its control jobs.
    init(logger: Logger, inbox: String) {
        self.logger = logger
        actions = NoticeActionRunner(inbox: inbox, logger: logger)
    }

    func post(_ notice: Notice) -> String? {
        switch NotificationLoop.shared {
        case .failure(let error):
            return warnOnce("\(error)")
        case .success(let loop):
            guard let problem = loop.post(notice, actions: actions) else { return nil }
            return warnOnce(problem)
        }
    }

    private func warnOnce(_ message: String) -> String {
        if warned.withLock({ warned in defer { warned = true }; return !warned }) {
            logger.warning("\(message); transfers go on without notifications")
        }
        return message
    }
}

/// GLib's default main context, run on a thread of its own for the rest of
/// the process once the first notice goes out: libnotify delivers a
/// notice's clicks (`ActionInvoked`) and its closing there. Every libnotify
/// call is made there too, so no libnotify object is ever touched by two
/// threads. One per process: a second loop on the default context would
/// wait for ever for the first to let go of it (tests run several agents
/// in one process).
final class NotificationLoop: Sendable {
    /// libnotify loaded and the loop started, or why not.
    static let shared = Result { try NotificationLoop(library: Libnotify.load()) }

    /// Notices whose buttons can still be clicked at most: each is kept
    /// until its server says it closed, and a server that never does must
    /// not make the agent keep them all.
    static let keptUpTo = 64
    /// xdg-open processes at once, at most: a flood of clicks forks no flood of processes.
    static let openersUpTo = 4
    /// How long a file manager gets to answer `ShowItems` (D-Bus may have to start it first).
    static let fileManagerTimeoutMs: Int32 = 10_000

    let library: Libnotify

    /// Touched on the loop's thread alone; under a lock all the same, so the
    /// compiler can check it. Never held across a call into GLib: a signal
    /// handler run by that call may come back for it.
    private struct Held {
        /// Notices with buttons (the notification's address), oldest first.
        var live: [(notification: UInt, posted: PostedNotice)] = []
        /// xdg-open processes started and not yet reaped.
        var openers = 0
    }
    private let held = Mutex(Held())

    private init(library: Libnotify) {
        self.library = library
        library.handleWarnings(of: "libnotify", with: dropUnknownActionWarnings)
        let thread = Thread { library.runDefaultLoop() }
        thread.name = "syncagent-notify"
        thread.start()
    }

    /// Posts `notice` from the loop's thread, its buttons answered by `actions`; nil when delivered.
    func post(_ notice: Notice, actions: NoticeActionRunner) -> String? {
        onLoop { [self] in show(notice, actions: actions) }
    }

    /// Runs `work` on the loop's thread and waits for its answer.
    private func onLoop(_ work: @escaping @Sendable () -> String?) -> String? {
        let reply = LoopWork(work)
        library.whenIdle(runLoopWork, Unmanaged.passRetained(reply).toOpaque(), release: releaseLoopWork)
        return reply.answer()
    }

    private func show(_ notice: Notice, actions: NoticeActionRunner) -> String? {
        guard let notification = library.notification(for: notice) else { return "libnotify could not create a notification" }
        // Asked each time: the server may have been replaced since (another desktop, a restarted daemon).
        guard !notice.actions.isEmpty, library.capabilities().contains("actions") else {
            defer { library.unref(notification) }
            return library.show(notification)
        }
        let posted = PostedNotice(actions: notice.actions, runner: actions)
        func offer(_ key: String, _ label: String) {
            // One reference per action, let go by libnotify when the notification is finalized.
            library.add(action: key, label: label, to: notification, callback: noticeActionInvoked,
                        userData: Unmanaged.passRetained(posted).toOpaque(), free: releasePostedNotice)
        }
        for action in notice.actions { offer(action.key, action.label) }
        if let opening = notice.actions.first(where: \.isDefault) { offer(NoticeAction.defaultKey, opening.label) }
        library.onClosed(notification, noticeClosed)
        if let problem = library.show(notification) {
            library.unref(notification)
            return problem
        }
        let address = UInt(bitPattern: notification)
        let evicted = held.withLock { held -> UInt? in
            held.live.append((address, posted))
            return held.live.count > Self.keptUpTo ? held.live.removeFirst().notification : nil
        }
        if let evicted, let oldest = OpaquePointer(bitPattern: evicted) { library.unref(oldest) }
        return nil
    }

    /// The server closed a notice (or forgot it): its buttons are done with.
    fileprivate func closed(_ notification: OpaquePointer) {
        let address = UInt(bitPattern: notification)
        let kept = held.withLock { held -> Bool in
            guard let index = held.live.firstIndex(where: { $0.notification == address }) else { return false }
            held.live.remove(at: index)
            return true
        }
        // libnotify holds its own reference while it tells of the closing: this one can go now.
        if kept { library.unref(notification) }
    }

    /// Starts `arguments` (xdg-open), its output thrown away, and reaps it when it ends.
    func spawnOpener(_ arguments: [String], logger: Logger) {
        let room = held.withLock { held -> Bool in
            guard held.openers < Self.openersUpTo else { return false }
            held.openers += 1
            return true
        }
        guard room else {
            logger.warning("not opening \(arguments.last ?? ""): \(Self.openersUpTo) openers still run")
            return
        }
        let pid: pid_t
        do {
            let discard = try Posix.open("/dev/null", O_WRONLY | O_CLOEXEC)
            defer { Posix.close(discard) }
            let environment = ProcessInfo.processInfo.environment.map { "\($0.key)=\($0.value)" }
            pid = try Posix.spawn(arguments, environment: environment, output: discard)
        } catch {
            held.withLock { $0.openers -= 1 }
            logger.warning("cannot open \(arguments.last ?? ""): \(error)")
            return
        }
        library.every(ms: 250, reapOpener, Unmanaged.passRetained(Opener(pid: pid, loop: self, logger: logger)).toOpaque(),
                      release: releaseOpener)
    }

    /// Whether the opener has ended (and is reaped).
    fileprivate func reaped(_ opener: Opener) -> Bool {
        do {
            guard try Posix.reapIfEnded(opener.pid, shown: "xdg-open (pid \(opener.pid))") != nil else { return false }
        } catch {
            // Gone without a trace to collect: nothing more to wait for.
            opener.logger.debug("xdg-open (pid \(opener.pid)) could not be waited for: \(error)")
        }
        held.withLock { $0.openers -= 1 }
        return true
    }
}

/// A notice shown with buttons: what they do, each at most once. A server
/// may send a click twice, or thousands of times; a notice's "Retry" writes
/// its control jobs once, and its "Open folder" opens once.
final class PostedNotice: Sendable {
    let actions: [NoticeAction]
    let runner: NoticeActionRunner
    /// The actions done, and those whose repeat was said (once: a flood of clicks is no flood of lines).
    private let done = Mutex((done: Set<String>(), repeatSaid: Set<String>()))

    init(actions: [NoticeAction], runner: NoticeActionRunner) {
        self.actions = actions
        self.runner = runner
    }

    /// `key` was clicked (on the loop's thread).
    func invoke(_ key: String) {
        let action = key == NoticeAction.defaultKey ? actions.first(where: \.isDefault) : actions.first { $0.key == key }
        guard let action, case .success(let loop) = NotificationLoop.shared else { return }
        let (first, sayRepeat) = done.withLock { done -> (Bool, Bool) in
            if done.done.insert(action.key).inserted { return (true, false) }
            return (false, done.repeatSaid.insert(action.key).inserted)
        }
        guard first else {
            if sayRepeat {
                runner.logger.debug("notification action already done; further clicks on it are let be",
                                    metadata: ["action": "\(action.key)"])
            }
            return
        }
        runner.perform(action, on: loop)
    }
}

/// A piece of work for the loop's thread, and its answer for the thread waiting on it.
private final class LoopWork: Sendable {
    private let work: @Sendable () -> String?
    private let result = Mutex<String?>(nil)
    private let done = DispatchSemaphore(value: 0)

    init(_ work: @escaping @Sendable () -> String?) { self.work = work }

    func run() {
        let answer = work()
        result.withLock { $0 = answer }
        done.signal()
    }

    func answer() -> String? {
        done.wait()
        return result.withLock { $0 }
    }
}

/// An xdg-open process, watched from the loop until it ends.
fileprivate final class Opener: Sendable {
    let pid: pid_t
    let loop: NotificationLoop
    let logger: Logger
    init(pid: pid_t, loop: NotificationLoop, logger: Logger) { self.pid = pid; self.loop = loop; self.logger = logger }
}

// MARK: - Called by GLib, on the loop's thread

/// G_SOURCE_REMOVE, G_SOURCE_CONTINUE.
private let sourceDone: Int32 = 0
private let sourceAgain: Int32 = 1

private func runLoopWork(_ data: UnsafeMutableRawPointer?) -> Int32 {
    if let data { Unmanaged<LoopWork>.fromOpaque(data).takeUnretainedValue().run() }
    return sourceDone
}

private func releaseLoopWork(_ data: UnsafeMutableRawPointer?) {
    if let data { Unmanaged<LoopWork>.fromOpaque(data).release() }
}

private func noticeActionInvoked(_ notification: OpaquePointer?, _ action: UnsafeMutablePointer<CChar>?,
                                 _ data: UnsafeMutableRawPointer?) {
    guard let action, let data else { return }
    Unmanaged<PostedNotice>.fromOpaque(data).takeUnretainedValue().invoke(String(cString: action))
}

private func releasePostedNotice(_ data: UnsafeMutableRawPointer?) {
    if let data { Unmanaged<PostedNotice>.fromOpaque(data).release() }
}

private func noticeClosed(_ notification: OpaquePointer?, _ data: UnsafeMutableRawPointer?) {
    guard let notification, case .success(let loop) = NotificationLoop.shared else { return }
    loop.closed(notification)
}

private func reapOpener(_ data: UnsafeMutableRawPointer?) -> Int32 {
    guard let data else { return sourceDone }
    let opener = Unmanaged<Opener>.fromOpaque(data).takeUnretainedValue()
    return opener.loop.reaped(opener) ? sourceDone : sourceAgain
}

private func releaseOpener(_ data: UnsafeMutableRawPointer?) {
    if let data { Unmanaged<Opener>.fromOpaque(data).release() }
}

/// libnotify warns "Received unknown action" for each click on a notice of
/// ours it has no action for: a notification server sending thousands must
/// not fill the agent's log. Other warnings go on to GLib's own handler
/// (the user data).
private func dropUnknownActionWarnings(_ domain: UnsafePointer<CChar>?, _ level: UInt32, _ message: UnsafePointer<CChar>?,
                                       _ data: UnsafeMutableRawPointer?) {
    if let message, String(cString: message).hasPrefix("Received unknown action") { return }
    guard let data else { return }
    unsafeBitCast(data, to: Libnotify.LogFunc.self)(domain, level, message, nil)
}

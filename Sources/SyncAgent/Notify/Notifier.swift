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
    /// libnotify once loaded (or why it could not be), and whether that was said: touched by the
    /// poster's one thread, under a lock all the same, so the compiler can check it.
    private struct Loaded {
        var library: Libnotify?
        var loadFailure: String?
        var warned = false
    }
    private let loaded = Mutex(Loaded())

    init(logger: Logger) { self.logger = logger }

    deinit { loaded.withLock { $0.library?.uninit() } }

    func post(_ notice: Notice) -> String? {
        loaded.withLock { loaded in
            if loaded.library == nil && loaded.loadFailure == nil {
                do { loaded.library = try Libnotify.load() } catch { loaded.loadFailure = "\(error)" }
            }
            guard let library = loaded.library else { return warnOnce(loaded.loadFailure ?? "libnotify is not available", &loaded) }
            if let problem = library.show(notice) { return warnOnce(problem, &loaded) }
            return nil
        }
    }

    private func warnOnce(_ message: String, _ loaded: inout Loaded) -> String {
        if !loaded.warned {
            loaded.warned = true
            logger.warning("\(message); transfers go on without notifications")
        }
        return message
    }
}

/// The few libnotify (and GObject) entry points the agent calls, resolved
/// from `libnotify.so.4` at run time. Signatures from libnotify's notify.h.
private struct Libnotify {
    private typealias Init = @convention(c) (UnsafePointer<CChar>) -> Int32
    private typealias Uninit = @convention(c) () -> Void
    private typealias New = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> OpaquePointer?
    private typealias SetString = @convention(c) (OpaquePointer, UnsafePointer<CChar>) -> Void
    private typealias SetUrgency = @convention(c) (OpaquePointer, Int32) -> Void
    private typealias Show = @convention(c) (OpaquePointer, UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> Int32
    private typealias Free = @convention(c) (UnsafeMutableRawPointer) -> Void

    private let uninitialize: Uninit
    private let new: New
    private let setAppName: SetString
    private let setCategory: SetString
    private let setUrgency: SetUrgency
    private let show: Show
    private let objectUnref: Free
    private let errorFree: Free

    /// NotifyUrgency: NOTIFY_URGENCY_NORMAL = 1, NOTIFY_URGENCY_CRITICAL = 2.
    private static let normal: Int32 = 1
    private static let critical: Int32 = 2

    struct LoadError: Error, CustomStringConvertible {
        var description: String
    }

    static func load() throws -> Libnotify {
        guard let handle = dlopen("libnotify.so.4", RTLD_NOW | RTLD_LOCAL) else {
            throw LoadError(description: "cannot load libnotify: \(String(cString: dlerror()))")
        }
        func symbol<T>(_ name: String, as _: T.Type) throws -> T {
            guard let address = dlsym(handle, name) else { throw LoadError(description: "libnotify has no \(name)") }
            return unsafeBitCast(address, to: T.self)
        }
        let initialize = try symbol("notify_init", as: Init.self)
        let library = Libnotify(
            uninitialize: try symbol("notify_uninit", as: Uninit.self),
            new: try symbol("notify_notification_new", as: New.self),
            setAppName: try symbol("notify_notification_set_app_name", as: SetString.self),
            setCategory: try symbol("notify_notification_set_category", as: SetString.self),
            setUrgency: try symbol("notify_notification_set_urgency", as: SetUrgency.self),
            show: try symbol("notify_notification_show", as: Show.self),
            objectUnref: try symbol("g_object_unref", as: Free.self),
            errorFree: try symbol("g_error_free", as: Free.self))
        guard initialize("syncagent") != 0 else { throw LoadError(description: "libnotify could not initialise") }
        return library
    }

    func uninit() { uninitialize() }

    /// nil when shown; otherwise GLib's error message.
    func show(_ notice: Notice) -> String? {
        guard let notification = new(notice.summary, notice.body.isEmpty ? nil : notice.body, notice.icon) else {
            return "libnotify could not create a notification"
        }
        defer { objectUnref(UnsafeMutableRawPointer(notification)) }
        setAppName(notification, "syncagent")
        setCategory(notification, notice.category)
        setUrgency(notification, notice.critical ? Self.critical : Self.normal)
        var error: UnsafeMutableRawPointer?
        guard show(notification, &error) == 0 else { return nil }
        // GError { GQuark domain; gint code; gchar *message; }
        let message = error.map { String(cString: $0.load(fromByteOffset: 8, as: UnsafePointer<CChar>.self)) }
        if let error { errorFree(error) }
        return "no desktop notification: \(message ?? "unknown error")"
    }
}

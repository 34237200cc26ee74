import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// The few libnotify, GLib, GObject and GIO entry points the agent calls,
/// resolved from `libnotify.so.4` (and the libraries it brings) at run
/// time. Signatures from notify.h, gmain.h, gsignal.h, gdbusconnection.h
/// and gvariant.h; none is variadic, so each can be called from Swift.
struct Libnotify: Sendable {
    // NotifyActionCallback, GDestroyNotify, GSourceFunc, GClosureNotify, GLogFunc.
    typealias ActionCallback = @convention(c) (OpaquePointer?, UnsafeMutablePointer<CChar>?, UnsafeMutableRawPointer?) -> Void
    typealias DestroyNotify = @convention(c) (UnsafeMutableRawPointer?) -> Void
    typealias SourceFunc = @convention(c) (UnsafeMutableRawPointer?) -> Int32
    typealias ClosureNotify = @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?) -> Void
    typealias LogFunc = @convention(c) (UnsafePointer<CChar>?, UInt32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void
    /// The handler of a notification's "closed" signal: (NotifyNotification *, gpointer user_data).
    typealias ClosedHandler = @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Void

    private typealias Init = @convention(c) (UnsafePointer<CChar>) -> Int32
    private typealias New = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> OpaquePointer?
    private typealias SetString = @convention(c) (OpaquePointer, UnsafePointer<CChar>) -> Void
    private typealias SetUrgency = @convention(c) (OpaquePointer, Int32) -> Void
    private typealias Show = @convention(c) (OpaquePointer, UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> Int32
    private typealias AddAction = @convention(c) (OpaquePointer, UnsafePointer<CChar>, UnsafePointer<CChar>, ActionCallback,
                                                  UnsafeMutableRawPointer?, DestroyNotify?) -> Void
    private typealias ServerCaps = @convention(c) () -> UnsafeMutableRawPointer?
    private typealias Free = @convention(c) (UnsafeMutableRawPointer?) -> Void
    private typealias ListFreeFull = @convention(c) (UnsafeMutableRawPointer?, Free) -> Void
    private typealias SignalConnect = @convention(c) (OpaquePointer, UnsafePointer<CChar>, UnsafeRawPointer, UnsafeMutableRawPointer?,
                                                      ClosureNotify?, UInt32) -> UInt
    private typealias MainLoopNew = @convention(c) (OpaquePointer?, Int32) -> OpaquePointer?
    private typealias MainLoopRun = @convention(c) (OpaquePointer) -> Void
    private typealias IdleAdd = @convention(c) (Int32, SourceFunc, UnsafeMutableRawPointer?, DestroyNotify?) -> UInt32
    private typealias TimeoutAdd = @convention(c) (Int32, UInt32, SourceFunc, UnsafeMutableRawPointer?, DestroyNotify?) -> UInt32
    private typealias LogSetHandler = @convention(c) (UnsafePointer<CChar>?, UInt32, LogFunc, UnsafeMutableRawPointer?) -> UInt32
    private typealias BusGet = @convention(c) (Int32, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> OpaquePointer?
    private typealias ConnectionCall = @convention(c) (OpaquePointer, UnsafePointer<CChar>?, UnsafePointer<CChar>, UnsafePointer<CChar>,
                                                       UnsafePointer<CChar>, OpaquePointer?, UnsafePointer<CChar>?, UInt32, Int32,
                                                       OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> OpaquePointer?
    private typealias VariantNewString = @convention(c) (UnsafePointer<CChar>) -> OpaquePointer?
    private typealias VariantNewArray = @convention(c) (UnsafePointer<CChar>?, UnsafePointer<OpaquePointer?>?, Int) -> OpaquePointer?
    private typealias VariantNewTuple = @convention(c) (UnsafePointer<OpaquePointer?>?, Int) -> OpaquePointer?
    private typealias VariantUnref = @convention(c) (OpaquePointer) -> Void
    private typealias Quark = @convention(c) () -> UInt32

    private let new: New
    private let setAppName: SetString
    private let setCategory: SetString
    private let setUrgency: SetUrgency
    private let show: Show
    private let addAction: AddAction
    private let serverCaps: ServerCaps
    private let objectUnref: Free
    private let errorFree: Free
    private let free: Free
    private let listFreeFull: ListFreeFull
    private let signalConnect: SignalConnect
    private let mainLoopNew: MainLoopNew
    private let mainLoopRun: MainLoopRun
    private let idleAdd: IdleAdd
    private let timeoutAdd: TimeoutAdd
    private let logSetHandler: LogSetHandler
    /// GLib's own log handler (`g_log_default_handler`), for what a handler of ours passes on.
    let logDefaultHandler: LogFunc
    private let busGet: BusGet
    private let connectionCall: ConnectionCall
    private let variantNewString: VariantNewString
    private let variantNewArray: VariantNewArray
    private let variantNewTuple: VariantNewTuple
    private let variantUnref: VariantUnref
    private let ioErrorQuark: Quark

    /// NotifyUrgency: NOTIFY_URGENCY_NORMAL = 1, NOTIFY_URGENCY_CRITICAL = 2.
    private static let normal: Int32 = 1
    private static let critical: Int32 = 2
    /// G_PRIORITY_DEFAULT, G_BUS_TYPE_SESSION, G_IO_ERROR_TIMED_OUT, G_LOG_LEVEL_WARNING.
    private static let defaultPriority: Int32 = 0
    private static let sessionBus: Int32 = 2
    private static let timedOut: Int32 = 24
    static let warningLevel: UInt32 = 1 << 4

    struct LoadError: Error, CustomStringConvertible {
        var description: String
    }

    /// A GLib error's words, freed: GError { GQuark domain; gint code; gchar *message; }.
    struct GLibError: Error, CustomStringConvertible {
        var description: String
        var timedOut: Bool
    }

    static func load() throws -> Libnotify {
        guard let handle = dlopen("libnotify.so.4", RTLD_NOW | RTLD_LOCAL) else {
            throw LoadError(description: "cannot load libnotify: \(String(cString: dlerror()))")
        }
        // dlsym on the handle also finds what libnotify's own libraries (glib, gobject, gio) define.
        func symbol<T>(_ name: String, as _: T.Type) throws -> T {
            guard let address = dlsym(handle, name) else { throw LoadError(description: "libnotify has no \(name)") }
            return unsafeBitCast(address, to: T.self)
        }
        let initialize = try symbol("notify_init", as: Init.self)
        let library = Libnotify(
            new: try symbol("notify_notification_new", as: New.self),
            setAppName: try symbol("notify_notification_set_app_name", as: SetString.self),
            setCategory: try symbol("notify_notification_set_category", as: SetString.self),
            setUrgency: try symbol("notify_notification_set_urgency", as: SetUrgency.self),
            show: try symbol("notify_notification_show", as: Show.self),
            addAction: try symbol("notify_notification_add_action", as: AddAction.self),
            serverCaps: try symbol("notify_get_server_caps", as: ServerCaps.self),
            objectUnref: try symbol("g_object_unref", as: Free.self),
            errorFree: try symbol("g_error_free", as: Free.self),
            free: try symbol("g_free", as: Free.self),
            listFreeFull: try symbol("g_list_free_full", as: ListFreeFull.self),
            signalConnect: try symbol("g_signal_connect_data", as: SignalConnect.self),
            mainLoopNew: try symbol("g_main_loop_new", as: MainLoopNew.self),
            mainLoopRun: try symbol("g_main_loop_run", as: MainLoopRun.self),
            idleAdd: try symbol("g_idle_add_full", as: IdleAdd.self),
            timeoutAdd: try symbol("g_timeout_add_full", as: TimeoutAdd.self),
            logSetHandler: try symbol("g_log_set_handler", as: LogSetHandler.self),
            logDefaultHandler: try symbol("g_log_default_handler", as: LogFunc.self),
            busGet: try symbol("g_bus_get_sync", as: BusGet.self),
            connectionCall: try symbol("g_dbus_connection_call_sync", as: ConnectionCall.self),
            variantNewString: try symbol("g_variant_new_string", as: VariantNewString.self),
            variantNewArray: try symbol("g_variant_new_array", as: VariantNewArray.self),
            variantNewTuple: try symbol("g_variant_new_tuple", as: VariantNewTuple.self),
            variantUnref: try symbol("g_variant_unref", as: VariantUnref.self),
            ioErrorQuark: try symbol("g_io_error_quark", as: Quark.self))
        guard initialize("syncagent") != 0 else { throw LoadError(description: "libnotify could not initialise") }
        return library
    }

    // MARK: - Notifications

    /// A notification with the agent's name, the notice's category and urgency; nil if none could be made.
    func notification(for notice: Notice) -> OpaquePointer? {
        guard let notification = new(notice.summary, notice.body.isEmpty ? nil : notice.body, notice.icon) else { return nil }
        setAppName(notification, "syncagent")
        setCategory(notification, notice.category)
        setUrgency(notification, notice.critical ? Self.critical : Self.normal)
        return notification
    }

    /// nil when shown; otherwise GLib's error message.
    func show(_ notification: OpaquePointer) -> String? {
        var error: UnsafeMutableRawPointer?
        guard show(notification, &error) == 0 else { return nil }
        return "no desktop notification: \(take(error)?.description ?? "unknown error")"
    }

    func add(action key: String, label: String, to notification: OpaquePointer, callback: ActionCallback,
             userData: UnsafeMutableRawPointer, free: DestroyNotify) {
        addAction(notification, key, label, callback, userData, free)
    }

    /// Connects `handler` to the notification's "closed" signal.
    func onClosed(_ notification: OpaquePointer, _ handler: ClosedHandler) {
        _ = signalConnect(notification, "closed", unsafeBitCast(handler, to: UnsafeRawPointer.self), nil, nil, 0)
    }

    func unref(_ object: OpaquePointer) { objectUnref(UnsafeMutableRawPointer(object)) }

    /// The notification server's capabilities (`GetCapabilities`); empty when it did not answer.
    func capabilities() -> [String] {
        guard let list = serverCaps() else { return [] }
        var names: [String] = []
        // GList { gpointer data; GList *next; GList *prev; }
        var node: UnsafeMutableRawPointer? = list
        while let current = node {
            if let name = current.load(as: UnsafePointer<CChar>?.self) { names.append(String(cString: name)) }
            node = current.load(fromByteOffset: MemoryLayout<UnsafeRawPointer>.size, as: UnsafeMutableRawPointer?.self)
        }
        listFreeFull(list, free)
        return names
    }

    // MARK: - The main loop

    /// Runs GLib's default main context on the calling thread, for ever.
    func runDefaultLoop() {
        guard let loop = mainLoopNew(nil, 0) else { return }
        mainLoopRun(loop)
    }

    /// Has the default context's thread call `function` with `data` once it is free; `release` lets `data` go after.
    func whenIdle(_ function: SourceFunc, _ data: UnsafeMutableRawPointer, release: DestroyNotify) {
        _ = idleAdd(Self.defaultPriority, function, data, release)
    }

    /// Has the default context's thread call `function` every `intervalMs` until it answers 0.
    func every(ms intervalMs: UInt32, _ function: SourceFunc, _ data: UnsafeMutableRawPointer, release: DestroyNotify) {
        _ = timeoutAdd(Self.defaultPriority, intervalMs, function, data, release)
    }

    /// Routes `domain`'s warnings to `handler`, which gets `g_log_default_handler` as its user data.
    func handleWarnings(of domain: String, with handler: LogFunc) {
        _ = logSetHandler(domain, Self.warningLevel, handler, unsafeBitCast(logDefaultHandler, to: UnsafeMutableRawPointer.self))
    }

    // MARK: - D-Bus

    /// Calls `method` on the session bus with one argument tuple of a string
    /// array and a string (FileManager1's `(ass)`), letting D-Bus start the
    /// service if it can; waits at most `timeoutMs`.
    func call(_ destination: String, path: String, interface: String, method: String, strings: [String], string: String,
              timeoutMs: Int32) -> GLibError? {
        var error: UnsafeMutableRawPointer?
        guard let bus = busGet(Self.sessionBus, nil, &error) else {
            return take(error) ?? GLibError(description: "no session bus", timedOut: false)
        }
        defer { unref(bus) }
        // Floating references, each taken by the container it goes into, the tuple by the call.
        let items = strings.map { variantNewString($0) }
        let array = items.withUnsafeBufferPointer { variantNewArray("s", $0.baseAddress, $0.count) }
        let tuple = [array, variantNewString(string)].withUnsafeBufferPointer { variantNewTuple($0.baseAddress, $0.count) }
        let reply = connectionCall(bus, destination, path, interface, method, tuple, nil, 0, timeoutMs, nil, &error)
        if let reply { variantUnref(reply); return nil }
        return take(error) ?? GLibError(description: "no answer", timedOut: false)
    }

    /// A GError's words and whether it was a timeout, the error freed.
    private func take(_ error: UnsafeMutableRawPointer?) -> GLibError? {
        guard let error else { return nil }
        defer { errorFree(error) }
        let domain = error.load(as: UInt32.self)
        let code = error.load(fromByteOffset: 4, as: Int32.self)
        let message = error.load(fromByteOffset: 8, as: UnsafePointer<CChar>?.self).map { String(cString: $0) } ?? "unknown error"
        return GLibError(description: message, timedOut: domain == ioErrorQuark() && code == Self.timedOut)
    }
}


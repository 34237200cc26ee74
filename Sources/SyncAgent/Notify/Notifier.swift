import CLibnotify
import Foundation
import Logging
import SyncAgentCore

/// Where notices go. The agent records the outcome either way, so a
/// notice is never posted twice.
protocol NoticePosting {
    /// nil when delivered; otherwise why not, in words.
    func post(_ notice: Notice) -> String?
}

/// libnotify over the user's D-Bus session. Without a session or a
/// notification server: one warning, and the agent goes on (SPEC §8).
final class DesktopNotifier: NoticePosting {
    private let logger: Logger
    private var initialized = false
    private var warned = false

    init(logger: Logger) { self.logger = logger }

    deinit { if initialized { notify_uninit() } }

    func post(_ notice: Notice) -> String? {
        if !initialized {
            initialized = notify_init("syncagent") != 0
            if !initialized { return warnOnce("libnotify could not initialise") }
        }
        guard let notification = notify_notification_new(notice.summary, notice.body.isEmpty ? nil : notice.body, "folder-download") else {
            return warnOnce("libnotify could not create a notification")
        }
        defer { g_object_unref(UnsafeMutableRawPointer(notification)) }
        notify_notification_set_app_name(notification, "syncagent")
        notify_notification_set_urgency(notification, notice.critical ? NOTIFY_URGENCY_CRITICAL : NOTIFY_URGENCY_NORMAL)
        var error: UnsafeMutablePointer<GError>?
        if notify_notification_show(notification, &error) == 0 {
            let message = error.map { String(cString: $0.pointee.message) } ?? "unknown error"
            if let error { g_error_free(error) }
            return warnOnce("no desktop notification: \(message)")
        }
        return nil
    }

    private func warnOnce(_ message: String) -> String {
        if !warned {
            warned = true
            logger.warning("\(message); transfers go on without notifications")
        }
        return message
    }
}

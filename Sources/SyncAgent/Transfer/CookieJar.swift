import CCurlShims
import Foundation
import SyncAgentCore
#if canImport(Glibc)
import Glibc
#endif

/// The session's cookie storage (`cookies = persistent | ephemeral`): one
/// curl share handle every transfer uses, so a cookie set by one response
/// goes with the next request to that site. `persistent` also keeps it in
/// `STATE_DIR/cookies.txt` (Netscape format, mode 0600), read at start and
/// rewritten whenever a response set a cookie, so it survives restarts.
final class CookieJar {
    private let share: UnsafeMutableRawPointer
    /// An idle easy handle on the share: loads the file into it and reads it out.
    private let handle: UnsafeMutableRawPointer
    /// nil for `ephemeral`: cookies live in memory only.
    let file: String?

    /// nil for `cookies = "off"`.
    static func make(mode: CookieMode, stateDir: String) throws -> CookieJar? {
        switch mode {
        case .off: return nil
        case .ephemeral: return try CookieJar(file: nil)
        case .persistent: return try CookieJar(file: (stateDir as NSString).appendingPathComponent("cookies.txt"))
        }
    }

    private init(file: String?) throws {
        _ = CurlMulti.globalInit
        guard let share = sa_curl_share_init(), let handle = sa_curl_easy_init() else {
            throw SystemError(operation: "curl_share_init", errno: ENOMEM)
        }
        self.share = share
        self.handle = handle
        self.file = file
        sa_share_setopt_long(share, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_COOKIE.rawValue))
        use(in: handle)
        if let file, FileSystem.exists(file) {
            sa_easy_setopt_string(handle, CURLOPT_COOKIEFILE, file)
            sa_easy_setopt_string(handle, CURLOPT_COOKIELIST, "RELOAD")
        }
    }

    deinit {
        sa_curl_easy_cleanup(handle)
        sa_curl_share_cleanup(share)
    }

    /// Gives `easy` the shared cookies (and turns its cookie engine on).
    func use(in easy: UnsafeMutableRawPointer) {
        sa_easy_setopt_pointer(easy, CURLOPT_SHARE, share)
        // An empty file name enables the engine without reading anything.
        sa_easy_setopt_string(easy, CURLOPT_COOKIEFILE, "")
    }

    /// Rewrites the jar file with every cookie held now: written beside it,
    /// flushed, then renamed over it, so a crash leaves the old or the new jar.
    func save() throws {
        guard let file else { return }
        var list: UnsafeMutableRawPointer?
        sa_easy_getinfo_pointer(handle, CURLINFO_COOKIELIST, &list)
        var text = "# Netscape HTTP Cookie File\n# Written by syncagent; rewritten whenever a server sets a cookie.\n"
        var line = list?.assumingMemoryBound(to: curl_slist.self)
        while let entry = line {
            if let data = entry.pointee.data { text += String(cString: data) + "\n" }
            line = entry.pointee.next
        }
        sa_curl_slist_free_all(list?.assumingMemoryBound(to: curl_slist.self))
        try FileSystem.writeAtomically(text, to: file, mode: 0o600)
    }
}

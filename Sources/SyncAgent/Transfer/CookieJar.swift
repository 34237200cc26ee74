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

    /// curl refused to set up the jar: its words for why.
    struct Refused: Error, CustomStringConvertible {
        var description: String
    }

    private init(file: String?) throws {
        _ = CurlMulti.globalInit
        guard let share = sa_curl_share_init() else { throw Refused(description: "curl_share_init failed (out of memory)") }
        guard let handle = sa_curl_easy_init() else {
            let cleaned = sa_curl_share_cleanup(share)
            assert(cleaned == CURLSHE_OK, "curl_share_cleanup of an unused share: \(cleaned)")
            throw Refused(description: "curl_easy_init failed (out of memory)")
        }
        self.share = share
        self.handle = handle
        self.file = file
        let sharing = sa_share_setopt_long(share, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_COOKIE.rawValue))
        guard sharing == CURLSHE_OK else { throw Refused(description: "curl would not share cookies (CURLSHcode \(sharing.rawValue))") }
        try use(in: handle)
        if let file, FileSystem.exists(file) {
            try check(sa_easy_setopt_string(handle, CURLOPT_COOKIEFILE, file), "read the cookie file \(file)")
            try check(sa_easy_setopt_string(handle, CURLOPT_COOKIELIST, "RELOAD"), "load the cookie file \(file)")
        }
    }

    deinit {
        sa_curl_easy_cleanup(handle)
        // Only a share still in use fails to clean up; every handle using it is gone with the agent.
        let cleaned = sa_curl_share_cleanup(share)
        assert(cleaned == CURLSHE_OK, "curl_share_cleanup: \(cleaned)")
    }

    private func check(_ code: CURLcode, _ what: String) throws {
        guard code == CURLE_OK else { throw Refused(description: "curl would not \(what): \(String(cString: sa_curl_easy_strerror(code)))") }
    }

    /// Gives `easy` the shared cookies (and turns its cookie engine on).
    func use(in easy: UnsafeMutableRawPointer) throws {
        try check(sa_easy_setopt_pointer(easy, CURLOPT_SHARE, share), "share its cookies with a transfer")
        // An empty file name enables the engine without reading anything.
        try check(sa_easy_setopt_string(easy, CURLOPT_COOKIEFILE, ""), "turn a transfer's cookie engine on")
    }

    /// Rewrites the jar file with every cookie held now: written beside it,
    /// flushed, then renamed over it, so a crash leaves the old or the new jar.
    func save() throws {
        guard let file else { return }
        var list: UnsafeMutableRawPointer?
        try check(sa_easy_getinfo_pointer(handle, CURLINFO_COOKIELIST, &list), "list the cookies it holds")
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

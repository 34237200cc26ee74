import Foundation

/// What a notice offers to do, where the notification server shows
/// buttons (its capabilities include "actions"). Both go through ways the
/// agent already has: opening is the file manager's; a retry is a `resume`
/// control job in the inbox, as `syncagent resume` writes, so it is logged,
/// applied once, and waits across a restart.
public enum NoticeAction: Equatable, Sendable {
    /// "Open folder": the published files the notice is about, shown in their folders.
    case openFolder(files: [String])
    /// "Retry": the failed tasks the notice is about, run again.
    case retry(tasks: [String])

    /// Its name on D-Bus: what `ActionInvoked` says was clicked.
    public var key: String {
        switch self {
        case .openFolder: "open-folder"
        case .retry: "retry"
        }
    }

    /// The button's words.
    public var label: String {
        switch self {
        case .openFolder: "Open folder"
        case .retry: "Retry"
        }
    }

    /// Whether a click on the notice's body ("default") does this one's
    /// work: opening is what a click on a finished download means; a retry
    /// goes only by its own button, never by a stray click.
    public var isDefault: Bool {
        if case .openFolder = self { true } else { false }
    }

    /// The key a notification server sends for a click on the body.
    public static let defaultKey = "default"
}

/// Which folders "Open folder" opens, and how the file manager is told.
public enum FolderOpening {
    /// Folders one click opens at most: a batch spread over fifty folders
    /// must not open fifty windows.
    public static let foldersUpTo = 3

    /// The files to show, each once, in the notice's order: those in its
    /// first `foldersUpTo` folders. Paths that are not absolute are left out.
    public static func shown(_ files: [String]) -> [String] {
        var seenFiles = Set<String>()
        var folders: [String] = []
        var shown: [String] = []
        for file in files where file.hasPrefix("/") && seenFiles.insert(file).inserted {
            let folder = self.folder(of: file)
            if !folders.contains(folder) {
                guard folders.count < foldersUpTo else { continue }
                folders.append(folder)
            }
            shown.append(file)
        }
        return shown
    }

    /// The folders holding `files`, each once, in order.
    public static func folders(of files: [String]) -> [String] {
        var folders: [String] = []
        for file in files {
            let folder = self.folder(of: file)
            if !folders.contains(folder) { folders.append(folder) }
        }
        return folders
    }

    /// The folder an absolute path is in ("/" for one at the root).
    public static func folder(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// A `file://` URI for an absolute path (RFC 8089): every byte but the
    /// unreserved ones and `/` percent-encoded, so a name with spaces, `#`,
    /// `%` or non-ASCII letters reaches the file manager as it is on disk.
    public static func fileURI(_ path: String) -> String {
        var uri = "file://"
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "/"):
                uri.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                uri += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return uri
    }
}

private extension String {
    func leftPadded(to width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}

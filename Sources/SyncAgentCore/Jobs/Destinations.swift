import Foundation

/// Two live tasks never share a destination or a partial file (SPEC §4.2).
/// A destination is reserved when its task is created — the fold keeps
/// every reservation — and `overwrite` is decided against reserved names as
/// well as against the files on disk.
public enum Destinations {
    /// What a new task does with the destination it asked for.
    public enum Decision: Equatable, Sendable {
        /// The task is created with this destination (the requested one, or
        /// `name.N.ext` for `overwrite = "rename"`).
        case use(String)
        /// `overwrite = "skip"`: another task already brings this file; the
        /// new task ends at once as finished, with this reason.
        case skip(String, reason: String)
        /// The new task ends at once as failed, with this reason.
        case refuse(String, reason: String)
    }

    /// The partial file of a destination.
    public static func partPath(of dest: String) -> String { dest + ".part" }

    /// `debian.iso` → `debian.N.iso` (N ≥ 1); N = 0 is the name itself.
    public static func candidate(_ dest: String, number: Int) -> String {
        guard number > 0 else { return dest }
        let slash = dest.lastIndex(of: "/").map { dest.index(after: $0) } ?? dest.startIndex
        let name = dest[slash...]
        // A leading dot is part of the name (".bashrc"), not an extension.
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            return "\(dest[..<dot]).\(number)\(dest[dot...])"
        }
        return "\(dest).\(number)"
    }

    /// The live task (other than `owner`) whose file or partial file would
    /// collide with `path` used as a destination, if any.
    public static func holder(of path: String, in state: AgentState, except owner: String? = nil) -> String? {
        for key in [path, partPath(of: path)] {
            if let holder = state.holder(ofDestination: key), holder != owner { return holder }
        }
        // `path` may itself be another task's partial file (`x.part` when `x` is reserved).
        if path.hasSuffix(".part"), let holder = state.holder(ofDestination: String(path.dropLast(5))), holder != owner {
            return holder
        }
        return nil
    }

    /// `dest` if no other live task holds it and it is not on disk (nor its
    /// partial file), else the first such `dest.N` from `hint` on.
    public static func firstFree(_ dest: String, owner: String? = nil, in state: AgentState, from hint: Int = 1,
                                 exists: (String) -> Bool) -> (path: String, number: Int) {
        func isFree(_ path: String) -> Bool {
            holder(of: path, in: state, except: owner) == nil && !exists(path) && !exists(partPath(of: path))
        }
        if isFree(dest) { return (dest, 0) }
        var number = max(1, hint)
        while true {
            let path = candidate(dest, number: number)
            if isFree(path) { return (path, number) }
            number += 1
        }
    }

    /// Where `rename` goes on looking for a free `dest.N`: the numbers below
    /// were taken when it last looked. Without it, a thousand jobs for one
    /// file name each probed 1, 2, 3 … (two stats a probe): 6,000 such jobs
    /// took 10 s, in one loop turn, found by an adversary. Bounded: it
    /// starts afresh past `capacity` names (a hint only saves probes).
    public struct RenameHints: Sendable {
        var next: [String: Int] = [:]
        static let capacity = 4096
        public init() {}

        mutating func found(_ number: Int, for dest: String) {
            guard number > 0 else { return }
            if next.count >= Self.capacity, next[dest] == nil { next.removeAll() }
            next[dest] = number + 1
        }
    }

    /// The decision at creation. Of the files on disk, `rename` avoids
    /// both the destination and its partial name; the others refuse a
    /// partial file they would truncate, and look at the destination itself
    /// when the task starts (`skip`, `fail`) or publishes (`replace`).
    /// The live task whose folder `path` lies in: an HLS video's own folder
    /// (its destination) or its work folder (`DEST.part/`). No name inside
    /// those is free, whatever its number.
    public static func folderHolder(of path: String, in state: AgentState) -> String? {
        // Walked on bytes: a Character walk back through every folder cost more than the lookups.
        var folder = path.utf8[...]
        while let slash = folder.lastIndex(of: UInt8(ascii: "/")), slash > folder.startIndex {
            folder = folder[..<slash]
            let name = String(Substring(folder))
            if let holder = state.holder(ofDestination: name) { return holder }
            if name.hasSuffix(".part"), let holder = state.holder(ofDestination: String(name.dropLast(5))) {
                return holder
            }
        }
        return nil
    }

    public static func decide(dest: String, overwrite: OverwriteMode, in state: AgentState,
                              exists: (String) -> Bool) -> Decision {
        var hints = RenameHints()
        return decide(dest: dest, overwrite: overwrite, in: state, hints: &hints, exists: exists)
    }

    /// As above, going on from where the last `rename` of the same name stopped.
    public static func decide(dest: String, overwrite: OverwriteMode, in state: AgentState, hints: inout RenameHints,
                              exists: (String) -> Bool) -> Decision {
        if let holder = folderHolder(of: dest, in: state) {
            return .refuse(dest, reason: "\(dest) lies in a folder of task \(holder) (\(state[holder]?.phase.rawValue ?? "live")); "
                           + "nothing else writes there")
        }
        if overwrite == .rename {
            let free = firstFree(dest, in: state, from: hints.next[dest] ?? 1, exists: exists)
            hints.found(free.number, for: dest)
            return .use(free.path)
        }
        guard let holder = holder(of: dest, in: state) else {
            // A partial file no live task holds is someone's: the user's, another
            // agent's, or a failed task's kept bytes. Never truncated by a new task.
            let part = partPath(of: dest)
            guard exists(part) else { return .use(dest) }
            let keeper = state.orderedTasks.last { $0.phase == .failed && $0.partPath == part }
            let whose = keeper.map { "the bytes task \($0.id) kept when it failed (resume or cancel it)" }
                ?? "not a partial file of this agent's"
            return .refuse(dest, reason: "\(part) exists and is \(whose); move it away, or use overwrite = \"rename\"")
        }
        let phase = state[holder]?.phase.rawValue ?? "live"
        switch overwrite {
        case .skip:
            return .skip(dest, reason: "skipped: task \(holder) (\(phase)) already brings \(dest)")
        case .fail, .replace, .update:
            return .refuse(dest, reason: "\(dest) is the destination of task \(holder) (\(phase)); two tasks never write one file (overwrite = \"\(overwrite.rawValue)\")")
        case .rename:
            return .use(dest)
        }
    }
}

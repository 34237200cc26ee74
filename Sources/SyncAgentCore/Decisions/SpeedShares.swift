import Foundation

/// `max_overall_speed` shared by the running transfers (aria2's
/// max-overall-download-limit), fairly: a transfer capped lower by its own
/// `max_speed` keeps its cap, and what it leaves is split among the others
/// (water-filling), so the sum never exceeds the overall cap and no
/// bandwidth a capped transfer cannot use is wasted.
public enum SpeedShares {
    /// - Parameters:
    ///   - overall: the shared cap; nil: none, each transfer keeps its own.
    ///   - own: each running transfer's own cap (nil: none).
    /// - Returns: the cap to give each transfer (nil: unlimited).
    public static func split(overall: Int64?, own: [String: Int64?]) -> [String: Int64?] {
        guard let overall, overall > 0, !own.isEmpty else { return own }
        var shares: [String: Int64?] = [:]
        var left = overall
        // Lowest own caps first: each takes min(its cap, an equal part of what is left).
        var open = own.sorted { ($0.value ?? .max, $0.key) < ($1.value ?? .max, $1.key) }
        while !open.isEmpty {
            let part = max(1, left / Int64(open.count))
            let (id, cap) = open.removeFirst()
            let share = min(cap ?? .max, part)
            shares[id] = share
            left = max(0, left - share)
        }
        return shares
    }
}

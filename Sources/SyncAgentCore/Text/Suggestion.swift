/// "Did you mean …?": the word meant, for a word mistyped.
public enum Suggestion {
    /// The candidate closest to `word` by edits (a letter added, dropped,
    /// changed, or two neighbours swapped: `stauts` → `status`), if it is
    /// close enough to be what was meant: at most one edit in a short word,
    /// two in one of five letters or more. Nil when none is, or two tie.
    public static func closest(to word: String, among candidates: [String]) -> String? {
        let typed = Array(word.lowercased())
        let allowed = typed.count >= 5 ? 2 : 1
        var best: (candidate: String, distance: Int)?
        var tied = false
        for candidate in candidates {
            let distance = edits(typed, Array(candidate.lowercased()))
            guard distance <= allowed else { continue }
            if let current = best, distance == current.distance { tied = true; continue }
            if best == nil || distance < best!.distance { best = (candidate, distance); tied = false }
        }
        return tied ? nil : best?.candidate
    }

    /// Optimal string alignment distance (Damerau–Levenshtein without
    /// repeated edits of one substring).
    static func edits(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var table = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { table[i][0] = i }
        for j in 0...b.count { table[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
                }
            }
        }
        return table[a.count][b.count]
    }
}

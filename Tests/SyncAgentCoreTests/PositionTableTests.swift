import Testing
import TestSupport
@testable import SyncAgentCore

/// The indexes of ids, destinations and job files store positions under
/// hashes in one open-addressed table: whatever is added and removed, it
/// answers as a list of (hash, position) pairs would.
@Suite("Position table")
struct PositionTableTests {
    /// Few distinct hashes, some alike in their low bits (one home slot), some
    /// equal: long runs, wrap-around at the table's end, moves on removal.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func answersAsAListOfPairs(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let hashes = (0..<24).map { index in index % 3 == 0 ? 7 : (index % 3 == 1 ? 7 | index << 32 : Int.random(in: .min ... .max, using: &random)) }
        var table = PositionTable()
        var model: [(hash: Int, position: Int)] = []
        for step in 0..<4_000 {
            let hash = hashes.randomElement(using: &random)!
            if Int.random(in: 0..<3, using: &random) > 0 || model.isEmpty {
                let position = step
                table.insert(hash: hash, position: position)
                model.append((hash, position))
            } else {
                let victim = model.remove(at: Int.random(in: 0..<model.count, using: &random))
                table.remove(hash: victim.hash, position: victim.position)
            }
            // A pair never stored is not found, and removing it changes nothing.
            table.remove(hash: hash, position: -5)
            #expect(table.count == model.count)
            if step % 97 == 0 || step > 3_900 {
                #expect(table.positions == model.map(\.position).sorted())
                for hash in Set(hashes) {
                    let stored = Set(model.filter { $0.hash == hash }.map(\.position))
                    var found: Set<Int> = []
                    _ = table.first(hash: hash) { found.insert($0); return false }
                    #expect(stored.isSubset(of: found), "every position under a hash is reached from its home")
                    for position in stored { #expect(table.first(hash: hash) { $0 == position } == position) }
                }
            }
        }
        // Equal whatever the order its pairs went in.
        var again = PositionTable()
        for pair in model.reversed() { again.insert(hash: pair.hash, position: pair.position) }
        #expect(again == table)
    }
}

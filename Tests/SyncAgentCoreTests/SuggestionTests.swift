import Testing
@testable import SyncAgentCore

@Suite("Did you mean …")
struct SuggestionTests {
    static let commands = ["run", "submit", "status", "replay", "events", "pause", "resume", "cancel", "forget", "compact", "help"]

    @Test(arguments: [
        ("stauts", "status"), ("sttaus", "status"), ("Status", "status"), ("sumbit", "submit"), ("replya", "replay"),
        ("evnets", "events"), ("paus", "pause"), ("resme", "resume"), ("cancle", "cancel"), ("froget", "forget"),
        ("comapct", "compact"), ("rn", "run"), ("hlep", "help"),
    ])
    func aMistypedCommandIsNamed(typed: String, meant: String) {
        #expect(Suggestion.closest(to: typed, among: Self.commands) == meant)
    }

    /// Too far from every command, or as near to two: nothing is guessed.
    @Test(arguments: ["nonsense", "stat", "x", "", "download", "st"])
    func aWordFarFromEveryCommandGetsNoGuess(typed: String) {
        #expect(Suggestion.closest(to: typed, among: Self.commands) == nil)
    }

    @Test func twoAsNearAreNoGuess() {
        #expect(Suggestion.closest(to: "bat", among: ["cat", "hat"]) == nil)
        #expect(Suggestion.edits(Array("stauts"), Array("status")) == 1)
        #expect(Suggestion.edits(Array("abc"), Array("")) == 3)
    }
}

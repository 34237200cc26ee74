/// A group of fields most values leave at their defaults: `TaskState`'s
/// details, `TaskSpec`'s rare keys.
protocol OutOfLineFields: Equatable, Sendable {
    init()
}

/// Such fields kept behind one pointer, absent while all of them hold their
/// defaults: a queued task then pays 8 bytes for them, not their whole size.
/// Copy on write, so the value holding it keeps value semantics.
struct OutOfLine<Fields: OutOfLineFields>: Equatable, Sendable {
    final class Box: @unchecked Sendable {
        // Changed only while uniquely referenced (see `fields`).
        fileprivate(set) var fields: Fields
        fileprivate init(_ fields: Fields) { self.fields = fields }
    }

    /// Nil, or fields that differ from the defaults (never a box of defaults:
    /// equality relies on it). Read one field in place through it
    /// (`box?.fields.x`): `fields` copies them all out.
    private(set) var box: Box?

    init() {}
    /// The fields themselves go in the box, not a copy: one is made for every task of a snapshot.
    init(_ fields: consuming Fields) { box = fields == Fields() ? nil : Box(fields) }

    var fields: Fields {
        get { box?.fields ?? Fields() }
        set {
            if newValue == Fields() {
                box = nil
            } else if box != nil, isKnownUniquelyReferenced(&box!) {
                box!.fields = newValue
            } else {
                box = Box(newValue)
            }
        }
    }

    /// Changes fields in place in a box no one else holds (the fold changes
    /// a running task's on every event), and makes no box to hold defaults.
    @inline(__always)
    mutating func modify(_ change: (inout Fields) -> Void) {
        if box != nil, isKnownUniquelyReferenced(&box!) {
            change(&box!.fields)
            if box!.fields == Fields() { box = nil }
        } else {
            var fields = box?.fields ?? Fields()
            change(&fields)
            box = fields == Fields() ? nil : Box(fields)
        }
    }

    static func == (lhs: OutOfLine, rhs: OutOfLine) -> Bool { lhs.box === rhs.box || lhs.fields == rhs.fields }
}

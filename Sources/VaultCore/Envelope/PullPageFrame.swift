/// A page of pulled changes in the binary encoding (Docs/envelope-v1.md §7.3): `"CVP" 0x01 || u32 count
/// || count × (u64 sequence || opt<bytes envelope>) || bool done || u64 next cursor || u32 n || n ×
/// commitment`, the commitments on the final page only.
///
/// The framing is checked for the whole page (a page that fails it applies nothing), but each change's
/// envelope is decoded on its own: since every envelope is length-prefixed, one that does not decode is
/// one change to quarantine (Docs/design.md §5), with its sequence and, when its header still reads, its
/// record id, and never a broken page.
public struct PullPageFrame: Sendable {
    /// The 4-byte marker that opens a page: "CVP" and the frame version 1.
    public static let magic: [UInt8] = [0x43, 0x56, 0x50, 0x01]
    /// The most changes in one page (the server's largest pull limit).
    public static let maxCount = 5_000
    /// The largest page, in bytes; a server ends a page early (`done` false) rather than pass it.
    public static let maxBytes = EnvelopeFrame.maxBytes

    /// One change: the sequence at which the server wrote a record's head, and where its envelope lies.
    public struct Change: Sendable, Hashable {
        /// The change's sequence in the owner's change log.
        public let sequence: UInt64
        /// Where the envelope's bytes lie in the page; nil when the server sent none.
        let range: Range<Int>?
    }

    /// The whole page as received.
    public let bytes: [UInt8]
    /// The changes, in increasing sequence order.
    public let changes: [Change]
    /// True when no later change existed when the page was made.
    public let done: Bool
    /// Where the next pull starts (`since`).
    public let nextCursor: UInt64
    /// On the final page, the newest state commitment of each tresor the pull covers (Docs/envelope-v1.md
    /// §3.4), signatures not yet checked; none on any other page.
    public let commitments: [StateCommitment]

    /// Checks the framing of a page that must follow `cursor`: the marker, the count (at most `maxCount`),
    /// every length prefix inside the body, each presence flag and `done` being 0 or 1, no trailing bytes,
    /// and sequences strictly increasing and above `cursor`, with `nextCursor` not behind it, and
    /// commitments well-formed and only on a final page. Envelopes are not decoded here (`envelope(of:)`).
    public init(bytes: [UInt8], after cursor: UInt64) throws(EnvelopeFrameError) {
        guard bytes.count <= Self.maxBytes else { throw .tooLarge("\(bytes.count) bytes; at most \(Self.maxBytes) are allowed") }
        var r = BinaryReader(bytes, bytes.startIndex..<bytes.endIndex)
        try r.expectMagic(Self.magic, "a page of changes")
        let count = Int(try framed { () throws(EnvelopeError) in try r.uint32("change count") })
        guard count <= Self.maxCount else { throw .tooLarge("it announces \(count) changes; at most \(Self.maxCount) are allowed") }
        // Every change takes at least 9 bytes (sequence and presence flag), and the page ends with 13 more.
        guard count <= max(0, r.remaining - 13) / 9 else {
            throw .malformed("it announces \(count) changes but holds only \(r.remaining) more bytes")
        }
        var changes: [Change] = []
        changes.reserveCapacity(count)
        var last = cursor
        for i in 0..<count {
            let change = try framed { () throws(EnvelopeError) in
                let sequence = try r.uint64("sequence of change \(i)")
                let present = try r.flag("presence flag of change \(i)")
                return Change(sequence: sequence, range: present ? try r.field("envelope of change \(i)") : nil)
            }
            guard change.sequence > last else { throw .malformed("its changes are out of order (change \(i) does not follow the one before)") }
            last = change.sequence
            changes.append(change)
        }
        let (done, next) = try framed { () throws(EnvelopeError) in (try r.flag("done flag"), try r.uint64("next cursor")) }
        let commitments = try r.commitments(max: EnvelopeFrame.maxCommitments)
        guard r.remaining == 0 else { throw .malformed("\(r.remaining) bytes follow the end of the page") }
        guard next >= cursor else { throw .malformed("its next cursor \(next) lies before the cursor \(cursor) it was asked after") }
        guard done || commitments.isEmpty else { throw .malformed("it carries state commitments but is not the final page") }
        self.bytes = bytes
        self.changes = changes
        self.done = done
        self.nextCursor = next
        self.commitments = commitments
    }

    /// Decodes the envelope of `change` in place. A change without one, or whose bytes are not a
    /// well-formed envelope, throws `malformed`: the caller quarantines that change and goes on.
    public func envelope(of change: Change) throws(EnvelopeError) -> Envelope {
        guard let range = change.range else { throw .malformed("the server sent no envelope for this change") }
        return try Envelope(binary: bytes, range: range)
    }

    /// The record id the change's envelope names, when at least its header is well-formed (also when
    /// the rest is not), so a quarantined change can say which record it was.
    public func recordID(of change: Change) -> RecordID? {
        guard let range = change.range else { return nil }
        var r = BinaryReader(bytes, range)
        return try? RecordHeader(reading: &r).recordID
    }

    /// The envelope bytes of `change` as received, or nil when the server sent none.
    public func envelopeBytes(of change: Change) -> ArraySlice<UInt8>? { change.range.map { bytes[$0] } }

    /// Encodes a page. `changes` hold each sequence with the envelope as the server stores it (sent as
    /// is, also when it would not decode) or nil for none. Refuses more than `maxCount` changes or
    /// `maxBytes` bytes: a server ends the page earlier instead, with `done` false.
    public static func encode(
        changes: [(sequence: UInt64, envelope: [UInt8]?)],
        done: Bool,
        nextCursor: UInt64,
        commitments: [StateCommitment] = []
    ) throws(EnvelopeFrameError)
        -> [UInt8]
    {
        guard changes.count <= maxCount else { throw .tooLarge("\(changes.count) changes; at most \(maxCount) are allowed") }
        let total =
            changes.reduce(head(count: 0).count) { $0 + changeCount(envelopeBytes: $1.envelope?.count) }
            + tail(done: done, nextCursor: nextCursor, commitments: commitments).count
        guard total <= maxBytes else { throw .tooLarge("\(total) bytes; at most \(maxBytes) are allowed") }
        var out = head(count: changes.count)
        out.reserveCapacity(total)
        for c in changes { appendChange(sequence: c.sequence, envelope: c.envelope, to: &out) }
        out.append(contentsOf: tail(done: done, nextCursor: nextCursor, commitments: commitments))
        return out
    }

    // A server writes a page in pieces as it sends it (the head, each change, the tail) instead of building
    // it whole: these are those pieces, byte for byte what `encode` joins.

    /// The marker and the change count.
    public static func head(count: Int) -> [UInt8] {
        var out = magic
        out.appendBigEndian(UInt32(count))
        return out
    }

    /// The bytes one change takes, with an envelope of `envelopeBytes` bytes or none.
    public static func changeCount(envelopeBytes: Int?) -> Int { 9 + (envelopeBytes.map { 4 + $0 } ?? 0) }

    /// Appends one change: its sequence, then its envelope as stored or an absent flag.
    public static func appendChange(sequence: UInt64, envelope: [UInt8]?, to out: inout [UInt8]) {
        out.appendBigEndian(sequence)
        out.append(envelope == nil ? 0 : 1)
        if let envelope { out.appendField(envelope) }
    }

    /// The `done` flag, the next cursor and the commitments (which only a final page carries).
    public static func tail(done: Bool, nextCursor: UInt64, commitments: [StateCommitment]) -> [UInt8] {
        var out: [UInt8] = [done ? 1 : 0]
        out.appendBigEndian(nextCursor)
        out.appendCommitments(done ? commitments : [])
        return out
    }
}

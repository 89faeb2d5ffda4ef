import Foundation
import VaultCrypto

/// LtHash16, the lattice-based homomorphic set hash of Bellare and Micciancio as deployed by Lewi et al.
/// ("Securing update propagation with homomorphic hashing", 2019): the hash of a set is the lane-wise
/// sum modulo 2^16 of its elements' 1024-lane expansions, so adding or removing one element costs one
/// expansion and 1024 additions, whatever the size of the set (Docs/envelope-v1.md §3.4). A state
/// commitment signs the BLAKE2b-256 of the 2048-byte state.
public struct LtHash: Sendable, Hashable {
    /// Lanes of 16 bits.
    public static let laneCount = 1024
    /// The state's size in bytes.
    public static let byteCount = laneCount * 2
    static let domain = "CareVault-lthash-v1"
    static let headDomain = "CareVault-head-v1"

    /// The lanes, each the sum modulo 2^16 of the elements' lanes.
    public private(set) var lanes: [UInt16]

    /// The hash of the empty set (every lane 0).
    public init() { lanes = [UInt16](repeating: 0, count: Self.laneCount) }

    /// A state from its 2048 bytes (lanes little-endian), as `bytes` wrote it.
    public init(bytes: [UInt8]) throws(EncodingError) {
        guard bytes.count == Self.byteCount else { throw .invalidValue("an LtHash state is \(Self.byteCount) bytes") }
        lanes = (0..<Self.laneCount).map { UInt16(bytes[2 * $0]) | UInt16(bytes[2 * $0 + 1]) << 8 }
    }

    /// The state as 2048 bytes, each lane little-endian.
    public var bytes: [UInt8] {
        var out = [UInt8](repeating: 0, count: Self.byteCount)
        for (i, lane) in lanes.enumerated() {
            out[2 * i] = UInt8(truncatingIfNeeded: lane)
            out[2 * i + 1] = UInt8(truncatingIfNeeded: lane >> 8)
        }
        return out
    }

    /// BLAKE2b-256 of the state's bytes: what a state commitment signs.
    public var digest: [UInt8] { (try? BLAKE2b.hash(bytes)) ?? [] }

    /// The element of a record head: `string "CareVault-head-v1" || bytes record id (32) || bytes version id (32)`.
    /// Both ids come as 64 hex digits, as the stores and the wire keep them.
    public static func headElement(recordID: String, versionID: String) throws(EncodingError) -> [UInt8] {
        guard let record = try? Hex.decode(recordID), record.count == 32 else { throw .invalidValue("a record id is not 64 hex digits") }
        guard let version = try? Hex.decode(versionID), version.count == 32 else { throw .invalidValue("a version id is not 64 hex digits") }
        var w = CanonicalWriter(domain: headDomain, capacity: 96)
        w.append(record)
        w.append(version)
        return w.bytes
    }

    /// An element's 2048 expansion bytes: the XChaCha20 keystream under BLAKE2b-256(`string
    /// "CareVault-lthash-v1" || element`) and a zero nonce.
    static func expand(_ element: [UInt8]) -> [UInt8] {
        // The element is self-delimiting (it starts with its own label), so it follows the label unprefixed.
        let seed = (try? BLAKE2b.hash(CanonicalWriter(domain: domain).bytes + element)) ?? []
        return (try? XChaCha20Stream.keystream(count: byteCount, key: seed, nonce: [UInt8](repeating: 0, count: 24))) ?? []
    }

    /// Adds `element` to the set.
    public mutating func add(_ element: [UInt8]) { combine(Self.expand(element), subtract: false) }

    /// Removes `element` from the set (it must have been added, or the state describes no set).
    public mutating func remove(_ element: [UInt8]) { combine(Self.expand(element), subtract: true) }

    /// Adds the head `versionID` of `recordID` (both hex).
    public mutating func add(recordID: String, versionID: String) throws(EncodingError) {
        add(try Self.headElement(recordID: recordID, versionID: versionID))
    }

    /// Removes the head `versionID` of `recordID` (both hex).
    public mutating func remove(recordID: String, versionID: String) throws(EncodingError) {
        remove(try Self.headElement(recordID: recordID, versionID: versionID))
    }

    /// Adds every lane of `other`: with `other` the sum of some elements, the same state as adding each.
    public mutating func add(_ other: LtHash) {
        lanes.withUnsafeMutableBufferPointer { l in
            other.lanes.withUnsafeBufferPointer { o in
                for i in 0..<Self.laneCount { l[i] = l[i] &+ o[i] }
            }
        }
    }

    /// This state with every lane of `other` added.
    public func adding(_ other: LtHash) -> LtHash {
        var sum = self
        sum.add(other)
        return sum
    }

    /// The sum of the elements of the heads `(recordID, versionID)` (both hex), expanded on every core:
    /// adding it to a state is adding each head, in any order (the lanes add modulo 2^16).
    public static func sum(ofHeads heads: [(recordID: String, versionID: String)]) async throws -> LtHash {
        let parts = try await Parallel.map(Parallel.chunks(heads.count), minChunk: 1) { try sum(ofHeads: heads, $0) }
        return parts.reduce(LtHash()) { $0.adding($1) }
    }

    /// The sum of the elements of `heads[range]`: one chunk of `sum(ofHeads:)` and `sumNow(ofHeads:)`.
    private static func sum(ofHeads heads: [(recordID: String, versionID: String)], _ range: Range<Int>) throws(EncodingError) -> LtHash {
        var part = LtHash()
        for i in range { try part.add(recordID: heads[i].recordID, versionID: heads[i].versionID) }
        return part
    }

    /// `sum(ofHeads:)` for a caller that cannot wait for tasks (inside a database transaction): the same
    /// sum, its chunks expanded on every core through Dispatch while the caller's thread waits.
    public static func sumNow(ofHeads heads: [(recordID: String, versionID: String)]) throws(EncodingError) -> LtHash {
        let ranges = Parallel.chunks(heads.count)
        // A chunk whose ids are not hex leaves its slot nil.
        var parts = [LtHash?](repeating: nil, count: ranges.count)
        parts.withUnsafeMutableBufferPointer { slots in
            // Each iteration writes its own slot only.
            nonisolated(unsafe) let slots = slots
            DispatchQueue.concurrentPerform(iterations: ranges.count) { k in slots[k] = try? sum(ofHeads: heads, ranges[k]) }
        }
        var total = LtHash()
        for part in parts {
            guard let part else { throw .invalidValue("a head's record id or version id is not 64 hex digits") }
            total.add(part)
        }
        return total
    }

    private mutating func combine(_ stream: [UInt8], subtract: Bool) {
        guard stream.count == Self.byteCount else { return }
        lanes.withUnsafeMutableBufferPointer { l in
            stream.withUnsafeBufferPointer { s in
                for i in 0..<Self.laneCount {
                    let x = UInt16(s[2 * i]) | UInt16(s[2 * i + 1]) << 8
                    l[i] = subtract ? l[i] &- x : l[i] &+ x
                }
            }
        }
    }
}

/// What a state commitment describes of one tresor's record heads (Docs/envelope-v1.md §3.4): their
/// LtHash, how many are live and how many are tombstones, and the newest HLC among them. Kept up to date
/// one head at a time as heads replace each other, at the cost of one or two LtHash updates per change.
public struct HeadSet: Sendable, Hashable {
    /// One record head: its version id (hex), whether it is a tombstone, and its HLC.
    public struct Head: Sendable, Hashable {
        /// The version id, 64 hex digits.
        public var versionID: String
        /// Whether the head is a tombstone.
        public var deleted: Bool
        /// The version's hybrid logical clock.
        public var timestamp: HLCTimestamp
        /// A head from its parts.
        public init(versionID: String, deleted: Bool, timestamp: HLCTimestamp) {
            self.versionID = versionID
            self.deleted = deleted
            self.timestamp = timestamp
        }
    }

    /// The HLC an empty set reports as its newest.
    public static let noTimestamp = HLCTimestamp(physicalMs: 0, counter: 0, deviceID: "")

    /// The LtHash of the heads.
    public var hash = LtHash()
    /// Live heads.
    public var live: UInt64 = 0
    /// Tombstone heads.
    public var deleted: UInt64 = 0
    /// The newest HLC among the heads. A head is only ever replaced by a newer one, so this is also the
    /// newest HLC ever added.
    public var newest = HeadSet.noTimestamp

    /// An empty set.
    public init() {}

    /// A set restored from its stored parts.
    public init(hash: LtHash, live: UInt64, deleted: UInt64, newest: HLCTimestamp) {
        self.hash = hash
        self.live = live
        self.deleted = deleted
        self.newest = newest
    }

    /// Makes `head` the head of `recordID` in place of `old` (nil when the set held none of it). With
    /// `alreadyAdded`, `head`'s element was added to `hash` beforehand (among a sum, `LtHash.sum(ofHeads:)`):
    /// the state that results is the same.
    public mutating func replace(recordID: String, old: Head?, with head: Head, alreadyAdded: Bool = false) throws(EncodingError) {
        if let old {
            guard old.versionID != head.versionID else {
                // No change, but for the element added beforehand.
                if alreadyAdded { try hash.remove(recordID: recordID, versionID: head.versionID) }
                return
            }
            try hash.remove(recordID: recordID, versionID: old.versionID)
            if old.deleted { deleted &-= 1 } else { live &-= 1 }
        }
        if !alreadyAdded { try hash.add(recordID: recordID, versionID: head.versionID) }
        if head.deleted { deleted &+= 1 } else { live &+= 1 }
        if newest < head.timestamp { newest = head.timestamp }
    }
}

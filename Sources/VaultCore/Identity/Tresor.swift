import Foundation
import VaultCrypto

/// One patient's key container for one category (Docs/envelope-v1.md §2). Its keys come in epochs:
/// epoch 1 is random, and every revocation starts a new epoch with a fresh key, so a revoked member's
/// old keys open nothing written afterwards.
public struct Tresor: Sendable, CustomStringConvertible {
    /// Deterministic from owner and category, so two devices that create the tresor of one category
    /// name it the same and the server can refuse the second with a conflict.
    public let id: UUID
    public let ownerID: UUID
    public let category: String
    /// Every epoch key this holder knows, by epoch number.
    public private(set) var keys: [UInt32: SymmetricKey]

    /// The newest epoch: the one new records are written under.
    public var currentEpoch: UInt32 { keys.keys.max() ?? 0 }

    /// The id of the tresor of `category` owned by `ownerID`.
    public static func id(ownerID: UUID, category: String) -> UUID {
        var w = CanonicalWriter(domain: "CareVault-tresor-id-v1")
        w.append(ownerID)
        w.append(category)
        var h = try! BLAKE2b.hash(w.bytes, outputLength: 16)
        h[6] = (h[6] & 0x0f) | 0x80  // a custom-version (8) RFC 9562 UUID, never mistaken for a random one
        h[8] = (h[8] & 0x3f) | 0x80
        return UUID(uuid: (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]))
    }

    /// A new tresor with a random epoch-1 key.
    public static func create(ownerID: UUID, category: String) -> Tresor {
        Tresor(ownerID: ownerID, category: category, keys: [1: .generate()])
    }

    /// A tresor known through its keys (e.g. opened from a grant).
    public init(ownerID: UUID, category: String, keys: [UInt32: SymmetricKey]) {
        self.id = Tresor.id(ownerID: ownerID, category: category)
        self.ownerID = ownerID
        self.category = category
        self.keys = keys
    }

    /// Starts a new epoch with a fresh random key and returns its number; nil, changing nothing, when the
    /// tresor is already at the last epoch a 32-bit number holds.
    @discardableResult
    public mutating func rotate() -> UInt32? {
        let (next, overflow) = currentEpoch.addingReportingOverflow(1)
        guard !overflow else { return nil }
        keys[next] = .generate()
        return next
    }

    /// Adds keys learnt from a grant (e.g. a newer epoch made on another device).
    public mutating func merge(keys more: [UInt32: SymmetricKey]) {
        keys.merge(more) { old, _ in old }
    }

    /// The key of `epoch`, or an error naming the missing epoch.
    public func key(epoch: UInt32) throws(EnvelopeError) -> SymmetricKey {
        guard let key = keys[epoch] else { throw .missingEpochKey(epoch) }
        return key
    }

    /// The key new records are sealed under.
    public var currentKey: SymmetricKey { keys[currentEpoch]! }

    public var description: String { "Tresor(\(category), epochs \(keys.keys.sorted()), keys: <redacted>)" }
}

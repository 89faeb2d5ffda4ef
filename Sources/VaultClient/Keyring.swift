import Foundation
import VaultCore
import VaultCrypto

/// The tresors and epoch keys a device holds, encrypted at rest under a subkey of the account's local
/// storage key (`UnlockedAccount.localStorageKey`, Docs/envelope-v1.md §2), which exists after a password
/// unlock and after a remembered-key unlock alike; a stolen device folder without either opens nothing.
public struct Keyring: Sendable {
    /// Tresors by category.
    public private(set) var tresors: [String: Tresor] = [:]

    /// A keyring holding `tresors` (by category).
    public init(tresors: [String: Tresor] = [:]) { self.tresors = tresors }

    /// The tresor of `category`, if the device holds its keys.
    public subscript(category: String) -> Tresor? { tresors[category] }

    /// Adds or merges a tresor's keys.
    public mutating func merge(_ tresor: Tresor) {
        if var existing = tresors[tresor.category] {
            existing.merge(keys: tresor.keys)
            tresors[tresor.category] = existing
        } else {
            tresors[tresor.category] = tresor
        }
    }

    static let context = try! KDFContext("CVkeyrng")
    static let domain = "CareVault-keyring-v1"

    struct Sealed: Codable {
        var nonce: AEADNonce
        var ciphertext: String
    }

    /// What a keyring is sealed under: a subkey of the account's local storage key, bound to its owner.
    public struct Seal: Sendable {
        let key: SymmetricKey
        let ownerID: UUID

        /// The seal of `ownerID`'s keyring under `key` (the account's local storage key).
        public init(key: SymmetricKey, ownerID: UUID) {
            self.key = key
            self.ownerID = ownerID
        }
    }

    /// The keyring sealed under `seal` (Docs/envelope-v1.md §2.5): the bytes of the row in the device's
    /// database, as they were the bytes of the keyring file before it.
    public func sealed(_ seal: Seal) throws -> Data {
        var w = CanonicalWriter(domain: Self.domain)
        w.append(UInt32(tresors.count))
        for t in tresors.values.sorted(by: { $0.category < $1.category }) {
            w.append(t.ownerID)
            w.append(t.category)
            w.append(UInt32(t.keys.count))
            for (epoch, key) in t.keys.sorted(by: { $0.key < $1.key }) {
                w.append(epoch)
                var k = key.copyBytes()
                w.append(k)
                Memory.zero(&k)
            }
        }
        let nonce = AEADNonce.random()
        var ad = CanonicalWriter(domain: Self.domain)
        ad.append(seal.ownerID)
        let sealed = AEAD.seal(w.bytes, key: seal.key.deriveSubkey(id: 1, context: Self.context), nonce: nonce, associatedData: ad.bytes)
        w.wipe()
        return try JSONEncoder().encode(Sealed(nonce: nonce, ciphertext: Base64URL.encode(sealed)))
    }

    /// Opens a keyring sealed under `seal`; `what` names it in the integrity error a wrong key or damaged
    /// bytes raise.
    public static func open(_ data: Data, seal: Seal, what: String) throws -> Keyring {
        do {
            let sealed = try JSONDecoder().decode(Sealed.self, from: data)
            var ad = CanonicalWriter(domain: domain)
            ad.append(seal.ownerID)
            var plain = try AEAD.open(
                try Base64URL.decode(sealed.ciphertext),
                key: seal.key.deriveSubkey(id: 1, context: context),
                nonce: sealed.nonce,
                associatedData: ad.bytes
            )
            defer { Memory.zero(&plain) }
            var r = try CanonicalReader(plain, domain: domain)
            var ring = Keyring()
            for _ in 0..<(try r.readUInt32()) {
                let owner = try r.readUUID()
                let category = try r.readString()
                var keys: [UInt32: SymmetricKey] = [:]
                for _ in 0..<(try r.readUInt32()) {
                    let epoch = try r.readUInt32()
                    var raw = try r.readBytes()
                    keys[epoch] = try SymmetricKey(bytes: raw)
                    Memory.zero(&raw)
                }
                ring.merge(Tresor(ownerID: owner, category: category, keys: keys))
            }
            try r.finish()
            return ring
        } catch {
            throw ClientError.integrity("\(what) does not open (wrong key or damaged data)")
        }
    }

    /// Opens the keyring file earlier versions kept at `url` (moved into the device's database when the
    /// vault opens, `LocalStore.openKeyring`); an absent file is an empty keyring, a damaged one an
    /// integrity error.
    public static func load(from url: URL, key: SymmetricKey, ownerID: UUID) throws -> Keyring {
        guard let data = try SecureFiles.read(url) else { return Keyring() }
        return try open(data, seal: Seal(key: key, ownerID: ownerID), what: "the keyring at \(url.path)")
    }

    /// Re-seals under `key` a keyring file at `url` that opens only under `oldKey` (keyrings sealed before
    /// the local storage key existed used the password-derived wrapping key), so that the vault can move it
    /// into the device's database when it opens. Returns whether it re-sealed one; a keyring that opens
    /// under neither is left alone for the move to report. A keyring in the database is always sealed under
    /// the local storage key, which a password change or a recovery keeps: it is never re-sealed.
    @discardableResult
    public static func migrate(at url: URL, from oldKey: SymmetricKey, to key: SymmetricKey, ownerID: UUID) throws -> Bool {
        guard FileManager.default.fileExists(atPath: url.path), (try? load(from: url, key: key, ownerID: ownerID)) == nil,
            let ring = try? load(from: url, key: oldKey, ownerID: ownerID)
        else { return false }
        try SecureFiles.write(try ring.sealed(Seal(key: key, ownerID: ownerID)), to: url)
        return true
    }
}

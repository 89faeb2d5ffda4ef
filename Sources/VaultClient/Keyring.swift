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

    /// Seals the keyring for `url` under a subkey of `key`.
    public func save(to url: URL, key: SymmetricKey, ownerID: UUID) throws {
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
        ad.append(ownerID)
        let sealed = AEAD.seal(w.bytes, key: key.deriveSubkey(id: 1, context: Self.context), nonce: nonce, associatedData: ad.bytes)
        w.wipe()
        try SecureFiles.write(try JSONEncoder().encode(Sealed(nonce: nonce, ciphertext: Base64URL.encode(sealed))), to: url)
    }

    /// Opens the keyring at `url`; an absent file is an empty keyring, a damaged one an integrity error.
    public static func load(from url: URL, key: SymmetricKey, ownerID: UUID) throws -> Keyring {
        guard let data = try SecureFiles.read(url) else { return Keyring() }
        do {
            let sealed = try JSONDecoder().decode(Sealed.self, from: data)
            var ad = CanonicalWriter(domain: domain)
            ad.append(ownerID)
            var plain = try AEAD.open(
                try Base64URL.decode(sealed.ciphertext),
                key: key.deriveSubkey(id: 1, context: context),
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
            throw ClientError.integrity("the keyring at \(url.path) does not open (wrong key or damaged file)")
        }
    }

    /// Re-seals under `key` a keyring at `url` that opens only under `oldKey` (keyrings sealed before the
    /// local storage key existed used the password-derived wrapping key). Returns whether it re-sealed one;
    /// a keyring that opens under neither is left alone for `load` to report.
    @discardableResult
    public static func migrate(at url: URL, from oldKey: SymmetricKey, to key: SymmetricKey, ownerID: UUID) throws -> Bool {
        guard FileManager.default.fileExists(atPath: url.path), (try? load(from: url, key: key, ownerID: ownerID)) == nil,
            let ring = try? load(from: url, key: oldKey, ownerID: ownerID)
        else { return false }
        try ring.save(to: url, key: key, ownerID: ownerID)
        return true
    }
}

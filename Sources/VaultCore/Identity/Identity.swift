import Foundation
import VaultCrypto

/// What a user may do: patients own data and share it, doctors read what is shared with them.
public enum Role: String, Codable, Sendable, CaseIterable {
    case patient
    case doctor
}

/// Usernames are compared case-insensitively; this is the one normal form every component uses.
public enum Username {
    /// Lower-cases and validates a username: 3 to 32 characters of a-z, 0-9, '.', '_' or '-',
    /// starting with a letter or digit.
    public static func normalize(_ raw: String) throws(TrustError) -> String {
        let name = raw.lowercased()
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789._-")
        guard (3...32).contains(name.count), name.allSatisfy({ allowed.contains($0) }),
            let first = name.first, first.isLetter || first.isNumber
        else { throw TrustError.invalidUsername(raw) }
        return name
    }

    /// The key under which a name the caller typed is looked up: the normal form when the name is valid,
    /// else a stand-in that matches no account (every stored name is valid) and holds nothing a database
    /// could refuse or an attacker could size: `invalid-` and a hash of the text. For look-ups only;
    /// anything stored or signed goes through `normalize`.
    public static func lookupKey(_ raw: String) -> String {
        if let name = try? normalize(raw) { return name }
        return "invalid-" + Hex.encode((try? BLAKE2b.hash(Array(raw.utf8), outputLength: 16)) ?? [])
    }
}

/// A user's private keys: the Ed25519 signing pair, the X25519 box pair and the record-id key
/// (Docs/envelope-v1.md §2). Made on the client at registration and kept, wrapped, in the key bundle.
public struct Identity: Sendable, CustomStringConvertible {
    /// The user's id, chosen by the client at registration.
    public let userID: UUID
    /// Signs records, grants and registration requests.
    public let signing: SigningKeyPair
    /// Receives sealed tresor epoch keys.
    public let box: BoxKeyPair
    /// Keys the hash that turns natural keys into record ids (§5); only the patient's devices hold it.
    public let recordIDKey: SymmetricKey

    /// A new identity with fresh random keys.
    public static func generate(userID: UUID = UUID()) -> Identity {
        Identity(userID: userID, signing: .generate(), box: .generate(), recordIDKey: .generate())
    }

    /// Assembles an identity from its parts (as unwrapped from a key bundle).
    public init(userID: UUID, signing: SigningKeyPair, box: BoxKeyPair, recordIDKey: SymmetricKey) {
        self.userID = userID
        self.signing = signing
        self.box = box
        self.recordIDKey = recordIDKey
    }

    public var description: String { "Identity(\(userID.uuidString.lowercased()), keys: <redacted>)" }
}

/// Milliseconds since 1970, the time unit of every signed statement.
public typealias UnixMillis = Int64

extension Date {
    /// This date in whole milliseconds since 1970 (truncated towards the past).
    public var unixMillis: UnixMillis { UnixMillis((timeIntervalSince1970 * 1000).rounded(.down)) }
    /// The date `ms` milliseconds after 1970.
    public init(unixMillis ms: UnixMillis) { self.init(timeIntervalSince1970: Double(ms) / 1000) }
}

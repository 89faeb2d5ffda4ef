import CSodium
import Foundation

/// Argon2id cost parameters, stored beside each account so a password derives the same key on every
/// device. Clients refuse parameters below libsodium's INTERACTIVE limits (a server must not be able to
/// weaken a user's password hashing) and above a ceiling (nor make a client allocate unbounded memory).
public struct KDFParameters: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The only algorithm this version speaks: Argon2id, version 1.3.
    public static let argon2id13 = "argon2id13"

    /// Algorithm name; always `argon2id13` for now.
    public let algorithm: String
    /// Argon2 passes (libsodium's opslimit).
    public let opsLimit: UInt64
    /// Memory in bytes (libsodium's memlimit).
    public let memLimitBytes: UInt64

    /// libsodium's INTERACTIVE preset: the floor.
    public static var interactive: KDFParameters {
        KDFParameters(unchecked: UInt64(crypto_pwhash_opslimit_interactive()), UInt64(crypto_pwhash_memlimit_interactive()))
    }
    /// libsodium's MODERATE preset: the default for new accounts.
    public static var moderate: KDFParameters {
        KDFParameters(unchecked: UInt64(crypto_pwhash_opslimit_moderate()), UInt64(crypto_pwhash_memlimit_moderate()))
    }
    /// The ceiling: libsodium's SENSITIVE memory (1 GiB) and at most 10 passes.
    public static let maxOpsLimit: UInt64 = 10
    public static var maxMemLimitBytes: UInt64 { UInt64(crypto_pwhash_memlimit_sensitive()) }

    /// Validated parameters; throws `CryptoError.invalidParameters` outside [INTERACTIVE, ceiling].
    public init(algorithm: String = KDFParameters.argon2id13, opsLimit: UInt64, memLimitBytes: UInt64) throws(CryptoError) {
        self.algorithm = algorithm
        self.opsLimit = opsLimit
        self.memLimitBytes = memLimitBytes
        try validate()
    }

    private init(unchecked ops: UInt64, _ mem: UInt64) {
        algorithm = Self.argon2id13
        opsLimit = ops
        memLimitBytes = mem
    }

    /// Throws unless the parameters are acceptable to this client.
    public func validate() throws(CryptoError) {
        Sodium.ensureInitialized()
        guard algorithm == Self.argon2id13 else { throw .invalidParameters("unknown algorithm \(algorithm)") }
        let floor = Self.interactive
        guard opsLimit >= floor.opsLimit else { throw .invalidParameters("opslimit \(opsLimit) is below the floor \(floor.opsLimit)") }
        guard memLimitBytes >= floor.memLimitBytes else {
            throw .invalidParameters("memlimit \(memLimitBytes) is below the floor \(floor.memLimitBytes)")
        }
        guard opsLimit <= Self.maxOpsLimit else { throw .invalidParameters("opslimit \(opsLimit) is above the ceiling \(Self.maxOpsLimit)") }
        guard memLimitBytes <= Self.maxMemLimitBytes else {
            throw .invalidParameters("memlimit \(memLimitBytes) is above the ceiling \(Self.maxMemLimitBytes)")
        }
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let algorithm = try c.decode(String.self, forKey: .algorithm)
        let ops = try c.decode(UInt64.self, forKey: .opsLimit)
        let mem = try c.decode(UInt64.self, forKey: .memLimitBytes)
        do {
            try self.init(algorithm: algorithm, opsLimit: ops, memLimitBytes: mem)
        } catch {
            throw DecodingError.dataCorruptedError(forKey: .opsLimit, in: c, debugDescription: error.description)
        }
    }

    public var description: String { "\(algorithm)(ops: \(opsLimit), mem: \(memLimitBytes / 1_048_576) MiB)" }
}

/// Argon2id password hashing (`crypto_pwhash`), deriving a 32-byte master key from a password.
public enum PasswordHasher {
    /// Counts the Argon2id runs started by the tasks it is bound to (with `$runs.withValue`), so a caller
    /// can tell that a refusal came before any derivation whatever else the process derives meanwhile.
    public final class RunCount: @unchecked Sendable {
        private let lock = NSLock()
        private var count = 0
        public init() {}
        public var value: Int { lock.withLock { count } }
        func add() { lock.withLock { count += 1 } }
    }

    @TaskLocal public static var runs: RunCount?

    /// Derives the master key. Parameters are validated first, so a weakened or absurd parameter set is
    /// refused before any work is done.
    public static func deriveKey(password: [UInt8], salt: Salt, parameters: KDFParameters) throws(CryptoError) -> SymmetricKey {
        try parameters.validate()
        runs?.add()
        let secret = try SecureBytes(count: SymmetricKey.byteCount) { (out) throws(CryptoError) in
            // An empty password still needs a valid pointer for the C call.
            let input = password.isEmpty ? [0] : password
            let rc = input.withUnsafeBufferPointer { pw in
                pw.withMemoryRebound(to: CChar.self) { pwc in
                    // blocking: the caller runs it off the pool (PasswordKeys.derive goes through OffPool)
                    crypto_pwhash(
                        out.baseAddress!.assumingMemoryBound(to: UInt8.self),
                        UInt64(out.count),
                        pwc.baseAddress!,
                        UInt64(password.count),
                        salt.bytes,
                        parameters.opsLimit,
                        Int(parameters.memLimitBytes),
                        crypto_pwhash_ALG_ARGON2ID13
                    )
                }
            }
            if rc != 0 { throw CryptoError.passwordHashingFailed }
        }
        return SymmetricKey(unchecked: secret)
    }

    /// Derives the master key from a password string (its UTF-8 bytes).
    public static func deriveKey(password: String, salt: Salt, parameters: KDFParameters) throws(CryptoError) -> SymmetricKey {
        var bytes = Array(password.utf8)
        defer { bytes.withUnsafeMutableBytes { sodium_memzero($0.baseAddress, $0.count) } }
        return try deriveKey(password: bytes, salt: salt, parameters: parameters)
    }
}

/// An eight-byte `crypto_kdf` context. Each kind of derived key has its own, so keys for different
/// purposes are independent even when derived from one master key.
public struct KDFContext: Sendable, Hashable, CustomStringConvertible {
    /// The eight ASCII bytes.
    public let bytes: [UInt8]

    /// Throws `CryptoError.invalidContext` unless `text` is exactly eight bytes of UTF-8.
    public init(_ text: String) throws(CryptoError) {
        let b = Array(text.utf8)
        guard b.count == Int(crypto_kdf_contextbytes()) else { throw CryptoError.invalidContext(text) }
        bytes = b
    }

    public var description: String { String(decoding: bytes, as: UTF8.self) }
}

extension SymmetricKey {
    /// A 32-byte subkey of this master key (`crypto_kdf_derive_from_key`) for `context` and `id`.
    public func deriveSubkey(id: UInt64, context: KDFContext) -> SymmetricKey {
        Sodium.ensureInitialized()
        let out = secret.withUnsafeBytes { master in
            SecureBytes(count: SymmetricKey.byteCount) { sub in
                context.bytes.withUnsafeBufferPointer { ctx in
                    ctx.withMemoryRebound(to: CChar.self) { c in
                        _ = crypto_kdf_derive_from_key(
                            sub.baseAddress!.assumingMemoryBound(to: UInt8.self),
                            sub.count,
                            id,
                            c.baseAddress!,
                            master.baseAddress!.assumingMemoryBound(to: UInt8.self)
                        )
                    }
                }
            }
        }
        return SymmetricKey(unchecked: out)
    }
}

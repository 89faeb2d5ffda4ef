import Foundation
import VaultCore
import VaultCrypto

/// What the store says of an `Idempotency-Key` when a request arrives with it (Docs/design.md §6.2).
public enum IdempotencyClaim: Sendable, Equatable {
    /// The key is new (or an earlier try of it was abandoned): this request runs, and its answer is kept
    /// under `claim`, which only this try holds (an answer or release of a try taken over is refused).
    case claimed(claim: [UInt8])
    /// A request with this key ran to its end: its kept answer (sealed), to be sent again.
    case answered(status: Int, sealed: [UInt8])
    /// A request with this key is running now.
    case inProgress
    /// The key was used with another method, route or body.
    case reused
}

/// The keys of non-idempotent requests and their first answers, so a retry is answered, not run again.
public protocol IdempotencyRepository: Sendable {
    /// Claims `keyHash` for a request of `fingerprint`: inserts it as running when it is new, or takes over a
    /// running claim made before `abandonedBefore` (its request died with its server); else says what it is.
    func claimIdempotencyKey(
        _ keyHash: [UInt8],
        fingerprint: [UInt8],
        now: UnixMillis,
        abandonedBefore: UnixMillis
    ) async throws
        -> IdempotencyClaim
    /// Keeps the answer of the try that holds `claim`; false when another try took the claim over.
    func answerIdempotencyKey(_ keyHash: [UInt8], claim: [UInt8], status: Int, sealed: [UInt8]) async throws -> Bool
    /// Forgets the claim `claim` whose answer is not kept (a retry may run the request again).
    func releaseIdempotencyKey(_ keyHash: [UInt8], claim: [UInt8]) async throws
    /// The kept answer of `keyHash`, read only (nothing is claimed): `.answered`, `.reused` when the
    /// fingerprint differs, `.inProgress` when there is no answer.
    func keptIdempotencyAnswer(_ keyHash: [UInt8], fingerprint: [UInt8]) async throws -> IdempotencyClaim
}

enum IdempotencySQL {
    static func claim(_ keyHash: [UInt8], fingerprint: [UInt8], claim: [UInt8], now: UnixMillis) -> SQLStatement {
        """
        INSERT INTO idempotency_keys (key_hash, fingerprint, claim, status, response, created_at)
        VALUES (\(keyHash), \(fingerprint), \(claim), NULL, NULL, \(now)) ON CONFLICT (key_hash) DO NOTHING
        RETURNING created_at AS value
        """
    }

    static func read(_ keyHash: [UInt8], forUpdate: Bool) -> SQLStatement {
        """
        SELECT fingerprint, status, response, created_at FROM idempotency_keys WHERE key_hash = \(keyHash)\(forUpdate: forUpdate ? .wait : nil)
        """
    }

    static func takeOver(_ keyHash: [UInt8], claim: [UInt8], now: UnixMillis, abandonedBefore: UnixMillis) -> SQLStatement {
        """
        UPDATE idempotency_keys SET created_at = \(now), claim = \(claim)
        WHERE key_hash = \(keyHash) AND status IS NULL AND created_at < \(abandonedBefore)
        RETURNING created_at AS value
        """
    }

    static func answer(_ keyHash: [UInt8], claim: [UInt8], status: Int, sealed: [UInt8]) -> SQLStatement {
        """
        UPDATE idempotency_keys SET status = \(Int64(status)), response = \(sealed)
        WHERE key_hash = \(keyHash) AND claim = \(claim) AND status IS NULL
        RETURNING created_at AS value
        """
    }

    static func release(_ keyHash: [UInt8], claim: [UInt8]) -> SQLStatement {
        "DELETE FROM idempotency_keys WHERE key_hash = \(keyHash) AND claim = \(claim) AND status IS NULL"
    }

    /// Keys first seen before `before`, a batch at a time (the retention purge).
    static func expired(before: UnixMillis, batch: Int) -> SQLStatement {
        """
        DELETE FROM idempotency_keys WHERE key_hash IN (
            SELECT key_hash FROM idempotency_keys WHERE created_at < \(before) LIMIT \(Int64(batch))\(forUpdate: .skipLocked))
        RETURNING created_at AS value
        """
    }
}

/// One stored key.
struct IdempotencyRow: StoredRowDecodable, Sendable {
    var fingerprint: [UInt8]
    var status: Int64?
    var response: [UInt8]?
    init(stored r: some StoredRow) throws {
        fingerprint = try r.bytes("fingerprint")
        status = try r.optionalInt64("status")
        response = status == nil ? nil : try r.bytes("response")
    }
}

protocol SQLIdempotencyStore: IdempotencyRepository, SQLStore {}

extension SQLIdempotencyStore {
    public func claimIdempotencyKey(
        _ keyHash: [UInt8],
        fingerprint: [UInt8],
        now: UnixMillis,
        abandonedBefore: UnixMillis
    ) async throws
        -> IdempotencyClaim
    {
        let claim = RandomBytes.bytes(count: 16)
        return try await transaction(conflict: nil) { sql in
            if try await sql.row(StoredNumber.self, IdempotencySQL.claim(keyHash, fingerprint: fingerprint, claim: claim, now: now)) != nil {
                return .claimed(claim: claim)
            }
            guard let row = try await sql.row(IdempotencyRow.self, IdempotencySQL.read(keyHash, forUpdate: true)) else {
                // Purged between the two statements: as good as new, and the next try claims it.
                return .inProgress
            }
            guard constantTimeEqual(row.fingerprint, fingerprint) else { return .reused }
            if let status = row.status, let response = row.response { return .answered(status: Int(clamping: status), sealed: response) }
            let taken = try await sql.row(
                StoredNumber.self,
                IdempotencySQL.takeOver(keyHash, claim: claim, now: now, abandonedBefore: abandonedBefore)
            )
            return taken != nil ? .claimed(claim: claim) : .inProgress
        }
    }

    public func answerIdempotencyKey(_ keyHash: [UInt8], claim: [UInt8], status: Int, sealed: [UInt8]) async throws -> Bool {
        try await transaction(conflict: nil) { sql in
            try await sql.row(StoredNumber.self, IdempotencySQL.answer(keyHash, claim: claim, status: status, sealed: sealed)) != nil
        }
    }

    public func releaseIdempotencyKey(_ keyHash: [UInt8], claim: [UInt8]) async throws {
        try await transaction(conflict: nil) { sql in try await sql.execute(IdempotencySQL.release(keyHash, claim: claim)) }
    }

    public func keptIdempotencyAnswer(_ keyHash: [UInt8], fingerprint: [UInt8]) async throws -> IdempotencyClaim {
        guard let row = try await row(IdempotencyRow.self, IdempotencySQL.read(keyHash, forUpdate: false)) else { return .inProgress }
        guard constantTimeEqual(row.fingerprint, fingerprint) else { return .reused }
        if let status = row.status, let response = row.response { return .answered(status: Int(clamping: status), sealed: response) }
        return .inProgress
    }
}

/// Equal contents, compared in time that does not depend on where they differ.
private func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var diff: UInt8 = 0
    for i in a.indices { diff |= a[i] ^ b[i] }
    return diff == 0
}

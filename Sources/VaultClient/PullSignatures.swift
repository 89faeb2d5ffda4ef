import Foundation
import Synchronization
import VaultCore
import VaultCrypto

/// The Ed25519 checks of pulled envelopes (Docs/envelope-v1.md §4.4 step 3), as the pull path runs them.
/// Tests count them (`counter`) and can hold a reader to one check per record (`perRecordOnly`); both are
/// task-local, taken once where a pull's work begins (`current`) and carried from there by value.
public enum PullSignatures {
    /// Counts envelope signature checks.
    public final class Counter: Sendable {
        private let count = Mutex(0)
        /// A counter at zero.
        public init() {}
        /// The checks counted so far.
        public var value: Int { count.withLock { $0 } }
        func add() { count.withLock { $0 += 1 } }
    }

    /// Where the envelope signature checks of the pulls run in this task are counted.
    @TaskLocal public static var counter: Counter?
    /// True to check every pulled envelope's signature even when a commitment authenticates the page.
    @TaskLocal public static var perRecordOnly = false
}

/// How one pull checks envelope signatures, taken from the task that runs it.
struct SignatureCheck: Sendable {
    var counter: PullSignatures.Counter?
    var perRecordOnly: Bool

    static var current: SignatureCheck { SignatureCheck(counter: PullSignatures.counter, perRecordOnly: PullSignatures.perRecordOnly) }

    /// Every check of §4.4, the signature included.
    func openRecord(
        _ env: Envelope,
        keys: [UInt32: SymmetricKey],
        authorKey: SigningPublicKey,
        context: EnvelopeContext
    ) throws(EnvelopeError)
        -> OpenedRecord
    {
        counter?.add()
        return try env.openRecord(keys: keys, authorKey: authorKey, expecting: context)
    }

    /// The Ed25519 check of §4.4 step 3 alone, for a record whose other checks already ran.
    func isValidSignature(of env: Envelope, by authorKey: SigningPublicKey) -> Bool {
        counter?.add()
        return authorKey.isValidSignature(env.signature, for: env.signedBytes)
    }
}

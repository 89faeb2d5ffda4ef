import Foundation
import HummingbirdTesting
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

extension APIClient {
    /// The commitment at `sequence` to the set of `heads` (one envelope per record), as the patient's
    /// device signs it; `adjust` changes fields before it is signed.
    func commitment(
        _ patient: TestUser,
        _ tresor: Tresor,
        sequence: UInt64,
        heads: [Envelope],
        adjust: (inout StateCommitment) -> Void = { _ in }
    ) throws -> (StateCommitment, HeadSet) {
        var state = HeadSet()
        for e in heads {
            let head = HeadSet.Head(versionID: e.versionID, deleted: e.header.deleted, timestamp: e.header.timestamp)
            try state.replace(recordID: e.header.recordID.hex, old: nil, with: head)
        }
        var c = StateCommitment.make(
            patient: patient.identity,
            tresorID: tresor.id,
            category: tresor.category,
            sequence: sequence,
            state: state,
            topEpoch: tresor.currentEpoch,
            tresorVersion: 1,
            committedAt: harness.clock.millis
        )
        adjust(&c)
        return (c.signed(by: patient.identity.signing), state)
    }

    /// A push of `envelopes` with `commitments`, counting the server's envelope signature checks.
    func countedPush(_ patient: TestUser, _ envelopes: [Envelope], _ commitments: [StateCommitment]) async throws -> (TestResponse, Int) {
        let counter = PushSignatures.Counter()
        let body = try EnvelopeFrame.encode(envelopes, commitments: commitments)
        let r = try await PushSignatures.$counter.withValue(counter) { try await pushBatch(patient, body) }
        return (r, counter.value)
    }

    /// The envelopes the server holds of the patient, as stored.
    func storedEnvelopes(_ patient: TestUser) async throws -> [[UInt8]] {
        try await repository.changes(ownerID: patient.id, tresorID: nil, since: 0, limit: 1_000).map(\.envelope)
    }

    /// Expects `r` to be the refusal of a batch by its commitment of `tresor`.
    func expectMismatch(_ r: TestResponse, _ tresor: Tresor, _ note: Comment) throws {
        #expect(r.status == .conflict && errorCode(r) == .commitmentMismatch, note)
        let message = (try? decode(APIErrorBody.self, r).error.message) ?? ""
        #expect(message.contains(tresor.id.uuidString.lowercased()) && message.contains(tresor.category), note)
        #expect(message.contains("nothing stored"), note)
    }
}

/// The server's check of a push by its commitment (Docs/commitment-pages.md §5): a batch that matches the
/// commitment it carries is stored without one signature check per envelope, and one that does not match
/// stores nothing and is refused with 409 naming the tresor.
@Suite("API: push batches checked by their state commitment")
struct APICommitmentCheckTests {
    @Test(arguments: Backend.allCases)
    func aMatchingCommitmentStoresTheBatchWithoutEnvelopeSignatureChecks(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 150)
            let (c1, s1) = try api.commitment(patient, tresor, sequence: 1, heads: envelopes)
            let (r, checks) = try await api.countedPush(patient, envelopes, [c1])
            #expect(r.status == .ok)
            #expect(try api.decode(PushResponse.self, r).results.allSatisfy { $0.status == .stored })
            #expect(checks == 0, "no envelope signature was verified")
            #expect(try await api.storedEnvelopes(patient) == envelopes.map(\.binary))
            #expect(try await api.repository.storedState(owner: patient.id, tresor: tresor.id) == s1)
            #expect(try api.page(try await api.pull(patient.token)).commitments == [c1])

            // Without a commitment, every envelope's signature is verified (the counter counts).
            let more = try api.envelopes(patient, tresor, count: 3, prefix: "m")
            let (plain, counted) = try await api.countedPush(patient, more, [])
            #expect(plain.status == .ok && counted == 3)
            // The stored commitment no longer describes the state: the next commitment cannot be expected to
            // match, so its batch is checked one by one (and stored, as before this check).
            let last = try api.envelopes(patient, tresor, count: 2, prefix: "l")
            let (c2, _) = try api.commitment(patient, tresor, sequence: 2, heads: envelopes + more + last)
            let (after, checkedAfter) = try await api.countedPush(patient, last, [c2])
            #expect(after.status == .ok && checkedAfter == 2)
            // Now it does again: the next batch goes by its commitment.
            let final = try api.envelopes(patient, tresor, count: 4, prefix: "f")
            let (c3, s3) = try api.commitment(patient, tresor, sequence: 3, heads: envelopes + more + last + final)
            let (done, checkedDone) = try await api.countedPush(patient, final, [c3])
            #expect(done.status == .ok && checkedDone == 0)
            #expect(try await api.repository.storedState(owner: patient.id, tresor: tresor.id) == s3)
        }
    }

    /// One envelope swapped for another validly signed envelope of the same patient: of the same record,
    /// or of another record. The commitment does not match and nothing of the batch is stored.
    @Test(arguments: Backend.allCases)
    func anEnvelopeSwappedForAnotherValidlySignedOneIsRefusedWhole(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let first = try api.envelopes(patient, tresor, count: 3)
            let (c1, s1) = try api.commitment(patient, tresor, sequence: 1, heads: first)
            #expect(try await api.countedPush(patient, first, [c1]).0.status == .ok)
            let stored = try await api.storedEnvelopes(patient)

            api.harness.clock.advance(by: 1_000)
            let signed = try api.envelope(patient, tresor, record: "r1", payload: "the version the device committed to")
            let sameRecord = try api.envelope(patient, tresor, record: "r1", payload: "another version of the record")
            let otherRecord = try api.envelope(patient, tresor, record: "r9", payload: "a version of another record")
            let fresh = try api.envelope(patient, tresor, record: "r5", payload: "new")
            let (c2, _) = try api.commitment(patient, tresor, sequence: 2, heads: [first[0], signed, first[2], fresh])
            for swapped in [sameRecord, otherRecord] {
                let (r, checks) = try await api.countedPush(patient, [swapped, fresh], [c2])
                try api.expectMismatch(r, tresor, "swapped")
                #expect(checks == 0)
            }
            #expect(try await api.storedEnvelopes(patient) == stored, "nothing stored")
            #expect(try await api.repository.storedState(owner: patient.id, tresor: tresor.id) == s1)
            #expect(try api.page(try await api.pull(patient.token)).commitments == [c1], "the commitment was not replaced")
            // The batch the commitment describes goes through, at the next change sequence numbers.
            let (r, _) = try await api.countedPush(patient, [signed, fresh], [c2])
            #expect(try api.decode(PushResponse.self, r).results.map(\.sequence) == [4, 5])
        }
    }

    /// One byte of an envelope changed: its version id is not the one committed to. Without a commitment
    /// the same envelope is refused by its signature, one by one, as before.
    @Test(arguments: Backend.allCases)
    func aTamperedByteIsRefusedWithOrWithoutACommitment(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 3)
            let (c1, _) = try api.commitment(patient, tresor, sequence: 1, heads: envelopes)
            var tampered = envelopes
            tampered[1].ciphertext[5] ^= 0x01
            let (r, _) = try await api.countedPush(patient, tampered, [c1])
            try api.expectMismatch(r, tresor, "a changed ciphertext byte")
            #expect(try await api.storedEnvelopes(patient).isEmpty)

            let (plain, checks) = try await api.countedPush(patient, tampered, [])
            let results = try api.decode(PushResponse.self, plain).results
            #expect(results.map(\.status) == [.stored, .rejected, .stored] && results[1].code == .invalidSignature)
            #expect(checks == 3)
        }
    }

    /// The commitment's own signature is verified once: a bad one refuses the push (400), whatever the fold.
    @Test(arguments: Backend.allCases)
    func aCommitmentWithABadSignatureIsRefused(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 2)
            var (c1, _) = try api.commitment(patient, tresor, sequence: 1, heads: envelopes)
            c1.live += 1
            let (r, _) = try await api.countedPush(patient, envelopes, [c1])
            #expect(r.status == .badRequest && api.errorCode(r) == .invalidSignature)
            let intruder = Identity.generate()
            let (forged, _) = try api.commitment(patient, tresor, sequence: 1, heads: envelopes)
            let (r2, _) = try await api.countedPush(patient, envelopes, [forged.signed(by: intruder.signing)])
            #expect(r2.status == .badRequest && api.errorCode(r2) == .invalidSignature)
            #expect(try await api.storedEnvelopes(patient).isEmpty)
        }
    }

    /// A sequence past what the store keeps (signed 64-bit) is refused: stored, it would come back negative
    /// and every later commitment of the tresor would be stale for good.
    @Test(arguments: Backend.allCases)
    func aSequenceTheStoreCannotKeepIsRefused(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 2)
            for sequence in [UInt64(Int64.max) + 1, .max] {
                let (c, _) = try api.commitment(patient, tresor, sequence: sequence, heads: envelopes)
                let (r, _) = try await api.countedPush(patient, envelopes, [c])
                #expect(r.status == .badRequest, "sequence \(sequence)")
            }
            #expect(try await api.storedEnvelopes(patient).isEmpty)
            let (ok, _) = try api.commitment(patient, tresor, sequence: 1, heads: envelopes)
            let (r, _) = try await api.countedPush(patient, envelopes, [ok])
            #expect(r.status == .ok, "the tresor is not stuck")
        }
    }

    /// A commitment that leaves an envelope of the batch out, or whose counts or newest HLC are not the
    /// fold's (signed as the patient, so only the comparison can refuse them).
    @Test(arguments: Backend.allCases)
    func aCommitmentThatOmitsAnEnvelopeOrStatesWrongCountsOrHLCIsRefused(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 3)
            let (omits, _) = try api.commitment(patient, tresor, sequence: 1, heads: Array(envelopes.prefix(2)))
            let later = HLCTimestamp(physicalMs: UInt64(api.harness.clock.millis) + 1, counter: 0, deviceID: "device-1")
            let wrong: [(String, (inout StateCommitment) -> Void)] = [
                ("live", { $0.live += 1 }), ("deleted", { $0.deleted = 1 }), ("newest", { $0.newest = later }),
                ("digest", { $0.digest = String(repeating: "0", count: 64) }),
            ]
            var refusals = [("omits an envelope", omits)]
            for (field, change) in wrong {
                refusals.append((field, try api.commitment(patient, tresor, sequence: 1, heads: envelopes, adjust: change).0))
            }
            for (what, c) in refusals {
                let (r, _) = try await api.countedPush(patient, envelopes, [c])
                try api.expectMismatch(r, tresor, "\(what)")
            }
            #expect(try await api.storedEnvelopes(patient).isEmpty)
            // A push of commitments alone is compared too.
            let (none, _) = try await api.countedPush(patient, [], [omits])
            try api.expectMismatch(none, tresor, "a commitment alone")
        }
    }

    /// A batch without a commitment keeps the check of each envelope's signature; and a batch whose
    /// envelope fails another check (here a clock too far ahead) is checked one by one, so the device
    /// learns which envelope was refused; its commitment is stored under the sequence rule, as before.
    @Test(arguments: Backend.allCases)
    func envelopesAreCheckedOneByOneWithoutACommitmentOrWhenOneFailsAnotherCheck(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let good = try api.envelopes(patient, tresor, count: 2)
            let forged = try api.envelope(patient, tresor, record: "x", payload: "p", signer: .generate())
            let (plain, checks) = try await api.countedPush(patient, good + [forged], [])
            let results = try api.decode(PushResponse.self, plain).results
            #expect(results.map(\.status) == [.stored, .stored, .rejected] && results[2].code == .invalidSignature)
            #expect(checks == 3)

            let ahead = UInt64(api.harness.clock.millis) + APILimits.maxForwardDriftMs + 60_000
            let skewed = try api.envelope(patient, tresor, record: "y", payload: "p", physicalMs: ahead)
            let fine = try api.envelopes(patient, tresor, count: 2, prefix: "z")
            let (c1, _) = try api.commitment(patient, tresor, sequence: 1, heads: good + fine + [skewed])
            let (r, counted) = try await api.countedPush(patient, fine + [skewed], [c1])
            let answer = try api.decode(PushResponse.self, r).results
            #expect(r.status == .ok && answer.map(\.status) == [.stored, .stored, .rejected] && answer[2].code == .clockSkew)
            #expect(counted == 2, "the envelopes that passed every other check had their signatures verified")
            #expect(try api.page(try await api.pull(patient.token)).commitments == [c1])
        }
    }

    /// The sequence rule comes first and is unchanged: a stale commitment is a 409 `conflict`.
    @Test(arguments: Backend.allCases)
    func aStaleCommitmentIsStillAConflict(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let (patient, tresor) = try await api.patientWithTresor()
            let envelopes = try api.envelopes(patient, tresor, count: 2)
            let (c1, _) = try api.commitment(patient, tresor, sequence: 1, heads: envelopes)
            #expect(try await api.countedPush(patient, envelopes, [c1]).0.status == .ok)
            let more = try api.envelopes(patient, tresor, count: 1, prefix: "n")
            let (again, _) = try api.commitment(patient, tresor, sequence: 1, heads: envelopes + more)
            let (r, _) = try await api.countedPush(patient, more, [again])
            #expect(r.status == .conflict && api.errorCode(r) == .conflict)
            #expect(try await api.storedEnvelopes(patient).count == 2)
        }
    }
}

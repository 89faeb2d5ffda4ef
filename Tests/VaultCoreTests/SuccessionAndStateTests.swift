import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

@Suite("Grant succession, share and account states")
struct SuccessionAndStateTests {
    /// A grant of `tresor` to the fixture's doctor, optionally only some epochs.
    private func grant(_ f: TrustFixture, _ tresor: Tresor, epochs: [UInt32]? = nil, expiresAt: UnixMillis? = 500) throws -> Grant {
        try Grant.make(
            patient: f.patient,
            member: f.doctorCert,
            adminKey: f.admin.publicKey,
            tresor: tresor,
            epochs: epochs,
            createdAt: 1,
            expiresAt: expiresAt
        )
    }

    @Test func aRotatedGrantSucceedsTheOneItExtends() throws {
        let f = try TrustFixture()
        var tresor = Tresor.create(ownerID: f.patient.userID, category: "interventions")
        let first = try grant(f, tresor)
        _ = tresor.rotate()
        let second = try grant(f, tresor)
        #expect(second.isSuccessor(of: first))
        // Not the other way round: the older grant lacks epoch 2.
        #expect(!first.isSuccessor(of: second))
        // A grant is its own successor (nothing dropped, nothing changed).
        #expect(first.isSuccessor(of: first))
    }

    @Test func aSuccessorKeepsPartiesTresorExpiryAndEveryEpoch() throws {
        let f = try TrustFixture()
        var tresor = Tresor.create(ownerID: f.patient.userID, category: "interventions")
        _ = tresor.rotate()
        _ = tresor.rotate()
        let base = try grant(f, tresor, epochs: [1, 2])

        let dropsAnEpoch = try grant(f, tresor, epochs: [2, 3])
        #expect(!dropsAnEpoch.isSuccessor(of: base))
        let longerExpiry = try grant(f, tresor, expiresAt: 900)
        #expect(!longerExpiry.isSuccessor(of: base))
        let noExpiry = try grant(f, tresor, expiresAt: nil)
        #expect(!noExpiry.isSuccessor(of: base))

        let other = Tresor.create(ownerID: f.patient.userID, category: "assessments")
        let otherTresor = try grant(f, other)
        #expect(!otherTresor.isSuccessor(of: base))

        var toSelf = try grant(f, tresor)
        toSelf.memberID = f.patient.userID
        #expect(!toSelf.isSuccessor(of: base))
        var otherPatient = try grant(f, tresor)
        otherPatient.patientID = UUID()
        #expect(!otherPatient.isSuccessor(of: base))
    }

    @Test(arguments: [
        ([UInt32](), false), ([1], true), ([1, 2, 3], true), ([2], false), ([1, 3], false), ([2, 1], false), ([1, 1], false),
        ([0, 1], false), ([UInt32.max], false), ([1, UInt32.max], false),
    ])
    func contiguousEpochs(epochs: [UInt32], expected: Bool) throws {
        let f = try TrustFixture()
        var g = try grant(f, Tresor.create(ownerID: f.patient.userID, category: "interventions"))
        g.epochs = epochs
        #expect(g.hasContiguousEpochs == expected)
    }

    @Test func epochsMustExistInTheTresor() throws {
        let f = try TrustFixture()
        var g = try grant(f, Tresor.create(ownerID: f.patient.userID, category: "interventions"))
        g.epochs = [1, 3]
        #expect(g.epochsExist(upTo: 3))
        #expect(!g.epochsExist(upTo: 2))
        #expect(!g.epochsExist(upTo: 0))
        g.epochs = [0]
        #expect(!g.epochsExist(upTo: 5))
    }

    @Test func shareStatesMoveOnlyAlongTheStateMachine() {
        let allowed: Set<String> = ["pending>active", "pending>rejected", "pending>revoked", "active>revoked", "active>expired"]
        for from in ShareState.allCases {
            for to in ShareState.allCases {
                #expect(from.canMove(to: to) == allowed.contains("\(from.rawValue)>\(to.rawValue)"), "\(from) -> \(to)")
            }
        }
        #expect(ShareState.allCases.filter(\.isFinal) == [.rejected, .revoked, .expired])
    }

    @Test func accountsAreDecidedOnce() {
        #expect(AccountStatus.pending.canMove(to: .active))
        #expect(AccountStatus.pending.canMove(to: .rejected))
        #expect(!AccountStatus.pending.canMove(to: .pending))
        #expect(!AccountStatus.active.canMove(to: .rejected))
        #expect(!AccountStatus.rejected.canMove(to: .active))
    }

    @Test func lookupKeysMatchNormalisedNamesAndNothingElse() {
        #expect(Username.lookupKey("Dr.Bob") == "dr.bob")
        // An invalid name still gets a key, which no stored (valid) name can equal.
        // An invalid name gets a stand-in that no valid name can equal, free of NUL and of the caller's length.
        let stand = Username.lookupKey("A\u{0}B" + String(repeating: "x", count: 100_000))
        #expect(stand.hasPrefix("invalid-") && stand.count == 40 && !stand.contains("\u{0}"))
        #expect((try? Username.normalize(stand)) == nil)
        #expect(Username.lookupKey("A B") != Username.lookupKey("A  B"))
    }
}

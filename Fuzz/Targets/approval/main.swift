import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Approvals of registrations and shares: decoded and verified against what they claim to cover; their
/// sequence numbers, and a pending list's next one, counted on with the clients' checked arithmetic.
let shareID = UUID(uuid: (3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3))

func seeds() -> [[UInt8]] {
    let registration = Approval.registration(FuzzFixture.patientCertificate, issuedAt: 1_767_000_000_000, sequence: 1, adminKey: FuzzFixture.admin)
    let share = Approval.share(id: shareID, grant: FuzzFixture.doctorGrant(), issuedAt: 1_767_000_000_000, sequence: 2, adminKey: FuzzFixture.admin)
    let edges = [APILimits.maxApprovalSequence, UInt64.max - 1, UInt64.max].map {
        Approval.share(id: shareID, grant: FuzzFixture.doctorGrant(), issuedAt: 1_767_000_000_000, sequence: $0, adminKey: FuzzFixture.admin)
    }
    let pending = PendingResponse(registrations: [], shares: [], nextSequence: UInt64.max)
    return [registration, share].map { Array(try! FuzzFixture.encoder.encode($0)) } + edges.map { Array(try! FuzzFixture.encoder.encode($0)) }
        + [Array(try! FuzzFixture.encoder.encode(pending))]
}

/// What the admin tool does with a number from the server: count on from it, check it is storable.
func countOn(from sequence: UInt64) {
    let next = APILimits.approvalSequence(after: sequence)
    precondition(next > sequence || sequence == .max, "approval sequences only go up")
    _ = (1...APILimits.maxApprovalSequence).contains(next)
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>
) -> CInt {
    writeSeedsIfAsked(seeds)
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    fuzzInput(data, size) { bytes in
        if let pending = try? FuzzFixture.decoder.decode(PendingResponse.self, from: Data(bytes)) { countOn(from: pending.nextSequence) }
        guard let approval = try? FuzzFixture.decoder.decode(Approval.self, from: Data(bytes)) else { return }
        let admin = FuzzFixture.admin.publicKey
        let certificate = FuzzFixture.patientCertificate
        _ = try? approval.verify(
            adminKey: admin,
            kind: .registration,
            subjectID: certificate.userID,
            statementHash: try! BLAKE2b.hash(certificate.statementBytes)
        )
        _ = try? approval.verifyShare(adminKey: admin, shareID: shareID, grant: FuzzFixture.doctorGrant())
        countOn(from: approval.sequence)
        assertRoundTrip(approval, "approval")
    }
}

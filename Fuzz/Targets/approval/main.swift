import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Approvals of registrations and shares: decoded and verified against what they claim to cover.
let shareID = UUID(uuid: (3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3))

func seeds() -> [[UInt8]] {
    let registration = Approval.registration(FuzzFixture.patientCertificate, issuedAt: 1_767_000_000_000, sequence: 1, adminKey: FuzzFixture.admin)
    let share = Approval.share(id: shareID, grant: FuzzFixture.doctorGrant(), issuedAt: 1_767_000_000_000, sequence: 2, adminKey: FuzzFixture.admin)
    return [registration, share].map { Array(try! FuzzFixture.encoder.encode($0)) }
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
        assertRoundTrip(approval, "approval")
    }
}

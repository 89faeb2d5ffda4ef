import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Certificates as a server hands them out: decoded and verified under the pinned admin key.
func seeds() -> [[UInt8]] {
    [FuzzFixture.patientCertificate, FuzzFixture.doctorCertificate].map { Array(try! FuzzFixture.encoder.encode($0)) }
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
        guard let certificate = try? FuzzFixture.decoder.decode(Certificate.self, from: Data(bytes)) else { return }
        let admin = FuzzFixture.admin.publicKey
        _ = try? certificate.verify(adminKey: admin)
        _ = try? certificate.verify(adminKey: admin, userID: FuzzFixture.doctor.userID, username: "drbob", role: .doctor)
        _ = certificate.statementBytes
        assertRoundTrip(certificate, "certificate")
    }
}

import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Registration requests as the admin reviews them: decoded and their self-signature checked.
func seeds() -> [[UInt8]] {
    let salt = try! Salt(bytes: [UInt8](repeating: 7, count: 16))
    // blocking: a fuzz target's seeds, made on its main thread before any task runs
    let keys = try! PasswordKeys.deriveBlocking(password: "correct horse", salt: salt, parameters: .interactive)
    let request = try! RegistrationRequest.make(
        identity: FuzzFixture.doctor,
        username: "drbob",
        role: .doctor,
        passwordKeys: keys,
        kdf: .interactive,
        salt: salt,
        requestedAt: 1_767_000_000_000
    )
    return [Array(try! FuzzFixture.encoder.encode(request))]
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
        guard let request = try? FuzzFixture.decoder.decode(RegistrationRequest.self, from: Data(bytes)) else { return }
        _ = try? request.verify()
        _ = request.matches(FuzzFixture.doctorCertificate)
        assertRoundTrip(request, "registration")
    }
}

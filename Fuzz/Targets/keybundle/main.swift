import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Key bundles as the server returns them at login: decoded and opened with a wrapping key.
let wrappingKey = try! SymmetricKey(bytes: [UInt8](repeating: 42, count: 32))

func seeds() -> [[UInt8]] {
    let bundle = KeyBundle.seal(
        FuzzFixture.patient,
        wrappingKey: wrappingKey,
        kdf: .interactive,
        salt: try! Salt(bytes: [UInt8](repeating: 7, count: 16))
    )
    return [Array(try! FuzzFixture.encoder.encode(bundle))]
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
        guard let bundle = try? FuzzFixture.decoder.decode(KeyBundle.self, from: Data(bytes)) else { return }
        if let identity = try? bundle.open(wrappingKey: wrappingKey) {
            precondition(identity.userID == bundle.userID, "a bundle opened as another user")
        }
        assertRoundTrip(bundle, "key bundle")
    }
}

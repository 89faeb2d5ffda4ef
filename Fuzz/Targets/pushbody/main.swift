import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Push bodies as the server receives them: decoded, then every envelope checked as the server checks
/// it before storing (structure, owner, signature) and its version id computed.
func seeds() -> [[UInt8]] {
    [Array(try! FuzzFixture.encoder.encode(PushRequest(envelopes: FuzzFixture.sampleEnvelopes()))), Array(#"{"envelopes":[]}"#.utf8)]
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
        guard let request = try? FuzzFixture.decoder.decode(PushRequest.self, from: Data(bytes)) else { return }
        let owner = EnvelopeContext(ownerID: FuzzFixture.patient.userID)
        for envelope in request.envelopes {
            _ = try? envelope.verify(authorKey: FuzzFixture.patient.signing.publicKey, expecting: owner)
            _ = envelope.versionID
        }
    }
}

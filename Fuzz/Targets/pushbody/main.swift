import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Push bodies as the server receives them, binary batches (Docs/envelope-v1.md §7.2): the framing read
/// as the server reads it, then every envelope decoded and checked as the server checks it before storing
/// (structure, owner, signature) and its version id computed.
func seeds() -> [[UInt8]] {
    [try! EnvelopeFrame.encode(FuzzFixture.sampleEnvelopes()), try! EnvelopeFrame.encode([])]
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
        guard let frame = try? EnvelopeFrame(bytes: bytes, maxCount: APILimits.maxPushBatch),
            let envelopes = try? frame.envelopes()
        else { return }
        let owner = EnvelopeContext(ownerID: FuzzFixture.patient.userID)
        for envelope in envelopes {
            _ = try? envelope.verify(authorKey: FuzzFixture.patient.signing.publicKey, expecting: owner)
            _ = envelope.versionID
        }
        _ = frame.commitments
    }
}

import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Envelopes as they arrive from a server or a device: decoded, checked, opened, and re-encoded.
func seeds() -> [[UInt8]] {
    let tombstone = FuzzFixture.seal(payload: Array(#"{"type":"activity"}"#.utf8), type: .activity, deleted: true)
    return (FuzzFixture.sampleEnvelopes() + [tombstone]).map { Array(try! FuzzFixture.encoder.encode($0)) }
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
        guard let envelope = try? FuzzFixture.decoder.decode(Envelope.self, from: Data(bytes)) else { return }
        let key = FuzzFixture.patient.signing.publicKey
        _ = try? envelope.verify(authorKey: key, expecting: FuzzFixture.context)
        _ = try? envelope.openRecord(keys: FuzzFixture.tresor.keys, authorKey: key, expecting: FuzzFixture.context)
        _ = try? envelope.openRecordVerifiedEarlier(keys: FuzzFixture.tresor.keys, expecting: FuzzFixture.context)
        assertRoundTrip(envelope, "envelope")
    }
}

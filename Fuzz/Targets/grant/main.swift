import Foundation
import FuzzSupport
import VaultAPI
import VaultCore
import VaultCrypto

/// Grants: the first byte picks the mode. 0: the rest is a grant's JSON, verified and opened by the
/// doctor. 1: the rest is the sealed key list itself, sealed to the doctor inside a grant the patient
/// really signed, so the parser of the opened keys sees arbitrary bytes.

func keyList(_ tresor: Tresor) -> [UInt8] {
    var w = CanonicalWriter(domain: "CareVault-grant-keys-v1")
    w.append(tresor.id)
    w.append(tresor.category)
    w.append(UInt32(tresor.keys.count))
    for epoch in tresor.keys.keys.sorted() {
        w.append(epoch)
        w.append(tresor.keys[epoch]!.copyBytes())
    }
    return w.bytes
}

func seeds() -> [[UInt8]] {
    [[0] + Array(try! FuzzFixture.encoder.encode(FuzzFixture.doctorGrant())), [1] + keyList(FuzzFixture.tresor)]
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
        guard let mode = bytes.first else { return }
        let rest = Array(bytes.dropFirst())
        let grant: Grant
        if mode % 2 == 0 {
            guard let decoded = try? FuzzFixture.decoder.decode(Grant.self, from: Data(rest)) else { return }
            grant = decoded
            _ = grant.hasContiguousEpochs
            _ = grant.isSuccessor(of: FuzzFixture.doctorGrant())
            _ = grant.epochsExist(upTo: UInt32.max)
        } else {
            var g = FuzzFixture.doctorGrant()
            g.sealedKeys = Base64URL.encode(SealedBox.seal(rest, to: FuzzFixture.doctor.box.publicKey))
            g.signature = FuzzFixture.patient.signing.sign(g.statementBytes)
            grant = g
        }
        _ = try? grant.verify(patient: FuzzFixture.patientCertificate, adminKey: FuzzFixture.admin.publicKey)
        _ = try? grant.openKeys(
            member: FuzzFixture.doctor,
            patient: FuzzFixture.patientCertificate,
            adminKey: FuzzFixture.admin.publicKey,
            now: 1_767_000_000_000
        )
    }
}

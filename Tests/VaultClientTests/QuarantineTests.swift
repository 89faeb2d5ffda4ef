import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// One bad record never blocks the rest (Docs/design.md §5): it is kept aside with its reason, everything
/// else is applied or shown, the command still fails as an integrity failure, and a healed server heals
/// the device.
@Suite("Client: a bad record is kept aside, the rest goes on")
struct QuarantineTests {
    /// A patient with three activities on the server (walk, run, swim), and the server's database open to tampering.
    static func patientWithThree(_ world: ClientWorld, _ backend: Backend, name: String = "pat") async throws -> (PatientVault, String) {
        let (vault, password) = try await world.patient(name, on: try world.device("\(name)-a"))
        for id in ["walk", "run", "swim"] { try await vault.addActivity(try Sample.activity(id)) }
        _ = try await vault.sync()
        try await MaliciousServerTests.allowTampering(world.repository, backend)
        return (vault, password)
    }

    /// The stored envelope of `activity` on `vault`'s device.
    static func envelope(_ vault: PatientVault, _ activity: String) async throws -> Envelope {
        try #require(try vault.store.record(await vault.recordID(activity: activity))).envelope
    }

    static func tamper(_ world: ClientWorld, _ backend: Backend, _ env: Envelope, from: String, to: String) async throws {
        try await world.repository.attackerEdits(backend, env, from: from, to: to)
    }

    /// The ciphertext's base64 text made undecodable: the envelope no longer parses.
    static let breakCiphertext = (from: #""ciphertext":""#, to: #""ciphertext":"*"#)

    @Test(arguments: Backend.allCases)
    func anUnparseableEnvelopeIsKeptAsideAndHealsWhenRestored(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vaultA, password) = try await Self.patientWithThree(world, backend)
            let run = try await Self.envelope(vaultA, "run")
            try await Self.tamper(world, backend, run, from: Self.breakCiphertext.from, to: Self.breakCiphertext.to)
            let owner = vaultA.account.profile.userID
            let last = try await world.repository.changes(ownerID: owner, tresorID: nil, since: 0, limit: 100).map(\.sequence).max()

            // A fresh device logs in, writes, and syncs: everything else arrives, the local write goes out.
            let vaultB = try await world.device("b").loginPatient("pat", password: password)
            try await vaultB.addActivity(try Sample.activity("yoga"))
            let summary = try await vaultB.syncKeepingQuarantine()
            #expect(try await vaultB.activities().map(\.id) == ["swim", "walk", "yoga"])
            #expect(summary.quarantined.map(\.reason) == [.malformed])
            #expect(summary.quarantined.map(\.recordID) == [run.header.recordID.hex], "the id is read from the damaged envelope")
            #expect(summary.quarantined.first?.versionID == nil)
            #expect(try vaultB.store.cursor() == last, "the cursor moved past the bad record")
            #expect(summary.pushed == 1)
            #expect(try await vaultB.pendingCount() == 0)
            #expect(
                summary.quarantineMessage
                    == "1 record from the server failed its integrity check and was not applied: malformed ×1; "
                    + "run `carevault-patient sync --verbose` for their ids"
            )
            // `sync` says so as an integrity failure, after doing the rest; the record stays aside.
            await #expect(throws: ClientError.integrity(summary.quarantineMessage!)) { _ = try await vaultB.sync() }
            #expect(try await vaultB.quarantined().count == 1)

            // The server heals: the next sync fetches the record again and applies it.
            try await Self.tamper(world, backend, run, from: Self.breakCiphertext.to, to: Self.breakCiphertext.from)
            let healed = try await vaultB.sync()
            #expect(healed.quarantined.isEmpty)
            #expect(try await vaultB.quarantined().isEmpty)
            #expect(try await vaultB.activities().map(\.id) == ["run", "swim", "walk", "yoga"])
            _ = try await vaultA.sync()
            #expect(try await vaultA.activity(id: "yoga") != nil, "the other device got the write")
        }
    }

    @Test(arguments: Backend.allCases)
    func aWrongSignatureAndASwappedCiphertextAreKeptAsideWithTheirReasons(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vaultA, password) = try await Self.patientWithThree(world, backend)
            let (walk, run, swim) = (
                try await Self.envelope(vaultA, "walk"), try await Self.envelope(vaultA, "run"), try await Self.envelope(vaultA, "swim")
            )
            // walk carries swim's signature; run carries swim's ciphertext.
            try await Self.tamper(world, backend, walk, from: walk.signature.base64URL, to: swim.signature.base64URL)
            try await Self.tamper(world, backend, run, from: Base64URL.encode(run.ciphertext), to: Base64URL.encode(swim.ciphertext))

            let vaultB = try await world.device("b").loginPatient("pat", password: password)
            let summary = try await vaultB.syncKeepingQuarantine()
            #expect(try await vaultB.activities().map(\.id) == ["swim"])
            #expect(summary.quarantined.map(\.reason) == [.invalidSignature, .invalidSignature])
            #expect(Set(summary.quarantined.compactMap(\.recordID)) == [walk.header.recordID.hex, run.header.recordID.hex])
            #expect(Set(summary.quarantined.compactMap(\.versionID)).count == 2, "the parsed envelopes have version ids")
            #expect(
                summary.quarantineMessage?.hasPrefix(
                    "2 records from the server failed their integrity check and were not applied: invalidSignature ×2"
                ) == true
            )
        }
    }

    /// Versions the patient's own key signed but that do not open: a broken or compromised device of theirs.
    @Test(arguments: Backend.allCases)
    func signedVersionsThatDoNotOpenAreKeptAsideWithTheirReasons(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vaultA, password) = try await Self.patientWithThree(world, backend)
            let signing = vaultA.account.identity.signing
            let tresor = try #require(await vaultA.keyring["interventions"])
            var header = try await Self.envelope(vaultA, "walk").header
            header.timestamp = HLCTimestamp(physicalMs: header.timestamp.physicalMs + 60_000, counter: 0, deviceID: "dev-rogue")
            let wrongKey = try Envelope.seal(
                record: .activity(try Sample.activity("walk")),
                type: .activity,
                header: header,
                key: .generate(),
                author: signing
            )
            header.recordID = await vaultA.recordID(activity: "run")
            let mismatch = try Envelope.seal(payload: Array(#"{"type":"outcome"}"#.utf8), header: header, key: tresor.currentKey, author: signing)
            let pushed = try await vaultA.transport.push(batch: try EnvelopeFrame.encode([wrongKey, mismatch]), auth: try await vaultA.auth)
            #expect(pushed.results.map(\.status) == [.stored, .stored], "the server cannot tell")

            let vaultB = try await world.device("b").loginPatient("pat", password: password)
            let summary = try await vaultB.syncKeepingQuarantine()
            #expect(try await vaultB.activities().map(\.id) == ["swim"])
            #expect(summary.quarantined.map(\.reason).sorted() == [.decryptionFailed, .payloadMismatch])
        }
    }

    @Test(arguments: Backend.allCases)
    func aDoctorSeesTheOtherPatientsAndTheRestOfThePatientsRecords(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let doctor = try await world.doctor("doc", on: try world.device("d"))
            let (first, _) = try await Self.patientWithThree(world, backend, name: "pat")
            let (second, _) = try await world.patient("other", on: try world.device("o"))
            try await second.addActivity(try Sample.activity("yoga"))
            _ = try await second.sync()
            for vault in [first, second] { _ = try await vault.grant(doctor: "doc", category: "interventions") }
            try await world.approveAll()
            for vault in [first, second] { _ = try await vault.sync() }
            let run = try await Self.envelope(first, "run")
            let swim = try await Self.envelope(first, "swim")
            try await Self.tamper(world, backend, run, from: Self.breakCiphertext.from, to: Self.breakCiphertext.to)
            try await Self.tamper(world, backend, swim, from: swim.signature.base64URL, to: run.signature.base64URL)

            let view = try await doctor.view(patient: "pat")
            #expect(view.activities.map(\.id) == ["walk"])
            #expect(view.quarantined.map(\.reason).sorted() == [.invalidSignature, .malformed])
            #expect(view.unreadable == 0, "keys the doctor lacks are another matter")
            #expect(view.quarantineMessage == "2 records of pat failed their integrity check and were not shown: invalidSignature ×1, malformed ×1")
            let other = try await doctor.view(patient: "other")
            #expect(other.activities.map(\.id) == ["yoga"])
            #expect(other.quarantined.isEmpty)
            #expect(try await doctor.patients().patients.map(\.username).sorted() == ["other", "pat"])

            // Still kept aside on the next view (the cursor moved on); healed, they are shown.
            #expect(try await doctor.view(patient: "pat").quarantined.count == 2)
            try await Self.tamper(world, backend, run, from: Self.breakCiphertext.to, to: Self.breakCiphertext.from)
            try await Self.tamper(world, backend, swim, from: run.signature.base64URL, to: swim.signature.base64URL)
            let healed = try await doctor.view(patient: "pat")
            #expect(healed.activities.map(\.id) == ["run", "swim", "walk"])
            #expect(healed.quarantined.isEmpty)
        }
    }

    @Test(arguments: Backend.allCases)
    func aBadRecordDoesNotStopTheRotationAfterARevocation(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            _ = try await world.doctor("doc", on: try world.device("d"))
            let (vault, _) = try await Self.patientWithThree(world, backend)
            _ = try await vault.grant(doctor: "doc", category: "interventions")
            try await world.approveAll()
            let run = try await Self.envelope(vault, "run")
            try await Self.tamper(world, backend, run, from: Self.breakCiphertext.from, to: Self.breakCiphertext.to)
            // This sync delivers the doctor's keys (before it pulls) and then meets the bad record.
            await #expect(throws: ClientError.self) { _ = try await vault.sync() }
            try await vault.updateActivity(try Sample.activity("walk", title: "changed"))
            await #expect(throws: ClientError.self) { _ = try await vault.revoke(doctor: "doc", category: "interventions") }
            #expect(await vault.keyring["interventions"]?.currentEpoch == 2, "the category has a new key all the same")
            #expect(try await vault.quarantined().map(\.reason) == [.malformed])
            #expect(try await vault.pendingCount() == 0, "the change went out")
        }
    }

    @Test(arguments: Backend.allCases)
    func aStoredEnvelopeThatIsNotOneIsOneChangeKeptAsideNotABrokenPage(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let (vaultA, password) = try await Self.patientWithThree(world, backend)
            // Stored bytes that are no envelope any more: in a binary page each envelope keeps its own length,
            // so this is one change kept aside and the others arrive (Docs/envelope-v1.md §7.3).
            try await Self.tamper(world, backend, try await Self.envelope(vaultA, "run"), from: #""header":"#, to: #""header":{"#)
            let vaultB = try await world.device("b").loginPatient("pat", password: password)
            let summary = try await vaultB.syncKeepingQuarantine()
            #expect(summary.quarantined.map(\.reason) == [.malformed])
            #expect(try await vaultB.activities().map(\.id) == ["swim", "walk"])
            #expect(try vaultB.store.cursor() == 3, "the cursor moved past the bad change")
        }
    }
}

import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// Whoever writes the server's database rewrites the audit log and rehashes it (Docs/design.md §6): the
/// admin's tool and the patient's device catch it against checkpoints signed with the admin key, without
/// taking the server's word.
@Suite("Client: the audit log is checked against signed checkpoints")
struct AuditCheckpointClientTests {
    /// A patient whose interventions a doctor has read once (a `records.read` entry about the patient).
    static func readByDoctor(_ world: ClientWorld) async throws -> PatientVault {
        let (vault, _) = try await world.patient("pat", on: try world.device("p"))
        let doctor = try await world.doctor("doc", on: try world.device("d"))
        try await vault.addActivity(try Sample.activity("walk"))
        _ = try await vault.sync()
        _ = try await vault.grant(doctor: "doc", category: "interventions")
        try await world.approveAll()
        _ = try await doctor.view(patient: "pat")
        return vault
    }

    static func entries(_ repo: any VaultRepository) async throws -> [AuditEntry] {
        try await repo.auditEntries(after: 0, limit: 100_000, patientID: nil)
    }

    /// `entries` renumbered from 1 and rehashed, as an attacker would after removing or editing some.
    static func rehashed(_ entries: [AuditEntry]) -> [AuditEntry] {
        var previous = AuditChain.genesis
        return entries.enumerated().map { i, e in
            var e = e
            e.sequence = UInt64(i + 1)
            e.previousHash = previous
            e.hash = AuditChain.hash(of: e) ?? ""
            previous = e.hash
            return e
        }
    }

    /// Replaces the whole stored log with `entries`, exactly as given, and moves the head to match.
    static func replaceLog(_ repo: any VaultRepository, _ backend: Backend, with entries: [AuditEntry]) async throws {
        try await repo.databaseOperator.replaceAuditLog(with: entries)
    }

    static func store(_ world: ClientWorld, _ name: String = "admin") -> AuditCheckpointStore {
        AuditCheckpointStore(url: world.root.appendingPathComponent("\(name)/audit-checkpoint.json"))
    }

    static func integrityMessage(_ body: () async throws -> Void) async -> String? {
        do { try await body() } catch let ClientError.integrity(message) { return message } catch { return "other error: \(error)" }
        return nil
    }

    @Test(arguments: Backend.allCases)
    func theAdminCatchesRemovedAndEditedEntriesAndADroppedCheckpoint(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Self.readByDoctor(world)
            let admin = try world.adminClient
            let store = Self.store(world)
            let before = try await admin.verifyAuditChain(store: store).report
            #expect(before.ok && before.newestCheckpoint == nil && before.entriesChecked > 0)
            let checkpoint = try await admin.checkpointAudit(store: store)
            #expect(try store.newest() == checkpoint)
            let original = try await Self.entries(world.repository)
            #expect(checkpoint.sequence == original.last?.sequence && checkpoint.headHash == original.last?.hash)
            let read = try #require(original.first { $0.action == "records.read" && $0.patientID == patient.account.profile.userID })

            // A field changed in place: the entry no longer hashes to its stored hash.
            var edited = original
            edited[Int(read.sequence) - 1].details["count"] = "0"
            try await Self.replaceLog(world.repository, backend, with: edited)
            let editedReport = try await admin.verifyAuditChain(store: store).report
            #expect(!editedReport.ok && editedReport.broken?.sequence == read.sequence && editedReport.broken?.reason == .editedEntry)

            // The same change with the chain rehashed after it: consistent on its own, not with the checkpoint.
            try await Self.replaceLog(world.repository, backend, with: Self.rehashed(edited))
            let rehashed = try await admin.verifyAuditChain(store: store).report.broken
            #expect(rehashed?.reason == .checkpointMismatch && rehashed?.sequence == checkpoint.sequence)

            // The read removed, everything after it renumbered and rehashed: the log now ends before the checkpoint.
            try await Self.replaceLog(world.repository, backend, with: Self.rehashed(original.filter { $0 != read }))
            let removed = try await admin.verifyAuditChain(store: store).report.broken
            #expect(removed?.reason == .checkpointMismatch && removed?.sequence == checkpoint.sequence)
            #expect(removed?.detail.contains("from 1 to \(checkpoint.sequence)") == true, "\(String(describing: removed))")
            // The server's own verdict sees nothing wrong: only the signed checkpoint catches this.
            #expect(try await admin.verifyAudit().ok)
            await #expect(throws: ClientError.self) { try await admin.checkpointAudit(store: store) }

            try await Self.replaceLog(world.repository, backend, with: original)
            #expect(try await admin.verifyAuditChain(store: store).report.ok)

            // The checkpoint row deleted: the admin's own memory of it catches that.
            try await world.repository.databaseOperator.dropAuditCheckpoints()
            let dropped = try await admin.verifyAuditChain(store: store).report.broken
            #expect(dropped?.reason == .checkpointMissing && dropped?.sequence == checkpoint.sequence)
            #expect(try await admin.verifyAuditChain(store: Self.store(world, "elsewhere")).report.ok, "without the memory it goes unnoticed")
        }
    }

    @Test(arguments: Backend.allCases)
    func aPatientDetectsItsReadRemovedBeforeACheckpoint(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Self.readByDoctor(world)
            let me = patient.account.profile.userID
            let unverified = try await patient.verifiedAccessLog()
            #expect(unverified.checkpoint == nil && unverified.entries.allSatisfy { !unverified.isCheckpointed($0) })

            let checkpoint = try await world.adminClient.checkpointAudit(store: Self.store(world))
            try await world.repository.appendAudit([AuditEvent(actor: "server", action: "records.read", patientID: me)], now: 1)
            let log = try await patient.verifiedAccessLog()
            #expect(log.checkpoint == checkpoint)
            let reads = log.entries.filter { $0.action == "records.read" }
            #expect(reads.count == 2 && log.isCheckpointed(reads[0]) && !log.isCheckpointed(reads[1]))

            // The first read removed and the chain renumbered and rehashed: the patient's device no longer
            // reaches the signed hash.
            let original = try await Self.entries(world.repository)
            try await Self.replaceLog(world.repository, backend, with: Self.rehashed(original.filter { $0 != reads[0] }))
            #expect(try await patient.accessLog().filter { $0.action == "records.read" }.count == 1, "the read is hidden")
            // The later read still links to the removed one's hash (Docs/envelope-v1.md §3.1).
            let message = await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(message?.contains("missing entry") == true, "\(message ?? "no error")")
            // Every entry about the patient from that read on removed, so that nothing links to it: the
            // signed hash still catches the rewrite.
            let tail = original.filter { $0.patientID != me || $0.sequence < reads[0].sequence }
            try await Self.replaceLog(world.repository, backend, with: Self.rehashed(tail))
            let rehashed = await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(rehashed?.contains("checkpoint mismatch") == true, "\(rehashed ?? "no error")")

            // Left in place but edited in the patient's copy only: its hash no longer matches its fields.
            var edited = original
            edited[Int(reads[0].sequence) - 1].details["doctor"] = "nobody"
            try await Self.replaceLog(world.repository, backend, with: edited)
            #expect(await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }?.contains("edited entry") == true)

            // Rolled back to before the checkpoint, checkpoint and all: the device remembers it.
            try await Self.replaceLog(world.repository, backend, with: original)
            try await world.repository.databaseOperator.dropAuditCheckpoints()
            #expect(await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }?.contains("checkpoint missing") == true)
        }
    }

    @Test(arguments: Backend.allCases)
    func aForgedCheckpointIsRefusedByTheServerAndByBothClients(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Self.readByDoctor(world)
            let admin = try world.adminClient
            let head = try #require(try await Self.entries(world.repository).last)
            func post(_ c: AuditCheckpoint) async throws -> AuditCheckpoint {
                try await admin.transport.send(
                    AdminEndpoints.signCheckpoint,
                    c,
                    auth: .admin(world.admin, deploymentID: try await admin.deploymentID())
                )
            }
            let rogue = SigningKeyPair.generate()
            let forged = AuditCheckpoint.sign(sequence: head.sequence, headHash: head.hash, signedAt: 1, adminKey: rogue)
            #expect(await Self.integrityMessage { _ = try await post(forged) }?.contains("signature") == true)
            let wrongHash = AuditCheckpoint.sign(sequence: head.sequence, headHash: AuditChain.genesis, signedAt: 1, adminKey: world.admin)
            await #expect(throws: ClientError.conflict("the audit log's hash at entry \(head.sequence) differs from the checkpoint's")) {
                _ = try await post(wrongHash)
            }
            let beyond = AuditCheckpoint.sign(sequence: head.sequence + 100, headHash: head.hash, signedAt: 1, adminKey: world.admin)
            await #expect(throws: ClientError.conflict("the audit log has no entry \(head.sequence + 100)")) { _ = try await post(beyond) }
            #expect(try await admin.auditCheckpoints().isEmpty)
            let genuine = AuditCheckpoint.sign(sequence: head.sequence, headHash: head.hash, signedAt: 2, adminKey: world.admin)
            #expect(try await post(genuine) == genuine)
            #expect(try await post(genuine) == genuine, "a retried request gets the same answer")
            let other = AuditCheckpoint.sign(sequence: head.sequence, headHash: head.hash, signedAt: 3, adminKey: world.admin)
            await #expect(throws: ClientError.self) { _ = try await post(other) }
            #expect(try await admin.auditCheckpoints() == [genuine])

            // Written into the database directly, a forged checkpoint is refused by the admin and the patient.
            let atOne = try #require(try await Self.entries(world.repository).first)
            let fake = AuditCheckpoint.sign(sequence: 1, headHash: atOne.hash, signedAt: 1, adminKey: rogue)
            try await world.repository.databaseOperator.insertAuditCheckpoint(fake, storedAt: 1)
            let broken = try await admin.verifyAuditChain(store: nil).report.broken
            #expect(broken?.reason == .forgedCheckpoint && broken?.sequence == 1)
            #expect(await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }?.contains("forged checkpoint") == true)
        }
    }

    @Test(arguments: Backend.allCases)
    func aPatientDetectsADoctorsReadNoLongerTaggedWithItsID(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Self.readByDoctor(world)
            _ = try await world.adminClient.checkpointAudit(store: Self.store(world))
            let reads = try await patient.verifiedAccessLog().entries.filter { $0.action == "records.read" }
            #expect(reads.count == 1)
            // A later entry about the patient, so the untagged read lies in the middle of its own links.
            try await world.repository.appendAudit([AuditEvent(actor: "server", action: "login", patientID: patient.account.profile.userID)], now: 2)
            #expect(try await patient.verifiedAccessLog().entries.count > reads.count)
            let original = try await Self.entries(world.repository)

            // The read's patient cleared, hashes, digest and links left as stored: the later entry links to a
            // hash the patient's log does not list.
            let op = world.repository.databaseOperator
            try await op.rewriteAuditEntry(sequence: reads[0].sequence, untagged: true)
            #expect(try await patient.accessLog().allSatisfy { $0.action != "records.read" }, "the read is hidden")
            let middle = await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(middle?.contains("missing entry") == true, "\(middle ?? "no error")")

            // Every later entry about the patient untagged too: the read is the newest link continuing the
            // patient's own links, and it is not in the access log.
            try await op.untagAuditEntries(of: patient.account.profile.userID, after: reads[0].sequence)
            let newest = await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(newest?.contains("entry \(reads[0].sequence): missing entry") == true, "\(newest ?? "no error")")

            // The link rewritten as well, so it no longer names the patient's previous entry: its hash no longer
            // matches what the chain lists for it.
            try await op.rewriteAuditEntry(sequence: reads[0].sequence, unlinked: true)
            let relinked = await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(relinked?.contains("edited entry") == true, "\(relinked ?? "no error")")

            // Presented as an entry of the old format instead: formats never go back.
            try await op.rewriteAuditEntry(sequence: reads[0].sequence, format: 1)
            let downgraded = await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(downgraded?.contains("broken link") == true, "\(downgraded ?? "no error")")

            try await Self.replaceLog(world.repository, backend, with: original)
            #expect(try await patient.verifiedAccessLog().entries.contains(reads[0]))
        }
    }

    @Test(arguments: Backend.allCases)
    func aDeviceRemembersWhereFormatTwoBegins(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Self.readByDoctor(world)
            let me = patient.account.profile.userID
            // A log from before the migration: every entry of format 1, this patient's included.
            let legacy = Self.rehashed(
                try await Self.entries(world.repository).map { e in
                    var e = e
                    e.format = nil
                    e.patientLink = nil
                    return e
                }
            )
            try await Self.replaceLog(world.repository, backend, with: legacy)
            try await world.repository.appendAudit([AuditEvent(actor: "server", action: "records.read", patientID: me)], now: 9)
            let read = try #require(try await Self.entries(world.repository).last)
            let page = try await patient.transport.send(AccessLogEndpoints.entries, auth: try patient.account.sessionAuth)
            let key = try Hex.decode(try #require(page.patientKey))
            let previous = legacy.last { $0.patientID == me }?.hash
            #expect(read.format == 2 && read.patientLink == AuditChain.patientLink(key: key, previous: previous))
            #expect(try await patient.verifiedAccessLog().entries.contains(read))

            // The read untagged and shown as format 1 without its link: no entry of this patient's is of format 2.
            try await world.repository.databaseOperator.rewriteAuditEntry(sequence: read.sequence, untagged: true, format: 1, unlinked: true)
            let message = await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(message?.contains("entry \(read.sequence): broken link") == true, "\(message ?? "no error")")
            // A device that never saw format 2 cannot tell (Docs/design.md §6).
            try FileManager.default.removeItem(at: patient.account.store.folder.appendingPathComponent("audit-marks.json"))
            #expect(await Self.integrityMessage { _ = try await patient.verifiedAccessLog() } == nil)
        }
    }

    /// The patient's audit key is the server's and this patient's alone; a device keeps the first it was given.
    @Test(arguments: Backend.allCases)
    func aDeviceKeepsItsAuditKey(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Self.readByDoctor(world)
            _ = try await patient.verifiedAccessLog()
            let page = try await patient.transport.send(AccessLogEndpoints.entries, auth: try patient.account.sessionAuth)
            #expect(page.patientKey?.count == 64)
            // Without the key, no link shows which entry it continues: none names another entry's hash.
            let links = try await world.repository.auditLinks(after: 0, limit: 1_000)
            let hashes = Set(links.map(\.hash))
            #expect(links.contains { $0.patientLink != nil } && links.allSatisfy { $0.patientLink.map { !hashes.contains($0) } ?? true })
            // The database's secret replaced: the server now derives another key, and the device refuses it.
            try await world.repository.databaseOperator.replaceServerSecret(with: [UInt8](repeating: 0xab, count: 32))
            let message = await Self.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(message?.contains("another audit key") == true, "\(message ?? "no error")")
        }
    }
}

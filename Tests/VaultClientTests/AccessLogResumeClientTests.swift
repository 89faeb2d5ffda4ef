import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient
@testable import VaultServer

/// A patient's access-log check resumes where the device's last passing check ended (Docs/design.md §6):
/// only the links written since are downloaded, the patient's older entries are held to a digest, and
/// whatever does not match what the device remembers sends it back to the full check, whose verdict counts.
@Suite("Client: a patient's access-log check resumes where the last one ended")
struct AccessLogResumeClientTests {
    typealias Base = AuditCheckpointClientTests

    /// Appends `count` reads about `patient`, each followed by an entry about nobody.
    static func activity(_ world: ClientWorld, about patient: UUID?, count: Int) async throws {
        for n in 0..<count {
            if let patient {
                try await world.repository.appendAudit([AuditEvent(actor: "server", action: "records.read", patientID: patient)], now: Int64(100 + n))
            }
            try await world.repository.appendAudit([AuditEvent(actor: "admin", action: "user.approved")], now: Int64(100 + n))
        }
    }

    static func head(_ world: ClientWorld) async throws -> UInt64 {
        try #require(try await Base.entries(world.repository).last).sequence
    }

    @Test(arguments: Backend.allCases)
    func onlyTheLinksAfterTheLastCheckAreDownloadedAndFullWalksThemAll(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            let me = patient.account.profile.userID
            let first = try await patient.verifiedAccessLog()
            let end = try await Self.head(world)
            #expect(first.resumedAfter == nil && first.linksRead == Int(end), "nothing remembered: the whole chain")
            let checkpoint = try await world.adminClient.checkpointAudit(store: Base.store(world))
            try await Self.activity(world, about: me, count: 3)
            let total = try await Self.head(world)

            let resumed = try await patient.verifiedAccessLog()
            #expect(resumed.resumedAfter == end)
            #expect(resumed.linksRead == Int(total - end) + 1, "the remembered link and the \(total - end) after it")
            #expect(resumed.linksRead < Int(total))
            #expect(resumed.checkpoint == checkpoint)
            #expect(resumed.entries.filter { $0.action == "records.read" }.count == 4)

            // The full check ignores the remembered point and agrees.
            let whole = try await patient.verifiedAccessLog(full: true)
            #expect(whole.resumedAfter == nil && whole.linksRead == Int(total))
            #expect(whole.entries == resumed.entries && whole.checkpoint == resumed.checkpoint)

            // Nothing new: only the remembered link.
            let again = try await patient.verifiedAccessLog()
            #expect(again.resumedAfter == total && again.linksRead == 1 && again.entries == whole.entries)
            let file = try #require(AccessLogResumePoint.load(patient.resumeURL))
            #expect(file.sequence == total && file.entries == whole.entries.count)
            let mode = try FileManager.default.attributesOfItem(atPath: patient.resumeURL.path)[.posixPermissions] as? Int
            #expect(mode == 0o600)

            // What the resumption does not read (Docs/design.md §6): someone else's entry before the point
            // removed, the patient's entries and the link at the point left alone. --full finds it.
            let nobody = try #require(try await Base.entries(world.repository).first { $0.sequence > end && $0.patientID == nil })
            try await world.repository.databaseOperator.dropGuard(of: .auditLog)
            try await world.repository.databaseOperator.deleteAuditEntry(sequence: nobody.sequence)
            #expect(try await patient.verifiedAccessLog().resumedAfter == total)
            let gap = await Base.integrityMessage { _ = try await patient.verifiedAccessLog(full: true) }
            #expect(gap?.contains("entry \(nobody.sequence): missing entry") == true, "\(gap ?? "no error")")
            // Found broken, the log is checked in full from then on.
            #expect(await Base.integrityMessage { _ = try await patient.verifiedAccessLog() } == gap)
            #expect(AccessLogResumePoint.load(patient.resumeURL) == nil)
            #expect(try patient.checkState.mark() != nil)
        }
    }

    /// One of the patient's entries before the remembered point deleted, edited, untagged or given to
    /// another patient in the server's database: the old links are not downloaded, but the entries no longer
    /// match their digest, and the full check names the damage.
    @Test(arguments: Backend.allCases)
    func oldEntriesChangedUnderneathAreCaught(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            let me = patient.account.profile.userID
            try await Self.activity(world, about: me, count: 2)
            _ = try await patient.verifiedAccessLog()
            try await Self.activity(world, about: me, count: 1)
            let resumed = try await patient.verifiedAccessLog()
            let point = try #require(resumed.resumedAfter)
            let original = try await Base.entries(world.repository)
            let reads = resumed.entries.filter { $0.action == "records.read" && $0.sequence < point }
            #expect(reads.count == 3)
            let target = reads[1]
            let index = Int(target.sequence) - 1
            let op = world.repository.databaseOperator
            let end = try #require(original.last).sequence
            // The message of the check after `tamper`, run with the point at the log's end; the log is then
            // put back, and a passing check (in full, a failed one having forgotten the point) keeps it again.
            func caught(_ tamper: () async throws -> Void) async throws -> String? {
                #expect(AccessLogResumePoint.load(patient.resumeURL)?.sequence == end)
                try await tamper()
                let message = await Base.integrityMessage { _ = try await patient.verifiedAccessLog() }
                try await Base.replaceLog(world.repository, backend, with: original)
                #expect(try await patient.verifiedAccessLog().entries == resumed.entries)
                return message
            }

            let deleted = try await caught {
                try await op.dropGuard(of: .auditLog)
                try await op.deleteAuditEntry(sequence: target.sequence)
            }
            #expect(deleted?.contains("missing entry") == true, "\(deleted ?? "no error")")

            let changed = try await caught {
                var edited = original
                edited[index].details["doctor"] = "nobody"
                try await Base.replaceLog(world.repository, backend, with: edited)
            }
            #expect(changed?.contains("entry \(target.sequence): edited entry") == true, "\(changed ?? "no error")")

            let untagged = try await caught { try await op.rewriteAuditEntry(sequence: target.sequence, untagged: true) }
            #expect(untagged?.contains("missing entry") == true, "\(untagged ?? "no error")")

            let reassigned = try await caught {
                var moved = original
                moved[index].patientID = UUID()
                try await Base.replaceLog(world.repository, backend, with: moved)
            }
            #expect(reassigned?.contains("missing entry") == true, "\(reassigned ?? "no error")")

            // The patient's newest entry, which no later entry of its own links to: only the digest of its
            // entries tells the resumption that the listing changed, since the links there are not read.
            let newest = try #require(resumed.entries.last)
            #expect(newest.sequence < end)
            let lastUntagged = try await caught { try await op.rewriteAuditEntry(sequence: newest.sequence, untagged: true) }
            #expect(lastUntagged?.contains("entry \(newest.sequence): missing entry") == true, "\(lastUntagged ?? "no error")")
            let lastDeleted = try await caught {
                try await op.dropGuard(of: .auditLog)
                try await op.deleteAuditEntry(sequence: newest.sequence)
            }
            #expect(lastDeleted?.contains("entry \(newest.sequence): missing entry") == true, "\(lastDeleted ?? "no error")")
            // The same entry edited and its stored hash recomputed in place, the entries after it left alone:
            // listed, it hashes to its fields, links to its own entry before and none of its own links to it,
            // and the resumption reads neither its link nor the next one. Only the digest sends the device to
            // the full check, which finds the next link not continuing it.
            let rehashedInPlace = try await caught {
                var edited = original
                let i = Int(newest.sequence) - 1
                edited[i].details["doctor"] = "nobody"
                edited[i].hash = AuditChain.hash(of: edited[i]) ?? ""
                try await Base.replaceLog(world.repository, backend, with: edited)
            }
            #expect(
                rehashedInPlace?.contains("entry \(newest.sequence + 1): broken link") == true,
                "\(rehashedInPlace ?? "no error")"
            )

            // An entry about the patient inserted before the point, the chain renumbered and rehashed.
            var longer = original
            let login = AuditEntry(sequence: 0, at: 5, actor: "server", action: "login", patientID: me, details: [:], previousHash: "", hash: "")
            longer.insert(login, at: 1)
            longer = Base.rehashed(longer)
            // The patient's first entry of format 2 after it links to the entry before it, not to the login.
            let follower = try #require(longer.first { $0.sequence > 2 && $0.patientID == me && $0.entryFormat == 2 })
            let inserted = try await caught { try await Base.replaceLog(world.repository, backend, with: longer) }
            #expect(inserted?.contains("entry \(follower.sequence): missing entry") == true, "\(inserted ?? "no error")")

            let restored = try await patient.verifiedAccessLog()
            #expect(restored.resumedAfter == end && restored.entries == resumed.entries)
        }
    }

    /// After the remembered point the links are checked as the full check checks them.
    @Test(arguments: Backend.allCases)
    func aRewrittenChainAfterTheRememberedPointIsCaught(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            let me = patient.account.profile.userID
            _ = try await patient.verifiedAccessLog()
            let point = try await Self.head(world)
            // A check that fails forgets the point and marks the next one full: each case below resumes from it again.
            let kept = try #require(AccessLogResumePoint.load(patient.resumeURL))
            #expect(kept.sequence == point)
            try await Self.activity(world, about: nil, count: 2)
            let checkpoint = try await world.adminClient.checkpointAudit(store: Base.store(world))
            try await Self.activity(world, about: me, count: 2)
            let original = try await Base.entries(world.repository)
            let reads = original.filter { $0.action == "records.read" && $0.patientID == me && $0.sequence > checkpoint.sequence }
            #expect(reads.count == 2)

            // A new read removed and the chain rehashed: the next read still links to it.
            try await Base.replaceLog(world.repository, backend, with: Base.rehashed(original.filter { $0 != reads[0] }))
            let removed = await Base.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(removed?.contains("missing entry") == true, "\(removed ?? "no error")")

            // An entry about nobody after the point edited in place: its link no longer hashes to what is listed.
            try Self.resume(patient, from: kept)
            let nobody = try #require(original.first { $0.sequence > point && $0.patientID == nil })
            var edited = original
            edited[Int(nobody.sequence) - 1].details["note"] = "changed"
            try await Base.replaceLog(world.repository, backend, with: edited)
            let inPlace = await Base.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(inPlace?.contains("entry \(nobody.sequence): edited entry") == true, "\(inPlace ?? "no error")")

            // The same edit rehashed from there on, the patient's new entries relinked to match: consistent
            // on its own, but the chain no longer reaches the checkpoint signed after the point.
            let rewritten = Self.relinked(Base.rehashed(edited), patient: me, key: try await Self.auditKey(patient))
            try Self.resume(patient, from: kept)
            try await Base.replaceLog(world.repository, backend, with: rewritten)
            let rehashed = await Base.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(rehashed?.contains("entry \(checkpoint.sequence): checkpoint mismatch") == true, "\(rehashed ?? "no error")")

            // After a failure the point put back is not used: the next check walks in full, then resumes.
            try await Base.replaceLog(world.repository, backend, with: original)
            try kept.save(patient.resumeURL)
            #expect(try await patient.verifiedAccessLog().resumedAfter == nil)
            try Self.resume(patient, from: kept)
            #expect(try await patient.verifiedAccessLog().resumedAfter == point)
        }
    }

    /// Puts `point` back as the one to resume at, with no mark that the next check must be full, so that a
    /// case tests the resumed check.
    static func resume(_ patient: PatientVault, from point: AccessLogResumePoint) throws {
        let state = patient.checkState
        if FileManager.default.fileExists(atPath: state.markURL.path) { try FileManager.default.removeItem(at: state.markURL) }
        try point.save(state.pointURL)
    }

    /// Remembered data the server's log does not match sends the device to the full check, whose verdict
    /// is reported, whether it passes or fails.
    @Test(arguments: Backend.allCases)
    func aPointThatDoesNotMatchFallsBackToTheFullCheck(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            try await Self.activity(world, about: nil, count: 3)
            _ = try await patient.verifiedAccessLog()
            let total = Int(try await Self.head(world))
            let original = try await Base.entries(world.repository)
            let url = patient.resumeURL
            let kept = try #require(AccessLogResumePoint.load(url))
            func fellBack() async throws -> Bool {
                let log = try await patient.verifiedAccessLog()
                return log.resumedAfter == nil && log.linksRead == total
            }

            // The remembered file damaged or edited: each is ignored or fails to match.
            try SecureFiles.write(Data("not json".utf8), to: url)
            #expect(try await fellBack())
            #expect(AccessLogResumePoint.load(url) == kept, "the full check keeps the point again")
            let edits: [(inout AccessLogResumePoint) -> Void] = [
                { (p: inout AccessLogResumePoint) in p.hash = AuditChain.genesis },
                { (p: inout AccessLogResumePoint) in p.sequence += 100 },
                { (p: inout AccessLogResumePoint) in p.entriesDigest = AuditChain.genesis },
                { (p: inout AccessLogResumePoint) in p.checkpoints = 1 },
                { (p: inout AccessLogResumePoint) in p.marks.patientKey = AuditChain.genesis },
            ]
            for edit in edits {
                var point = kept
                edit(&point)
                try point.save(url)
                #expect(try await fellBack())
            }

            // The chain rehashed below the point, the patient's entries untouched: no checkpoint pins it, so
            // the full check accepts it, and that is the answer.
            let nobody = try #require(original.filter { $0.patientID == nil }.dropLast().last)
            var edited = original
            edited[Int(nobody.sequence) - 1].details["note"] = "changed"
            try await Base.replaceLog(world.repository, backend, with: Base.rehashed(edited))
            #expect(try await fellBack())

            // Signed at the point, then rehashed below it: the full check names the checkpoint.
            try await Base.replaceLog(world.repository, backend, with: original)
            let checkpoint = try await world.adminClient.checkpointAudit(store: Base.store(world))
            #expect(try await patient.verifiedAccessLog().checkpoint == checkpoint)
            try await Base.replaceLog(world.repository, backend, with: Base.rehashed(edited))
            let rehashed = await Base.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(rehashed?.contains("checkpoint mismatch") == true, "\(rehashed ?? "no error")")

            // The checkpoint dropped: the device remembers it.
            try await Base.replaceLog(world.repository, backend, with: original)
            #expect(try await patient.verifiedAccessLog().checkpoint == checkpoint)
            try await world.repository.databaseOperator.dropAuditCheckpoints()
            let dropped = await Base.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(dropped?.contains("checkpoint missing") == true, "\(dropped ?? "no error")")
        }
    }

    /// The digests of `access-log-resume.json` are the layouts Docs/envelope-v1.md §2.5 states.
    @Test func theDigestsAreTheDocumentedLayouts() throws {
        let link = String(repeating: "cd", count: 32)
        let entries = [
            AuditEntry(sequence: 3, at: 1, actor: "a", action: "login", patientID: nil, details: [:], previousHash: "p", hash: "h3"),
            AuditEntry(
                sequence: 7,
                at: 2,
                actor: "b",
                action: "records.read",
                patientID: nil,
                details: [:],
                previousHash: "h6",
                hash: "h7",
                format: 2,
                patientLink: link
            ),
        ]
        var w = CanonicalWriter(domain: "CareVault-access-log-entries-v1")
        w.append(UInt64(2))
        for (sequence, format, hash, patientLink) in [(UInt64(3), UInt8(1), "h3", String?.none), (7, 2, "h7", link)] {
            w.append(sequence)
            w.append(format)
            w.append(hash)
            w.append(patientLink)
        }
        #expect(AccessLogResumePoint.digest(entries: entries) == Hex.encode(try BLAKE2b.hash(w.bytes)))

        let admin = SigningKeyPair.generate()
        let checkpoints = [AuditCheckpoint.sign(sequence: 5, headHash: AuditChain.genesis, signedAt: 9, adminKey: admin)]
        var c = CanonicalWriter(domain: "CareVault-access-log-checkpoints-v1")
        c.append(UInt64(1))
        c.append(UInt64(5))
        c.append(AuditChain.genesis)
        c.append(Int64(9))
        #expect(AccessLogResumePoint.digest(checkpoints: checkpoints) == Hex.encode(try BLAKE2b.hash(c.bytes)))
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("Docs/envelope-v1.md"), encoding: .utf8)
        #expect(doc.contains("CareVault-access-log-entries-v1") && doc.contains("CareVault-access-log-checkpoints-v1"))
    }

    /// The link at the remembered point is read again and checked as the full check checks it, not only for
    /// its sequence and hash: its listed digest or format changed in place (the stored hash left alone) is
    /// caught, as a walk from entry 1 catches it.
    @Test(arguments: Backend.allCases)
    func theLinkAtThePointIsCheckedInFull(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            try await Self.activity(world, about: nil, count: 1)
            _ = try await patient.verifiedAccessLog()
            let kept = try #require(AccessLogResumePoint.load(patient.resumeURL))
            let original = try await Base.entries(world.repository)
            let anchor = try #require(original.last)
            #expect(anchor.sequence == kept.sequence && anchor.hash == kept.hash && anchor.patientID == nil)
            let i = Int(anchor.sequence) - 1

            var edited = original
            edited[i].details["note"] = "changed"
            try await Base.replaceLog(world.repository, backend, with: edited)
            let content = await Base.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(content?.contains("entry \(anchor.sequence): edited entry") == true, "\(content ?? "no error")")

            var downgraded = original
            downgraded[i].format = nil
            downgraded[i].patientLink = nil
            try await Base.replaceLog(world.repository, backend, with: downgraded)
            try Self.resume(patient, from: kept)
            let format = await Base.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(format?.contains("entry \(anchor.sequence): broken link") == true, "\(format ?? "no error")")

            try await Base.replaceLog(world.repository, backend, with: original)
            #expect(try await patient.verifiedAccessLog().resumedAfter == nil)
            #expect(try await patient.verifiedAccessLog().resumedAfter == kept.sequence)
        }
    }

    /// Any integrity failure, not only a broken chain, marks that the next checks walk the whole chain; the
    /// point put back is not used while the mark is set, only a passing full walk clears it, and a walk that
    /// passes does not keep a point over a mark set after it began.
    @Test(arguments: Backend.allCases)
    func anIntegrityFailureMakesTheNextChecksFullUntilOnePasses(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            _ = try await patient.verifiedAccessLog()
            let state = patient.checkState
            let kept = try #require(AccessLogResumePoint.load(state.pointURL))
            #expect(try state.mark() == nil)

            // Another audit key than the one this device remembers: refused before any link is read.
            let marksURL = patient.account.store.folder.appendingPathComponent("audit-marks.json")
            let marks = try AuditLogMarks.load(marksURL)
            var other = marks
            other.patientKey = String(repeating: "ab", count: 32)
            try other.save(marksURL)
            let key = await Base.integrityMessage { _ = try await patient.verifiedAccessLog() }
            #expect(key?.contains("another audit key") == true, "\(key ?? "no error")")
            #expect(try state.mark() != nil && AccessLogResumePoint.load(state.pointURL) == nil)
            #expect(SecureFiles.permissions(state.markURL) == 0o600)

            try marks.save(marksURL)
            try kept.save(state.pointURL)
            let full = try await patient.verifiedAccessLog()
            #expect(full.resumedAfter == nil, "the mark, not the point put back, decides")
            #expect(try state.mark() == nil && AccessLogResumePoint.load(state.pointURL) == kept)
            #expect(try await patient.verifiedAccessLog().resumedAfter == kept.sequence)

            // Another check fails while this one walks: this one keeps no point and clears no mark.
            try state.requireFullCheck(reason: "another check failed")
            let set = try state.mark()
            #expect(try state.keep(kept, full: false, markAtStart: nil) == false)
            #expect(try state.keep(kept, full: true, markAtStart: nil) == false)
            #expect(try AccessLogResumePoint.load(state.pointURL) == nil && state.mark() == set)
            #expect(try state.resumePoint() == nil)
            // A full walk that began under that mark clears it.
            #expect(try state.keep(kept, full: true, markAtStart: set) == true)
            #expect(try state.mark() == nil && state.resumePoint() == kept)
        }
    }

    /// The resumption fails to match and the full check passes, but the chain no longer holds at the point
    /// what this device checked: the log was rewritten or cut there (honest after a restored backup), and the
    /// answer says so. Nothing changed there: nothing is said.
    @Test(arguments: Backend.allCases)
    func aLogRewrittenOrCutBeforeThePointIsReported(backend: Backend) async throws {
        try await ClientWorld.run(backend) { world in
            let patient = try await Base.readByDoctor(world)
            let me = patient.account.profile.userID
            try await Self.activity(world, about: nil, count: 3)
            let first = try await patient.verifiedAccessLog()
            #expect(first.rewrittenSinceLastCheck == nil)
            let original = try await Base.entries(world.repository)
            let end = try #require(original.last).sequence
            let mine = first.entries.count
            let sentence = "the log was rewritten or cut at or before entry \(end) since this device last checked it"

            // Someone else's entry below the point edited and the chain rehashed: no checkpoint pins it.
            let nobody = try #require(original.filter { $0.patientID == nil }.dropLast().last)
            var edited = original
            edited[Int(nobody.sequence) - 1].details["note"] = "changed"
            let rehashed = try await patient.verifiedAccessLogAfter(replacing: Base.rehashed(edited), world, backend)
            #expect(rehashed.resumedAfter == nil)
            let unchanged = "your \(mine) entries up to there are unchanged"
            #expect(rehashed.rewrittenSinceLastCheck == "\(sentence) (entry \(end) now has another hash; \(unchanged))")
            #expect(try patient.checkState.mark() == nil, "the full check passed")
            let next = try await patient.verifiedAccessLog()
            #expect(next.resumedAfter == end && next.rewrittenSinceLastCheck == nil)
            #expect(try await patient.verifiedAccessLog(full: true).rewrittenSinceLastCheck == nil)

            // Cut: the newest two entries, about nobody, gone.
            let cut = try await patient.verifiedAccessLogAfter(replacing: Array(Base.rehashed(edited).dropLast(2)), world, backend)
            #expect(cut.rewrittenSinceLastCheck == "\(sentence) (the log now ends at entry \(end - 2); \(unchanged))")

            // The patient's newest entry removed and the chain rehashed: no later entry of its own links to it.
            try await Base.replaceLog(world.repository, backend, with: original)
            _ = try await patient.verifiedAccessLog()
            let newest = try #require(original.last { $0.patientID == me })
            let removed = try await patient.verifiedAccessLogAfter(replacing: Base.rehashed(original.filter { $0 != newest }), world, backend)
            #expect(removed.entries.count == mine - 1)
            #expect(
                removed.rewrittenSinceLastCheck
                    == "\(sentence) (the log now ends at entry \(end - 1); you had \(mine) entries up to there and now have \(mine - 1), not the same ones)"
            )
        }
    }

    static func auditKey(_ patient: PatientVault) async throws -> [UInt8] {
        let page = try await patient.transport.send(AccessLogEndpoints.entries, auth: try patient.account.sessionAuth)
        return try Hex.decode(try #require(page.patientKey))
    }

    /// `entries` with the patient's links recomputed for the hashes they now have, and the chain rehashed to
    /// match, as an operator who holds the server's secret would.
    static func relinked(_ entries: [AuditEntry], patient: UUID, key: [UInt8]) -> [AuditEntry] {
        var previous = AuditChain.genesis
        var own: String?
        return entries.map { e in
            var e = e
            e.previousHash = previous
            if e.patientID == patient, e.entryFormat == 2 { e.patientLink = AuditChain.patientLink(key: key, previous: own) }
            e.hash = AuditChain.hash(of: e) ?? ""
            if e.patientID == patient { own = e.hash }
            previous = e.hash
            return e
        }
    }
}

extension PatientVault {
    /// The check after the server's log is replaced with `entries`.
    func verifiedAccessLogAfter(replacing entries: [AuditEntry], _ world: ClientWorld, _ backend: Backend) async throws -> VerifiedAccessLog {
        try await AuditCheckpointClientTests.replaceLog(world.repository, backend, with: entries)
        return try await verifiedAccessLog()
    }
}

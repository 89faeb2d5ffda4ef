import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// What `revoke` did: the shares it ended (as the server confirmed them), whether it started a new key epoch
/// the doctor never receives, and the category's epoch afterwards.
public struct Revocation: Sendable, Encodable {
    public var shares: [ShareInfo]
    public var rotated: Bool
    public var epoch: UInt32
}

extension PatientVault {
    /// Looks a user up in the server's directory and trusts the answer only if its certificate verifies
    /// under the pinned admin key with the expected name and role: a substituted key is caught here.
    func certifiedUser(username: String, role: Role) async throws -> Certificate {
        let certificate = try await directoryCertificate(username: username, role: role)
        // Pinned on first use: a second key certified under a name this device trusts needs a person's word.
        var pins = try CertificatePins(store: account.store)
        try pins.check(certificate)
        return certificate
    }

    /// The directory's certificate of `username`, verified under the pinned admin key with that name and
    /// role (not checked against the pins: its user id is what the admin signed, whatever the key).
    func directoryCertificate(username: String, role: Role) async throws -> Certificate {
        let entry: DirectoryEntry
        do { entry = try await transport.send(DirectoryEndpoints.user(named: username), auth: try auth) } catch ClientError.notFound {
            throw ClientError.notFound("no approved \(role.rawValue) named '\(username)'")
        }
        do { try entry.certificate.verify(adminKey: adminKey, username: username, role: role) } catch {
            if case .wrongRole = error { throw ClientError.invalidRequest("'\(username)' is not a \(role.rawValue)") }
            throw ClientError.integrity("the server's certificate for '\(username)' does not verify under the pinned admin key: \(error)")
        }
        return entry.certificate
    }

    /// Accepts a changed key for `username` after a person compared `fingerprint` with them out of band:
    /// the server's current certificate must verify and carry exactly that fingerprint.
    public func confirmCertificateChange(username: String, role: Role = .doctor, fingerprint: String) async throws -> Certificate {
        let entry: DirectoryEntry
        do { entry = try await transport.send(DirectoryEndpoints.user(named: username), auth: try auth) } catch ClientError.notFound {
            throw ClientError.notFound("no approved \(role.rawValue) named '\(username)'")
        }
        do { try entry.certificate.verify(adminKey: adminKey, username: username, role: role) } catch {
            throw ClientError.integrity("the server's certificate for '\(username)' does not verify under the pinned admin key: \(error)")
        }
        guard entry.certificate.fingerprint == fingerprint.lowercased() else {
            throw ClientError.integrity(
                "the server presents fingerprint \(entry.certificate.fingerprint) for '\(username)', not the \(fingerprint) you confirmed"
            )
        }
        var pins = try CertificatePins(store: account.store)
        try pins.replace(with: entry.certificate)
        return entry.certificate
    }

    /// Asks to share `category` with a doctor (Docs/design.md §3): files the patient's signed request, which
    /// carries no keys, and records the doctor in the tresor's ledger. The keys are sealed to the doctor by
    /// this patient's next sync (on any device) after the admin's approval of exactly this request verifies.
    public func grant(doctor username: String, category: String, expiresAt: Date? = nil) async throws -> ShareInfo {
        let doctor = try await certifiedUser(username: username, role: .doctor)
        _ = try tresor(category)
        try await reconcileTresors()
        guard let t = keyring[category] else { throw ClientError.localState("no keys for \(category)") }
        let ledgerState = try store.ledgerState(category: category) ?? TresorLedgerState.none
        let request: Grant
        do {
            request = try Grant.request(
                patient: account.identity,
                member: doctor,
                adminKey: adminKey,
                ownerID: me,
                category: category,
                tresorVersion: ledgerState.ledger.version,
                createdAt: now().unixMillis,
                expiresAt: expiresAt?.unixMillis
            )
        } catch { throw ClientError.from(error) }
        let filed: ShareInfo
        do {
            filed = try await transport.send(ShareEndpoints.create, CreateShareRequest(grant: request), auth: try auth)
        } catch ClientError.conflict(let message) {
            // A request sent again after its first attempt was stored and the answer lost (an instance killed
            // mid-answer): the share already filed for exactly this signed request is this one. Any other
            // open share of the pair is a real conflict.
            guard let mine = try await shares().first(where: { $0.grant == request }) else { throw ClientError.conflict(message) }
            filed = mine
        }
        guard filed.grant == request, filed.doctorID == doctor.userID, filed.patientID == me else {
            throw ClientError.integrity("the server did not file the share request this patient signed")
        }
        let member = LedgerMember(
            shareID: filed.shareID,
            memberID: doctor.userID,
            username: doctor.username,
            status: .requested,
            expiresAt: request.expiresAt,
            changedAt: now().unixMillis
        )
        // Recorded in the ledger as committed now, not the copy read before the request went out: another
        // process of this device may have recorded a member meanwhile, which must not be lost. The share id
        // is the server's choice, not signed: one the ledger already holds would silently replace nothing
        // and leave the new doctor without keys.
        try store.write { tx in
            var current = try tx.ledgerState(category: category) ?? ledgerState
            guard current.ledger.members[filed.shareID] == nil else {
                throw ClientError.integrity("the server filed this share request under the id of another share of \(category)")
            }
            current.ledger.record(member)
            try tx.saveLedgerState(current, category: category, tresorID: t.id)
        }
        try await reconcileTresors()
        return filed
    }

    /// This patient's shares, newest last.
    public func shares() async throws -> [ShareInfo] {
        let list = try await transport.send(ShareEndpoints.list, auth: try auth)
        return list.shares
    }

    /// Ends every open share of `category` with a doctor at once, whether pending, active or expired, and
    /// starts a new key epoch the doctor never receives (Docs/design.md §3.1).
    ///
    /// The patient's own ledger decides what is ended, never the server's list or its labels: every share
    /// the ledger holds open for the doctor must be listed by the server (else nothing is revoked: exit 65),
    /// and a share the ledger lists as revoked or rejected is never a target. Shares the server lists whose
    /// signed request names this doctor and category and that the ledger does not know (requested on another
    /// device) are ended too. A device cannot tell that a doctor holds no keys (another device may have
    /// delivered them after an approval this one was not shown), so every revocation rotates.
    ///
    /// The decision is recorded before anything goes over the network: the members become *revoked* in the
    /// ledger, with the statements and the rotation owed, in one local transaction. Nothing the server shows
    /// afterwards can have keys delivered to them, and an interrupted revocation is finished by the next sync
    /// (`finishOwedRevocations`). `reencrypt` also rewrites the category's records under the new epoch.
    public func revoke(doctor username: String, category: String, reencrypt: Bool = false) async throws -> Revocation {
        let name = username.lowercased()
        try await reconcileTresors()
        guard let tresor = keyring[category] else { throw ClientError.notFound("no \(category) to revoke: this patient has no such category") }
        let listed = try await shares()
        let ledger = try store.ledgerState(category: category)?.ledger
        let recorded = ledger?.members.values.filter { $0.username == name } ?? []
        let doctorID: UUID
        if let member = recorded.first {
            doctorID = member.memberID
        } else {
            doctorID = try await directoryCertificate(username: name, role: .doctor).userID
        }
        let mine = { (share: ShareInfo) -> Bool in
            (try? share.grant.verify(patient: self.account.certificate, adminKey: self.adminKey)) != nil && share.grant.patientID == self.me
                && share.grant.category == category && share.grant.tresorID == tresor.id
        }
        var targets: [ShareInfo] = []
        for member in recorded.filter({ !$0.status.isFinal }).sorted(by: { $0.changedAt < $1.changedAt }) {
            guard let share = listed.first(where: { $0.shareID == member.shareID }) else {
                throw ClientError.integrity(
                    "the server does not list the share of \(category) with \(username) that this device's ledger holds open "
                        + "(share \(member.shareID.uuidString.lowercased())); nothing was revoked"
                )
            }
            guard mine(share), share.grant.memberID == member.memberID else {
                throw ClientError.integrity("the server lists a share of \(category) that this patient did not sign; nothing was revoked")
            }
            targets.append(share)
        }
        // Never a share the ledger ended: showing an ended share as active is how a server would divert a
        // revocation. Chosen by the signed request (doctor, category, tresor), never by the server's labels.
        let ended = Set(recorded.filter { $0.status == .revoked || $0.status == .rejected }.map(\.shareID))
        for share in listed
        where mine(share) && share.grant.memberID == doctorID && !ended.contains(share.shareID)
            && !targets.contains(where: { $0.shareID == share.shareID }) && !endedByPatient(share)
        {
            targets.append(share)
        }
        let known = !recorded.isEmpty || listed.contains { mine($0) && $0.grant.memberID == doctorID }
        guard known else { throw ClientError.notFound("no share of \(category) with \(username) on the server or in this device's ledger") }
        let at = now().unixMillis
        try store.decideRevocation(
            targets.map { (endedMember($0, ledger: ledger, name: name, at: at), $0.grant) },
            category: category,
            tresorID: tresor.id
        )
        var confirmed: [ShareInfo] = []
        for share in targets {
            confirmed.append(try await sendRevocation(of: share.shareID, request: share.grant, listed: share, at: at))
        }
        // The owed rotation happens in this sync's share maintenance, before anything is pulled or written.
        _ = try await syncKeepingQuarantine()
        if try store.owedRotations().contains(category) { try await finishOwedRotation(category) }
        if reencrypt { try await reencryptOlderRecords(category: category) }
        _ = try await sync()
        return Revocation(shares: confirmed, rotated: true, epoch: keyring[category]?.currentEpoch ?? 0)
    }

    /// Whether the server shows `share` ended by a revocation this patient signed.
    func endedByPatient(_ share: ShareInfo) -> Bool {
        guard let revocation = share.revocation else { return false }
        return (try? revocation.verify(shareID: share.shareID, request: share.grant, patient: account.certificate, adminKey: adminKey)) != nil
    }

    /// Signs and sends the revocation of `shareID` (whose request is `request`), and checks that the server
    /// holds exactly that statement; the owed statement is then done. Returns the server's answer.
    func sendRevocation(of shareID: UUID, request: Grant, listed: ShareInfo, at: UnixMillis) async throws -> ShareInfo {
        let revocation = ShareRevocation.make(shareID: shareID, request: request, patient: account.identity, revokedAt: at)
        let answer = try await transport.send(ShareEndpoints.revoke(shareID.uuidString), RevokeShareRequest(revocation: revocation), auth: try auth)
        guard answer.shareID == shareID, answer.revocation == revocation,
            answer.state == .revoked || (listed.state.isFinal && answer.state == listed.state)
        else {
            throw ClientError.integrity("the server did not confirm the revocation of share \(shareID.uuidString.lowercased())")
        }
        try store.revocationSent(shareID)
        return answer
    }

    /// Finishes what an interrupted `share revoke` left owed (Docs/design.md §3.1): sends the statements the
    /// server has not confirmed, and rotates the categories not rotated yet. A statement the server refuses
    /// or a share it does not list stays owed (withholding delays the doctor's notice; the rotation does not
    /// wait for it).
    func finishOwedRevocations() async throws {
        let owed = try store.owedRevocations()
        if !owed.isEmpty {
            let listed = try await shares()
            for item in owed {
                guard let share = listed.first(where: { $0.shareID == item.shareID }) else { continue }
                if endedByPatient(share) {
                    try store.revocationSent(item.shareID)
                    continue
                }
                _ = try? await sendRevocation(of: item.shareID, request: item.request, listed: share, at: now().unixMillis)
            }
        }
        for category in try store.owedRotations() { try await finishOwedRotation(category) }
    }

    /// The rotation a revocation of `category` owes: a new epoch sealed only to the members the ledger
    /// still lists (the revoked ones were recorded before).
    func finishOwedRotation(_ category: String) async throws {
        guard keyring[category] != nil else { return try store.rotationDone(category) }
        try await rotateKeys(category: category, ending: [])
        try store.rotationDone(category)
    }

    /// Re-seals the category's records older than its current epoch under it: only records whose local
    /// copy is the server's head (an unsent or stale copy is not rewritten).
    func reencryptOlderRecords(category: String) async throws {
        guard let current = keyring[category] else { return }
        for row in try store.records(category: category)
        where row.envelope.header.epoch < current.currentEpoch && !row.pending && row.serverTimestamp == row.timestamp {
            let record = row.deleted ? nil : try open(row)
            try write(record, type: row.recordType, recordID: row.envelope.header.recordID, category: category)
        }
    }

    /// The ledger entry of `share` marked revoked at `at` (a new entry when this device's ledger lacks it).
    func endedMember(_ share: ShareInfo, ledger: TresorLedger?, name: String, at: UnixMillis) -> LedgerMember {
        var member =
            ledger?.members[share.shareID]
            ?? LedgerMember(
                shareID: share.shareID,
                memberID: share.grant.memberID,
                username: name,
                status: .revoked,
                expiresAt: share.grant.expiresAt,
                changedAt: at
            )
        member.status = .revoked
        member.changedAt = at
        return member
    }

    /// Starts a new epoch of `category` (after a sync): records `ending` in the ledger, declares the epoch,
    /// seals it to the members the ledger still lists, and optionally re-seals every record of the category
    /// under it.
    public func rotate(category: String, reencrypt: Bool, ending: [LedgerMember] = []) async throws {
        // Pull first: re-encrypting stale local copies with fresh timestamps would undo other devices' changes.
        // A quarantined record must not stop a rotation (it follows a revocation): the final sync reports it.
        _ = try await syncKeepingQuarantine()
        try await rotateKeys(category: category, ending: ending)
        if reencrypt { try await reencryptOlderRecords(category: category) }
        _ = try await sync()
    }
}

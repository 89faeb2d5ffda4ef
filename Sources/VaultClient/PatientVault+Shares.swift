import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

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
        do { entry = try await transport.send(.GET, Routes.userByName(username), auth: try auth) } catch ClientError.notFound {
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
        do { entry = try await transport.send(.GET, Routes.userByName(username), auth: try auth) } catch ClientError.notFound {
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
        var marks = try store.marks(category: category) ?? TresorMarks(ledger: TresorLedger(version: 0), seenVersion: 0, topEpoch: 0)
        let request: Grant
        do {
            request = try Grant.request(
                patient: account.identity,
                member: doctor,
                adminKey: adminKey,
                ownerID: me,
                category: category,
                tresorVersion: marks.ledger.version,
                createdAt: now().unixMillis,
                expiresAt: expiresAt?.unixMillis
            )
        } catch { throw ClientError.from(error) }
        let filed: ShareInfo = try await transport.send(.POST, Routes.shares, body: CreateShareRequest(grant: request), auth: try auth)
        guard filed.grant == request, filed.doctorID == doctor.userID, filed.patientID == me else {
            throw ClientError.integrity("the server did not file the share request this patient signed")
        }
        marks.ledger.record(
            LedgerMember(
                shareID: filed.shareID,
                memberID: doctor.userID,
                username: doctor.username,
                status: .requested,
                expiresAt: request.expiresAt,
                changedAt: now().unixMillis
            )
        )
        try store.saveMarks(marks, category: category, tresorID: t.id)
        try await reconcileTresors()
        return filed
    }

    /// This patient's shares, newest last.
    public func shares() async throws -> [ShareInfo] {
        let list: ShareList = try await transport.send(.GET, Routes.shares, auth: try auth)
        return list.shares
    }

    /// Ends the share of `category` with a doctor at once, whether it is pending, active or already expired:
    /// signs the revocation, records it in the tresor's ledger and, when the doctor held keys, starts a new
    /// key epoch that only the members the ledger still lists receive; `reencrypt` also rewrites the
    /// category's records under it.
    public func revoke(doctor username: String, category: String, reencrypt: Bool = false) async throws -> ShareInfo {
        let name = username.lowercased()
        try await reconcileTresors()
        let listed = try await shares()
        let ledger = try store.marks(category: category)?.ledger
        let known = ledger?.members.values.filter { $0.username == name && !$0.status.isFinal }.max { $0.changedAt < $1.changedAt }
        let open = listed.filter {
            $0.doctorUsername == name && $0.category == category && [.pending, .active, .expired].contains($0.state) && $0.revocation == nil
        }
        guard let share = known.flatMap({ m in listed.first { $0.shareID == m.shareID } }) ?? open.last else {
            throw ClientError.notFound("no active, pending or expired share of \(category) with \(username)")
        }
        do {
            try share.grant.verify(patient: account.certificate, adminKey: adminKey)
            guard share.grant.patientID == me, share.grant.category == category else { throw TrustError.mismatch(what: "share", field: "parties") }
        } catch { throw ClientError.integrity("the server lists a share of \(category) that this patient did not sign") }
        // The server's names are labels: the request the patient signed must name the doctor asked for.
        guard share.grant.memberID == (try await memberID(of: name, share: share, ledger: ledger)) else {
            throw ClientError.integrity("the share the server lists as one with \(username) names another doctor; nothing was revoked")
        }
        let at = now().unixMillis
        let revocation = ShareRevocation.make(shareID: share.shareID, request: share.grant, patient: account.identity, revokedAt: at)
        let ended: ShareInfo = try await transport.send(
            .POST,
            Routes.shareRevoke(share.shareID.uuidString),
            body: RevokeShareRequest(revocation: revocation),
            auth: try auth
        )
        guard ended.shareID == share.shareID, ended.state == .revoked || (share.state == .expired && ended.state == .expired) else {
            throw ClientError.integrity("the server did not confirm the revocation")
        }
        let recorded = ledger?.members[share.shareID]
        var member =
            recorded
            ?? LedgerMember(
                shareID: share.shareID,
                memberID: share.grant.memberID,
                username: name,
                status: .revoked,
                expiresAt: share.grant.expiresAt,
                changedAt: at
            )
        // No new epoch when the doctor holds nothing: a request whose keys were never delivered, or a member
        // the tresor already rotated past (expired). A share missing from the ledger may hold keys.
        let heldKeys = recorded.map { !$0.status.isFinal && ($0.status != .requested || !share.grant.isRequest) } ?? true
        member.status = .revoked
        member.changedAt = at
        if heldKeys {
            try await rotate(category: category, reencrypt: reencrypt, ending: [member])
        } else {
            try recordInLedger(member, category: category)
            try await reconcileTresors()
        }
        return ended
    }

    /// The user id of doctor `name`: from this tresor's ledger (the entry of `share`, which must carry that
    /// name, or any entry of the name), else from the certified directory.
    func memberID(of name: String, share: ShareInfo, ledger: TresorLedger?) async throws -> UUID {
        if let recorded = ledger?.members[share.shareID] {
            guard recorded.username == name else {
                throw ClientError.integrity("the server lists the share with \(recorded.username) as one with \(name); nothing was revoked")
            }
            return recorded.memberID
        }
        if let entry = ledger?.members.values.first(where: { $0.username == name }) { return entry.memberID }
        return try await directoryCertificate(username: name, role: .doctor).userID
    }

    /// Starts a new epoch of `category` (after a sync): records `ending` in the ledger, declares the epoch,
    /// seals it to the members the ledger still lists, and optionally re-seals every record of the category
    /// under it.
    public func rotate(category: String, reencrypt: Bool, ending: [LedgerMember] = []) async throws {
        // Pull first: re-encrypting stale local copies with fresh timestamps would undo other devices' changes.
        // A quarantined record must not stop a rotation (it follows a revocation): the final sync reports it.
        _ = try await syncKeepingQuarantine()
        try await rotateKeys(category: category, ending: ending)
        guard let current = keyring[category] else { return }
        if reencrypt {
            // Only records whose local copy is the server's head: an unsent or stale copy is not rewritten.
            for row in try store.records(category: category)
            where row.envelope.header.epoch < current.currentEpoch
                && !row.pending && row.serverTimestamp == row.timestamp
            {
                let record = row.deleted ? nil : try open(row)
                try write(record, type: row.recordType, recordID: row.envelope.header.recordID, category: category)
            }
        }
        _ = try await sync()
    }
}

import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

extension PatientVault {
    /// Looks a user up in the server's directory and trusts the answer only if its certificate verifies
    /// under the pinned admin key with the expected name and role: a substituted key is caught here.
    func certifiedUser(username: String, role: Role) async throws -> Certificate {
        let entry: DirectoryEntry
        do { entry = try await transport.send(.GET, Routes.userByName(username), auth: try auth) } catch ClientError.notFound {
            throw ClientError.notFound("no approved \(role.rawValue) named '\(username)'")
        }
        do { try entry.certificate.verify(adminKey: adminKey, username: username, role: role) } catch {
            if case .wrongRole = error { throw ClientError.invalidRequest("'\(username)' is not a \(role.rawValue)") }
            throw ClientError.integrity("the server's certificate for '\(username)' does not verify under the pinned admin key: \(error)")
        }
        // Pinned on first use: a second key certified under a name this device trusts needs a person's word.
        var pins = try CertificatePins(store: account.store)
        try pins.check(entry.certificate)
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

    /// Shares `category` with a doctor: seals every epoch key to the doctor's certified box key, signs the
    /// grant and submits it. The share is pending until the admin approves it.
    public func grant(doctor username: String, category: String, expiresAt: Date? = nil) async throws -> ShareInfo {
        let doctor = try await certifiedUser(username: username, role: .doctor)
        _ = try tresor(category)
        try await reconcileTresors()
        guard let t = keyring[category] else { throw ClientError.localState("no keys for \(category)") }
        let grant: Grant
        do {
            grant = try Grant.make(
                patient: account.identity,
                member: doctor,
                adminKey: adminKey,
                tresor: t,
                createdAt: Date().unixMillis,
                expiresAt: expiresAt?.unixMillis
            )
        } catch { throw ClientError.from(error) }
        return try await transport.send(.POST, Routes.shares, body: CreateShareRequest(grant: grant), auth: try auth)
    }

    /// This patient's shares, newest last.
    public func shares() async throws -> [ShareInfo] {
        let list: ShareList = try await transport.send(.GET, Routes.shares, auth: try auth)
        return list.shares
    }

    /// Revokes the open share of `category` with a doctor at once, then starts a new key epoch, grants it
    /// to this patient's devices and to the doctors who still have active shares of that category, and
    /// (with `reencrypt`) rewrites the category's records under the new epoch.
    public func revoke(doctor username: String, category: String, reencrypt: Bool = false) async throws -> ShareInfo {
        let open = try await shares().filter {
            $0.doctorUsername == username.lowercased() && $0.category == category && ($0.state == .active || $0.state == .pending)
        }
        guard let share = open.last else { throw ClientError.notFound("no active or pending share of \(category) with \(username)") }
        let revoked: ShareInfo = try await transport.send(.POST, Routes.shareRevoke(share.shareID.uuidString), auth: try auth)
        guard revoked.state == .revoked, revoked.shareID == share.shareID else {
            throw ClientError.integrity("the server did not confirm the revocation")
        }
        try await rotate(category: category, reencrypt: reencrypt, excluding: share.doctorID)
        return revoked
    }

    /// Starts a new epoch of `category`: declares it (self-grant), re-grants the remaining active shares,
    /// and optionally re-seals every record of the category under it.
    public func rotate(category: String, reencrypt: Bool, excluding revokedDoctor: UUID? = nil) async throws {
        // Pull first: re-encrypting stale local copies with fresh timestamps would undo other devices' changes.
        // A quarantined record must not stop a rotation (it follows a revocation): the final sync reports it.
        _ = try await syncKeepingQuarantine()
        guard var t = keyring[category] else { throw ClientError.notFound("no tresor for \(category)") }
        t.rotate()
        keyring.merge(t)
        try saveKeyring()
        do {
            try await declare(t)
        } catch ClientError.conflict {
            try await reconcileTresors()
        }
        guard let current = keyring[category] else { return }
        for share in try await shares() where share.category == category && share.state == .active && share.doctorID != revokedDoctor {
            // Only shares this patient signed and the admin approved get the new key: the server's list alone is not enough.
            let doctor = try await certifiedUser(username: share.doctorUsername, role: .doctor)
            do {
                try share.grant.verify(patient: account.certificate, adminKey: adminKey)
                guard let approval = share.approval, share.grant.patientID == me, share.grant.memberID == doctor.userID,
                    share.doctorID == doctor.userID, share.grant.tresorID == current.id
                else { throw TrustError.mismatch(what: "share", field: "parties") }
                try approval.verifyShare(adminKey: adminKey, shareID: share.shareID, grant: share.grant)
            } catch {
                throw ClientError.integrity("the server lists a share of \(category) that this patient did not make or the admin did not approve")
            }
            let g = try Grant.make(
                patient: account.identity,
                member: doctor,
                adminKey: adminKey,
                tresor: current,
                createdAt: Date().unixMillis,
                expiresAt: share.grant.expiresAt
            )
            let _: ShareInfo = try await transport.send(
                .PUT,
                Routes.shareGrant(share.shareID.uuidString),
                body: UpdateShareGrantRequest(grant: g),
                auth: try auth
            )
        }
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

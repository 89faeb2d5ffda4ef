import Foundation
import Hummingbird
import VaultAPI
import VaultCore
import VaultCrypto

/// Shares (Docs/design.md §3): requests, listings, revocation, new epochs, the doctor's patients.
extension VaultService {
    func shareInfo(_ s: ShareRow) async throws -> ShareInfo {
        var names: [UUID: String] = [:]
        return try await shareInfo(s, names: &names)
    }

    /// `names` keeps the usernames already read, so a listing reads each user once, not twice per share.
    func shareInfo(_ s: ShareRow, names: inout [UUID: String]) async throws -> ShareInfo {
        for id in [s.patientID, s.doctorID] where names[id] == nil { names[id] = try await repository.user(id: id)?.username ?? "?" }
        return ShareInfo(
            shareID: s.id,
            patientID: s.patientID,
            patientUsername: names[s.patientID] ?? "?",
            doctorID: s.doctorID,
            doctorUsername: names[s.doctorID] ?? "?",
            tresorID: s.tresorID,
            category: s.category,
            state: s.state,
            grant: s.grant,
            approval: s.approval,
            latestGrant: s.latestGrant,
            revocation: s.revocation,
            reason: s.reason,
            createdAt: s.createdAt,
            updatedAt: s.updatedAt,
            expiresAt: s.expiresAt
        )
    }

    func createShare(_ caller: Caller, _ r: CreateShareRequest) async throws -> ShareInfo {
        try require(caller, role: .patient)
        let g = r.grant
        guard g.patientID == caller.id else { throw APIError.forbidden("a patient can only share their own data") }
        try verify(g, by: caller, what: "grant")
        guard let doctor = try await repository.user(id: g.memberID), doctor.status == .active, doctor.role == .doctor else {
            throw APIError.badRequest("the grant's member is not an approved doctor")
        }
        guard let tresor = try await repository.tresor(id: g.tresorID), tresor.ownerID == caller.id, tresor.category == g.category else {
            throw APIError.badRequest("unknown tresor: declare the category's tresor first (PUT /v1/tresors)")
        }
        // Keys are delivered only after the admin's approval (Docs/design.md §3): a request carries none.
        guard g.version == 2, g.isRequest else {
            throw APIError.badRequest("a share request carries no keys; the patient's device delivers them after approval")
        }
        let now = clock()
        if let e = g.expiresAt, e <= now { throw APIError.badRequest("the share's expiry date has already passed") }
        let row = ShareRow(
            id: UUID(),
            patientID: caller.id,
            doctorID: doctor.id,
            tresorID: tresor.id,
            category: tresor.category,
            state: .pending,
            grant: g,
            approval: nil,
            reason: nil,
            createdAt: now,
            updatedAt: now,
            expiresAt: g.expiresAt
        )
        let event = Self.patientEvent(
            caller,
            "share.requested",
            ["share": Self.idText(row.id), "doctor": doctor.username, "category": row.category]
        )
        try await repository.insertShare(row, audit: event)
        return try await shareInfo(announce(row))
    }

    /// The caller's shares; with `patient`, only those of that patient (a doctor opening one patient reads
    /// that patient's shares, not every patient's: Docs/design.md §3).
    func shares(_ caller: Caller, patient: UUID? = nil) async throws -> ShareList {
        // A doctor sees approved shares only: active ones, and ended ones that carry the patient's revocation
        // (so the doctor's client learns the end from the patient, not from the server). A request the admin
        // never approved, withdrawn or not, is never shown to the doctor (Docs/design.md §3.1). Shares made
        // before keys waited for approval carry keys in their request: a doctor never sees those before approval.
        var rows: [ShareRow]
        switch (caller.user.role, patient) {
        case (.patient, _): rows = try await repository.shares(patientID: caller.id, asOf: clock())
        case let (.doctor, patient?): rows = try await repository.shares(doctorID: caller.id, patientID: patient, asOf: clock())
        case (.doctor, nil): rows = try await repository.shares(doctorID: caller.id, asOf: clock())
        }
        if caller.user.role == .doctor { rows = rows.filter { $0.approval != nil && ($0.state == .active || $0.revocation != nil) } }
        if let patient { rows = rows.filter { $0.patientID == patient } }
        var out: [ShareInfo] = []
        var names: [UUID: String] = [:]
        for r in rows { out.append(try await shareInfo(r, names: &names)) }
        return ShareList(shares: out)
    }

    func ownedShare(_ caller: Caller, _ id: UUID) async throws -> ShareRow {
        try require(caller, role: .patient)
        guard let s = try await repository.share(id: id), s.patientID == caller.id else { throw APIError.notFound("no such share") }
        return s
    }

    /// Ends a share with the patient's signed revocation (Docs/envelope-v1.md §3.3), which every revocation
    /// carries: the route refuses a request without one.
    func revokeShare(_ caller: Caller, _ id: UUID, _ revocation: ShareRevocation) async throws -> ShareInfo {
        let s = try await ownedShare(caller, id)
        do { try revocation.verify(shareID: s.id, request: s.grant, patient: caller.certificate, adminKey: adminKey) } catch {
            throw APIError.badRequest("the revocation does not verify: \(error)")
        }
        try await repository.recordRevocation(id: s.id, revocation: revocation)
        // An ended share takes the patient's statement too: it tells the doctor the end is the patient's.
        if s.state.isFinal, var ended = try await repository.share(id: s.id) {
            ended.revocation = ended.revocation ?? revocation
            return try await shareInfo(ended)
        }
        let event = Self.patientEvent(caller, "share.revoked", ["share": Self.idText(s.id), "category": s.category])
        let row = try await repository.transitionShare(
            id: s.id,
            from: [.pending, .active],
            to: .revoked,
            approval: nil,
            reason: "revoked by the patient",
            now: clock(),
            audit: event
        )
        return try await shareInfo(announce(row))
    }

    func updateShareGrant(_ caller: Caller, _ id: UUID, _ r: UpdateShareGrantRequest) async throws -> ShareInfo {
        let s = try await ownedShare(caller, id)
        let g = r.grant
        guard g.patientID == s.patientID, g.memberID == s.doctorID, g.tresorID == s.tresorID, g.category == s.category else {
            throw APIError.badRequest("a new grant must name the same patient, doctor and tresor")
        }
        guard g.expiresAt == s.grant.expiresAt else {
            throw APIError.badRequest("a new grant keeps the approved expiry date; share again to change it")
        }
        try verify(g, by: caller, what: "grant")
        guard let tresor = try await repository.tresor(id: s.tresorID), g.epochsExist(upTo: tresor.currentEpoch),
            g.isSuccessor(of: s.latestGrant ?? s.grant)
        else { throw APIError.badRequest("a new grant keeps the old epochs and adds only epochs the tresor has") }
        let event = Self.patientEvent(
            caller,
            "share.epochs",
            ["share": Self.idText(s.id), "epochs": g.epochs.map(String.init).joined(separator: ",")]
        )
        let row = try await repository.updateShareGrant(id: s.id, grant: g, now: clock(), audit: event)
        return try await shareInfo(announce(row))
    }

    /// A page of the doctor's patients, by patient id (Docs/design.md §6.1): up to `limit`
    /// patients after `after` with an active share naming the doctor.
    func patients(_ caller: Caller, after: UUID?, limit: Int) async throws -> PatientList {
        try require(caller, role: .doctor)
        let clamped = Self.listLimit(limit)
        let now = clock()
        _ = try await repository.expireShares(now: now)
        let rows = try await repository.patientShares(doctorID: caller.id, patientsAfter: after, limit: clamped + 1)
        var order: [UUID] = []
        var seen = Set<UUID>()
        var byPatient: [UUID: PatientSummary] = [:]
        for s in rows {
            if seen.insert(s.patientID).inserted { order.append(s.patientID) }
            guard order.count <= clamped, !s.expired(at: now) else { continue }
            let last = s.lastChange ?? s.updatedAt
            if var p = byPatient[s.patientID] {
                p.categories = Array(Set(p.categories + [s.category])).sorted()
                p.lastChange = max(p.lastChange, last)
                byPatient[s.patientID] = p
            } else {
                byPatient[s.patientID] = PatientSummary(
                    patientID: s.patientID,
                    username: s.username ?? "?",
                    categories: [s.category],
                    lastChange: last
                )
            }
        }
        let page = order.prefix(clamped)
        return PatientList(
            patients: page.compactMap { byPatient[$0] },
            nextCursor: page.last ?? after,
            done: order.count <= clamped
        )
    }
}

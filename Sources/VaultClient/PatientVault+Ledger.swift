import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// The patient's side of membership (Docs/design.md §3): the ledger decides who receives keys, never the
/// server's list. Keys go to a doctor only after the admin's approval of the patient's own request has
/// verified here; a rotation seals the new epoch only to members the ledger lists as delivered, not
/// ended and not expired; an expiry rotates the tresor at the first sync after it.
extension PatientVault {
    /// Records `member` in `category`'s ledger on this device; the next reconcile declares it.
    func recordInLedger(_ member: LedgerMember, category: String) throws {
        guard let t = keyring[category] else { throw ClientError.notFound("no tresor for \(category)") }
        // Read and written in one transaction: a member another process of this device records meanwhile stays.
        try store.write { tx in
            var ledgerState = try tx.ledgerState(category: category) ?? TresorLedgerState.none
            ledgerState.ledger.record(member)
            try tx.saveLedgerState(ledgerState, category: category, tresorID: t.id)
        }
    }

    /// The members of a tresor declared before ledgers existed, from the shares this patient signed and
    /// the admin approved (active: keys were sealed in the request) or that still wait (pending). Kept
    /// while a tresor's newest self-grant may be of version 1: its approved requests cannot be re-signed
    /// without a new approval, so they stay readable (Docs/design.md §8).
    func legacyLedger(category: String, tresorID: UUID) async throws -> TresorLedger {
        var ledger = TresorLedger(version: 0)
        for share in try await shares() where share.tresorID == tresorID && (share.state == .active || share.state == .pending) {
            guard (try? share.grant.verify(patient: account.certificate, adminKey: adminKey)) != nil, share.grant.patientID == me,
                share.grant.tresorID == tresorID
            else { continue }
            if share.state == .active {
                guard let approval = share.approval,
                    (try? approval.verifyShare(adminKey: adminKey, shareID: share.shareID, grant: share.grant)) != nil
                else { continue }
            }
            ledger.record(
                LedgerMember(
                    shareID: share.shareID,
                    memberID: share.grant.memberID,
                    username: share.doctorUsername,
                    status: share.state == .active && !share.grant.isRequest ? .delivered : .requested,
                    expiresAt: share.grant.expiresAt,
                    changedAt: share.createdAt
                )
            )
        }
        return ledger
    }

    /// Delivers keys to approved requests and rotates past expired members, for every tresor this device
    /// keeps a ledger of. Runs at every sync (Docs/design.md §3). Returns the deliveries it made, each as
    /// "CATEGORY to USERNAME", so that the sync can say so.
    @discardableResult
    func maintainShares() async throws -> [String] {
        // First what an interrupted revocation owes: its members are already out of the ledger's recipients.
        try await finishOwedRevocations()
        let at = now().unixMillis
        var deliveries: [String] = []
        var listed: [ShareInfo]?
        var recorded = false
        for category in try store.ledgerCategories() {
            guard let ledgerState = try store.ledgerState(category: category), keyring[category] != nil else { continue }
            let due = ledgerState.ledger.dueToExpire(at: at)
            if !due.isEmpty {
                // The end date passed: a new epoch the expired members never receive.
                try await rotateKeys(
                    category: category,
                    ending: due.map {
                        var m = $0
                        m.status = .expired
                        m.changedAt = at
                        return m
                    }
                )
                listed = nil
            }
            let awaiting = try store.ledgerState(category: category)?.ledger.awaitingDelivery(at: at) ?? []
            guard !awaiting.isEmpty else { continue }
            let shares: [ShareInfo]
            if let listed { shares = listed } else { shares = try await self.shares() }
            listed = shares
            for member in awaiting {
                guard let share = shares.first(where: { $0.shareID == member.shareID }) else { continue }
                switch share.state {
                case .active:
                    guard let t = keyring[category] else { continue }
                    try await deliver(to: member, share: share, tresor: t)
                    var delivered = member
                    delivered.status = .delivered
                    delivered.changedAt = at
                    try recordInLedger(delivered, category: category)
                    recorded = true
                    deliveries.append("\(category) to \(member.username)")
                case .rejected:
                    var rejected = member
                    rejected.status = .rejected
                    rejected.changedAt = at
                    try recordInLedger(rejected, category: category)
                    recorded = true
                default: continue
                }
            }
        }
        // Declared once, after every category's local changes: not between one category's deliveries and
        // the next's.
        if recorded { try await reconcileTresors() }
        return deliveries
    }

    /// Seals every epoch of `tresor` to `member` in a successor of the share's request, after checking that
    /// the request is this patient's, names the member, and carries the admin's approval of exactly it.
    func deliver(to member: LedgerMember, share: ShareInfo, tresor: Tresor) async throws {
        do {
            try share.grant.verify(patient: account.certificate, adminKey: adminKey)
            guard share.grant.patientID == me, share.grant.memberID == member.memberID, share.doctorID == member.memberID,
                share.grant.tresorID == tresor.id, share.grant.expiresAt == member.expiresAt
            else { throw TrustError.mismatch(what: "share", field: "parties") }
            guard let approval = share.approval else { throw TrustError.mismatch(what: "share", field: "approval") }
            try approval.verifyShare(adminKey: adminKey, shareID: share.shareID, grant: share.grant)
        } catch {
            throw ClientError.integrity(
                "the server lists a share of \(tresor.category) with \(member.username) that this patient did not request or the admin did not approve"
            )
        }
        let doctor = try await certifiedUser(username: member.username, role: .doctor)
        guard doctor.userID == member.memberID else {
            throw ClientError.integrity("the certificate of '\(member.username)' names another user than the one this patient shared with")
        }
        let version = try store.ledgerState(category: tresor.category)?.ledger.version ?? 0
        let grant: Grant
        do {
            grant = try Grant.make(
                patient: account.identity,
                member: doctor,
                adminKey: adminKey,
                tresor: tresor,
                tresorVersion: version,
                createdAt: now().unixMillis,
                expiresAt: member.expiresAt
            )
        } catch { throw ClientError.from(error) }
        _ = try await transport.send(ShareEndpoints.updateGrant(share.shareID.uuidString), UpdateShareGrantRequest(grant: grant), auth: try auth)
    }

    /// Starts a new epoch of `category` without syncing: records `ending` in the ledger, declares the new
    /// epoch with it, then seals the epoch to the members the ledger lists as holding keys. A member the
    /// server does not list as active gets nothing (the server can withhold, never add).
    func rotateKeys(category: String, ending: [LedgerMember]) async throws {
        let seal = keyringSeal
        // The ended members and the new epoch land together: no new key without the ledger that excludes them.
        // The new epoch follows the row's newest (another process may have rotated since this vault opened).
        keyring = try store.write { tx in
            var next = try tx.keyring(seal)
            guard var t = next[category] else { throw ClientError.notFound("no tresor for \(category)") }
            guard t.rotate() != nil else { throw ClientError.integrity("the tresor for \(category) is at its last epoch (\(t.currentEpoch))") }
            next.merge(t)
            var state = try tx.ledgerState(category: category) ?? .none
            for member in ending { state.ledger.record(member) }
            try tx.saveLedgerState(state, category: category, tresorID: t.id)
            try tx.save(next, seal: seal)
            return next
        }
        try await reconcileTresors()
        guard let current = keyring[category], let ledger = try store.ledgerState(category: category)?.ledger else { return }
        let recipients = ledger.recipients(at: now().unixMillis)
        guard !recipients.isEmpty else { return }
        let listed = try await shares()
        for member in recipients {
            guard let share = listed.first(where: { $0.shareID == member.shareID }), share.state == .active else { continue }
            try await deliver(to: member, share: share, tresor: current)
        }
    }
}

/// One doctor this patient shares a category with, as this patient's own ledger records it.
public struct SharedDoctor: Sendable, Encodable, Equatable {
    public var doctor: String
    public var category: String
    /// `active` (keys delivered) or `requested` (waiting for the admin, or for the next sync to deliver them).
    public var state: String
    public var since: UnixMillis
    public var expiresAt: UnixMillis?
    public var shareID: UUID
}

extension PatientVault {
    /// The doctors this patient shares with, from its own ledger, never from the server's list (Docs/design.md
    /// §3): open members, not ended and not expired. Open shares the server lists that the ledger does not
    /// know are counted in `unlisted` and not shown: a share row the operator invented, a request of this
    /// patient's copied under another id, or one made on another device whose ledger this one has not received
    /// yet (it appears after that device's next sync).
    public func doctors() async throws -> (doctors: [SharedDoctor], unlisted: Int) {
        try await reconcileTresors()
        let at = now().unixMillis
        var out: [SharedDoctor] = []
        var known = Set<UUID>()
        for category in try store.ledgerCategories() {
            guard let ledger = try store.ledgerState(category: category)?.ledger else { continue }
            known.formUnion(ledger.members.keys)
            for m in ledger.members.values where !m.status.isFinal && !m.hasExpired(at: at) {
                out.append(
                    SharedDoctor(
                        doctor: m.username,
                        category: category,
                        state: m.status == .delivered ? "active" : "requested",
                        since: m.changedAt,
                        expiresAt: m.expiresAt,
                        shareID: m.shareID
                    )
                )
            }
        }
        let unlisted = try await shares().filter { ($0.state == .active || $0.state == .pending) && !known.contains($0.shareID) }.count
        out.sort { ($0.doctor, $0.category, $0.since) < ($1.doctor, $1.category, $1.since) }
        return (out, unlisted)
    }
}

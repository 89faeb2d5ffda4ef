import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// One shared category of one patient, verified end to end: the patient's certificate under the pinned
/// admin key, the admin's approval of exactly this grant, the patient's signature on the grant (and on
/// any later grant of newer epochs), and the keys opened with the doctor's own box key.
public struct VerifiedShare: Sendable {
    /// One reading per tresor, by category: two verified shares of one tresor (a request copied under a new
    /// share id that this device has not seen revoked) add keys, never a second copy of each record.
    static func onePerTresor(_ shares: [VerifiedShare]) -> [VerifiedShare] {
        var tresors: [UUID: VerifiedShare] = [:]
        for share in shares {
            guard let seen = tresors[share.tresor.id] else {
                tresors[share.tresor.id] = share
                continue
            }
            var merged = seen.tresor
            merged.merge(keys: share.tresor.keys)
            tresors[share.tresor.id] = VerifiedShare(share: seen.share, tresor: merged)
        }
        return tresors.values.sorted { $0.share.category < $1.share.category }
    }

    /// The share as the server listed it.
    public let share: ShareInfo
    /// The category's keys the grants opened (none while the patient's device has not delivered them).
    public let tresor: Tresor
    /// True when the admin approved the share but the patient's device has not yet sealed the keys to
    /// this doctor (it does so at its next sync, Docs/design.md §3).
    public var awaitingKeys: Bool { tresor.keys.isEmpty }
}

/// What a doctor sees of one patient.
public struct PatientView: Sendable {
    /// The patient's certificate, verified under the pinned admin key.
    public var patient: Certificate
    /// The categories viewed, sorted.
    public var categories: [String]
    /// The live activities, sorted by id.
    public var activities: [Activity]
    /// The live outcomes, sorted by activity and occurrence.
    public var outcomes: [Outcome]
    /// Records the doctor holds no key for (written under an epoch not granted to them).
    public var unreadable: Int
    /// Categories the admin approved whose keys the patient's device has not delivered yet, sorted.
    public var awaitingKeys: [String] = []
    /// Records of the viewed categories that failed their integrity check and were not shown (Docs/design.md §5).
    public var quarantined: [QuarantinedRecord] = []
    /// Per category, when the patient signed the state commitment the cached records were checked against
    /// (Docs/envelope-v1.md §3.4): the view is complete and current as of then. Absent for a category
    /// without a commitment yet (data from before commitments) or whose check failed.
    public var asOf: [String: UnixMillis] = [:]
    /// Why categories could not be confirmed complete and current: the records the server sent are not
    /// the set the patient committed to, or it showed an older commitment than before.
    public var incomplete: [String] = []
    /// Categories whose server is behind the state this cache accepted (a restored backup, or a rollback)
    /// while the cache still holds exactly that state: shown as of the accepted commitment, each with
    /// this note, until the patient's device brings the server up to date (Docs/design.md §5.2).
    public var serverBehind: [String] = []
    /// The categories of `serverBehind`, sorted as they were read.
    public var behind: [String] = []

    /// Records of categories whose check against the patient's commitment failed (`incomplete`): decrypted
    /// and signed by the patient, but not the set the patient committed to (an older version, a deleted
    /// record brought back). Never mixed with the verified ones; shown only on request, marked.
    public var unverifiedActivities: [Activity] = []
    public var unverifiedOutcomes: [Outcome] = []
    /// The categories whose records are kept apart in `unverifiedActivities` and `unverifiedOutcomes`.
    public var unverifiedCategories: [String] = []

    /// The categories not confirmed complete and current: no commitment of the patient's matched what the
    /// server sent (none shown, or its check failed). A fresh reader cannot tell a tresor from before
    /// commitments from one whose commitment the server withholds, so it never calls either complete.
    public var unconfirmed: [String] { categories.filter { asOf[$0] == nil } }

    /// True when every category shown has an accepted commitment that matches what was sent.
    public var complete: Bool { incomplete.isEmpty && unconfirmed.isEmpty }

    /// The message that says the view is not complete and current, or nil when every category checked out.
    public var completenessMessage: String? {
        incomplete.isEmpty ? nil : "what the server sent of \(patient.username) is not complete and current: " + incomplete.joined(separator: "; ")
    }

    /// The message that names the records not shown and their reasons, or nil when every record verified.
    public var quarantineMessage: String? {
        QuarantinedRecord.message(quarantined, subject: "of \(patient.username)", notDone: "shown", hint: "")
    }
}

/// The doctor's side (Docs/design.md §3): "My Patients", and for one patient the shared categories pulled
/// into a local ciphertext cache with a cursor per share (repeated views are incremental), verified and
/// decrypted in memory.
public actor DoctorReader {
    /// The doctor's unlocked account.
    nonisolated public let account: UnlockedAccount
    let transport: Transport
    let adminKey: SigningPublicKey
    let cache: DoctorCache
    /// How many cached envelopes a view reads and decrypts at a time.
    private(set) var viewPage = 4_096

    /// Opens the reader of an unlocked doctor account and its cache.
    public init(account: UnlockedAccount, transport: Transport, adminKey: SigningPublicKey) throws {
        guard account.profile.role == .doctor else { throw ClientError.notPermitted(code: .forbidden, "this account is not a doctor") }
        self.account = account
        self.transport = transport
        self.adminKey = adminKey
        cache = try DoctorCache(url: account.store.storeURL)
    }

    var auth: Transport.Auth { get throws { try account.sessionAuth } }

    /// Sets how many cached envelopes a view reads and decrypts at a time (at least one).
    func setViewPage(_ count: Int) { viewPage = max(1, count) }

    /// The "My Patients" list: patients with at least one active share naming this doctor whose patient
    /// certificate, signed request and admin approval verify here (Docs/design.md §3). The server's list is
    /// only a hint: a patient it lists whose shares do not verify (a share row the operator invented, a
    /// revoked share shown again) is left out and counted in `unverified`. Each summary's categories are the
    /// verified ones; its last change is the server's word.
    /// The server's list is read page by page (`pageSize` a page); the result is ordered by username.
    public func patients(pageSize: Int = APILimits.maxListLimit) async throws -> (patients: [PatientSummary], unverified: Int) {
        let summaries = try await ListingPages.all(
            fetch: { after in
                let query = ListingPages.query(after: after, limit: pageSize)
                return try await transport.send(ShareEndpoints.doctorPatients.query(query), auth: try auth)
            },
            items: \.patients,
            next: { ListingPages.key($0.nextCursor) },
            done: \.done
        )
        let list = try await transport.send(ShareEndpoints.list, auth: try auth)
        var out: [PatientSummary] = []
        var unverified = 0
        var seen = Set<UUID>()
        for summary in summaries where seen.insert(summary.patientID).inserted {
            let listed = list.shares.filter { $0.patientID == summary.patientID }
            do {
                let cert = try await patientCertificate(id: summary.patientID, username: summary.username)
                let verified = try verify(listed, patient: cert)
                // Every share expired: not a patient of this doctor any more, and nothing the server made up.
                guard !verified.isEmpty else { continue }
                var shown = summary
                shown.categories = Array(Set(verified.map(\.share.category))).sorted()
                out.append(shown)
            } catch let e as ClientError {
                switch e {
                case .integrity, .notPermitted, .notFound: unverified += 1
                default: throw e
                }
            }
        }
        return (out.sorted { ($0.username, $0.patientID.uuidString) < ($1.username, $1.patientID.uuidString) }, unverified)
    }

    /// The patient's certificate, verified under the pinned admin key.
    func patientCertificate(id: UUID, username: String?) async throws -> Certificate {
        let entry = try await transport.send(DirectoryEndpoints.user(id: id.uuidString), auth: try auth)
        do { try entry.certificate.verify(adminKey: adminKey, userID: id, username: username, role: .patient) } catch {
            throw ClientError.integrity("the patient's certificate does not verify under the pinned admin key: \(error)")
        }
        return entry.certificate
    }

    /// Every active share of `patient` (a username), each verified end to end.
    /// The patient is looked up by name and only their shares are listed (`GET /v1/shares?patient=ID`), so
    /// opening one patient costs the same however many patients the doctor follows. The listing is only a
    /// hint: what another patient's share it holds is dropped, and each share is verified as before.
    public func verifiedShares(patient username: String) async throws -> (Certificate, [VerifiedShare]) {
        // A name that cannot be a username is nobody who shares (and never reaches the URL's path).
        guard let name = try? Username.normalize(username) else { throw ClientError.notPermitted(code: .shareNotActive, Self.notActive(username)) }
        let entry: DirectoryEntry
        do { entry = try await transport.send(DirectoryEndpoints.user(named: name), auth: try auth) } catch ClientError.notFound {
            throw ClientError.notPermitted(code: .shareNotActive, Self.notActive(username))
        }
        guard entry.certificate.role == .patient else { throw ClientError.notPermitted(code: .shareNotActive, Self.notActive(username)) }
        let cert = entry.certificate
        do { try cert.verify(adminKey: adminKey, userID: cert.userID, username: name, role: .patient) } catch {
            throw ClientError.integrity("the patient's certificate does not verify under the pinned admin key: \(error)")
        }
        let list = try await transport.send(ShareEndpoints.list.query("patient=\(cert.userID.uuidString)"), auth: try auth)
        let listed = list.shares.filter { $0.patientID == cert.userID }
        guard !listed.isEmpty else { throw ClientError.notPermitted(code: .shareNotActive, Self.notActive(username)) }
        return (cert, try verify(listed, patient: cert))
    }

    static func notActive(_ username: String) -> String {
        "no active share from '\(username)': not shared, not yet approved, revoked or expired"
    }

    /// The active shares among `listed` (shares of one patient) that verify end to end, after remembering
    /// every revocation the patient signed: a revoked share, or a copy of its request under another share
    /// id, is never trusted again, whatever the server lists later (Docs/design.md §3.1).
    func verify(_ listed: [ShareInfo], patient cert: Certificate) throws -> [VerifiedShare] {
        for s in listed {
            guard let revocation = s.revocation else { continue }
            do {
                try revocation.verify(shareID: s.shareID, request: s.grant, patient: cert, adminKey: adminKey)
                guard revocation.memberID == account.profile.userID else { throw TrustError.mismatch(what: "revocation", field: "member") }
            } catch { throw ClientError.integrity("the server shows a revocation of \(s.category) the patient did not sign: \(error)") }
            try cache.markRevoked(
                shareID: s.shareID,
                request: s.grant,
                also: s.latestGrant.map { [$0] } ?? [],
                owner: cert.userID,
                at: revocation.revokedAt
            )
        }
        var mine: [ShareInfo] = []
        for s in listed where s.state == .active {
            if try cache.isRevoked(shareID: s.shareID, request: s.grant) {
                // A share revoked before request hashes were kept: its request is remembered from now on.
                try cache.markRevoked(shareID: s.shareID, request: s.grant, owner: cert.userID, at: 0)
                continue
            }
            mine.append(s)
        }
        guard !mine.isEmpty else { throw ClientError.notPermitted(code: .shareNotActive, Self.notActive(cert.username)) }
        var out: [VerifiedShare] = []
        for s in mine {
            do {
                guard s.doctorID == account.profile.userID, s.grant.memberID == account.profile.userID, s.grant.patientID == cert.userID else {
                    throw TrustError.mismatch(what: "share", field: "parties")
                }
                guard let approval = s.approval else { throw TrustError.mismatch(what: "share", field: "approval") }
                try approval.verifyShare(adminKey: adminKey, shareID: s.shareID, grant: s.grant)
                let now = Date().unixMillis
                if let expiresAt = s.grant.expiresAt, now >= expiresAt { throw TrustError.expired(what: "share") }
                // A request carries no keys (they follow the approval); a share made before that carries them.
                var tresor =
                    s.grant.isRequest
                    ? Tresor(ownerID: cert.userID, category: s.grant.category, keys: [:])
                    : try s.grant.openKeys(member: account.identity, patient: cert, adminKey: adminKey, now: now)
                if let latest = s.latestGrant {
                    // The keys, and newer epochs after a rotation: a successor of exactly the approved grant,
                    // signed by the patient (same parties, tresor and expiry).
                    guard latest.isSuccessor(of: s.grant), !latest.isRequest else {
                        throw TrustError.mismatch(what: "delivered grant", field: "scope")
                    }
                    tresor.merge(keys: try latest.openKeys(member: account.identity, patient: cert, adminKey: adminKey, now: now).keys)
                }
                out.append(VerifiedShare(share: s, tresor: tresor))
            } catch let e as TrustError {
                if case .expired = e { continue }
                throw ClientError.integrity("the share of \(s.category) does not verify: \(e)")
            }
        }
        return out
    }

    /// Pulls what changed since the last view into the cache, after fetching the share's quarantined
    /// records again, through the replica engine (Docs/design.md §5). Every envelope is checked (signature,
    /// or for a final page the patient's commitment that covers it, Docs/commitment-pages.md; context and,
    /// under an epoch the doctor holds, decryption and payload) before it is stored; one that
    /// fails is quarantined and the rest goes on. A page is stored with its cursor in one transaction. Once
    /// the server says it sent every change, the newest state commitment it showed is checked against the
    /// cached heads (Docs/envelope-v1.md §3.4); returns how many changes were pulled and what is wrong with
    /// the share's state, if anything.
    /// When the server is behind what the cache accepted and the cache still holds exactly that state,
    /// `standing` says so, and `problem` is nil: the last accepted view stands (Docs/design.md §5.2).
    /// With `opened`, the records the checks open are kept there for the view that follows.
    func refresh(
        _ patient: Certificate,
        _ share: VerifiedShare,
        progress: (@Sendable (Int) -> Void)?,
        opened: OpenedRecords? = nil
    ) async throws -> (pulled: Int, problem: String?, standing: ServerBehind?) {
        let feed = ReplicaFeed(owner: patient.userID, tresor: share.tresor.id)
        let applier = SharedReplica(cache: cache, patient: patient, share: share, opened: opened)
        let replica = ReplicaEngine(feed: feed, applier: applier, transport: transport, auth: try auth)
        _ = try await replica.retryQuarantined()
        let pulled = try await replica.pull(progress: progress)
        if pulled.behind.count == 1, let behind = pulled.behind.first, behind.holdsAccepted, pulled.problems == [behind.message] {
            return (pulled.pulled, nil, behind)
        }
        return (pulled.pulled, pulled.problems.isEmpty ? nil : pulled.problems.joined(separator: "; "), nil)
    }

    /// Pulls and decrypts the shared categories of `patient` (one category when given).
    public func view(patient username: String, category: String? = nil, progress: (@Sendable (Int) -> Void)? = nil) async throws -> PatientView {
        let (cert, shares) = try await verifiedShares(patient: username)
        let chosen = shares.filter { category == nil || $0.share.category == category }
        if let category, chosen.isEmpty {
            throw ClientError.notPermitted(code: .shareNotActive, "'\(username)' has not shared \(category) with you (or the share is not active)")
        }
        let reading = VerifiedShare.onePerTresor(chosen)
        var view = PatientView(patient: cert, categories: reading.map(\.share.category), activities: [], outcomes: [], unreadable: 0)
        view.awaitingKeys = reading.filter(\.awaitingKeys).map(\.share.category).sorted()
        var unconfirmed = Set<String>()
        for share in reading {
            // What the refresh opens as it checks is handed to the reading below (by version id), not opened twice.
            let opened = OpenedRecords()
            let refreshed = try await refresh(cert, share, progress: progress, opened: opened)
            var mismatched = refreshed.problem != nil
            if let problem = refreshed.problem {
                view.incomplete.append(problem)
                unconfirmed.insert(share.share.category)
            }
            let held = try await cache.quarantined(owner: cert.userID, tresor: share.tresor.id)
            view.quarantined += held
            // With records held aside the set cannot be checked against the commitment: not confirmed.
            if !held.isEmpty { unconfirmed.insert(share.share.category) }
            let context = EnvelopeContext(ownerID: cert.userID, tresorID: share.tresor.id, category: share.share.category)
            let keys = share.tresor.keys
            // A page of the cache at a time, decrypted on every core: a large share's envelopes are never all
            // in memory at once. Signatures (or the commitment covering them) were checked before the envelopes
            // entered the cache (refresh); here the AEAD authenticates each header and ciphertext under the epoch key.
            // A head whose version the refresh opened as it checked it comes as that record (`OpenedRecords`).
            var after = ""
            var activities: [Activity] = []
            var outcomes: [Outcome] = []
            while let page = try await cache.liveHeads(owner: cert.userID, tresor: share.tresor.id, after: after, limit: viewPage, take: opened.take)
            {
                after = page.last
                let records: [CareRecord??] = try await Parallel.map(page.heads) { head in
                    let bytes: Data
                    switch head {
                    case let .taken(record): return .some(record)
                    case let .sealed(sealed): bytes = sealed
                    }
                    let env: Envelope
                    do { env = try StoredEnvelope.decode(bytes) } catch {
                        throw ClientError.integrity("the local cache holds an unreadable envelope")
                    }
                    guard keys[env.header.epoch] != nil else { return .none }
                    do { return .some(try env.openRecordVerifiedEarlier(keys: keys, expecting: context).record) } catch {
                        throw ClientError.from(error)
                    }
                }
                for record in records {
                    switch record {
                    case nil: view.unreadable += 1
                    case let .activity(a)??: activities.append(a)
                    case let .outcome(o)??: outcomes.append(o)
                    case .some(nil): break
                    }
                }
            }
            // A view that stands on the accepted state must have been read from exactly that state: another
            // process of this doctor (`watch`) may have stored records since the refresh (Docs/design.md §5.2).
            if let standing = refreshed.standing {
                if try await cache.holdsAccepted(owner: cert.userID, tresor: share.tresor.id) {
                    view.serverBehind.append(standing.standingMessage)
                    view.behind.append(share.share.category)
                } else {
                    view.incomplete.append("the cached records of \(share.share.category) changed while they were read; view again")
                    unconfirmed.insert(share.share.category)
                    mismatched = true
                }
            }
            if mismatched {
                view.unverifiedCategories.append(share.share.category)
                view.unverifiedActivities += activities
                view.unverifiedOutcomes += outcomes
            } else {
                view.activities += activities
                view.outcomes += outcomes
            }
        }
        let accepted = try await cache.acceptedCommitments(owner: cert.userID)
        for share in reading where !unconfirmed.contains(share.share.category) {
            if let c = accepted[share.tresor.id] { view.asOf[share.share.category] = c.committedAt }
        }
        view.activities.sort { $0.id < $1.id }
        view.outcomes.sort { ($0.activityID, $0.occurrence) < ($1.activityID, $1.occurrence) }
        view.unverifiedActivities.sort { $0.id < $1.id }
        view.unverifiedOutcomes.sort { ($0.activityID, $0.occurrence) < ($1.activityID, $1.occurrence) }
        return view
    }
}

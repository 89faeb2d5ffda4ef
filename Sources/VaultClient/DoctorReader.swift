import Foundation
import GRDB
import VaultAPI
import VaultCore
import VaultCrypto

/// One shared category of one patient, verified end to end: the patient's certificate under the pinned
/// admin key, the admin's approval of exactly this grant, the patient's signature on the grant (and on
/// any later grant of newer epochs), and the keys opened with the doctor's own box key.
public struct VerifiedShare: Sendable {
    public let share: ShareInfo
    public let tresor: Tresor
}

/// What a doctor sees of one patient.
public struct PatientView: Sendable {
    public var patient: Certificate
    public var categories: [String]
    public var activities: [Activity]
    public var outcomes: [Outcome]
    /// Records the doctor holds no key for (written under an epoch not granted to them).
    public var unreadable: Int
}

/// The doctor's side (Docs/design.md §3): "My Patients", and for one patient the shared categories pulled
/// into a local ciphertext cache with a cursor per share (repeated views are incremental), verified and
/// decrypted in memory.
public actor DoctorReader {
    nonisolated public let account: UnlockedAccount
    let transport: Transport
    let adminKey: SigningPublicKey
    let cache: DatabaseQueue

    public init(account: UnlockedAccount, transport: Transport, adminKey: SigningPublicKey) throws {
        guard account.profile.role == .doctor else { throw ClientError.notPermitted(code: .forbidden, "this account is not a doctor") }
        self.account = account
        self.transport = transport
        self.adminKey = adminKey
        try SecureFiles.ensureDirectory(account.store.folder)
        cache = try DatabaseQueue(path: account.store.storeURL.path)
        try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: account.store.storeURL.path)
        var m = DatabaseMigrator()
        m.registerMigration("v1-doctor-cache") { db in
            try db.execute(sql: """
                CREATE TABLE shared_records (
                    owner_id TEXT NOT NULL,
                    record_id TEXT NOT NULL,
                    tresor_id TEXT NOT NULL,
                    hlc_physical INTEGER NOT NULL,
                    hlc_counter INTEGER NOT NULL,
                    hlc_device TEXT NOT NULL,
                    deleted INTEGER NOT NULL,
                    envelope BLOB NOT NULL,
                    PRIMARY KEY (owner_id, record_id));
                CREATE TABLE cursors (owner_id TEXT NOT NULL, tresor_id TEXT NOT NULL, cursor INTEGER NOT NULL, PRIMARY KEY (owner_id, tresor_id));
                """)
        }
        try m.migrate(cache)
    }

    var auth: Transport.Auth { get throws { try account.sessionAuth } }

    /// The "My Patients" list: patients with at least one active share naming this doctor.
    public func patients() async throws -> [PatientSummary] {
        let list: PatientList = try await transport.send(.GET, Routes.doctorPatients, auth: try auth)
        return list.patients
    }

    /// The patient's certificate, verified under the pinned admin key.
    func patientCertificate(id: UUID, username: String?) async throws -> Certificate {
        let entry: DirectoryEntry = try await transport.send(.GET, Routes.userByID(id.uuidString), auth: try auth)
        do { try entry.certificate.verify(adminKey: adminKey, userID: id, username: username, role: .patient) } catch {
            throw ClientError.integrity("the patient's certificate does not verify under the pinned admin key: \(error)")
        }
        return entry.certificate
    }

    /// Every active share of `patient` (a username), each verified end to end.
    public func verifiedShares(patient username: String) async throws -> (Certificate, [VerifiedShare]) {
        let list: ShareList = try await transport.send(.GET, Routes.shares, auth: try auth)
        let mine = list.shares.filter { $0.patientUsername == username.lowercased() && $0.state == .active }
        guard let first = mine.first else {
            throw ClientError.notPermitted(code: .shareNotActive, "no active share from '\(username)': not shared, not yet approved, revoked or expired")
        }
        let cert = try await patientCertificate(id: first.patientID, username: username)
        var out: [VerifiedShare] = []
        for s in mine {
            do {
                guard s.doctorID == account.profile.userID, s.grant.memberID == account.profile.userID, s.grant.patientID == cert.userID else {
                    throw TrustError.mismatch(what: "share", field: "parties")
                }
                guard let approval = s.approval else { throw TrustError.mismatch(what: "share", field: "approval") }
                try approval.verifyShare(adminKey: adminKey, shareID: s.shareID, grant: s.grant)
                var tresor = try s.grant.openKeys(member: account.identity, patient: cert, adminKey: adminKey, now: Date().unixMillis)
                if let latest = s.latestGrant {
                    // Newer epochs after a rotation: same parties, tresor and expiry, signed by the patient.
                    guard latest.isSuccessor(of: s.grant) else { throw TrustError.mismatch(what: "rotated grant", field: "scope") }
                    tresor.merge(keys: try latest.openKeys(member: account.identity, patient: cert, adminKey: adminKey, now: Date().unixMillis).keys)
                }
                out.append(VerifiedShare(share: s, tresor: tresor))
            } catch let e as TrustError {
                if case .expired = e { continue }
                throw ClientError.integrity("the share of \(s.category) does not verify: \(e)")
            }
        }
        return (cert, out)
    }

    /// Pulls what changed since the last view into the cache; every envelope's signature and context is
    /// checked before anything is stored, and a page is stored with its cursor in one transaction.
    func refresh(_ patient: Certificate, _ share: VerifiedShare, progress: (@Sendable (Int) -> Void)?) async throws -> Int {
        let owner = patient.userID.uuidString, tresorID = share.tresor.id.uuidString
        var cursor = try await cache.read { db in
            try Int64.fetchOne(db, sql: "SELECT cursor FROM cursors WHERE owner_id = ? AND tresor_id = ?", arguments: [owner, tresorID]) ?? 0
        }
        var pulled = 0
        while true {
            let page: PullResponse = try await transport.send(
                .GET, Routes.records + "?owner=\(owner)&tresor=\(tresorID)&since=\(cursor)&limit=\(SyncPolicy.pullPage)", auth: try auth)
            let context = EnvelopeContext(ownerID: patient.userID, tresorID: share.tresor.id, category: share.share.category)
            let signingKey = patient.signingKey
            // Every signature checked (on every core) before anything is stored; each envelope's JSON for the cache on the way.
            let stored: [Data] = try await Parallel.map(page.changes) { change in
                do { try change.envelope.verify(authorKey: signingKey, expecting: context) } catch { throw ClientError.from(error) }
                guard change.envelope.header.timestamp.physicalMs <= UInt64(Int64.max) else { throw ClientError.integrity("a record's clock is out of range") }
                return try LocalStore.encoder.encode(change.envelope)
            }
            guard page.changes.allSatisfy({ $0.sequence > UInt64(cursor) }) else { throw ClientError.integrity("the server sent changes out of order") }
            guard let next = Int64(exactly: page.changes.last?.sequence ?? UInt64(cursor)) else { throw ClientError.integrity("the server sent an impossible sequence number") }
            try await cache.write { db in
                let readHead = try db.cachedStatement(sql: "SELECT hlc_physical, hlc_counter, hlc_device, deleted FROM shared_records WHERE owner_id = ? AND record_id = ?")
                let upsert = try db.cachedStatement(sql: """
                    INSERT INTO shared_records (owner_id, record_id, tresor_id, hlc_physical, hlc_counter, hlc_device, deleted, envelope)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (owner_id, record_id) DO UPDATE SET tresor_id = excluded.tresor_id, hlc_physical = excluded.hlc_physical,
                        hlc_counter = excluded.hlc_counter, hlc_device = excluded.hlc_device, deleted = excluded.deleted, envelope = excluded.envelope
                    """)
                for (change, json) in zip(page.changes, stored) {
                    let h = change.envelope.header
                    if let row = try Row.fetchOne(readHead, arguments: [owner, h.recordID.hex]) {
                        let held = HLCTimestamp(physicalMs: UInt64(row[0] as Int64), counter: UInt32(row[1] as Int64), deviceID: row[2])
                        if h.timestamp < held { throw ClientError.integrity("the server replayed an older version of a record") }
                    }
                    try upsert.execute(arguments: [owner, h.recordID.hex, tresorID, Int64(h.timestamp.physicalMs), Int64(h.timestamp.counter), h.timestamp.deviceID,
                                                   h.deleted, json])
                }
                try db.execute(sql: "INSERT INTO cursors (owner_id, tresor_id, cursor) VALUES (?, ?, ?) ON CONFLICT (owner_id, tresor_id) DO UPDATE SET cursor = excluded.cursor",
                               arguments: [owner, tresorID, next])
            }
            pulled += page.changes.count
            progress?(pulled)
            cursor = next
            if page.done || page.changes.isEmpty { return pulled }
        }
    }

    /// Pulls and decrypts the shared categories of `patient` (one category when given).
    public func view(patient username: String, category: String? = nil, progress: (@Sendable (Int) -> Void)? = nil) async throws -> PatientView {
        let (cert, shares) = try await verifiedShares(patient: username)
        let chosen = shares.filter { category == nil || $0.share.category == category }
        if let category, chosen.isEmpty {
            throw ClientError.notPermitted(code: .shareNotActive, "'\(username)' has not shared \(category) with you (or the share is not active)")
        }
        var view = PatientView(patient: cert, categories: chosen.map(\.share.category).sorted(), activities: [], outcomes: [], unreadable: 0)
        for share in chosen {
            _ = try await refresh(cert, share, progress: progress)
            let stored = try await cache.read { db in
                try Data.fetchAll(db, sql: "SELECT envelope FROM shared_records WHERE owner_id = ? AND tresor_id = ? AND deleted = 0",
                                  arguments: [cert.userID.uuidString, share.tresor.id.uuidString])
            }
            let context = EnvelopeContext(ownerID: cert.userID, tresorID: share.tresor.id, category: share.share.category)
            let keys = share.tresor.keys
            // Decrypted on every core. Signatures were checked before the envelopes entered the cache (refresh);
            // here the AEAD authenticates each header and ciphertext under the epoch key.
            let opened: [CareRecord??] = try await Parallel.map(stored) { json in
                let env: Envelope
                do { env = try LocalStore.decoder.decode(Envelope.self, from: json) } catch {
                    throw ClientError.integrity("the local cache holds an unreadable envelope")
                }
                guard keys[env.header.epoch] != nil else { return .none }
                do { return .some(try env.openRecordVerifiedEarlier(keys: keys, expecting: context).record) } catch { throw ClientError.from(error) }
            }
            for record in opened {
                switch record {
                case nil: view.unreadable += 1
                case let .activity(a)??: view.activities.append(a)
                case let .outcome(o)??: view.outcomes.append(o)
                case .some(nil): break
                }
            }
        }
        view.activities.sort { $0.id < $1.id }
        view.outcomes.sort { ($0.activityID, $0.occurrence) < ($1.activityID, $1.occurrence) }
        return view
    }
}

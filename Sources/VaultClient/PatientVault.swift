import Foundation
import VaultAPI
import VaultCore
import VaultCrypto

/// A patient's data on this device: the care-data API, the sync engine and the share manager
/// (Docs/design.md §3-§5). Writes go to the local store first (with their outbox entry, in one transaction);
/// `sync` exchanges ciphertext with the server.
public actor PatientVault {
    /// The patient's unlocked account.
    nonisolated public let account: UnlockedAccount
    let transport: Transport
    let adminKey: SigningPublicKey
    nonisolated let store: LocalStore
    var keyring: Keyring
    let now: @Sendable () -> Date

    /// Opens the vault of an unlocked patient account: its local store and keyring.
    public init(
        account: UnlockedAccount,
        transport: Transport,
        adminKey: SigningPublicKey,
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws {
        guard account.profile.role == .patient else { throw ClientError.notPermitted(code: .forbidden, "this account is not a patient") }
        self.account = account
        self.transport = transport
        self.adminKey = adminKey
        self.now = now
        store = try LocalStore(url: account.store.storeURL)
        keyring = try Keyring.load(from: account.store.keyringURL, key: account.localStorageKey, ownerID: account.profile.userID)
    }

    var me: UUID { account.profile.userID }
    var auth: Transport.Auth { get throws { try account.sessionAuth } }
    /// The wall clock for the hybrid logical clock, in milliseconds (never negative).
    var wallClockMs: UInt64 { UInt64(max(0, now().unixMillis)) }

    // MARK: Tresors

    /// The tresor of `category`, made (random epoch-1 key, saved in the keyring) on first use.
    func tresor(_ category: String) throws -> Tresor {
        if let t = keyring[category] { return t }
        do { try Activity.validateCategory(category) } catch {
            throw ClientError.invalidRequest("invalid category '\(category)': \(error)")
        }
        let t = Tresor.create(ownerID: me, category: category)
        keyring.merge(t)
        try saveKeyring()
        return t
    }

    func saveKeyring() throws {
        try keyring.save(to: account.store.keyringURL, key: account.localStorageKey, ownerID: me)
    }

    func selfGrant(_ t: Tresor, ledger: TresorLedger) throws -> Grant {
        try Grant.make(
            patient: account.identity,
            member: account.certificate,
            adminKey: adminKey,
            tresor: t,
            tresorVersion: ledger.version,
            ledger: ledger,
            createdAt: now().unixMillis
        )
    }

    /// Declares `t`'s keys and `ledger` to the server with a fresh self-grant at `ledger.version`, which
    /// must be the server's version plus one; another device's change of that version is a conflict.
    func declare(_ t: Tresor, ledger: TresorLedger) async throws {
        let _: TresorInfo = try await transport.send(
            .PUT,
            Routes.tresors,
            body: PutTresorRequest(selfGrant: try selfGrant(t, ledger: ledger)),
            auth: try auth
        )
        try store.saveMarks(TresorMarks(ledger: ledger, seenVersion: ledger.version, topEpoch: t.currentEpoch), category: t.category, tresorID: t.id)
    }

    /// Learns keys and ledgers other devices made (from the self-grants on the server) and declares what
    /// the server lacks (Docs/design.md §2-§3). A self-grant older than one this device has seen, or one
    /// that hides an epoch this device has seen signed, is refused. When two devices made the same epoch
    /// offline, the server's keys win and this device re-seals its unsent versions under them.
    func reconcileTresors(attempt: Int = 0) async throws {
        let list: TresorList = try await transport.send(.GET, Routes.tresors, auth: try auth)
        var onServer: [String: (ledger: TresorLedger, top: UInt32)] = [:]
        // The keyring and the marks are written only when they change: most syncs change neither, and the
        // keyring is a sealed file written anew each time.
        let heldEpochs = Set(keyring.tresors.values.flatMap { t in t.keys.keys.map { "\(t.category)/\($0)" } })
        var resealed = false
        for info in list.tresors {
            do {
                let signed = info.selfGrant
                try signed.verify(patient: account.certificate, adminKey: adminKey)
                // Everything is keyed by what the patient signed, never by the server's labels.
                guard signed.memberID == me, info.ownerID == me, info.category == signed.category, info.tresorID == signed.tresorID,
                    signed.hasContiguousEpochs, info.currentEpoch == signed.epochs.last
                else { throw TrustError.mismatch(what: "self-grant", field: "tresor, category or epoch") }
            } catch { throw ClientError.integrity("the server's self-grant for a category is not what this account signed: \(error)") }
            let remote: Tresor
            let remoteLedger: TresorLedger
            do {
                (remote, remoteLedger) = try info.selfGrant.openSelfGrant(
                    identity: account.identity,
                    certificate: account.certificate,
                    adminKey: adminKey
                )
            } catch { throw ClientError.from(error) }
            let stored = try store.marks(category: info.category)
            var marks = stored ?? TresorMarks(ledger: TresorLedger(version: 0), seenVersion: 0, topEpoch: 0)
            try Self.refuseRollback(category: info.category, remoteVersion: remoteLedger.version, remoteTop: remote.currentEpoch, marks: marks)
            if let local = keyring[info.category] {
                let clashing = remote.keys.filter { epoch, key in local.keys[epoch].map { $0 != key } ?? false }
                if !clashing.isEmpty {
                    try reseal(category: info.category, adopting: remote)
                    resealed = true
                }
            }
            keyring.merge(remote)
            if remoteLedger.version == 0, marks.seenVersion == 0, marks.ledger.members.isEmpty {
                // A tresor declared before ledgers existed: its members are taken once from the shares the
                // admin approved (Docs/design.md §3), then kept by the patient's devices.
                marks.ledger = try await legacyLedger(category: info.category, tresorID: info.tresorID)
            }
            marks.ledger.merge(remoteLedger)
            marks.seenVersion = remoteLedger.version
            marks.topEpoch = max(marks.topEpoch, remote.currentEpoch)
            if marks != stored {
                try store.saveMarks(marks, category: info.category, tresorID: info.tresorID)
            }
            onServer[info.category] = (remoteLedger, remote.currentEpoch)
        }
        let nowHeld = Set(keyring.tresors.values.flatMap { t in t.keys.keys.map { "\(t.category)/\($0)" } })
        if resealed || nowHeld != heldEpochs || !FileManager.default.fileExists(atPath: account.store.keyringURL.path) {
            try saveKeyring()
        }
        for t in keyring.tresors.values.sorted(by: { $0.category < $1.category }) {
            var marks = try store.marks(category: t.category) ?? TresorMarks(ledger: TresorLedger(version: 0), seenVersion: 0, topEpoch: 0)
            let server = onServer[t.category]
            guard server == nil || t.currentEpoch > server!.top || marks.ledger.members != server!.ledger.members else { continue }
            // Checked: the versions come from the server's self-grant and the local store.
            let (next, overflow) = max(server?.ledger.version ?? 0, marks.seenVersion).addingReportingOverflow(1)
            guard !overflow else { throw ClientError.integrity("the tresor for \(t.category) is at its last version number") }
            marks.ledger.version = next
            do {
                try await declare(t, ledger: marks.ledger)
            } catch ClientError.conflict {
                // Another device declared this version first: merge theirs and try again.
                guard attempt < 3 else { throw ClientError.temporary("the category keys keep changing on the server; sync again") }
                try await reconcileTresors(attempt: attempt + 1)
                return
            }
        }
    }

    /// Refuses a self-grant older than one this device has seen, or one whose newest epoch is older than
    /// an epoch this device has seen signed (a hidden rotation): writing under it would hand new records
    /// to a member the patient removed (Docs/design.md §3).
    static func refuseRollback(category: String, remoteVersion: UInt64, remoteTop: UInt32, marks: TresorMarks) throws {
        if remoteVersion < marks.seenVersion {
            throw ClientError.integrity(
                "the server serves an older key declaration of \(category) (version \(remoteVersion)) than this device has seen "
                    + "(version \(marks.seenVersion)); nothing is written under it"
            )
        }
        if remoteTop < marks.topEpoch {
            throw ClientError.integrity(
                "the server hides key epoch \(marks.topEpoch) of \(category), which this device has seen signed; nothing is written under an older epoch"
            )
        }
    }

    /// Replaces this device's keys of `category` by `remote`'s and re-seals the unsent versions under them.
    func reseal(category: String, adopting remote: Tresor) throws {
        guard let local = keyring[category], local.id == remote.id, remote.category == category else {
            throw ClientError.integrity("refusing to adopt keys of another tresor for \(category)")
        }
        // Every local record of the category, not only unsent ones: a record sealed under a key that lost
        // must not stay unreadable. A record already re-sealed (after a crash before the keyring was
        // saved) opens with the remote keys instead.
        let envelopes = try store.records(category: category).map(\.envelope)
        let signing = account.identity.signing
        let cert = account.certificate
        try store.write { tx in
            for env in envelopes {
                let context = EnvelopeContext(ownerID: env.header.ownerID, tresorID: remote.id, category: category)
                if (try? env.open(keys: remote.keys, authorKey: cert.signingKey, expecting: context)) != nil { continue }
                let payload = try env.open(keys: local.keys, authorKey: cert.signingKey, expecting: context)
                var header = env.header
                header.epoch = remote.currentEpoch
                try tx.put(try Envelope.seal(payload: payload, header: header, key: remote.currentKey, author: signing), outbox: true)
            }
        }
        var replaced = Keyring(tresors: keyring.tresors.filter { $0.key != category })
        replaced.merge(remote)
        keyring = replaced
    }
}

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
    /// What the keyring is sealed under in the store.
    let keyringSeal: Keyring.Seal
    /// The keyring as last committed to the store (changed only after the transaction that writes it).
    var keyring: Keyring
    let now: @Sendable () -> Date

    /// Opens the vault of an unlocked patient account: its local store and the keyring in it (moving in the
    /// keyring file an earlier version kept).
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
        keyringSeal = Keyring.Seal(key: account.localStorageKey, ownerID: account.profile.userID)
        keyring = try store.openKeyring(keyringSeal, movingIn: account.store.keyringURL)
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
        let made = Tresor.create(ownerID: me, category: category)
        let seal = keyringSeal
        // From the row, not from this process's copy: another process on this home (a `sync --watch`
        // beside a `log`) may have added keys since this vault opened, and the row is replaced whole.
        let (ring, t) = try store.write { tx -> (Keyring, Tresor) in
            var ring = try tx.keyring(seal)
            if let existing = ring[category] { return (ring, existing) }
            ring.merge(made)
            try tx.save(ring, seal: seal)
            return (ring, made)
        }
        keyring = ring
        return t
    }

    /// Reads the keyring again from the store: another process on this home may have changed it (made a
    /// category, rotated one) since this vault opened. A long-running process calls it before each sync.
    func reloadKeyring() throws {
        let seal = keyringSeal
        keyring = try store.read { tx in try tx.keyring(seal) }
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
    /// must be above the server's version; another device's change of that version is a conflict.
    func declare(_ t: Tresor, ledger: TresorLedger) async throws {
        _ = try await transport.send(TresorEndpoints.put, PutTresorRequest(selfGrant: try selfGrant(t, ledger: ledger)), auth: try auth)
        try store.saveLedgerState(
            TresorLedgerState(ledger: ledger, seenVersion: ledger.version, topEpoch: t.currentEpoch),
            category: t.category,
            tresorID: t.id
        )
    }

    /// Learns keys and ledgers other devices made (from the self-grants on the server) and declares what
    /// the server lacks (Docs/design.md §2-§3), in three steps: fetch (the server's self-grants, verified,
    /// and the members of pre-ledger tresors), plan (keys, re-sealed records, ledgers and marks written in
    /// one local transaction), declare (what the server lacks). A self-grant older than one this device has
    /// seen, or one that hides an epoch this device has seen signed, is refused and nothing is written. When
    /// two devices made the same epoch offline, the server's keys win and this device re-seals its records
    /// under them in the same transaction.
    ///
    /// Another process of this device (a `share grant` beside a `sync --watch`) may raise the marks while
    /// the list is on its way: a self-grant older than a mark raised since the marks were read before the
    /// fetch is fetched again, not refused (a server that keeps serving it is refused on the next pass).
    @discardableResult
    func reconcileTresors(attempt: Int = 0) async throws -> [String] {
        let marksBefore = try store.ledgerMarks()
        let list = try await transport.send(TresorEndpoints.list, auth: try auth)
        let served = try list.tresors.map(openSelfGrant)
        var legacy: [String: TresorLedger] = [:]
        for s in served where s.ledger.version == 0 {
            let known = try store.ledgerState(category: s.tresor.category) ?? .none
            if known.seenVersion == 0, known.ledger.members.isEmpty {
                // A tresor declared before ledgers existed: its members are taken once from the shares the
                // admin approved (Docs/design.md §3), then kept by the patient's devices.
                legacy[s.tresor.category] = try await legacyLedger(category: s.tresor.category, tresorID: s.tresor.id)
            }
        }
        let plan: Adoption
        do {
            // The last attempt refuses outright: a server that keeps timing stale lists against this
            // device's own changes gets the integrity refusal, not an endless "try again".
            plan = try adopt(served, legacy: legacy, marksBefore: attempt < 3 ? marksBefore : nil)
        } catch is MarksRaisedMeanwhile {
            guard attempt < 3 else { throw ClientError.temporary("the category keys keep changing on this device; sync again") }
            return try await reconcileTresors(attempt: attempt + 1)
        }
        for (t, ledger) in plan.declarations {
            do {
                try await declare(t, ledger: ledger)
            } catch ClientError.conflict {
                // Another device declared this version first: merge theirs and try again.
                guard attempt < 3 else { throw ClientError.temporary("the category keys keep changing on the server; sync again") }
                return try await reconcileTresors(attempt: attempt + 1)
            }
        }
        return plan.behind.map { $0.note }
    }

    /// What `adopt` decided: the self-grants to declare, and the categories whose server was behind this
    /// device (a restored backup) and get this device's declaration again.
    struct Adoption {
        var declarations: [(Tresor, TresorLedger)]
        var behind: [DeclarationBehind]
    }

    /// A category whose server serves an older self-grant than this device has seen.
    struct DeclarationBehind: Sendable {
        var category: String
        var shownVersion: UInt64
        var seenVersion: UInt64

        var note: String {
            "the server is behind what this device last saw (the key declaration of \(category): it shows version \(shownVersion), "
                + "this device has seen \(seenVersion)), as after a restored backup; re-sent this device's declaration"
        }
    }

    /// One self-grant of the server's list, verified as this account's and opened.
    func openSelfGrant(_ info: TresorInfo) throws -> (tresor: Tresor, ledger: TresorLedger) {
        do {
            let signed = info.selfGrant
            try signed.verify(patient: account.certificate, adminKey: adminKey)
            // Everything is keyed by what the patient signed, never by the server's labels.
            guard signed.memberID == me, info.ownerID == me, info.category == signed.category, info.tresorID == signed.tresorID,
                signed.hasContiguousEpochs, info.currentEpoch == signed.epochs.last
            else { throw TrustError.mismatch(what: "self-grant", field: "tresor, category or epoch") }
        } catch { throw ClientError.integrity("the server's self-grant for a category is not what this account signed: \(error)") }
        do {
            return try info.selfGrant.openSelfGrant(identity: account.identity, certificate: account.certificate, adminKey: adminKey)
        } catch { throw ClientError.from(error) }
    }

    /// Takes in the server's verified self-grants in one local transaction (keys, re-sealed records,
    /// ledgers and marks land together, or nothing does) and returns what to declare: each tresor whose
    /// keys or ledger the server lacks, with its ledger at the next version.
    /// `marksBefore` are the marks as read before the list was fetched (see `reconcileTresors`); nil when
    /// nothing else can have raised them.
    func adopt(
        _ served: [(tresor: Tresor, ledger: TresorLedger)],
        legacy: [String: TresorLedger],
        marksBefore: [String: LedgerMarks]? = nil
    ) throws -> Adoption {
        let seal = keyringSeal
        let cert = account.certificate
        let signing = account.identity.signing
        let (ring, plan) = try store.write { tx -> (Keyring, Adoption) in
            // The row as committed, not this process's copy (see `tresor`): the row is replaced whole.
            var ring = try tx.keyring(seal)
            var changed = false
            var onServer: [String: (ledger: TresorLedger, top: UInt32)] = [:]
            var behind: [DeclarationBehind] = []
            for (remote, remoteLedger) in served {
                let category = remote.category
                let stored = try tx.ledgerState(category: category)
                var state = stored ?? .none
                do {
                    try Self.refuseRollback(
                        category: category,
                        remoteVersion: remoteLedger.version,
                        remoteTop: remote.currentEpoch,
                        ledgerState: state
                    )
                } catch {
                    // Fetched again only when the list was no rollback against the marks read before it was
                    // fetched; one older than those is refused whatever else moved meanwhile.
                    if let before = marksBefore.map({ $0[category] ?? LedgerMarks() }),
                        remoteLedger.version >= before.seenVersion, remote.currentEpoch >= before.topEpoch, before.isBehind(state)
                    {
                        throw MarksRaisedMeanwhile()
                    }
                    // Behind, not forged: an older declaration of the very tresor this device holds, whose keys
                    // this device holds up to every epoch it has seen. Nothing of it is taken; this device's own
                    // ledger and keys are declared again below (Docs/design.md §5.2).
                    guard Self.canRedeclare(remote, remoteVersion: remoteLedger.version, local: ring[category], state: state) else {
                        throw error
                    }
                    behind.append(DeclarationBehind(category: category, shownVersion: remoteLedger.version, seenVersion: state.seenVersion))
                    onServer[category] = (remoteLedger, remote.currentEpoch)
                    continue
                }
                if let local = ring[category] {
                    if remote.keys.contains(where: { epoch, key in local.keys[epoch].map { $0 != key } ?? false }) {
                        try Self.reseal(tx, category: category, local: local, adopting: remote, author: cert, signing: signing)
                        var replaced = Keyring(tresors: ring.tresors.filter { $0.key != category })
                        replaced.merge(remote)
                        ring = replaced
                        changed = true
                    }
                }
                if ring[category].map({ local in remote.keys.keys.contains { local.keys[$0] == nil } }) ?? true { changed = true }
                ring.merge(remote)
                if remoteLedger.version == 0, state.seenVersion == 0, state.ledger.members.isEmpty, let members = legacy[category] {
                    state.ledger = members
                }
                state.ledger.merge(remoteLedger)
                state.seenVersion = max(state.seenVersion, remoteLedger.version)
                state.topEpoch = max(state.topEpoch, remote.currentEpoch)
                if state != stored { try tx.saveLedgerState(state, category: category, tresorID: remote.id) }
                onServer[category] = (remoteLedger, remote.currentEpoch)
            }
            if changed { try tx.save(ring, seal: seal) }
            var declarations: [(Tresor, TresorLedger)] = []
            for t in ring.tresors.values.sorted(by: { $0.category < $1.category }) {
                var state = try tx.ledgerState(category: t.category) ?? .none
                let server = onServer[t.category]
                let redeclare = behind.contains { $0.category == t.category }
                guard server == nil || redeclare || t.currentEpoch > server!.top || state.ledger.members != server!.ledger.members else {
                    continue
                }
                // Checked: the versions come from the server's self-grant and the local store.
                let (next, overflow) = max(server?.ledger.version ?? 0, state.seenVersion).addingReportingOverflow(1)
                guard !overflow else { throw ClientError.integrity("the tresor for \(t.category) is at its last version number") }
                state.ledger.version = next
                declarations.append((t, state.ledger))
            }
            return (ring, Adoption(declarations: declarations, behind: behind))
        }
        keyring = ring
        return plan
    }

    /// Whether an older self-grant the server serves is one this device can bring up to date by declaring
    /// its own state again: the same tresor as this device's, no newer in version or epoch than what this
    /// device has seen, and this device holds the keys of every epoch it has seen (a newer epoch known only
    /// from a record's header cannot be declared here; another of the patient's devices must).
    static func canRedeclare(_ remote: Tresor, remoteVersion: UInt64, local: Tresor?, state: TresorLedgerState) -> Bool {
        guard let local, local.id == remote.id, local.category == remote.category else { return false }
        guard local.currentEpoch >= 1 else { return false }
        return remoteVersion <= state.seenVersion && remote.currentEpoch <= state.topEpoch && local.currentEpoch >= state.topEpoch
            && (1...local.currentEpoch).allSatisfy { local.keys[$0] != nil }
    }

    /// A mark of this device went up between the fetch and the local transaction (see `reconcileTresors`).
    struct MarksRaisedMeanwhile: Error {}

    /// Refuses a self-grant older than one this device has seen, or one whose newest epoch is older than
    /// an epoch this device has seen signed (a hidden rotation): writing under it would hand new records
    /// to a member the patient removed (Docs/design.md §3).
    static func refuseRollback(category: String, remoteVersion: UInt64, remoteTop: UInt32, ledgerState: TresorLedgerState) throws {
        if remoteVersion < ledgerState.seenVersion {
            throw ClientError.integrity(
                "the server serves an older key declaration of \(category) (version \(remoteVersion)) than this device has seen "
                    + "(version \(ledgerState.seenVersion)); nothing is written under it"
            )
        }
        if remoteTop < ledgerState.topEpoch {
            throw ClientError.integrity(
                "the server hides key epoch \(ledgerState.topEpoch) of \(category), which this device has seen signed; nothing is written under an older epoch"
            )
        }
    }

    /// Re-seals every local record of `category` sealed under `local`'s keys under `remote`'s newest
    /// epoch, in `tx` (with the keyring that adopts `remote`): not only unsent ones, since a record sealed
    /// under a key that lost must not stay unreadable.
    static func reseal(
        _ tx: LocalStore.Transaction,
        category: String,
        local: Tresor,
        adopting remote: Tresor,
        author cert: Certificate,
        signing: SigningKeyPair
    ) throws {
        guard local.id == remote.id, remote.category == category else {
            throw ClientError.integrity("refusing to adopt keys of another tresor for \(category)")
        }
        for env in try tx.records(category: category).map(\.envelope) {
            let context = EnvelopeContext(ownerID: env.header.ownerID, tresorID: remote.id, category: category)
            if (try? env.open(keys: remote.keys, authorKey: cert.signingKey, expecting: context)) != nil { continue }
            let payload = try env.open(keys: local.keys, authorKey: cert.signingKey, expecting: context)
            var header = env.header
            header.epoch = remote.currentEpoch
            try tx.put(try Envelope.seal(payload: payload, header: header, key: remote.currentKey, author: signing), outbox: true)
        }
    }
}

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

    func selfGrant(_ t: Tresor) throws -> Grant {
        try Grant.make(
            patient: account.identity,
            member: account.certificate,
            adminKey: adminKey,
            tresor: t,
            createdAt: Date().unixMillis
        )
    }

    /// Declares `t`'s current epoch to the server with a fresh self-grant; another device's different
    /// keys for that epoch are a conflict.
    func declare(_ t: Tresor) async throws {
        let _: TresorInfo = try await transport.send(.PUT, Routes.tresors, body: PutTresorRequest(selfGrant: try selfGrant(t)), auth: try auth)
    }

    /// Learns keys other devices made (from the self-grants on the server) and declares tresors and
    /// epochs the server does not know yet. When two devices made the same epoch offline, the server's
    /// keys win and this device re-seals its unsent versions under them.
    func reconcileTresors(attempt: Int = 0) async throws {
        let list: TresorList = try await transport.send(.GET, Routes.tresors, auth: try auth)
        var byCategory: [String: TresorInfo] = [:]
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
            do { remote = try info.selfGrant.openKeys(member: account.identity, patient: account.certificate, adminKey: adminKey) } catch {
                throw ClientError.from(error)
            }
            byCategory[info.category] = info
            if let local = keyring[info.category] {
                let clashing = remote.keys.filter { epoch, key in local.keys[epoch].map { $0 != key } ?? false }
                if !clashing.isEmpty { try reseal(category: info.category, adopting: remote) }
            }
            keyring.merge(remote)
        }
        try saveKeyring()
        for t in keyring.tresors.values where (byCategory[t.category]?.currentEpoch ?? 0) < t.currentEpoch {
            do {
                try await declare(t)
            } catch ClientError.conflict {
                // Another device declared this epoch first with other keys: take theirs.
                guard attempt < 3 else { throw ClientError.temporary("the category keys keep changing on the server; sync again") }
                try await reconcileTresors(attempt: attempt + 1)
                return
            }
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

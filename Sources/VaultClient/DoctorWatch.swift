import Foundation
import Synchronization
import VaultAPI
import VaultCore
import VaultCrypto

/// One change a doctor's replica applied: verified (the patient's signature, the share's context, and
/// decryption when the doctor holds the epoch's key) and stored in the cache. Never taken from an event.
public struct AppliedChange: Sendable {
    /// The patient's username, from the verified certificate.
    public var patient: String
    public var patientID: UUID
    public var category: String
    public var kind: RecordType
    /// The record id (hex) of the envelope's header.
    public var recordID: String
    /// True when the patient removed the record.
    public var deleted: Bool
    /// When the patient's device wrote this version (its clock, Unix ms).
    public var at: UInt64
    /// The record, decrypted; nil for a removal or a record under a key not granted to this doctor.
    public var record: CareRecord?
    /// True when the refresh that stored it did not end with the patient's commitment confirming the
    /// category (or failed): stored and signed by the patient, but not shown to be current and complete,
    /// as `show` marks the records of such a category UNVERIFIED.
    public var unconfirmed = false
}

extension SharedReplica {
    /// The entries of `stored` that the store kept: those it did not hold aside (a replayed older version
    /// goes to quarantine inside the store).
    func kept(_ entries: [DoctorCache.Entry]) async throws -> [DoctorCache.Entry] {
        guard !entries.isEmpty else { return [] }
        let held = Set(try await quarantined().map(\.sequence))
        return entries.filter { !held.contains($0.sequence) }
    }
}

/// What `carevault-doctor watch` follows: the shared categories of one patient or of every patient,
/// refreshed through the replica engine when the event stream wakes it. Each change the engine applied
/// is reported once; each integrity problem once, while it lasts. The shares are verified again at every
/// `refreshAll` (the stream opened, a share changed state, a resync); a `change` of a patient seen
/// before pulls with the shares verified then, minus those expired since.
public actor DoctorWatch {
    public let reader: DoctorReader
    /// The one patient watched (a username), or nil for every patient who shares with this doctor.
    public let only: String?
    /// The patients seen so far, by id.
    private var owners: [UUID: String] = [:]
    /// The verified shares of each patient seen, by username, as of the last `refreshAll`.
    private var verified: [String: (Certificate, [VerifiedShare])] = [:]
    /// The patients whose shares verified and were pulled, until the server refuses them.
    private var watching = Set<String>()
    /// Problems already reported.
    private var reported = Set<String>()
    /// Told the username of a patient watched until now whose shares the server refuses and who shares
    /// nothing verifiable any more.
    private let notice: @Sendable (String) -> Void

    public init(reader: DoctorReader, patient: String?, notice: @escaping @Sendable (String) -> Void = { _ in }) {
        self.reader = reader
        only = patient?.lowercased()
        self.notice = notice
    }

    /// Refreshes every patient watched. Returns the new integrity problems, in plain words.
    public func refreshAll(report: @escaping @Sendable (AppliedChange) -> Void) async throws -> [String] {
        var names: [String]
        if let only {
            names = [only]
        } else {
            let (patients, _) = try await reader.patients()
            names = patients.map(\.username)
        }
        var problems: [String] = []
        verified = [:]
        for name in names { problems += try await refresh(username: name, report: report) }
        for gone in watching.subtracting(names).sorted() { unwatch(gone) }
        return problems
    }

    /// Refreshes the patient `owner` (a change event named them); every patient when not seen yet, and
    /// nothing when one patient is watched, already seen, and this is someone else.
    public func refresh(owner: UUID, report: @escaping @Sendable (AppliedChange) -> Void) async throws -> [String] {
        guard let name = owners[owner] else {
            if only != nil, !owners.isEmpty { return [] }
            return try await refreshAll(report: report)
        }
        return try await refresh(username: name, report: report)
    }

    /// After a `share` event: re-reads and pulls the shares of the patient it names, so a doctor who follows
    /// many patients does not refresh them all for one patient's share. A patient not seen yet is looked up
    /// in the doctor's patient list (one listing, not a refresh of everyone); one not listed has nothing
    /// active to read (a request not yet approved). An event naming no patient (an older server), or a
    /// watch of one patient, re-reads everything as before. The name is only a hint: what is read is
    /// verified as always, and a server that names the wrong patient only delays the right one's refresh
    /// until its next event, which a server can always do.
    public func refreshShares(of patient: UUID?, report: @escaping @Sendable (AppliedChange) -> Void) async throws -> [String] {
        guard let patient, only == nil else { return try await refreshAll(report: report) }
        var name = owners[patient]
        if name == nil {
            let (patients, _) = try await reader.patients()
            name = patients.first { $0.patientID == patient }?.username
        }
        guard let name else { return [] }
        verified[name] = nil
        let problems = try await refresh(username: name, report: report)
        // Listed, but nothing of theirs is active any more (a revocation): as `refreshAll` would, stop.
        if let shares = verified[name]?.1, shares.isEmpty {
            verified[name] = nil
            unwatch(name)
        }
        return problems
    }

    /// Pulls the shared categories of one patient. A patient who shares nothing (any more) is not an
    /// error: there is nothing to watch until a share event says otherwise. A pull the server refuses
    /// (a share revoked or ended meanwhile) drops the shares verified before and reads them again; when
    /// nothing is shared any more, `notice` says the patient is no longer watched.
    private func refresh(username: String, report: @escaping @Sendable (AppliedChange) -> Void) async throws -> [String] {
        let now = Date().unixMillis
        let current = verified[username].map { ($0.0, $0.1.filter { s in s.share.grant.expiresAt.map { now < $0 } ?? true }) }
        if let current, !current.1.isEmpty {
            do {
                return fresh(try await pull(current.0, current.1, report: report))
            } catch let error where Self.isRefused(error) {
                // Read the shares again below.
            }
        }
        verified[username] = nil
        let cert: Certificate
        let shares: [VerifiedShare]
        do {
            (cert, shares) = try await reader.verifiedShares(patient: username)
        } catch let error where Self.isRefused(error) {
            unwatch(username)
            return []
        } catch let ClientError.integrity(message) {
            return fresh(["the shares of \(username) do not verify: \(message)"])
        }
        owners[cert.userID] = cert.username
        verified[username] = (cert, shares)
        do {
            let problems = try await pull(cert, shares, report: report)
            watching.insert(username)
            return fresh(problems)
        } catch let error where Self.isRefused(error) {
            // Refused again with the shares just read: not watched until a share event says otherwise.
            verified[username] = nil
            unwatch(username)
            return []
        }
    }

    /// Says once that a patient watched until now is not any more.
    private func unwatch(_ username: String) {
        if watching.remove(username) != nil { notice(username) }
    }

    /// A pull or share read the server refused for this patient (403), not the session ending (401).
    static func isRefused(_ error: any Error) -> Bool {
        guard case let ClientError.notPermitted(code, _) = error else { return false }
        return code == .shareNotActive || code == .forbidden
    }

    /// Pulls each shared tresor of one patient once. Returns its problems.
    private func pull(
        _ cert: Certificate,
        _ shares: [VerifiedShare],
        report: @escaping @Sendable (AppliedChange) -> Void
    ) async throws
        -> [String]
    {
        var problems: [String] = []
        for share in VerifiedShare.onePerTresor(shares) {
            do {
                problems += try await reader.refreshReporting(cert, share, report: report)
            } catch let ClientError.integrity(message) {
                problems.append("integrity check failed for \(cert.username) \(share.share.category): \(message)")
            }
        }
        return problems
    }

    /// The problems not reported before.
    private func fresh(_ problems: [String]) -> [String] {
        problems.filter { reported.insert($0).inserted }
    }
}

extension DoctorReader {
    /// `refresh`, telling `report` of every change the engine stored. Returns what is wrong with the
    /// share: its commitments, and the records held aside.
    func refreshReporting(
        _ patient: Certificate,
        _ share: VerifiedShare,
        report: @escaping @Sendable (AppliedChange) -> Void
    ) async throws
        -> [String]
    {
        let feed = ReplicaFeed(owner: patient.userID, tresor: share.tresor.id)
        var applier = SharedReplica(cache: cache, patient: patient, share: share)
        let context = applier.checks.context
        let keys = share.tresor.keys
        let category = share.share.category
        // Reported only once the pull ended: unconfirmed unless every commitment review passed and one was accepted.
        let buffer = ChangeBuffer()
        applier.applied = { entries in
            for entry in entries {
                let record = (try? StoredEnvelope.decode(entry.bytes)).flatMap { env in
                    try? env.openRecordVerifiedEarlier(keys: keys, expecting: context).record
                }
                buffer.changes.withLock {
                    $0.append(
                        AppliedChange(
                            patient: patient.username,
                            patientID: patient.userID,
                            category: category,
                            kind: entry.header.recordType,
                            recordID: entry.header.recordID.hex,
                            deleted: entry.header.deleted,
                            at: entry.header.timestamp.physicalMs,
                            record: record
                        )
                    )
                }
            }
        }
        let flush = { @Sendable (unconfirmed: Bool) in
            for var change in buffer.changes.withLock({ b in
                defer { b = [] }
                return b
            }) {
                change.unconfirmed = unconfirmed
                report(change)
            }
        }
        let replica = ReplicaEngine(feed: feed, applier: applier, transport: transport, auth: try auth)
        var problems: [String]
        do {
            _ = try await replica.retryQuarantined()
            problems = try await replica.pull().problems
        } catch {
            flush(true)
            throw error
        }
        // Confirmed only by a commitment of the patient's this cache accepted and a set it could compare: a
        // pull with no problem but no commitment ever shown (withheld, or data from before commitments), or
        // with records held aside (the set was not compared), is not (Docs/design.md §5.3).
        let accepted = try await cache.acceptedCommitments(owner: patient.userID)[share.tresor.id]
        let held = try await cache.quarantined(owner: patient.userID, tresor: share.tresor.id)
        flush(!problems.isEmpty || accepted == nil || !held.isEmpty)
        if let message = QuarantinedRecord.message(held, subject: "of \(patient.username)", notDone: "shown", hint: "") {
            problems.append(message)
        }
        return problems
    }
}

/// The changes one refresh stored, held until it ends.
final class ChangeBuffer: Sendable {
    let changes = Mutex<[AppliedChange]>([])
}

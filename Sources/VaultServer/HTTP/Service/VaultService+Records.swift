import Foundation
import Hummingbird
import Synchronization
import VaultAPI
import VaultCore
import VaultCrypto

/// Records (Docs/design.md §5): push with every server-side check, pull through shares, the access log.
extension VaultService {
    /// A push as a binary batch (Docs/envelope-v1.md §7.2), read without a JSON step. A batch whose framing
    /// fails, or holding one envelope that is not well-formed, is refused whole (400 naming the envelope by
    /// its index, nothing stored); each envelope is then stored as the very bytes received.
    func push(_ caller: Caller, batch body: [UInt8]) async throws -> PushResponse {
        try require(caller, role: .patient)
        let pushed: [PushedEnvelope]
        let frame: EnvelopeFrame
        do {
            frame = try EnvelopeFrame(bytes: body, maxCount: APILimits.maxPushBatch)
            pushed = try frame.envelopes().enumerated().map { PushedEnvelope(envelope: $1, bytes: Array(frame.envelopeBytes(at: $0))) }
        } catch {
            guard case .tooLarge = error else { throw APIError.badRequest(error.description) }
            throw APIError(.contentTooLarge, .payloadTooLarge, error.description)
        }
        return try await push(caller, pushed, commitments: frame.commitments)
    }

    /// Every check of a push, and one transaction storing the versions that passed with the commitments.
    /// First every check but the signature runs on every envelope (on every core); then each tresor whose
    /// commitment the batch carries, whose envelopes all passed and whose stored commitment describes its
    /// stored state is checked by that commitment: its envelopes go without their signature checks and the
    /// store compares the state the batch leaves with the commitment (Docs/commitment-pages.md §5). The
    /// other envelopes' signatures are verified in chunks: the transaction begins once the first chunk is
    /// checked (every chunk, where the repository does not stream pushes) and stores each later chunk as
    /// soon as its checks are done, while the chunks after it are still being verified on the other cores.
    /// The store itself refuses a version whose record lives in another tresor (`StoreOutcome.misplaced`),
    /// under its lock.
    func push(_ caller: Caller, _ envelopes: [PushedEnvelope], commitments pushedCommitments: [StateCommitment]) async throws -> PushResponse {
        let tresors = Dictionary(uniqueKeysWithValues: try await repository.tresors(ownerID: caller.id).map { ($0.id, $0) })
        let now = clock()
        let signingKey = caller.certificate.signingKey
        let me = caller.id
        var commitments = try Self.check(pushedCommitments, caller: caller, tresors: tresors)
        let prechecked = try await Parallel.map(envelopes) { Self.check($0, owner: me, tresors: tresors, now: now) }
        var byCommitment = Set(commitments.map(\.tresorID))
        if !byCommitment.isEmpty {
            for (e, checked) in zip(envelopes, prechecked) {
                if case .failure = checked { byCommitment.remove(e.envelope.header.tresorID) }
            }
            byCommitment.subtract(try await repository.tresorsOutOfStep(ownerID: me))
            for i in commitments.indices where !byCommitment.contains(commitments[i].tresorID) { commitments[i].expected = nil }
        }
        let signed = byCommitment
        let repository = self.repository
        let ranges = Parallel.chunks(envelopes.count)
        let stream = VersionChunks(count: ranges.count)
        var results = zip(envelopes, prechecked).map { e, checked in
            switch checked {
            case let .success(row): PushResult(versionID: row.versionID, status: .rejected)
            case let .failure(err): PushResult(versionID: e.envelope.versionID, status: .rejected, code: err.code, reason: err.message)
            }
        }
        var accepted: [[Int]] = Array(repeating: [], count: ranges.count)
        let storeCommitments = commitments

        let outcomes: [StoreOutcome]
        do {
            outcomes = try await withThrowingTaskGroup(of: PushStep.self) { group in
                // The signature checks left, spread over every core.
                for (k, range) in ranges.enumerated() {
                    let part = zip(envelopes[range], prechecked[range])
                    group.addTask {
                        .checked(
                            k,
                            part.map { e, checked in
                                checked.flatMap { row in
                                    signed.contains(row.tresorID) ? .success(row) : Self.checkSignature(e.envelope, row, signingKey: signingKey)
                                }
                            }
                        )
                    }
                }
                let store: @Sendable () async throws -> PushStep = {
                    .stored(try await repository.storeVersions(ownerID: me, stream, commitments: storeCommitments))
                }
                if ranges.isEmpty { group.addTask(operation: store) }
                var delivered = 0
                var outcomes: [StoreOutcome]?
                for try await step in group {
                    switch step {
                    case let .checked(k, checked):
                        var rows: [VersionRow] = []
                        for (i, result) in zip(ranges[k], checked) {
                            switch result {
                            case let .success(row):
                                results[i].status = .stored
                                accepted[k].append(i)
                                rows.append(row)
                            case let .failure(err):
                                results[i] = PushResult(versionID: results[i].versionID, status: .rejected, code: err.code, reason: err.message)
                            }
                        }
                        stream.deliver(rows, at: k)
                        delivered += 1
                        if repository.streamsPushes ? k == 0 : delivered == ranges.count { group.addTask(operation: store) }
                    case let .stored(o):
                        outcomes = o
                    }
                }
                guard let outcomes else { throw APIError.internal }
                return outcomes
            }
        } catch let RepositoryError.commitmentMismatch(tresor) {
            throw APIError.commitmentMismatch(tresor, category: tresors[tresor]?.category)
        }
        for (k, outcome) in zip(accepted.joined(), outcomes) {
            switch outcome {
            case let .stored(seq): results[k].sequence = seq
            case .duplicate: results[k].status = .duplicate
            case .misplaced:
                let err = Self.misplaced
                results[k] = PushResult(versionID: results[k].versionID, status: .rejected, code: err.code, reason: err.message)
            }
        }
        ServerMetrics.shared.recordsPushed.increment(by: results.filter { $0.status == .stored }.count)
        announcePush(owner: me, results, envelopes)
        return PushResponse(results: results)
    }

    /// The refusal of a version whose record lives in another category's tresor: moving it would leave the
    /// first tresor's readers (a doctor of that category) without its later versions and its tombstone.
    static let misplaced = APIError(.conflict, .conflict, "this record lives in another category's tresor; a record never moves between categories")

    /// The checks of pushed state commitments that need no database (Docs/envelope-v1.md §3.4): each is
    /// signed by the caller, names one of the caller's tresors with its category, and at most one per
    /// tresor. Their sequence is checked against the stored one in the push's transaction.
    static func check(_ commitments: [StateCommitment], caller: Caller, tresors: [UUID: TresorRow]) throws -> [CommitmentRow] {
        guard commitments.count <= APILimits.maxPushBatch else {
            throw APIError(.contentTooLarge, .payloadTooLarge, "at most \(APILimits.maxPushBatch) commitments per push")
        }
        var seen = Set<UUID>()
        return try commitments.map { c in
            guard let t = tresors[c.tresorID] else { throw APIError.badRequest("a state commitment names an unknown tresor: declare it first") }
            do { try c.verify(patient: caller.certificate, tresorID: t.id, category: t.category) } catch {
                throw APIError(.badRequest, .invalidSignature, "a state commitment does not verify: \(error)")
            }
            guard seen.insert(c.tresorID).inserted else { throw APIError.badRequest("two state commitments name one tresor") }
            // Stored as a signed 64-bit integer: a larger sequence would come back negative and make every
            // later commitment of the tresor look stale, for good.
            guard c.sequence <= UInt64(Int64.max) else { throw APIError.badRequest("a state commitment's sequence is out of range") }
            guard let json = try? VaultResponseEncoder.json.encode(c) else { throw APIError.badRequest("a state commitment cannot be encoded") }
            return CommitmentRow(tresorID: c.tresorID, sequence: c.sequence, json: Array(json), expected: c)
        }
    }

    /// Every server-side check of one envelope but its signature (Docs/design.md §4, §5; Docs/envelope-v1.md
    /// §4.4 steps 1 and 2), and its version id computed from the bytes received.
    static func check(_ pushed: PushedEnvelope, owner: UUID, tresors: [UUID: TresorRow], now: UnixMillis) -> Result<VersionRow, APIError> {
        let e = pushed.envelope
        do {
            try e.header.validateStructure()
        } catch {
            return .failure(APIError.badRequest("\(error)"))
        }
        guard e.header.ownerID == owner else { return .failure(.forbidden("envelope names another owner")) }
        guard e.ciphertext.count <= APILimits.maxCiphertextBytes else {
            return .failure(APIError(.contentTooLarge, .payloadTooLarge, "ciphertext larger than \(APILimits.maxCiphertextBytes) bytes"))
        }
        guard let t = tresors[e.header.tresorID], t.category == e.header.category else {
            return .failure(.badRequest("unknown tresor or category: declare it first"))
        }
        guard e.header.epoch <= t.currentEpoch else { return .failure(.badRequest("tresor epoch \(e.header.epoch) is not declared")) }
        let limit = UInt64(max(0, now)) + APILimits.maxForwardDriftMs
        guard e.header.timestamp.physicalMs <= limit else {
            let hours = APILimits.maxForwardDriftMs / 3_600_000
            return .failure(APIError(.badRequest, .clockSkew, "HLC time is more than \(hours) hours ahead of the server; check the device clock"))
        }
        let ts = e.header.timestamp
        return .success(
            VersionRow(
                versionID: e.versionID(associatedData: e.header.associatedData()),
                ownerID: owner,
                recordID: e.header.recordID.hex,
                tresorID: t.id,
                epoch: e.header.epoch,
                hlcPhysical: Int64(clamping: ts.physicalMs),
                hlcCounter: Int64(ts.counter),
                hlcDevice: ts.deviceID,
                deleted: e.header.deleted,
                envelope: pushed.bytes
            )
        )
    }

    /// The envelope's signature under the owner's certified key (Docs/envelope-v1.md §4.4 step 3), for an
    /// envelope that passed every other check as `row`. Counted in `PushSignatures.counter`.
    static func checkSignature(_ e: Envelope, _ row: VersionRow, signingKey: SigningPublicKey) -> Result<VersionRow, APIError> {
        PushSignatures.counter?.add()
        let signed = Envelope.signedBytes(associatedData: e.header.associatedData(), nonce: e.nonce, ciphertext: e.ciphertext)
        guard signingKey.isValidSignature(e.signature, for: signed) else {
            return .failure(APIError(.badRequest, .invalidSignature, "envelope signature does not verify under the owner's certified key"))
        }
        return .success(row)
    }

    /// A page of changes. The owner reads all of theirs; a doctor reads one tresor through an active share.
    func pull(
        _ caller: Caller,
        owner: UUID?,
        tresor: UUID?,
        since: UInt64,
        limit: Int,
        maxBytes: Int = PullPageBytes.default
    ) async throws -> PullPage {
        let owner = owner ?? caller.id
        let clamped = max(1, min(limit, APILimits.maxPullLimit))
        if owner == caller.id {
            guard caller.user.role == .patient else { throw APIError.badRequest("a doctor names the patient and category: ?owner=ID&tresor=ID") }
            let page = try await repository.page(ownerID: owner, tresorID: tresor, since: since, limit: clamped, maxBytes: maxBytes)
            ServerMetrics.shared.recordsPulled.increment(by: page.changes.count)
            return PullPage(stored: page, since: since)
        }
        try require(caller, role: .doctor)
        guard let tresor else { throw APIError.badRequest("a doctor pulls one tresor: add ?tresor=ID") }
        let now = clock()
        // Only a share active at `now` lets the doctor in, whether or not its end has been recorded yet.
        let open = try await repository.activeShare(doctorID: caller.id, patientID: owner, tresorID: tresor, now: now)
        guard let share = open else {
            // Named only for a share the admin approved: a request never approved (pending, rejected, withdrawn)
            // is the patient's business alone, so it answers like no share at all (Docs/design.md §3.1).
            let mine = try await repository.shares(doctorID: caller.id, patientID: owner, asOf: now).filter {
                $0.tresorID == tresor && $0.approval != nil
            }
            if let s = mine.last {
                throw APIError(.forbidden, .shareNotActive, "the share of \(s.category) is \(s.state.rawValue); access is not permitted")
            }
            throw APIError.forbidden("no share of this patient's data with you")
        }
        let page = try await repository.page(ownerID: owner, tresorID: tresor, since: since, limit: clamped, maxBytes: maxBytes)
        let category = share.category
        // Audited before the page goes out, in a batch with the reads of other requests; a read whose
        // entry is not committed fails. Every page is one entry, an empty one too (Docs/design.md §6).
        try await auditBatcher.append(
            AuditEvent(
                actor: Self.idText(caller.id),
                action: "records.read",
                patientID: owner,
                details: [
                    "doctor": caller.user.username, "category": category, "since": String(since),
                    "count": String(page.changes.count),
                ]
            ),
            now: now
        )
        ServerMetrics.shared.recordsPulled.increment(by: page.changes.count)
        return PullPage(stored: page, since: since)
    }

    func accessLog(_ caller: Caller, after: UInt64, limit: Int) async throws -> AuditPage {
        try require(caller, role: .patient)
        var page = try await auditPage(after: after, limit: limit, patientID: caller.id)
        let key = try AuditBuilder.patientKey(caller.id, serverSecret: try await repository.serverSecret())
        page.patientKey = Hex.encode(key)
        return page
    }

    /// The chain without contents, for a patient to check its entries against a signed checkpoint
    /// (Docs/design.md §6).
    func accessLogChain(_ caller: Caller, after: UInt64, limit: Int) async throws -> AuditLinkPage {
        try require(caller, role: .patient)
        let clamped = max(1, min(limit, APILimits.maxLinkLimit))
        let links = try await repository.auditLinks(after: after, limit: clamped)
        return AuditLinkPage(links: links, nextCursor: links.last?.sequence ?? after, done: links.count < clamped)
    }

    /// The admin-signed checkpoints, which the patient verifies under the pinned admin key.
    func accessLogCheckpoints(_ caller: Caller) async throws -> AuditCheckpointList {
        try require(caller, role: .patient)
        return AuditCheckpointList(checkpoints: try await repository.auditCheckpoints())
    }
}

/// What the concurrent steps of a push yield.
enum PushStep: Sendable {
    /// The checks of chunk `k` of the envelopes.
    case checked(Int, [Result<VersionRow, APIError>])
    /// The store's outcomes, in the order of the accepted versions.
    case stored([StoreOutcome])
}

/// The Ed25519 checks of pushed envelopes (Docs/envelope-v1.md §4.4 step 3) as the server runs them:
/// tests count them in a task-local counter, carried into the tasks a push spreads its checks over.
public enum PushSignatures {
    /// Counts envelope signature checks.
    public final class Counter: Sendable {
        private let count = Mutex(0)
        /// A counter at zero.
        public init() {}
        /// The checks counted so far.
        public var value: Int { count.withLock { $0 } }
        func add() { count.withLock { $0 += 1 } }
    }

    /// Where the envelope signature checks of the pushes handled in this task are counted.
    @TaskLocal public static var counter: Counter?
}

/// One pushed envelope: decoded for the checks, and the binary encoding that is stored as it is.
struct PushedEnvelope: Sendable {
    var envelope: Envelope
    var bytes: [UInt8]
}

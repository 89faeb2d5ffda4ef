import Foundation
import NIOCore
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto

/// End-to-end push and pull of `count` outcomes of one size on one backend (Docs/benchmarks.md §2, §3), each
/// beside its floor in the same database.
struct PushPullResult: Sendable {
    var backend: BackendKind
    var size: RecordSize
    var count: Int
    var ciphertextBytes: Int
    var storedEnvelopeBytes: Int
    var pushSeconds: Double
    var pushFloorSeconds: Double
    var pulledRecords: Int
    var pullSeconds: Double
    var pullFloorSeconds: Double
    /// The floor of a pull the commitment authenticates (`CommittedPullFloor`).
    var pullCommittedFloorSeconds: Double
    /// Diagnostics: the same work with no SDK client around it (pre-encoded bodies posted straight to
    /// the server; pages fetched as raw bytes), which splits the end-to-end figure into server and client.
    var serverPushSeconds: Double
    var serverPullSeconds: Double
    /// Bytes on the wire per record, measured from the bodies of those raw pushes and pulls.
    var pushWireBytes: Int
    var pullWireBytes: Int

    var pushRps: Double { Double(count) / pushSeconds }
    var pushFloorRps: Double { Double(count) / pushFloorSeconds }
    var pushRatio: Double { pushRps / pushFloorRps }
    var pullRps: Double { Double(pulledRecords) / pullSeconds }
    var pullFloorRps: Double { Double(count) / pullFloorSeconds }
    var pullRatio: Double { pullRps / pullFloorRps }
    var pullCommittedFloorRps: Double { Double(count) / pullCommittedFloorSeconds }
    var pullCommittedRatio: Double { pullRps / pullCommittedFloorRps }
    var serverPushRps: Double { Double(count) / serverPushSeconds }
    var serverPullRps: Double { Double(pulledRecords) / serverPullSeconds }
}

struct PushPullBench {
    let database: BenchDatabase
    let size: RecordSize
    let count: Int
    let root: URL

    func run() async throws -> PushPullResult {
        let admin = SigningKeyPair.generate()
        let tag = "\(database.kind.rawValue) \(size.label)"
        return try await withServer(repository: database.repository, adminKey: admin.publicKey) { server in
            let world = BenchWorld(server: server, admin: admin, root: root.appendingPathComponent("pushpull-\(shortID())"))
            defer { try? FileManager.default.removeItem(at: world.root) }
            let patientName = "patient-\(shortID())"
            let doctorName = "doctor-\(shortID())"
            let vault = try await world.patient(patientName)
            let doctor = try await world.doctor(doctorName)

            // The activity, its tresor and an approved share, all synced, so the timed sync only pushes outcomes.
            try await vault.addActivity(try BenchRecords.activity())
            _ = try await vault.sync()
            _ = try await vault.grant(doctor: doctorName, category: BenchRecords.category)
            try await world.approveAll()
            _ = try await vault.sync()

            // Outcomes created locally (sealed and queued on the device): not part of the push figure.
            let note = String(repeating: "x", count: try BenchRecords.noteLength(for: size))
            let (_, createSeconds) = try await Measure.timeAsync {
                for i in 0..<count {
                    try await vault.recordOutcome(
                        activityID: BenchRecords.activityID,
                        occurrence: i,
                        value: BenchRecords.value(at: Date()),
                        note: note
                    )
                }
            }
            let pending = try await vault.pendingCount()
            guard pending == count else { throw BenchError("\(pending) outcomes pending, expected \(count)") }
            Progress.say("\(tag): \(count) outcomes created on the device in \(fmt(createSeconds, 1)) s (not timed); pushing")

            // 1. Push: sync of the pending outcomes (upload, server verification, storage, acknowledgement).
            let (summary, pushSeconds) = try await Measure.timeAsync { try await vault.sync() }
            guard summary.pushed == count, summary.rejected.isEmpty, summary.duplicates == 0 else {
                throw BenchError("push stored \(summary.pushed) of \(count) (\(summary.rejected.count) rejected: \(summary.rejected.first ?? "-"))")
            }

            Progress.say("\(tag): pushed in \(fmt(pushSeconds, 3)) s; the doctor pulls")
            // 2. Pull: the doctor's first view of the category (fetch, verify, cache, decrypt), cold cache.
            let (view, pullSeconds) = try await Measure.timeAsync { try await doctor.view(patient: patientName, category: BenchRecords.category) }
            guard view.outcomes.count == count, view.activities.count == 1, view.unreadable == 0 else {
                throw BenchError("the doctor read \(view.outcomes.count) outcomes and \(view.activities.count) activities, expected \(count) and 1")
            }
            let pulled = view.outcomes.count + view.activities.count
            Progress.say("\(tag): pulled in \(fmt(pullSeconds, 3)) s; the floors follow")

            // 3. Floors on the same database: rows as large as the stored envelopes, inserted in batches of
            //    500, then selected in pages of 1,000 and verified and decrypted with raw libsodium.
            let stored = try await database.floor.storedEnvelopes()
            guard stored.count == count + 1 else { throw BenchError("the server stored \(stored.count) versions, expected \(count + 1)") }
            let sample = try sampleEnvelope(note: note)
            let raw = RawEnvelopeFloor(
                plaintextCount: sample.ciphertext.count - AEAD.tagByteCount,
                ad: sample.header.associatedData(),
                signedCount: sample.signedBytes.count
            )
            let blobs = raw.sealedBlobs(256, blobCount: stored.averageBytes)
            let now = Int64(Date().unixMillis)
            let owner = UUID()
            let tresor = UUID()
            let rows = (0..<count).map { i in
                FloorRow(
                    versionID: Hex.encode(RandomBytes.bytes(count: 32)),
                    ownerID: owner,
                    recordID: Hex.encode(RandomBytes.bytes(count: 32)),
                    tresorID: tresor,
                    epoch: 1,
                    hlcPhysical: now,
                    hlcCounter: Int64(i),
                    hlcDevice: "dev-0123456789abcdef",
                    deleted: false,
                    envelope: blobs[i % blobs.count]
                )
            }
            try await database.floor.createTable()
            let (_, insertSeconds) = try await Measure.timeAsync { try await database.floor.insert(rows, batchSize: 500) }
            let (read, selectSeconds) = try await Measure.timeAsync { try await database.floor.scan(pageSize: 1_000) { raw.open($0) } }
            guard read == count else { throw BenchError("the floor read \(read) rows, expected \(count)") }
            let committedSeconds = try await CommittedPullFloor.seconds(
                database.floor,
                raw: raw,
                count: count,
                envelopeBytes: stored.averageBytes,
                root: root.appendingPathComponent("floor-\(shortID())")
            )

            // 4. Diagnostics: the server alone.
            let probe = try await serverOnly(
                baseURL: server.baseURL,
                admin: admin,
                patient: vault.account,
                doctor: doctor.account,
                noteLength: note.count,
                pulled: pulled
            )

            let r = PushPullResult(
                backend: database.kind,
                size: size,
                count: count,
                ciphertextBytes: sample.ciphertext.count,
                storedEnvelopeBytes: stored.averageBytes,
                pushSeconds: pushSeconds,
                pushFloorSeconds: insertSeconds,
                pulledRecords: pulled,
                pullSeconds: pullSeconds,
                pullFloorSeconds: selectSeconds,
                pullCommittedFloorSeconds: committedSeconds,
                serverPushSeconds: probe.push,
                serverPullSeconds: probe.pull,
                pushWireBytes: probe.pushBytes / count,
                pullWireBytes: probe.pullBytes / pulled
            )
            Progress.say(
                "\(tag): push \(fmt(r.pushRps, 0))/s (floor \(fmt(r.pushFloorRps, 0))/s, server alone \(fmt(r.serverPushRps, 0))/s), "
                    + "pull \(fmt(r.pullRps, 0))/s (floor \(fmt(r.pullFloorRps, 0))/s, without signatures \(fmt(r.pullCommittedFloorRps, 0))/s, server alone \(fmt(r.serverPullRps, 0))/s)"
                    + "; ciphertext \(r.ciphertextBytes) B, stored envelope \(r.storedEnvelopeBytes) B, "
                    + "on the wire \(r.pushWireBytes) B pushed and \(r.pullWireBytes) B pulled per record"
            )
            return r
        }
    }

    /// The server's share of push and pull: `count` envelopes like the pushed ones (sealed beforehand, in
    /// a tresor of their own so the doctor's category is untouched) posted as pre-encoded batches of 500,
    /// then the doctor's pages of the shared category fetched as raw bytes, as DoctorReader requests them.
    func serverOnly(
        baseURL: String,
        admin: SigningKeyPair,
        patient: UnlockedAccount,
        doctor: UnlockedAccount,
        noteLength: Int,
        pulled: Int
    ) async throws -> (push: Double, pull: Double, pushBytes: Int, pullBytes: Int) {
        guard let patientToken = patient.session?.token, let doctorToken = doctor.session?.token else { throw BenchError("no session") }
        let owner = patient.identity.userID
        let tresor = Tresor.create(ownerID: owner, category: "server-probe")
        try await EnvelopeFactory.declare(
            tresor,
            identity: patient.identity,
            certificate: patient.certificate,
            adminKey: admin.publicKey,
            token: patientToken,
            baseURL: baseURL
        )
        let batch = SyncPolicy.pushBatch
        let bodies = try await EnvelopeFactory.pushBodies(
            identity: patient.identity,
            tresor: tresor,
            deviceID: "dev-probe00000000000",
            activityID: "probe-walk",
            first: 0,
            batches: (count + batch - 1) / batch,
            size: batch,
            noteLength: noteLength
        )
        return try await withRawHTTP(baseURL, connections: 1) { http in
            _ = try await http.send(.GET, Routes.health, token: nil)
            var answers: [ByteBuffer] = []
            let (_, pushSeconds) = try await Measure.timeAsync {
                for body in bodies {
                    let (status, answer) = try await http.send(.POST, Routes.records, token: patientToken, body: body)
                    guard status == 200 else { throw BenchError("server-only push answered HTTP \(status)") }
                    answers.append(answer)
                }
            }
            let stored = try answers.reduce(0) { n, a in
                n + (try JSONDecoder().decode(PushResponse.self, from: Data(a.readableBytesView))).results.filter { $0.status == .stored }.count
            }
            guard stored == bodies.count * batch else { throw BenchError("server-only push stored \(stored) of \(bodies.count * batch)") }

            let shared = Tresor.id(ownerID: owner, category: BenchRecords.category)
            var cursor: UInt64 = 0
            var pages = 0
            var pullBytes = 0
            var changes = 0
            let (_, pullSeconds) = try await Measure.timeAsync {
                while pages < 10_000 {
                    let (status, page) = try await http.send(
                        .GET,
                        Routes.records + "?owner=\(owner.uuidString)&tresor=\(shared.uuidString)&since=\(cursor)&limit=\(SyncPolicy.pullPage)",
                        token: doctorToken
                    )
                    guard status == 200 else { throw BenchError("server-only pull answered HTTP \(status)") }
                    pages += 1
                    pullBytes += page.readableBytes
                    // The framing only (every length checked, no envelope decoded): where the page ends.
                    let frame = try PullPageFrame(bytes: Array(page.readableBytesView), after: cursor)
                    changes += frame.changes.count
                    if frame.done || frame.nextCursor == cursor { break }
                    cursor = frame.nextCursor
                }
            }
            // Pages end at 1,000 changes or at the byte bound (Docs/envelope-v1.md §7.3), whichever comes first.
            guard changes == pulled else { throw BenchError("server-only pull read \(changes) changes in \(pages) pages for \(pulled) records") }
            return (pushSeconds, pullSeconds, bodies.reduce(0) { $0 + $1.readableBytes }, pullBytes)
        }
    }

    /// An envelope like the ones pushed (same payload length, header shape and signer kind).
    func sampleEnvelope(note: String) throws -> Envelope {
        let identity = Identity.generate()
        let tresor = Tresor.create(ownerID: identity.userID, category: BenchRecords.category)
        let rid = RecordID.make(type: .outcome, activityID: BenchRecords.activityID, occurrence: 5_000, key: identity.recordIDKey)
        return try Envelope.seal(
            record: .outcome(BenchRecords.outcome(occurrence: 5_000, note: note)),
            type: .outcome,
            header: BenchRecords.header(owner: identity, tresor: tresor, recordID: rid, counter: 0),
            key: tresor.currentKey,
            author: identity.signing
        )
    }
}

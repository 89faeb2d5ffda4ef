import Foundation
import NIOCore
import VaultAPI
import VaultClient
import VaultCore
import VaultCrypto

/// Outcome envelopes sealed outside any timed section, in parallel on every core, for the measurements
/// that post pre-encoded bodies straight to the server (load generator, server-only probes).
enum EnvelopeFactory {
    /// `batches` push bodies (binary batches, Docs/envelope-v1.md §7.2, as the SDK sends them) of `size` new outcome envelopes
    /// each, for occurrences `first`... of `activityID` (same length as the benchmark's, so the same size).
    static func pushBodies(
        identity: Identity,
        tresor: Tresor,
        deviceID: String,
        activityID: String = BenchRecords.activityID,
        first: Int,
        batches: Int,
        size: Int,
        noteLength: Int
    ) async throws -> [ByteBuffer] {
        let note = String(repeating: "x", count: noteLength)
        let workers = max(1, ProcessInfo.processInfo.activeProcessorCount)
        return try await withThrowingTaskGroup(of: [(Int, ByteBuffer)].self) { group in
            for w in 0..<workers {
                group.addTask {
                    var out: [(Int, ByteBuffer)] = []
                    for b in stride(from: w, to: batches, by: workers) {
                        let envelopes = try (0..<size).map { k -> Envelope in
                            let index = first + b * size + k
                            let rid = RecordID.make(type: .outcome, activityID: activityID, occurrence: index, key: identity.recordIDKey)
                            let header = BenchRecords.header(
                                owner: identity,
                                tresor: tresor,
                                recordID: rid,
                                counter: UInt32(index),
                                deviceID: deviceID
                            )
                            return try Envelope.seal(
                                record: .outcome(BenchRecords.outcome(activityID: activityID, occurrence: index, note: note)),
                                type: .outcome,
                                header: header,
                                key: tresor.currentKey,
                                author: identity.signing
                            )
                        }
                        out.append((b, ByteBuffer(bytes: try EnvelopeFrame.encode(envelopes))))
                    }
                    return out
                }
            }
            var all: [(Int, ByteBuffer)] = []
            for try await part in group { all += part }
            return all.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }

    /// Declares a tresor (its self-grant, signed by the patient) through the SDK's transport.
    static func declare(
        _ tresor: Tresor,
        identity: Identity,
        certificate: Certificate,
        adminKey: SigningPublicKey,
        token: String,
        baseURL: String
    ) async throws {
        let grant = try Grant.make(
            patient: identity,
            member: certificate,
            adminKey: adminKey,
            tresor: tresor,
            tresorVersion: 1,
            ledger: TresorLedger(version: 1),
            createdAt: Date().unixMillis
        )
        let transport = try Transport(baseURL: baseURL, maxAttempts: 1)
        _ = try await transport.send(TresorEndpoints.put, PutTresorRequest(selfGrant: grant), auth: .session(token))
    }
}

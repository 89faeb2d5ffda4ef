import Foundation
import Testing
import VaultAPI
import VaultCore

@testable import VaultClient

/// The patient's walk over the chain's links (Docs/envelope-v1.md §3.1) against a server that lies in its
/// answers: an entry fetched again because the chain holds it about the patient must be exactly the chain's
/// entry, and the entries that continue it are the patient's too.
@Suite("Client: the access log's links against a lying server")
struct AccessLogLinksTests {
    static let patient = UUID()
    static let key = [UInt8](repeating: 7, count: 32)

    /// Three entries about the patient, each linked to the one before, after one entry about nobody.
    static func chain() -> [AuditEntry] {
        var previous = String(repeating: "0", count: 64)
        var patientPrevious: String?
        var out: [AuditEntry] = []
        for (n, action) in ["account.registered", "records.read", "login", "records.read"].enumerated() {
            let about: UUID? = n == 0 ? nil : patient
            var e = AuditEntry(
                sequence: UInt64(n + 1),
                at: 1_767_254_400_000 + Int64(n),
                actor: n == 1 ? "drx" : "fay",
                action: action,
                patientID: about,
                details: [:],
                previousHash: previous,
                hash: "",
                format: 2,
                patientLink: about.map { _ in AuditChain.patientLink(key: key, previous: patientPrevious) }
            )
            e.hash = AuditChain.hash(of: e)
            previous = e.hash
            if about != nil { patientPrevious = e.hash }
            out.append(e)
        }
        return out
    }

    static func link(_ e: AuditEntry) -> AuditLink {
        AuditLink(
            sequence: e.sequence,
            previousHash: e.previousHash,
            hash: e.hash,
            format: e.format,
            digest: AuditChain.digest(of: e),
            patientLink: e.patientLink
        )
    }

    /// The walk when the server's list shows only the first entry about the patient.
    static func walk() throws -> (AccessLogLinks, [AuditEntry]) {
        let all = chain()
        var links = try AccessLogLinks(patient: patient, key: key, entries: [all[1]], formatTwoFrom: nil)
        for e in all { try links.append(link(e)) }
        return (links, all)
    }

    @Test func theEntriesAfterAHiddenOneAreTheServerToShowToo() throws {
        let (links, all) = try Self.walk()
        #expect(links.unlisted == [3, 4], "the hidden read and the one continuing it")
        try links.finish(later: [all[2], all[3]], last: 4)
        #expect(throws: AuditChainBreak.self, "the one continuing the hidden read is missing") {
            try links.finish(later: [all[2]], last: 4)
        }
    }

    @Test func anEntryFetchedAgainMustBeTheChainsEntry() throws {
        let (links, all) = try Self.walk()
        // The second answer forges a harmless entry at the hidden read's sequence: the patient's, hashing to
        // its own fields (format 1), but not the entry the chain holds there.
        var forged = AuditEntry(
            sequence: 3,
            at: all[2].at,
            actor: "fay",
            action: "login",
            patientID: Self.patient,
            details: [:],
            previousHash: all[2].previousHash,
            hash: ""
        )
        forged.hash = AuditChain.hash(of: forged)
        #expect(throws: AuditChainBreak.self) { try links.finish(later: [forged, all[3]], last: 4) }
    }
}

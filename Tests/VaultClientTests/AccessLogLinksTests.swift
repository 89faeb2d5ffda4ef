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

    /// Three entries about the patient (or more, with more `actions`), each linked to the one before, after
    /// one entry about nobody.
    static func chain(_ actions: [String] = ["account.registered", "records.read", "login", "records.read"]) -> [AuditEntry] {
        var previous = String(repeating: "0", count: 64)
        var patientPrevious: String?
        var out: [AuditEntry] = []
        for (n, action) in actions.enumerated() {
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
            e.hash = AuditChain.hash(of: e) ?? ""
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
        forged.hash = AuditChain.hash(of: forged) ?? ""
        #expect(throws: AuditChainBreak.self) { try links.finish(later: [forged, all[3]], last: 4) }
    }

    /// The message of the break `body` throws, nil when it throws none.
    static func broken(_ body: () throws -> Void) -> String? {
        do { try body() } catch let error as AuditChainBreak { return error.description } catch { return "other error: \(error)" }
        return nil
    }

    /// An entry at sequence 0, whose hash is recomputed from its fields and which would otherwise lie "at or
    /// before" any checkpoint, is refused before any link is read.
    @Test func anEntryAtSequenceZeroIsRefusedWhateverItsHash() {
        var zero = Self.chain()[1]
        zero.sequence = 0
        zero.hash = AuditChain.hash(of: zero) ?? ""
        #expect(AuditChain.hash(of: zero) == zero.hash, "its hash looks valid")
        let message = Self.broken { _ = try AccessLogLinks(patient: Self.patient, key: Self.key, entries: [zero], formatTwoFrom: nil) }
        #expect(message?.contains("entry 0: edited entry") == true, "\(message ?? "accepted")")
    }

    /// An entry of a format other than 1 or 2 has no hash: neither the text an older build hashed such an
    /// entry to nor anything else passes.
    @Test(arguments: [UInt8(0), 3])
    func anEntryOfAnUnknownFormatIsRefused(format: UInt8) {
        var odd = Self.chain()[1]
        odd.format = format
        #expect(AuditChain.hash(of: odd) == nil)
        for hash in ["unsupported audit entry format \(format)", odd.hash] {
            odd.hash = hash
            let message = Self.broken { _ = try AccessLogLinks(patient: Self.patient, key: Self.key, entries: [odd], formatTwoFrom: nil) }
            #expect(message?.contains("entry 2: edited entry") == true, "\(message ?? "accepted")")
        }
    }

    /// An entry listed past the chain's last link was never compared with a link: refused, not shown.
    @Test func anEntryPastTheChainsEndIsRefused() throws {
        let all = Self.chain(["account.registered", "records.read", "login", "records.read", "login"])
        var links = try AccessLogLinks(patient: Self.patient, key: Self.key, entries: Array(all[1...]), formatTwoFrom: nil)
        for e in all.prefix(4) { try links.append(Self.link(e)) }
        let message = Self.broken { try links.finish(later: [], last: 4) }
        #expect(message == "entry 5: missing entry: your access log lists an entry there, past the chain's end at entry 4")
    }

    /// An entry whose link the walk never took (the walk's caller skipping it) is refused at the end; a
    /// resumed walk asks it only of the entries after the links it does not read.
    @Test func anEntryAtASequenceWhoseLinkIsMissingIsRefused() throws {
        let all = Self.chain()
        var links = try AccessLogLinks(patient: Self.patient, key: Self.key, entries: Array(all[1...]), formatTwoFrom: nil)
        for e in all where e.sequence != 3 { try links.append(Self.link(e)) }
        let message = Self.broken { try links.finish(later: [], last: 4) }
        #expect(message == "entry 3: missing entry: your access log lists an entry there that was not compared with the chain's link")

        var resumed = try AccessLogLinks(patient: Self.patient, key: Self.key, entries: Array(all[1...]), formatTwoFrom: 1, after: 2)
        for e in all.suffix(2) { try resumed.append(Self.link(e)) }
        try resumed.finish(later: [], last: 4)
    }
}

import Foundation
import VaultCore
import VaultCrypto

/// The admin's own record of every share request it decided, by the hash of the patient's signed request
/// (`Grant.statementHash`), beside its ledger of issued certificates (Docs/design.md §3). A hostile server
/// can copy a request the patient withdrew or revoked into a new pending share; its statement is the
/// patient's, so it verifies, but the admin approves a request once: the copy under another share id is
/// refused here, whatever the server says. The file is written (mode 0600) before an approval leaves this
/// process.
public actor ShareDecisionLedger {
    /// One decided request.
    public struct Entry: Codable, Sendable, Equatable {
        /// BLAKE2b-256 of the request's statement bytes, lowercase hex.
        public var requestHash: String
        public var shareID: UUID
        public var decision: Decision
        public var decidedAt: UnixMillis
    }

    /// What the admin decided.
    public enum Decision: String, Codable, Sendable { case approved, rejected }

    /// Where the ledger is kept.
    public nonisolated let url: URL
    private var entries: [Entry]

    /// The ledger at `url`; a missing file is an empty ledger, an unreadable one an error (never silently
    /// empty, which would forget what was decided).
    public init(url: URL) throws {
        self.url = url
        guard let data = try SecureFiles.read(url) else {
            entries = []
            return
        }
        do { entries = try JSONDecoder().decode([Entry].self, from: data) } catch {
            throw ClientError.localState("the ledger of decided shares \(url.path) is unreadable; restore it from a backup before approving shares")
        }
    }

    /// The default place: `decided-share-requests.json` in the folder of the certificate ledger.
    public static func url(besideCertificateLedger ledger: URL) -> URL {
        ledger.deletingLastPathComponent().appendingPathComponent("decided-share-requests.json")
    }

    /// The decision taken before on `request`, if any.
    public func decision(on request: Grant) -> Entry? {
        let hash = Hex.encode(request.statementHash)
        return entries.first { $0.requestHash == hash }
    }

    /// Every decision, oldest first.
    public func all() -> [Entry] { entries }

    /// Records `decision` on `request` filed as `shareID`, or refuses it when the request was decided
    /// before under another share id, or decided the other way. Deciding the same share the same way again
    /// is allowed (an approval that failed on the way to the server is retried that way).
    public func admit(_ request: Grant, shareID: UUID, decision: Decision, at: UnixMillis) throws {
        // Another admin process may have decided since this one read the file.
        if let data = try SecureFiles.read(url) {
            do { entries = try JSONDecoder().decode([Entry].self, from: data) } catch {
                throw ClientError.localState(
                    "the ledger of decided shares \(url.path) is unreadable; restore it from a backup before approving shares"
                )
            }
        }
        if let e = self.decision(on: request) {
            guard e.shareID == shareID, e.decision == decision else {
                throw ClientError.integrity(
                    "refusing to decide a share request twice: this request of the patient was \(e.decision.rawValue) before as share "
                        + "\(e.shareID.uuidString.lowercased()); the server now presents it as share \(shareID.uuidString.lowercased())"
                )
            }
            return
        }
        entries.append(Entry(requestHash: Hex.encode(request.statementHash), shareID: shareID, decision: decision, decidedAt: at))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try SecureFiles.write(try encoder.encode(entries), to: url)
    }
}

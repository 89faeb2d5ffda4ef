import Foundation
import Hummingbird
import VaultAPI
import VaultCore
import VaultCrypto

/// Tresors (Docs/design.md §4): a patient declares each category's tresor and its epochs with a self-grant.
extension VaultService {
    func putTresor(_ caller: Caller, _ r: PutTresorRequest) async throws -> TresorInfo {
        try require(caller, role: .patient)
        let g = r.selfGrant
        guard g.patientID == caller.id, g.memberID == caller.id else {
            throw APIError.forbidden("a self-grant names the caller as patient and member")
        }
        try validateCategory(g.category)
        try verify(g, by: caller, what: "self-grant")
        guard g.hasContiguousEpochs, let top = g.epochs.last else {
            throw APIError.badRequest("a self-grant carries every epoch from 1 to the newest")
        }
        // Tresor versions count from 1 (Docs/envelope-v1.md §3.2): readers refuse a self-grant at 0, so storing
        // one would leave the category stuck for every device.
        if g.version >= 2, (g.tresorVersion ?? 0) == 0 {
            throw APIError.badRequest("a self-grant's tresor version counts from 1")
        }
        let row = TresorRow(id: g.tresorID, ownerID: caller.id, category: g.category, currentEpoch: top, selfGrant: g, updatedAt: clock())
        let event = Self.patientEvent(caller, "tresor.epoch", ["category": g.category, "epoch": String(top)])
        let saved = try await repository.upsertTresor(row, audit: event)
        return info(saved)
    }

    func tresors(_ caller: Caller) async throws -> TresorList {
        try require(caller, role: .patient)
        return TresorList(tresors: try await repository.tresors(ownerID: caller.id).map(info))
    }

    func info(_ t: TresorRow) -> TresorInfo {
        TresorInfo(
            tresorID: t.id,
            ownerID: t.ownerID,
            category: t.category,
            currentEpoch: t.currentEpoch,
            selfGrant: t.selfGrant,
            updatedAt: t.updatedAt
        )
    }

    func validateCategory(_ c: String) throws {
        do { try Activity.validateCategory(c) } catch {
            throw APIError.badRequest("category must be 1-64 characters of a-z, 0-9 and '-'")
        }
    }
}

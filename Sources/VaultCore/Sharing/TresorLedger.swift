import Foundation

/// One member of a tresor as the patient decided it (Docs/design.md §3): the share it belongs to, and
/// whether the patient asked for it, delivered keys to it, or ended it. The server's share list is only a
/// hint; this is what a rotation and a key delivery obey.
public struct LedgerMember: Sendable, Hashable, Codable {
    /// Where a member stands. The order is the order of events: a merge keeps the later one, and the
    /// three ends are final.
    public enum Status: UInt8, Sendable, Codable, CaseIterable {
        /// The patient filed a share request; no keys were sealed to the member.
        case requested = 1
        /// The admin's approval of the request verified and the keys were sealed to the member.
        case delivered = 2
        /// The patient revoked the share (or withdrew the request).
        case revoked = 3
        /// The share's end date passed; the tresor was rotated past it.
        case expired = 4
        /// The admin rejected the request.
        case rejected = 5

        /// True for the three ends.
        public var isFinal: Bool { rawValue >= Status.revoked.rawValue }
    }

    /// The share id the server gave the request.
    public var shareID: UUID
    /// The member's user id (a doctor).
    public var memberID: UUID
    /// The member's username, for messages.
    public var username: String
    public var status: Status
    /// The end date the patient signed into the request, if any.
    public var expiresAt: UnixMillis?
    /// When the status last changed, on the patient's device.
    public var changedAt: UnixMillis

    /// A member entry.
    public init(shareID: UUID, memberID: UUID, username: String, status: Status, expiresAt: UnixMillis?, changedAt: UnixMillis) {
        self.shareID = shareID
        self.memberID = memberID
        self.username = username
        self.status = status
        self.expiresAt = expiresAt
        self.changedAt = changedAt
    }

    /// True when the member's end date has passed at `now`.
    public func hasExpired(at now: UnixMillis) -> Bool { expiresAt.map { now >= $0 } ?? false }
}

/// The patient's record of who may hold a tresor's keys, with the tresor's version (Docs/envelope-v1.md
/// §3.2). It travels sealed inside the patient's self-grant, so only the patient's devices read it, and
/// the patient's signature over the self-grant covers it. Its version grows with every change of the
/// tresor's keys or members; a device never accepts a lower one than it has seen.
public struct TresorLedger: Sendable, Hashable {
    /// The tresor version this ledger was sealed at.
    public var version: UInt64
    /// Members by share id.
    public private(set) var members: [UUID: LedgerMember]

    /// An empty ledger at `version`.
    public init(version: UInt64, members: [UUID: LedgerMember] = [:]) {
        self.version = version
        self.members = members
    }

    /// Adds or moves a member; a final status is never undone and a member never moves back.
    public mutating func record(_ member: LedgerMember) {
        if let existing = members[member.shareID] {
            guard !existing.status.isFinal, member.status.rawValue > existing.status.rawValue else { return }
        }
        members[member.shareID] = member
    }

    /// The union of two devices' ledgers: every member, each at its later status, and the higher version.
    public mutating func merge(_ other: TresorLedger) {
        version = max(version, other.version)
        for member in other.members.values.sorted(by: { $0.changedAt < $1.changedAt }) { record(member) }
    }

    /// Members that hold keys and may receive the next epoch at `now`: delivered, not ended, not expired.
    public func recipients(at now: UnixMillis) -> [LedgerMember] {
        members.values.filter { $0.status == .delivered && !$0.hasExpired(at: now) }.sorted { $0.shareID.uuidString < $1.shareID.uuidString }
    }

    /// Members whose keys must be delivered once their approval verifies: requested, not expired.
    public func awaitingDelivery(at now: UnixMillis) -> [LedgerMember] {
        members.values.filter { $0.status == .requested && !$0.hasExpired(at: now) }.sorted { $0.shareID.uuidString < $1.shareID.uuidString }
    }

    /// Members that hold keys or are about to, and whose end date has passed: the tresor rotates past them.
    public func dueToExpire(at now: UnixMillis) -> [LedgerMember] {
        members.values.filter { !$0.status.isFinal && $0.hasExpired(at: now) }.sorted { $0.shareID.uuidString < $1.shareID.uuidString }
    }

    /// The open (requested or delivered) member entry for `memberID`, if any.
    public func openMember(_ memberID: UUID) -> LedgerMember? {
        members.values.filter { $0.memberID == memberID && !$0.status.isFinal }.max { $0.changedAt < $1.changedAt }
    }

    /// Writes the ledger after the keys of a self-grant: `u32 m || m × member`, members by share id.
    func append(to w: inout CanonicalWriter) {
        let sorted = members.values.sorted { $0.shareID.uuidString < $1.shareID.uuidString }
        w.append(UInt32(sorted.count))
        for m in sorted {
            w.append(m.shareID)
            w.append(m.memberID)
            w.append(m.username)
            w.append(m.status.rawValue)
            w.append(m.expiresAt)
            w.append(m.changedAt)
        }
    }

    /// Reads what `append(to:)` wrote; `version` is the signed tresor version of the self-grant.
    static func read(from r: inout CanonicalReader, version: UInt64) throws -> TresorLedger {
        var ledger = TresorLedger(version: version)
        let count = try r.readUInt32()
        guard count <= 100_000 else { throw TrustError.malformed(what: "ledger", reason: "too many members") }
        for _ in 0..<count {
            let shareID = try r.readUUID()
            let memberID = try r.readUUID()
            let username = try r.readString()
            guard let status = LedgerMember.Status(rawValue: try r.readUInt8()) else {
                throw TrustError.malformed(what: "ledger", reason: "unknown member status")
            }
            let expiresAt = try r.readOptionalInt64()
            let changedAt = try r.readInt64()
            guard ledger.members[shareID] == nil else { throw TrustError.malformed(what: "ledger", reason: "a share appears twice") }
            ledger.members[shareID] = LedgerMember(
                shareID: shareID,
                memberID: memberID,
                username: username,
                status: status,
                expiresAt: expiresAt,
                changedAt: changedAt
            )
        }
        return ledger
    }
}

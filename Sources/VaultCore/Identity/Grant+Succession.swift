import Foundation

/// The rules that relate one grant to another (Docs/design.md §3, Docs/envelope-v1.md §3). They live here
/// once; the server, the patient's rotation, the doctor's reader and the admin tool all call them.
extension Grant {
    /// True when the grant carries exactly the epochs 1, 2, …, n for some n ≥ 1, in order: the shape of a
    /// self-grant, which hands a new device every key of the tresor. Checked element by element so that a
    /// signed epoch of 2^32-1 never makes anyone build a 2^32-element range.
    public var hasContiguousEpochs: Bool {
        guard let top = epochs.last, top >= 1, epochs.count == Int(top) else { return false }
        return epochs.enumerated().allSatisfy { $0.element == UInt32($0.offset + 1) }
    }

    /// True when this grant may replace `older` after a rotation: it names the same patient, member,
    /// tresor and category, keeps the expiry the admin approved, and carries every epoch `older` carried
    /// (it may add newer ones), at a tresor version no older than `older`'s. Signatures are not checked
    /// here; callers verify them first.
    public func isSuccessor(of older: Grant) -> Bool {
        patientID == older.patientID && memberID == older.memberID && tresorID == older.tresorID
            && category == older.category && expiresAt == older.expiresAt
            && (tresorVersion ?? 0) >= (older.tresorVersion ?? 0)
            && Set(older.epochs).isSubset(of: Set(epochs))
    }

    /// True when every epoch the grant names lies in 1...`currentEpoch`.
    public func epochsExist(upTo currentEpoch: UInt32) -> Bool {
        currentEpoch >= 1 && epochs.allSatisfy { (1...currentEpoch).contains($0) }
    }
}

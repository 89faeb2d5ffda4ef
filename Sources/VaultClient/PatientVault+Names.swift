import Foundation
import VaultCore

extension PatientVault {
    /// The usernames of the doctors this device's share ledgers name, by lowercased user id. The ledgers are
    /// kept and signed by the patient's own devices, so an id the server's access log gives (`share.approved`
    /// names the doctor by id) can be shown by the name the patient shared with, not the server's word.
    public func memberNames() throws -> [String: String] {
        var names: [String: String] = [:]
        for category in try store.ledgerCategories() {
            guard let members = try store.ledgerState(category: category)?.ledger.members else { continue }
            for member in members.values {
                names[member.memberID.uuidString.lowercased()] = member.username
            }
        }
        return names
    }
}

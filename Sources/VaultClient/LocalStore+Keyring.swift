import Foundation
import GRDB

extension LocalStore {
    /// The device's keyring in one row of the store, sealed as the keyring file was (Docs/envelope-v1.md
    /// §2.5), so that keys, ledgers and epoch marks change in one transaction. Added after the commitments'
    /// conversion; the file of an earlier version moves in when the vault opens (`openKeyring`).
    static let keyringTable = DeviceDatabase.Migration(
        "v8-keyring",
        sql: "CREATE TABLE keyring (id INTEGER PRIMARY KEY CHECK (id = 1), sealed BLOB NOT NULL)"
    )

    /// The name a keyring file takes once its keys are committed in the database, until it is erased.
    static func movedKeyringURL(_ file: URL) -> URL {
        file.deletingLastPathComponent().appendingPathComponent(".\(file.lastPathComponent).moved")
    }

    /// Opens the device's keyring, first moving in the keyring file an earlier version kept at `file`:
    /// its keys are merged into the row (a key the row holds for the same epoch wins: the row is newer) and
    /// committed durably, and only then is the file renamed away and erased. A crash before the commit
    /// leaves the file, moved in at the next open; a crash after it leaves the file or its renamed copy,
    /// merged again (nothing to add) or erased. A file that does not open under `seal` is reported and kept.
    func openKeyring(_ seal: Keyring.Seal, movingIn file: URL) throws -> Keyring {
        if let data = try SecureFiles.read(file) {
            let fromFile = try Keyring.open(data, seal: seal, what: "the keyring at \(file.path)")
            // Durable before the file goes: with NORMAL a commit can be lost to a power cut.
            try DeviceDatabase.writeDurably(queue) { db in
                let tx = Transaction(db: db)
                var ring = try tx.keyring(seal)
                for t in fromFile.tresors.values { ring.merge(t) }
                try tx.save(ring, seal: seal)
            }
            let moved = Self.movedKeyringURL(file)
            // Gone already: another process opening this home moved it in first.
            guard rename(file.path, moved.path) == 0 || errno == ENOENT else {
                throw ClientError.localState("cannot remove \(file.path) after moving its keys into \(queue.path)")
            }
        }
        // Renamed only after its keys were committed: what is left of it is a copy.
        let moved = Self.movedKeyringURL(file)
        if FileManager.default.fileExists(atPath: moved.path) { SecureFiles.erase(moved) }
        return try read { tx in try tx.keyring(seal) }
    }
}

extension LocalStore.Transaction {
    /// The device's keyring (empty before the first key).
    func keyring(_ seal: Keyring.Seal) throws -> Keyring {
        guard let data = try Data.fetchOne(db.cachedStatement(sql: "SELECT sealed FROM keyring WHERE id = 1")) else { return Keyring() }
        return try Keyring.open(data, seal: seal, what: "the keyring in the device's database")
    }

    /// Replaces the device's keyring by `keyring`, sealed under `seal`.
    func save(_ keyring: Keyring, seal: Keyring.Seal) throws {
        try db.cachedStatement(sql: "INSERT INTO keyring (id, sealed) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET sealed = excluded.sealed")
            .execute(arguments: [try keyring.sealed(seal)])
    }

    /// Every local head of `category`.
    func records(category: String) throws -> [LocalRecordRow] {
        try Row.fetchAll(db.cachedStatement(sql: LocalStore.selectRecord + " WHERE r.category = ?"), arguments: [category]).map(LocalStore.row)
    }
}

import Foundation

extension ServerOperator {
    /// The tables a push writes: what a backup taken now and restored later turns back (the accounts,
    /// shares and sessions of a test are made before its backup, so theirs stay as they are).
    static let recordTables = ["versions", "heads", "owner_sequences", "tresor_commitments", "tresor_states"]

    /// Takes a backup of the records, commitments and change sequences as they are now, inside the
    /// database (`backup_<table>`), for `restoreRecordsBackup`.
    public func backUpRecords() async throws {
        for table in Self.recordTables { try await execute("CREATE TABLE backup_\(table) AS SELECT * FROM \(table)") }
    }

    /// Restores the backup `backUpRecords` took, as an operator restoring an older copy does: every
    /// version, head, commitment and change sequence pushed since is gone, sequences start again from
    /// where they were. The append-only guard of the versions goes first (a restore replaces the table).
    public func restoreRecordsBackup() async throws {
        try await dropGuard(of: .versions)
        for table in Self.recordTables.reversed() { try await execute("DELETE FROM \(table)") }
        for table in Self.recordTables { try await execute("INSERT INTO \(table) SELECT * FROM backup_\(table)") }
    }
}

extension ServerOperator {
    /// Makes the database keep every tresor's commitment as it is: a newer one pushed is taken without error
    /// and silently not stored (a server that accepts a heal and goes on showing the old state).
    public func ignoreCommitmentUpdates() async throws {
        switch backend {
        case .sqlite:
            try await execute("CREATE TRIGGER keep_old_commitments BEFORE UPDATE ON tresor_commitments BEGIN SELECT RAISE(IGNORE); END")
        case .postgres:
            // The body's semicolon as an octal escape: the raw SQL runs statement by statement, split at ';'.
            try await execute(
                "CREATE FUNCTION keep_old_commitments() RETURNS trigger LANGUAGE plpgsql AS E'BEGIN RETURN NULL\\073 END'"
            )
            try await execute(
                "CREATE TRIGGER keep_old_commitments BEFORE UPDATE ON tresor_commitments FOR EACH ROW EXECUTE FUNCTION keep_old_commitments()"
            )
        }
    }
}

import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultServer

/// The schema is written once (Docs/design.md §6): both backends must end with the same tables, columns,
/// keys and indexes, and the shipped migration must never change under databases that already applied it.
@Suite("Schema (both backends)")
struct SchemaTests {
    /// Columns per table as first shipped; a column added, dropped, renamed or moved fails here.
    static let knownColumns: [String: [String]] = [
        "meta": ["key", "value"],
        "users": [
            "id", "username", "role", "status", "registration", "certificate", "approval", "reject_reason", "created_at", "updated_at",
            "suspended_at", "suspend_reason", "credential_generation",
        ],
        "sessions": ["token_hash", "user_id", "created_at", "expires_at", "device_name", "last_used_at", "credential_generation"],
        "account_credentials": ["user_id", "credential_update", "recovery_bundle", "recovery_verifier", "updated_at"],
        "account_deletions": ["owner_id"],
        "tresors": ["id", "owner_id", "category", "current_epoch", "self_grant", "updated_at"],
        "shares": [
            "id", "patient_id", "doctor_id", "tresor_id", "category", "state", "grant_json", "latest_grant", "approval",
            "approval_sequence", "reason", "created_at", "updated_at", "expires_at", "revocation_json",
        ],
        "owner_sequences": ["owner_id", "last_sequence"],
        "versions": [
            "version_id", "owner_id", "record_id", "tresor_id", "epoch", "hlc_physical", "hlc_counter", "hlc_device", "deleted", "envelope",
        ],
        "heads": [
            "owner_id", "record_id", "tresor_id", "version_id", "hlc_physical", "hlc_counter", "hlc_device", "deleted", "sequence",
            "changed_at",
        ],
        "audit_log": [
            "sequence", "at", "actor", "action", "patient_id", "details", "previous_hash", "hash", "format", "digest", "patient_link",
        ],
        "audit_head": ["id", "sequence", "hash"],
        "admin_signatures": ["signature", "seen_at"],
        "audit_checkpoints": ["sequence", "head_hash", "signed_at", "signature", "stored_at"],
        "tresor_commitments": ["tresor_id", "owner_id", "sequence", "statement", "updated_at"],
        "login_throttle": ["key", "failures", "last_failure", "expires_at"],
        "tresor_states": ["tresor_id", "owner_id", "lthash", "live", "deleted", "newest_physical", "newest_counter", "newest_device"],
        "idempotency_keys": ["key_hash", "fingerprint", "claim", "status", "response", "created_at"],
    ]

    static let knownIndexes: [String: SchemaCatalog.Index] = [
        "shares_open": .init(table: "shares", columns: ["patient_id", "doctor_id", "tresor_id"], unique: true, partial: true),
        "shares_doctor": .init(table: "shares", columns: ["doctor_id", "state"], unique: false, partial: false),
        "shares_patient": .init(table: "shares", columns: ["patient_id"], unique: false, partial: false),
        "heads_sequence": .init(table: "heads", columns: ["owner_id", "sequence"], unique: true, partial: false),
        "heads_tresor_sequence": .init(table: "heads", columns: ["owner_id", "tresor_id", "sequence"], unique: false, partial: false),
        "audit_patient": .init(table: "audit_log", columns: ["patient_id", "sequence"], unique: false, partial: false),
        "admin_signatures_seen": .init(table: "admin_signatures", columns: ["seen_at"], unique: false, partial: false),
        "tresor_commitments_owner": .init(table: "tresor_commitments", columns: ["owner_id"], unique: false, partial: false),
        "sessions_user": .init(table: "sessions", columns: ["user_id"], unique: false, partial: false),
        "login_throttle_expires": .init(table: "login_throttle", columns: ["expires_at"], unique: false, partial: false),
        "tresor_states_owner": .init(table: "tresor_states", columns: ["owner_id"], unique: false, partial: false),
        "shares_state_expires": .init(table: "shares", columns: ["state", "expires_at"], unique: false, partial: false),
        "shares_approval_sequence": .init(table: "shares", columns: ["approval_sequence"], unique: false, partial: false),
        "idempotency_keys_created": .init(table: "idempotency_keys", columns: ["created_at"], unique: false, partial: false),
    ]

    static func catalog(_ repo: any VaultRepository) async throws -> SchemaCatalog {
        if let sqlite = repo as? SQLiteRepository { return try await sqlite.schemaCatalog() }
        return try await #require(repo as? PostgresRepository).schemaCatalog()
    }

    @Test(arguments: Backend.allCases)
    func migrationCreatesTheKnownTablesColumnsAndIndexes(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let catalog = try await Self.catalog(repo)
            #expect(catalog.tables.mapValues { $0.map(\.name) } == Self.knownColumns)
            #expect(catalog.indexes == Self.knownIndexes)
            #expect(catalog.primaryKeys["heads"] == ["owner_id", "record_id"])
            #expect(catalog.uniqueConstraints == ["users": [["username"]], "tresors": [["owner_id", "category"]]])
            let nullable = catalog.tables["shares"]?.filter { !$0.notNull }.map(\.name)
            #expect(nullable == ["latest_grant", "approval", "approval_sequence", "reason", "expires_at", "revocation_json"])
        }
    }

    @Test
    func bothBackendsEndWithTheSameSchema() async throws {
        try await TestDatabase.with(.sqlite) { sqlite in
            let expected = try await Self.catalog(sqlite)
            try await TestDatabase.with(.postgres) { postgres in
                let actual = try await Self.catalog(postgres)
                #expect(actual.tables == expected.tables)
                #expect(actual.primaryKeys == expected.primaryKeys)
                #expect(actual.uniqueConstraints == expected.uniqueConstraints)
                #expect(actual.indexes == expected.indexes)
            }
        }
    }

    /// Databases record "v1-initial" as applied and never run it again, so its statements must stay what they
    /// were when it shipped (up to whitespace); a changed schema needs a new migration instead, appended.
    @Test(arguments: [
        (SchemaDialect.sqlite, "cd5ba70525bf037b3b799d88b373745ac9cdf200eefaac8babb853abed578ce0"),
        (SchemaDialect.postgres, "4738414b840bd7f6ba173990eda705f8ebe3cca6cd75b196440e47726de06606"),
    ])
    func shippedMigrationIsFrozen(dialect: SchemaDialect, digest: String) throws {
        let migrations = Schema.migrations(dialect)
        #expect(
            migrations.map(\.id) == [
                "v1-initial", "v2-audit-checkpoints", "v3-share-revocations", "v4-state-commitments", "v5-account-lifecycle", "v6-login-throttle",
                "v7-heads-reference-kept-by-the-store", "v8-audit-patient-links", "v9-session-credential-generations", "v10-tresor-states",
                "v11-share-indexes", "v12-idempotency-keys",
            ]
        )
        let normalized = migrations[0].statements.map { $0.split(whereSeparator: \.isWhitespace).joined(separator: " ") }.joined(separator: ";\n")
        let hex = try BLAKE2b.hash(Array(normalized.utf8)).map { String(format: "%02x", $0) }.joined()
        #expect(hex == digest)
    }

    /// The foreign keys declared on `heads`, as the engine reports them.
    static func headsForeignKeys(_ repo: any VaultRepository) async throws -> Int {
        if let sqlite = repo as? SQLiteRepository {
            return try await sqlite.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM pragma_foreign_key_list('heads')") ?? -1 }
        }
        let postgres = try #require(repo as? PostgresRepository)
        var count = -1
        for try await n in try await postgres.client.query(
            "SELECT count(*)::bigint FROM pg_constraint WHERE conrelid = 'heads'::regclass AND contype = 'f'",
            logger: postgres.logger
        ).decode(Int64.self) { count = Int(n) }
        return count
    }

    /// v7 on a database written by the previous version (its foreign key from heads to versions put back and
    /// the migration forgotten): PostgreSQL loses the key and keeps every version and head; SQLite keeps its key.
    @Test(arguments: Backend.allCases)
    func theUpgradeDropsTheHeadsForeignKeyOnPostgreSQLOnlyAndKeepsTheData(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let owner = try await Fixtures.owner(repo)
            let tresor = UUID()
            let first = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 1)
            #expect(try await repo.storeVersions(ownerID: owner, [first]) == [.stored(sequence: 1)])
            guard backend == .postgres else {
                #expect(try await Self.headsForeignKeys(repo) == 1, "SQLite keeps the declared reference")
                return
            }
            #expect(try await Self.headsForeignKeys(repo) == 0)
            try await repo.attackerExecutes(
                """
                ALTER TABLE heads ADD CONSTRAINT heads_version_id_fkey FOREIGN KEY (version_id) REFERENCES versions(version_id);
                DELETE FROM schema_migrations WHERE name = 'v7-heads-reference-kept-by-the-store'
                """
            )
            #expect(try await Self.headsForeignKeys(repo) == 1, "the previous version's schema")
            try await repo.migrate()
            #expect(try await Self.headsForeignKeys(repo) == 0)
            let newer = Fixtures.version(owner: owner, record: "r1", tresor: tresor, physical: 2)
            let other = Fixtures.version(owner: owner, record: "r2", tresor: tresor, physical: 1)
            #expect(try await repo.storeVersions(ownerID: owner, [first, newer, other]) == [.duplicate, .stored(sequence: 2), .stored(sequence: 3)])
            #expect(try await repo.changes(ownerID: owner, tresorID: nil, since: 0, limit: 10).map(\.envelope) == [newer.envelope, other.envelope])
        }
    }

    /// v8 on a database written by the previous version: its audit entries stay format 1 with their hashes
    /// (signed checkpoints pin them), and later entries chain on in format 2, each about a patient linked to
    /// the newest earlier entry about that patient, of either format (Docs/envelope-v1.md §3.1).
    @Test(arguments: Backend.allCases)
    func theUpgradeKeepsFormatOneAuditEntriesAndChainsFormatTwoOnThem(backend: Backend) async throws {
        try await TestDatabase.with(backend) { repo in
            let patient = UUID()
            // The previous version's schema: no format-2 guard, no columns, the migration not recorded.
            try await repo.attackerExecutes(
                backend == .sqlite ? "DROP TRIGGER audit_format_2" : "DROP TRIGGER audit_format_2 ON audit_log"
            )
            try await repo.attackerExecutes(
                """
                ALTER TABLE audit_log DROP COLUMN format;
                ALTER TABLE audit_log DROP COLUMN digest;
                ALTER TABLE audit_log DROP COLUMN patient_link;
                """
                    + (backend == .sqlite
                        ? "DELETE FROM grdb_migrations WHERE identifier = 'v8-audit-patient-links'"
                        : "DELETE FROM schema_migrations WHERE name = 'v8-audit-patient-links'")
            )
            var previous = AuditChain.genesis
            var old: [AuditEntry] = []
            for (n, about) in [(1, nil), (2, patient), (3, nil)] as [(UInt64, UUID?)] {
                var e = AuditEntry(
                    sequence: n,
                    at: Int64(n),
                    actor: "server",
                    action: "login",
                    patientID: about,
                    details: ["n": "\(n)"],
                    previousHash: previous,
                    hash: ""
                )
                e.hash = AuditChain.hash(of: e) ?? ""
                previous = e.hash
                old.append(e)
                let id = about.map { "'\($0.uuidString.lowercased())'" } ?? "NULL"
                try await repo.attackerExecutes(
                    "INSERT INTO audit_log (sequence, at, actor, action, patient_id, details, previous_hash, hash) VALUES "
                        + "(\(n), \(n), 'server', 'login', \(id), '{\"n\":\"\(n)\"}', '\(e.previousHash)', '\(e.hash)')"
                )
            }
            try await repo.attackerExecutes("UPDATE audit_head SET sequence = 3, hash = '\(previous)' WHERE id = 1")
            try await repo.migrate()
            try await repo.appendAudit([AuditEvent(actor: "server", action: "records.read", patientID: patient)], now: 4)

            let entries = try await repo.auditEntries(after: 0, limit: 10, patientID: nil)
            #expect(Array(entries.prefix(3)) == old, "format 1, as written")
            let new = try #require(entries.last)
            let key = try AuditBuilder.patientKey(patient, serverSecret: try await repo.serverSecret())
            let linked = AuditChain.patientLink(key: key, previous: old[1].hash)
            #expect(new.format == 2 && new.patientLink == linked && new.previousHash == old[2].hash)
            #expect(AuditChain.hash(of: new) == new.hash)
            #expect(try await repo.verifyAudit().ok)
            let links = try await repo.auditLinks(after: 0, limit: 10)
            #expect(links.prefix(3).allSatisfy { $0.format == nil && $0.digest == nil && $0.patientLink == nil })
            let link = try #require(links.last)
            #expect(link.digest == AuditChain.digest(of: new) && link.patientLink == linked)
            #expect(
                AuditChain.linkHash(sequence: 4, digest: AuditChain.digest(of: new), patientLink: linked, previousHash: old[2].hash)
                    == new.hash
            )

            // An instance of the previous version, still running, cannot append a format-1 entry after them.
            let stale =
                "INSERT INTO audit_log (sequence, at, actor, action, patient_id, details, previous_hash, hash) "
                + "VALUES (5, 5, 'server', 'login', NULL, '{}', '\(new.hash)', '\(AuditChain.genesis)')"
            await #expect(throws: (any Error).self) { try await repo.attackerExecutes(stale) }
            #expect(try await repo.auditEntries(after: 4, limit: 10, patientID: nil).isEmpty)
        }
    }
}

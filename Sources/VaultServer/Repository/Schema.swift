import Foundation
import VaultCore

/// The one schema both backends create (Docs/design.md §6): tables and indexes written once, column types
/// and append-only triggers from the dialect. Migrations are named, never edited once shipped (existing
/// databases record these names), and use SQL rather than model types.
enum Schema {
    /// One named migration as a list of single statements (PostgreSQL's extended protocol takes one at a time).
    struct Migration {
        var id: String
        var statements: [String]
        /// Run after the statements, in the same transaction: what SQL alone cannot compute.
        var compute: (@Sendable (any SQLConnection) async throws -> Void)? = nil
    }

    static func migrations(_ dialect: SchemaDialect) -> [Migration] {
        [
            Migration(id: "v1-initial", statements: v1(dialect)),
            Migration(id: "v2-audit-checkpoints", statements: v2AuditCheckpoints(dialect)),
            // The patient's signed end of a share, shown to its doctor (Docs/envelope-v1.md §3.3); and no
            // sealed keys before approval: requests filed with keys (version-1 grants) that still wait go.
            Migration(
                id: "v3-share-revocations",
                statements: ["ALTER TABLE shares ADD COLUMN revocation_json \(dialect.text)", Schema.dropPendingRequestsWithKeys]
            ),
            // The patient's newest signed state commitment per tresor (Docs/envelope-v1.md §3.4).
            Migration(id: "v4-state-commitments", statements: v4StateCommitments(dialect)),
            Migration(id: "v5-account-lifecycle", statements: v5AccountLifecycle(dialect)),
            // Login back-off shared by every instance on one database (Docs/design.md §2).
            Migration(id: "v6-login-throttle", statements: v6LoginThrottle(dialect)),
            Migration(id: "v7-heads-reference-kept-by-the-store", statements: v7HeadsReference(dialect)),
            Migration(id: "v8-audit-patient-links", statements: v8AuditPatientLinks(dialect)),
            // Sessions bound to the credentials they were made with (Docs/design.md §2).
            Migration(id: "v9-session-credential-generations", statements: v9SessionGenerations(dialect)),
            // Each tresor's head state beside its commitment, computed once from the stored heads
            // (Docs/commitment-pages.md §5).
            Migration(id: "v10-tresor-states", statements: v10TresorStates(dialect), compute: TresorStateSQL.rebuild),
            Migration(id: "v11-share-indexes", statements: v11ShareIndexes(dialect)),
            // The keys of non-idempotent requests and their first answers (Docs/design.md §6.2).
            Migration(id: "v12-idempotency-keys", statements: v12IdempotencyKeys(dialect)),
        ]
    }

    /// Deletes pending shares whose request is a version-1 grant, which always carried sealed keys
    /// (Docs/design.md §3): no key may wait for an approval anywhere. The patient's device asks again.
    static let dropPendingRequestsWithKeys = #"DELETE FROM shares WHERE state = 'pending' AND grant_json LIKE '%"version":1%'"#

    static let shareStates = ShareState.allCases.map { "'\($0.rawValue)'" }.joined(separator: ",")

    /// The tables an append-only trigger guards.
    static let appendOnly = [
        SchemaDialect.AppendOnly(trigger: "versions_append_only", table: "versions", message: "versions are append-only"),
        SchemaDialect.AppendOnly(trigger: "audit_append_only", table: "audit_log", message: "audit log is append-only"),
    ]

    static func v1(_ t: SchemaDialect) -> [String] {
        // A version's last-writer-wins key, kept on the version and copied to its record's head (Docs/design.md §5).
        let ordering = "hlc_physical \(t.int64) NOT NULL, hlc_counter \(t.int64) NOT NULL, hlc_device \(t.text) NOT NULL, deleted \(t.bool) NOT NULL"
        return statements(
            """
            CREATE TABLE meta (key \(t.text) PRIMARY KEY, value \(t.bytes) NOT NULL);
            CREATE TABLE users (
                id \(t.uuid) PRIMARY KEY,
                username \(t.text) NOT NULL UNIQUE,
                role \(t.text) NOT NULL CHECK (role IN ('patient', 'doctor')),
                status \(t.text) NOT NULL CHECK (status IN ('pending', 'active', 'rejected')),
                registration \(t.text) NOT NULL,
                certificate \(t.text),
                approval \(t.text),
                reject_reason \(t.text),
                created_at \(t.int64) NOT NULL,
                updated_at \(t.int64) NOT NULL);
            CREATE TABLE sessions (
                token_hash \(t.text) PRIMARY KEY,
                user_id \(t.uuid) NOT NULL REFERENCES users(id),
                created_at \(t.int64) NOT NULL,
                expires_at \(t.int64) NOT NULL);
            CREATE TABLE tresors (
                id \(t.uuid) PRIMARY KEY,
                owner_id \(t.uuid) NOT NULL REFERENCES users(id),
                category \(t.text) NOT NULL,
                current_epoch \(t.int64) NOT NULL CHECK (current_epoch >= 1),
                self_grant \(t.text) NOT NULL,
                updated_at \(t.int64) NOT NULL,
                UNIQUE (owner_id, category));
            CREATE TABLE shares (
                id \(t.uuid) PRIMARY KEY,
                patient_id \(t.uuid) NOT NULL REFERENCES users(id),
                doctor_id \(t.uuid) NOT NULL REFERENCES users(id),
                tresor_id \(t.uuid) NOT NULL REFERENCES tresors(id),
                category \(t.text) NOT NULL,
                state \(t.text) NOT NULL CHECK (state IN (\(shareStates))),
                grant_json \(t.text) NOT NULL,
                latest_grant \(t.text),
                approval \(t.text),
                approval_sequence \(t.int64),
                reason \(t.text),
                created_at \(t.int64) NOT NULL,
                updated_at \(t.int64) NOT NULL,
                expires_at \(t.int64));
            CREATE UNIQUE INDEX shares_open ON shares (patient_id, doctor_id, tresor_id) WHERE state IN ('pending', 'active');
            CREATE INDEX shares_doctor ON shares (doctor_id, state);
            CREATE INDEX shares_patient ON shares (patient_id);
            CREATE TABLE owner_sequences (owner_id \(t.uuid) PRIMARY KEY, last_sequence \(t.int64) NOT NULL);
            CREATE TABLE versions (
                version_id \(t.text) PRIMARY KEY,
                owner_id \(t.uuid) NOT NULL,
                record_id \(t.text) NOT NULL,
                tresor_id \(t.uuid) NOT NULL,
                epoch \(t.int64) NOT NULL,
                \(ordering),
                envelope \(t.bytes) NOT NULL);
            CREATE TABLE heads (
                owner_id \(t.uuid) NOT NULL,
                record_id \(t.text) NOT NULL,
                tresor_id \(t.uuid) NOT NULL,
                version_id \(t.text) NOT NULL REFERENCES versions(version_id),
                \(ordering),
                sequence \(t.int64) NOT NULL,
                changed_at \(t.int64) NOT NULL,
                PRIMARY KEY (owner_id, record_id));
            CREATE UNIQUE INDEX heads_sequence ON heads (owner_id, sequence);
            CREATE INDEX heads_tresor_sequence ON heads (owner_id, tresor_id, sequence);
            CREATE TABLE audit_log (
                sequence \(t.int64) PRIMARY KEY,
                at \(t.int64) NOT NULL,
                actor \(t.text) NOT NULL,
                action \(t.text) NOT NULL,
                patient_id \(t.uuid),
                details \(t.text) NOT NULL,
                previous_hash \(t.text) NOT NULL,
                hash \(t.text) NOT NULL);
            CREATE INDEX audit_patient ON audit_log (patient_id, sequence);
            CREATE TABLE audit_head (id \(t.int32) PRIMARY KEY CHECK (id = 1), sequence \(t.int64) NOT NULL, hash \(t.text) NOT NULL);
            INSERT INTO audit_head (id, sequence, hash) VALUES (1, 0, '\(AuditChain.genesis)');
            CREATE TABLE admin_signatures (signature \(t.text) PRIMARY KEY, seen_at \(t.int64) NOT NULL);
            CREATE INDEX admin_signatures_seen ON admin_signatures (seen_at);
            """
        ) + t.appendOnlyTriggers(appendOnly)
    }

    /// Admin-signed checkpoints of the audit chain (Docs/envelope-v1.md §3.1), append-only like the log
    /// they pin. `head_hash` is hex and `signature` base64url, as on the wire.
    static func v2AuditCheckpoints(_ t: SchemaDialect) -> [String] {
        [
            """
            CREATE TABLE audit_checkpoints (
                sequence \(t.int64) PRIMARY KEY,
                head_hash \(t.text) NOT NULL,
                signed_at \(t.int64) NOT NULL,
                signature \(t.text) NOT NULL,
                stored_at \(t.int64) NOT NULL)
            """
        ]
            + t.appendOnlyTriggers(
                [.init(trigger: "audit_checkpoints_append_only", table: "audit_checkpoints", message: "audit checkpoints are append-only")],
                defineFunction: false
            )
    }

    /// One row per tresor: the newest commitment, replaced (never appended) by its successor, whose
    /// sequence is one more. `statement` is the commitment's JSON as pushed.
    static func v4StateCommitments(_ t: SchemaDialect) -> [String] {
        statements(
            """
            CREATE TABLE tresor_commitments (
                tresor_id \(t.uuid) PRIMARY KEY REFERENCES tresors(id),
                owner_id \(t.uuid) NOT NULL REFERENCES users(id),
                sequence \(t.int64) NOT NULL,
                statement \(t.bytes) NOT NULL,
                updated_at \(t.int64) NOT NULL);
            CREATE INDEX tresor_commitments_owner ON tresor_commitments (owner_id);
            """
        )
    }

    /// Password changes, recovery, session names, suspension and account deletion (Docs/design.md §2).
    /// `account_credentials` holds what replaced the registration's password credentials and the recovery
    /// bundle; `account_deletions` is the one deliberate way past the versions' append-only guard: a row
    /// naming an owner lives only inside the transaction that deletes that owner's versions.
    static func v5AccountLifecycle(_ t: SchemaDialect) -> [String] {
        [
            "ALTER TABLE users ADD COLUMN suspended_at \(t.int64)",
            "ALTER TABLE users ADD COLUMN suspend_reason \(t.text)",
            "ALTER TABLE sessions ADD COLUMN device_name \(t.text)",
            "ALTER TABLE sessions ADD COLUMN last_used_at \(t.int64)",
            """
            CREATE TABLE account_credentials (
                user_id \(t.uuid) PRIMARY KEY REFERENCES users(id),
                credential_update \(t.text),
                recovery_bundle \(t.text),
                recovery_verifier \(t.text),
                updated_at \(t.int64) NOT NULL)
            """,
            "CREATE TABLE account_deletions (owner_id \(t.uuid) PRIMARY KEY)",
            "CREATE INDEX sessions_user ON sessions (user_id)",
        ] + t.versionsDeletableByOwner
    }

    /// The login back-off (Docs/design.md §2), in the database so that several instances behind a load balancer
    /// count one client's failures together. `key` is `u:` and the normalised username, `a:` and the client
    /// address (failure counts, `last_failure` the newest), or `t:` username, newline, address (a pair that
    /// logged in, exempt from the username's back-off). A row is meaningless after `expires_at`.
    static func v6LoginThrottle(_ t: SchemaDialect) -> [String] {
        [
            """
            CREATE TABLE login_throttle (
                key \(t.text) PRIMARY KEY,
                failures \(t.int64) NOT NULL,
                last_failure \(t.int64) NOT NULL,
                expires_at \(t.int64) NOT NULL)
            """,
            "CREATE INDEX login_throttle_expires ON login_throttle (expires_at)",
        ]
    }

    /// On PostgreSQL, `heads.version_id` stops being a declared foreign key. The store writes a head only
    /// for a version it inserted in the same transaction, so the reference holds by construction; the
    /// constraint's check, a query per head that also locks the version's row, cost 2-3 ms of every batch
    /// of 500 (Docs/benchmarks.md §2). SQLite keeps it: there the check is one probe of the key.
    /// `IF EXISTS`: an operator may have dropped it already, and the goal is the same.
    static func v7HeadsReference(_ t: SchemaDialect) -> [String] {
        switch t {
        case .sqlite: []
        // Bounded wait for the table locks: behind a long read, the migration fails and is tried again
        // rather than stall every query queued behind it; the later migrations of the same transaction wait as before.
        case .postgres:
            [
                "SET LOCAL lock_timeout = '5s'", "ALTER TABLE heads DROP CONSTRAINT IF EXISTS heads_version_id_fkey",
                "SET LOCAL lock_timeout TO DEFAULT",
            ]
        }
    }

    /// Audit entries of format 2 (Docs/envelope-v1.md §3.1): each entry about a patient links to the newest
    /// earlier entry about that patient, and the chain's hash covers that link and a digest of the contents,
    /// both stored so that `GET /v1/access-log/chain` lists them. Entries written before keep format 1 and
    /// their hashes, which signed checkpoints pin; no stored row changes, so the append-only guard stays.
    /// From here on a new entry must be of format 2: an instance of an older version would append format-1
    /// entries after format-2 ones, which a patient's device takes for a downgrade (Docs/operations.md §6).
    static func v8AuditPatientLinks(_ t: SchemaDialect) -> [String] {
        let refused = "NEW.format <> 2 OR NEW.digest IS NULL"
        let message = "audit entries are written in format 2 since v8-audit-patient-links"
        let guardStatements: [String] =
            switch t {
            case .sqlite:
                ["CREATE TRIGGER audit_format_2 BEFORE INSERT ON audit_log WHEN \(refused) BEGIN SELECT RAISE(ABORT, '\(message)'); END"]
            case .postgres:
                [
                    """
                    CREATE OR REPLACE FUNCTION carevault_audit_format_2() RETURNS trigger LANGUAGE plpgsql AS $$
                        BEGIN IF \(refused) THEN RAISE EXCEPTION '\(message)'; END IF; RETURN NEW; END $$
                    """,
                    "CREATE TRIGGER audit_format_2 BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION carevault_audit_format_2()",
                ]
            }
        return [
            "ALTER TABLE audit_log ADD COLUMN format \(t.int64) NOT NULL DEFAULT 1",
            "ALTER TABLE audit_log ADD COLUMN digest \(t.text)",
            "ALTER TABLE audit_log ADD COLUMN patient_link \(t.text)",
        ] + guardStatements
    }

    /// A counter per account that every credential change (password change, recovery) raises, and on each
    /// session the value it was made under: a session whose value is not the account's is refused, so a
    /// change ends every session made with older credentials, one made while the change committed included
    /// (Docs/design.md §2). Existing rows start at 0 on both sides and stay valid.
    static func v9SessionGenerations(_ t: SchemaDialect) -> [String] {
        [
            "ALTER TABLE users ADD COLUMN credential_generation \(t.int64) NOT NULL DEFAULT 0",
            "ALTER TABLE sessions ADD COLUMN credential_generation \(t.int64) NOT NULL DEFAULT 0",
        ]
    }

    /// One row per tresor that has a head: the LtHash16 state of its heads (2048 bytes, lanes little-endian,
    /// Docs/envelope-v1.md §3.4), how many are live and how many tombstones, and the newest HLC among them.
    /// No foreign key to `tresors`, like `heads`: the store writes both in one transaction.
    static func v10TresorStates(_ t: SchemaDialect) -> [String] {
        statements(
            """
            CREATE TABLE tresor_states (
                tresor_id \(t.uuid) PRIMARY KEY,
                owner_id \(t.uuid) NOT NULL,
                lthash \(t.bytes) NOT NULL,
                live \(t.int64) NOT NULL,
                deleted \(t.int64) NOT NULL,
                newest_physical \(t.int64) NOT NULL,
                newest_counter \(t.int64) NOT NULL,
                newest_device \(t.text) NOT NULL);
            CREATE INDEX tresor_states_owner ON tresor_states (owner_id);
            """
        )
    }

    /// Indexes for two reads that scanned every share: the sweep of shares whose end date passed, which
    /// runs before share reads (`ShareSQL.due`: by state and expiry), and the highest approval sequence
    /// (`ShareSQL.maxApprovalSequence`). The clinic simulation found the sweep the statement PostgreSQL spent
    /// the most time on, at 1.6 ms a call with 4,000 shares (Docs/benchmarks.md §9).
    static func v11ShareIndexes(_ t: SchemaDialect) -> [String] {
        statements(
            """
            CREATE INDEX shares_state_expires ON shares (state, expires_at);
            CREATE INDEX shares_approval_sequence ON shares (approval_sequence);
            """
        )
    }

    static func v12IdempotencyKeys(_ t: SchemaDialect) -> [String] {
        statements(
            """
            CREATE TABLE idempotency_keys (
                key_hash \(t.bytes) PRIMARY KEY,
                fingerprint \(t.bytes) NOT NULL,
                claim \(t.bytes) NOT NULL,
                status \(t.int64),
                response \(t.bytes),
                created_at \(t.int64) NOT NULL
            );
            CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
            """
        )
    }

    /// Splits SQL into statements at semicolons that end a line.
    static func statements(_ sql: String) -> [String] {
        sql.components(separatedBy: ";\n").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .map { $0.hasSuffix(";") ? String($0.dropLast()) : $0 }.filter { !$0.isEmpty }
    }
}

extension SchemaDialect {
    /// Replaces the versions' delete guard, under its shipped name, by one that lets a row go only while
    /// `account_deletions` names its owner; updates stay refused (Docs/design.md §2).
    var versionsDeletableByOwner: [String] {
        let exempt = "EXISTS (SELECT 1 FROM account_deletions WHERE owner_id = OLD.owner_id)"
        switch self {
        case .sqlite:
            return [
                "DROP TRIGGER versions_append_only_d",
                "CREATE TRIGGER versions_append_only_d BEFORE DELETE ON versions WHEN NOT \(exempt) "
                    + "BEGIN SELECT RAISE(ABORT, 'versions are append-only'); END",
            ]
        case .postgres:
            return [
                """
                CREATE FUNCTION carevault_versions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                        IF TG_OP = 'DELETE' AND \(exempt) THEN RETURN OLD; END IF;
                        RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
                    END $$
                """,
                "DROP TRIGGER versions_append_only ON versions",
                "CREATE TRIGGER versions_append_only BEFORE UPDATE OR DELETE ON versions FOR EACH ROW "
                    + "EXECUTE FUNCTION carevault_versions_append_only()",
            ]
        }
    }
}

import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// Pins the signed statements to their field-by-field layout (Docs/envelope-v1.md §2, §3), written out here
/// without the shared writer helpers, so a change to a helper cannot silently change what old signatures
/// cover; and checks that the shared signing step covers every field.
@Suite("Statement layouts")
struct StatementLayoutTests {
    let f: TrustFixture
    let kdf = KDFParameters.interactive
    let salt = Salt.random()

    init() throws { f = try TrustFixture() }

    func registration() throws -> RegistrationRequest {
        let keys = PasswordKeys(loginKey: .generate(), wrappingKey: .generate())
        return try RegistrationRequest.make(
            identity: f.patient,
            username: "Alice",
            role: .patient,
            passwordKeys: keys,
            kdf: kdf,
            salt: salt,
            requestedAt: 1_700_000_000_123
        )
    }

    @Test func certificateStatementIsItsFieldsInOrder() throws {
        let c = f.patientCert
        var w = CanonicalWriter(domain: "CareVault-certificate-v1")
        w.append(UInt8(1))
        w.append(c.userID)
        w.append("alice")
        w.append("patient")
        w.append(f.patient.signing.publicKey)
        w.append(f.patient.box.publicKey)
        w.append(Int64(1_700_000_000_000))
        #expect(c.statementBytes == w.bytes)
        #expect(f.admin.publicKey.isValidSignature(c.signature, for: w.bytes))
    }

    @Test func registrationStatementIsItsFieldsInOrder() throws {
        let r = try registration()
        var w = CanonicalWriter(domain: "CareVault-registration-v1")
        w.append(UInt8(1))
        w.append(r.userID)
        w.append("alice")
        w.append("patient")
        w.append(f.patient.signing.publicKey)
        w.append(f.patient.box.publicKey)
        w.append(kdf.algorithm)
        w.append(kdf.opsLimit)
        w.append(kdf.memLimitBytes)
        w.append(salt)
        w.append(r.loginVerifier)
        w.append(r.keyBundle.userID)
        w.append(r.keyBundle.nonce)
        w.append(r.keyBundle.ciphertext)
        w.append(Int64(1_700_000_000_123))
        #expect(r.statementBytes == w.bytes)
        try r.verify()
    }

    @Test func keyBundleAssociatedDataBindsTheParametersAndSalt() throws {
        let r = try registration()
        var w = CanonicalWriter(domain: "CareVault-keybundle-v1")
        w.append(UInt8(1))
        w.append(r.userID)
        w.append(kdf.algorithm)
        w.append(kdf.opsLimit)
        w.append(kdf.memLimitBytes)
        w.append(salt)
        #expect(r.keyBundle.associatedData() == w.bytes)
    }

    /// A server (or anyone on the way) that changes any signed field after signing is caught.
    @Test func changingAnySignedFieldBreaksTheSignature() throws {
        let edits: [(String, (inout Certificate) -> Void)] = [
            ("user id", { $0.userID = UUID() }),
            ("username", { $0.username = "mallory" }),
            ("role", { $0.role = .doctor }),
            ("signing key", { $0.signingKey = SigningKeyPair.generate().publicKey }),
            ("box key", { $0.boxKey = BoxKeyPair.generate().publicKey }),
            ("issued at", { $0.issuedAt += 1 }),
        ]
        for (field, edit) in edits {
            var c = f.patientCert
            edit(&c)
            #expect(throws: TrustError.invalidSignature(what: "certificate"), "\(field)") { try c.verify(adminKey: f.admin.publicKey) }
        }
        var r = try registration()
        r.kdf = .moderate
        r.keyBundle.kdf = .moderate
        #expect(throws: TrustError.invalidSignature(what: "registration")) { try r.verify() }
    }

    @Test func anUnsignedStatementVerifiesUnderNoKey() throws {
        var c = f.patientCert
        c.signature = .unsigned
        #expect(throws: TrustError.invalidSignature(what: "certificate")) { try c.verify(adminKey: f.admin.publicKey) }
        #expect(c.signed(by: f.admin) == f.patientCert)
    }
}

/// The audit chain's hash covers every field of an entry and the previous hash (Docs/design.md §6).
@Suite("Audit chain hash")
struct AuditChainHashTests {
    struct Entry: AuditChainEntry {
        var sequence: UInt64 = 7
        var at: UnixMillis = 1_700_000_000_000
        var actor = "admin"
        var action = "share.approved"
        var patientID: UUID? = UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")
        var details = ["share": "s1", "category": "care-card"]
        var previousHash = AuditChain.genesis
    }

    @Test func hashIsTheFieldsInOrder() throws {
        let e = Entry()
        var w = CanonicalWriter(domain: "CareVault-audit-v1")
        w.append(UInt64(7))
        w.append(Int64(1_700_000_000_000))
        w.append("admin")
        w.append("share.approved")
        w.append(Optional("6f9619ff-8b86-d011-b42d-00c04fc964ff"))
        w.append(UInt32(2))
        for (k, v) in [("category", "care-card"), ("share", "s1")] {
            w.append(k)
            w.append(v)
        }
        w.append(AuditChain.genesis)
        let expected = Hex.encode(try BLAKE2b.hash(w.bytes))
        #expect(AuditChain.hash(of: e) == expected)
    }

    @Test func everyFieldChangesTheHash() {
        let base = AuditChain.hash(of: Entry())
        let edits: [(inout Entry) -> Void] = [
            { $0.sequence += 1 }, { $0.at += 1 }, { $0.actor = "server" }, { $0.action = "share.rejected" },
            { $0.patientID = nil }, { $0.details["share"] = "s2" }, { $0.previousHash = String(repeating: "1", count: 64) },
        ]
        for edit in edits {
            var e = Entry()
            edit(&e)
            #expect(AuditChain.hash(of: e) != base)
        }
    }
}

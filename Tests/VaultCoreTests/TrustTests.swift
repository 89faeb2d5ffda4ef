import Foundation
import Testing
import VaultCrypto

@testable import VaultCore

/// A small world: an admin, a patient and a doctor with certificates.
struct TrustFixture {
    let admin = SigningKeyPair.generate()
    let patient = Identity.generate()
    let doctor = Identity.generate()
    let patientCert: Certificate
    let doctorCert: Certificate

    init() throws {
        patientCert = try Certificate.issue(
            userID: patient.userID,
            username: "Alice",
            role: .patient,
            signingKey: patient.signing.publicKey,
            boxKey: patient.box.publicKey,
            issuedAt: 1_700_000_000_000,
            adminKey: admin
        )
        doctorCert = try Certificate.issue(
            userID: doctor.userID,
            username: "dr.bob",
            role: .doctor,
            signingKey: doctor.signing.publicKey,
            boxKey: doctor.box.publicKey,
            issuedAt: 1_700_000_000_000,
            adminKey: admin
        )
    }
}

@Suite("Certificates")
struct CertificateTests {
    @Test func validCertificateVerifiesAndUsernameIsNormalised() throws {
        let f = try TrustFixture()
        #expect(f.patientCert.username == "alice")
        try f.patientCert.verify(adminKey: f.admin.publicKey, userID: f.patient.userID, username: "ALICE", role: .patient)
        let json = try JSONEncoder().encode(f.patientCert)
        try JSONDecoder().decode(Certificate.self, from: json).verify(adminKey: f.admin.publicKey)
    }

    @Test func rejectsAnotherUserAnotherRoleAndANonAdminSigner() throws {
        let f = try TrustFixture()
        #expect(throws: TrustError.mismatch(what: "certificate", field: "user id")) {
            try f.patientCert.verify(adminKey: f.admin.publicKey, userID: f.doctor.userID)
        }
        #expect(throws: TrustError.mismatch(what: "certificate", field: "username")) {
            try f.patientCert.verify(adminKey: f.admin.publicKey, username: "dr.bob")
        }
        #expect(throws: TrustError.wrongRole(expected: .doctor, actual: .patient)) {
            try f.patientCert.verify(adminKey: f.admin.publicKey, role: .doctor)
        }
        // Signed by someone other than the pinned admin (e.g. a server minting its own certificates).
        let rogue = SigningKeyPair.generate()
        let forged = try Certificate.issue(
            userID: f.doctor.userID,
            username: "dr.bob",
            role: .doctor,
            signingKey: rogue.publicKey,
            boxKey: BoxKeyPair.generate().publicKey,
            issuedAt: 1,
            adminKey: rogue
        )
        #expect(throws: TrustError.invalidSignature(what: "certificate")) { try forged.verify(adminKey: f.admin.publicKey) }
        // A genuine certificate whose role or keys were edited afterwards.
        for edit in [
            { (c: inout Certificate) in c.role = .doctor }, { $0.boxKey = BoxKeyPair.generate().publicKey },
            { $0.username = "mallory" }, { $0.issuedAt += 1 }, { $0.userID = UUID() },
        ] {
            var c = f.patientCert
            edit(&c)
            #expect(throws: TrustError.invalidSignature(what: "certificate")) { try c.verify(adminKey: f.admin.publicKey) }
        }
    }

    @Test func usernamesAreValidated() throws {
        for bad in ["ab", "a b", "émile", String(repeating: "x", count: 33), "-lead", ""] {
            #expect(throws: TrustError.invalidUsername(bad)) { try Username.normalize(bad) }
        }
        #expect(try Username.normalize("Dr.Who_2") == "dr.who_2")
    }
}

@Suite("Approvals")
struct ApprovalTests {
    @Test func registrationApprovalCoversExactlyItsCertificate() throws {
        let f = try TrustFixture()
        let approval = Approval.registration(f.patientCert, issuedAt: 5, sequence: 1, adminKey: f.admin)
        try approval.verify(adminKey: f.admin.publicKey, kind: .registration, subjectID: f.patient.userID, statementHash: f.patientCert.statementHash)
        #expect(throws: TrustError.mismatch(what: "approval", field: "subject")) {
            try approval.verify(
                adminKey: f.admin.publicKey,
                kind: .registration,
                subjectID: f.doctor.userID,
                statementHash: f.patientCert.statementHash
            )
        }
        #expect(throws: TrustError.hashMismatch(what: "approval")) {
            try approval.verify(
                adminKey: f.admin.publicKey,
                kind: .registration,
                subjectID: f.patient.userID,
                statementHash: f.doctorCert.statementHash
            )
        }
        #expect(throws: TrustError.mismatch(what: "approval", field: "kind")) {
            try approval.verify(adminKey: f.admin.publicKey, kind: .share, subjectID: f.patient.userID, statementHash: f.patientCert.statementHash)
        }
    }

    @Test func shareApprovalCannotBeReplayedOntoAnotherShareOrForged() throws {
        let f = try TrustFixture()
        let tresor = Tresor.create(ownerID: f.patient.userID, category: "interventions")
        let grant = try Grant.make(patient: f.patient, member: f.doctorCert, adminKey: f.admin.publicKey, tresor: tresor, createdAt: 10)
        let shareID = UUID()
        let approval = Approval.share(id: shareID, grant: grant, issuedAt: 11, sequence: 2, adminKey: f.admin)
        try approval.verifyShare(adminKey: f.admin.publicKey, shareID: shareID, grant: grant)

        // Replayed onto another share of the same grant, or onto another grant.
        #expect(throws: TrustError.mismatch(what: "approval", field: "subject")) {
            try approval.verifyShare(adminKey: f.admin.publicKey, shareID: UUID(), grant: grant)
        }
        let other = try Grant.make(
            patient: f.patient,
            member: f.doctorCert,
            adminKey: f.admin.publicKey,
            tresor: Tresor.create(ownerID: f.patient.userID, category: "assessments"),
            createdAt: 10
        )
        #expect(throws: TrustError.self) { try approval.verifyShare(adminKey: f.admin.publicKey, shareID: shareID, grant: other) }
        // Signed by a non-admin key.
        let forged = Approval.share(id: shareID, grant: grant, issuedAt: 11, sequence: 2, adminKey: .generate())
        #expect(throws: TrustError.invalidSignature(what: "approval")) {
            try forged.verifyShare(adminKey: f.admin.publicKey, shareID: shareID, grant: grant)
        }
        // A genuine approval edited after signing.
        var edited = approval
        edited.sequence += 1
        #expect(throws: TrustError.invalidSignature(what: "approval")) {
            try edited.verifyShare(adminKey: f.admin.publicKey, shareID: shareID, grant: grant)
        }
    }
}

@Suite("Grants and tresors")
struct GrantTests {
    @Test func doctorOpensExactlyTheGrantedEpochKeys() throws {
        let f = try TrustFixture()
        var tresor = Tresor.create(ownerID: f.patient.userID, category: "interventions")
        tresor.rotate()
        #expect(tresor.currentEpoch == 2)
        let grant = try Grant.make(
            patient: f.patient,
            member: f.doctorCert,
            adminKey: f.admin.publicKey,
            tresor: tresor,
            createdAt: 1,
            expiresAt: 100
        )
        #expect(grant.epochs == [1, 2])
        let opened = try grant.openKeys(member: f.doctor, patient: f.patientCert, adminKey: f.admin.publicKey, now: 50)
        #expect(opened.id == tresor.id)
        #expect(opened.keys[1] == tresor.keys[1] && opened.keys[2] == tresor.keys[2])
        #expect(throws: TrustError.expired(what: "grant")) {
            try grant.openKeys(member: f.doctor, patient: f.patientCert, adminKey: f.admin.publicKey, now: 100)
        }
        // Someone else cannot open it, even the patient's own identity.
        #expect(throws: TrustError.mismatch(what: "grant", field: "member")) {
            try grant.openKeys(member: f.patient, patient: f.patientCert, adminKey: f.admin.publicKey)
        }
    }

    @Test func grantNotSignedByThePatientIsRejected() throws {
        let f = try TrustFixture()
        let tresor = Tresor.create(ownerID: f.patient.userID, category: "interventions")
        // A server (or anyone) builds a grant for the patient's tresor with its own signing key.
        let impostor = Identity(userID: f.patient.userID, signing: .generate(), box: .generate(), recordIDKey: .generate())
        let forged = try Grant.make(patient: impostor, member: f.doctorCert, adminKey: f.admin.publicKey, tresor: tresor, createdAt: 1)
        #expect(throws: TrustError.invalidSignature(what: "grant")) {
            try forged.openKeys(member: f.doctor, patient: f.patientCert, adminKey: f.admin.publicKey)
        }
    }

    /// Epochs count from 1 and a grant lists them strictly ascending; a version-2 self-grant's tresor
    /// version counts from 1 (Docs/envelope-v1.md §3, §3.4), even when the patient's key signed otherwise.
    @Test func grantEpochsAndSelfGrantVersionsCountFromOne() throws {
        let f = try TrustFixture()
        var tresor = Tresor.create(ownerID: f.patient.userID, category: "interventions")
        tresor.rotate()
        let genuine = try Grant.make(patient: f.patient, member: f.doctorCert, adminKey: f.admin.publicKey, tresor: tresor, createdAt: 1)
        try genuine.verify(patient: f.patientCert, adminKey: f.admin.publicKey)
        for epochs: [UInt32] in [[0, 1], [2, 1], [1, 1]] {
            var g = genuine
            g.epochs = epochs
            g = g.signed(by: f.patient.signing)
            #expect(throws: TrustError.malformed(what: "grant", reason: "epochs count from 1, strictly ascending")) {
                try g.verify(patient: f.patientCert, adminKey: f.admin.publicKey)
            }
        }
        var own = try Grant.make(patient: f.patient, member: f.patientCert, adminKey: f.admin.publicKey, tresor: tresor, createdAt: 1)
        _ = try own.openSelfGrant(identity: f.patient, certificate: f.patientCert, adminKey: f.admin.publicKey)
        own.tresorVersion = 0
        own = own.signed(by: f.patient.signing)
        #expect(throws: TrustError.malformed(what: "self-grant", reason: "tresor versions count from 1")) {
            try own.openSelfGrant(identity: f.patient, certificate: f.patientCert, adminKey: f.admin.publicKey)
        }
    }

    @Test func grantSignedOverOtherSealedKeysIsRejected() throws {
        let f = try TrustFixture()
        let tresor = Tresor.create(ownerID: f.patient.userID, category: "interventions")
        let genuine = try Grant.make(patient: f.patient, member: f.doctorCert, adminKey: f.admin.publicKey, tresor: tresor, createdAt: 1)
        // Swap in keys the server made up, sealed to the doctor: the signature covers the hash of the sealed keys.
        let fake = Tresor.create(ownerID: f.patient.userID, category: "interventions")
        let other = try Grant.make(patient: f.patient, member: f.doctorCert, adminKey: f.admin.publicKey, tresor: fake, createdAt: 1)
        var swapped = genuine
        swapped.sealedKeys = other.sealedKeys
        #expect(throws: TrustError.invalidSignature(what: "grant")) {
            try swapped.openKeys(member: f.doctor, patient: f.patientCert, adminKey: f.admin.publicKey)
        }
        // Sealed keys of the assessments tresor under a correctly signed statement naming interventions.
        let assessments = Tresor.create(ownerID: f.patient.userID, category: "assessments")
        let a = try Grant.make(patient: f.patient, member: f.doctorCert, adminKey: f.admin.publicKey, tresor: assessments, createdAt: 1)
        var relabelled = genuine
        relabelled.sealedKeys = a.sealedKeys
        relabelled.signature = f.patient.signing.sign(relabelled.statementBytes)
        #expect(throws: TrustError.mismatch(what: "grant keys", field: "tresor")) {
            try relabelled.openKeys(member: f.doctor, patient: f.patientCert, adminKey: f.admin.publicKey)
        }
    }

    @Test func grantToASubstitutedKeyIsRefusedBeforeSealing() throws {
        let f = try TrustFixture()
        // The server hands out a "doctor certificate" carrying its own box key, not signed by the admin.
        var substituted = f.doctorCert
        substituted.boxKey = BoxKeyPair.generate().publicKey
        #expect(throws: TrustError.invalidSignature(what: "certificate")) {
            try Grant.make(
                patient: f.patient,
                member: substituted,
                adminKey: f.admin.publicKey,
                tresor: Tresor.create(ownerID: f.patient.userID, category: "interventions"),
                createdAt: 1
            )
        }
    }

    @Test func tresorIdsAreDeterministicPerOwnerAndCategory() {
        let owner = UUID()
        #expect(Tresor.id(ownerID: owner, category: "interventions") == Tresor.create(ownerID: owner, category: "interventions").id)
        #expect(Tresor.id(ownerID: owner, category: "interventions") != Tresor.id(ownerID: owner, category: "assessments"))
        #expect(Tresor.id(ownerID: owner, category: "interventions") != Tresor.id(ownerID: UUID(), category: "interventions"))
        let a = Tresor.create(ownerID: owner, category: "x")
        let b = Tresor.create(ownerID: owner, category: "x")
        #expect(a.keys[1] != b.keys[1], "epoch keys are random")
        #expect(!String(describing: a).contains(Hex.encode(a.currentKey.copyBytes())))
    }
}

@Suite("Key bundle and password keys")
struct KeyBundleTests {
    let params = KDFParameters.interactive

    @Test func rightPasswordRestoresTheSameIdentity() async throws {
        let identity = Identity.generate()
        let salt = Salt.random()
        let keys = try await PasswordKeys.derive(password: "hunter2 but longer", salt: salt, parameters: params)
        let bundle = KeyBundle.seal(identity, wrappingKey: keys.wrappingKey, kdf: params, salt: salt)
        let wire = try JSONDecoder().decode(KeyBundle.self, from: JSONEncoder().encode(bundle))
        let (restored, again) = try await wire.open(password: "hunter2 but longer")
        #expect(restored.userID == identity.userID)
        #expect(restored.signing.publicKey == identity.signing.publicKey)
        #expect(restored.box.publicKey == identity.box.publicKey)
        #expect(restored.recordIDKey == identity.recordIDKey)
        #expect(again.loginVerifier == keys.loginVerifier)
        #expect(keys.loginKey != keys.wrappingKey)
    }

    @Test func wrongPasswordIsAWrongPasswordErrorNotGarbage() async throws {
        let salt = Salt.random()
        let keys = try await PasswordKeys.derive(password: "right", salt: salt, parameters: params)
        let bundle = KeyBundle.seal(.generate(), wrappingKey: keys.wrappingKey, kdf: params, salt: salt)
        await #expect(throws: TrustError.wrongPassword) { try await bundle.open(password: "wrong") }
        #expect(try await PasswordKeys.derive(password: "wrong", salt: salt, parameters: params).loginVerifier != keys.loginVerifier)
    }

    @Test func bundleAlteredOnTheServerDoesNotOpen() async throws {
        let salt = Salt.random()
        let keys = try await PasswordKeys.derive(password: "pw", salt: salt, parameters: params)
        let bundle = KeyBundle.seal(.generate(), wrappingKey: keys.wrappingKey, kdf: params, salt: salt)
        var otherUser = bundle
        otherUser.userID = UUID()
        #expect(throws: TrustError.wrongPassword) { try otherUser.open(wrappingKey: keys.wrappingKey) }
        var stronger = bundle
        stronger.kdf = try KDFParameters(opsLimit: 3, memLimitBytes: params.memLimitBytes)
        #expect(throws: TrustError.wrongPassword) { try stronger.open(wrappingKey: keys.wrappingKey) }
        var flipped = bundle
        var raw = try Base64URL.decode(flipped.ciphertext)
        raw[0] ^= 1
        flipped.ciphertext = Base64URL.encode(raw)
        #expect(throws: TrustError.wrongPassword) { try flipped.open(wrappingKey: keys.wrappingKey) }
    }

    @Test func weakenedParametersFromTheServerAreRefusedBeforeAnyWork() async throws {
        // A server that serves a bundle claiming 1 pass and 8 KiB: the JSON decoder itself refuses it.
        let salt = Salt.random()
        let keys = try await PasswordKeys.derive(password: "pw", salt: salt, parameters: params)
        let bundle = KeyBundle.seal(.generate(), wrappingKey: keys.wrappingKey, kdf: params, salt: salt)
        var json = try JSONSerialization.jsonObject(with: JSONEncoder().encode(bundle)) as! [String: Any]
        json["kdf"] = ["algorithm": "argon2id13", "opsLimit": 1, "memLimitBytes": 8192]
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(KeyBundle.self, from: JSONSerialization.data(withJSONObject: json)) }
        await #expect(throws: CryptoError.self) {
            try await PasswordKeys.derive(password: "pw", salt: salt, parameters: KDFParameters(opsLimit: 1, memLimitBytes: 8192))
        }
    }
}

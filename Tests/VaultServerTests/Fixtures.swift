import Foundation
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// Users, statements and rows for tests, made with the real domain code.
enum Fixtures {
    /// A registration made without Argon2 (random password keys), for repository tests.
    static func registration(
        _ username: String,
        role: Role,
        identity: Identity = .generate(),
        keys: PasswordKeys = PasswordKeys(loginKey: .generate(), wrappingKey: .generate())
    ) throws -> RegistrationRequest {
        try RegistrationRequest.make(
            identity: identity,
            username: username,
            role: role,
            passwordKeys: keys,
            kdf: .interactive,
            salt: .random(),
            requestedAt: Date().unixMillis
        )
    }

    static func userRow(_ username: String, role: Role = .patient, id: Identity = .generate()) throws -> UserRow {
        let r = try registration(username, role: role, identity: id)
        return UserRow(
            id: r.userID,
            username: r.username,
            role: role,
            status: .pending,
            registration: r,
            certificate: nil,
            approval: nil,
            rejectReason: nil,
            createdAt: 1,
            updatedAt: 1
        )
    }

    /// An owner the store accepts: a registered account (the store refuses versions of an owner without one).
    static func owner(_ repo: any VaultRepository) async throws -> UUID {
        let row = try userRow("own-\(UUID().uuidString.prefix(8).lowercased())")
        try await repo.insertUser(row, audit: audit)
        return row.id
    }

    static func version(
        owner: UUID,
        record: String,
        tresor: UUID,
        physical: Int64,
        counter: Int64 = 0,
        device: String = "d1",
        deleted: Bool = false,
        payload: String = "x"
    ) -> VersionRow {
        let json = Array(#"{"record":"\#(record)","t":\#(physical),"c":\#(counter),"d":"\#(device)","p":"\#(payload)","x":\#(deleted)}"#.utf8)
        return VersionRow(
            versionID: Hex.encode(try! BLAKE2b.hash(json)),
            ownerID: owner,
            recordID: recordID(record),
            tresorID: tresor,
            epoch: 1,
            hlcPhysical: physical,
            hlcCounter: counter,
            hlcDevice: device,
            deleted: deleted,
            envelope: json
        )
    }

    /// The record id a test names `name`: 64 hex digits, as every pushed envelope's (a head's element in its
    /// tresor's state is made of it, Docs/envelope-v1.md §3.4); a name that is one already stays as it is.
    static func recordID(_ name: String) -> String {
        name.count == 64 && (try? Hex.decode(name)) != nil ? name : Hex.encode(try! BLAKE2b.hash(Array("record \(name)".utf8)))
    }

    static let audit = AuditEvent(actor: "test", action: "test")
}

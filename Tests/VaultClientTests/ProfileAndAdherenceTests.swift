import Foundation
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultTestSupport

@testable import VaultClient

@Suite("Client: profile files and adherence")
struct ProfileAndAdherenceTests {
    @Test func secretsAreOwnerOnlyAndLogoutErasesTheRememberedKey() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let device = try world.device("a")
            _ = try await device.accounts.register(username: "hana", password: "long enough pw", role: .patient)
            // Before approval the keys cannot be used.
            await #expect(throws: ClientError.self) { _ = try await device.accounts.unlock(password: "long enough pw") }
            try await world.approveAll()
            let account = try await device.accounts.login(username: "hana", password: "long enough pw", remember: true)
            let vault = try PatientVault(account: account, transport: device.transport, adminKey: world.admin.publicKey)
            try await vault.addActivity(try Sample.activity("walk"))
            let store = account.store
            for file in [store.profileURL, store.sessionURL, store.deviceKeyURL, store.storeURL] {
                #expect(SecureFiles.permissions(file) == 0o600, "\(file.lastPathComponent)")
            }
            #expect(SecureFiles.permissions(store.folder) == 0o700)
            // The keyring is a sealed row of the database, not a file of its own.
            #expect(!FileManager.default.fileExists(atPath: store.keyringURL.path))
            // Nothing stored in the clear: no title in the database (with the keyring) or the profile.
            for file in [store.storeURL, store.profileURL] {
                let bytes = try Data(contentsOf: file)
                #expect(bytes.range(of: Data("Walk".utf8)) == nil, "\(file.lastPathComponent) holds plaintext")
            }
            _ = try await device.accounts.unlock(password: nil)
            await #expect(throws: ClientError.self) {
                // A wrong password cannot unlock once the remembered key is gone.
                try? FileManager.default.removeItem(at: store.deviceKeyURL)
                _ = try await device.accounts.unlock(password: "wrong password")
            }
            _ = try await device.accounts.login(username: "hana", password: "long enough pw", remember: true)
            try await device.accounts.logout()
            #expect(!FileManager.default.fileExists(atPath: store.deviceKeyURL.path))
            #expect(!FileManager.default.fileExists(atPath: store.sessionURL.path))
            await #expect(throws: ClientError.self) { _ = try await device.accounts.unlock(password: nil) }
            _ = try await device.accounts.unlock(password: "long enough pw")
        }
    }

    @Test func adherenceCountsOccurrencesAgainstRecordedOutcomes() throws {
        let utc = TimeZone(identifier: "UTC")!
        let start = Date(unixMillis: 1_767_254_400_000)  // 2026-01-01 08:00 UTC
        let twice = try Activity(
            id: "pill",
            title: "Pill",
            category: "interventions",
            schedule: Schedule.dailyAtTimes(
                start: Date(unixMillis: 1_767_225_600_000),
                end: nil,
                times: [DateComponents(hour: 8), DateComponents(hour: 20)],
                timeZone: utc
            ),
            createdAt: start
        )
        let from = Date(unixMillis: 1_767_225_600_000)
        let to = from.addingTimeInterval(3 * 86_400)
        let events = try twice.schedule.events(from: from, to: to)
        #expect(events.count == 6)
        let done = [events[0], events[1], events[4]].map {
            Outcome(activityID: "pill", occurrence: $0.occurrence, values: [OutcomeValue(value: .boolean(true), createdAt: start)], createdAt: start)
        }
        // An outcome whose only value was removed does not count.
        var removed = Outcome(
            activityID: "pill",
            occurrence: events[2].occurrence,
            values: [OutcomeValue(id: "v", value: .boolean(true), createdAt: start)],
            createdAt: start
        )
        removed.removeValue(id: "v", at: start)
        let rows = try Adherence.rows(activities: [twice], outcomes: done + [removed], from: from, to: to, timeZone: utc)
        #expect(rows.count == 1)
        #expect(rows[0].expected == 6 && rows[0].completed == 3 && rows[0].ratio == 0.5)
        #expect(rows[0].days.map(\.date) == ["2026-01-01", "2026-01-02", "2026-01-03"])
        #expect(rows[0].days.map(\.completed) == [2, 0, 1])
    }
}

@Suite("Client: files written where the user chose")
struct SecureFilesTests {
    @Test func writingIntoAnExistingFolderLeavesItsModeAlone() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cv-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(at: dir) }
        try SecureFiles.write(Data("x".utf8), to: dir.appendingPathComponent("export.json"))
        #expect(SecureFiles.permissions(dir) == 0o755, "an export must not make the user's folder private")
        #expect(SecureFiles.permissions(dir.appendingPathComponent("export.json")) == 0o600)
        let fresh = dir.appendingPathComponent("new/deeper")
        try SecureFiles.write(Data("y".utf8), to: fresh.appendingPathComponent("f"))
        #expect(SecureFiles.permissions(fresh) == 0o700, "folders CareVault creates are private")
    }

    @Test func plainHTTPIsRefusedBeyondLoopback() throws {
        #expect(throws: ClientError.self) { try Transport(baseURL: "http://vault.example.org:8080") }
        _ = try Transport(baseURL: "http://127.0.0.1:8080")
        _ = try Transport(baseURL: "https://vault.example.org")
    }
}

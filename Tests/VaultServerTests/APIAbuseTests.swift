import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing
import VaultAPI
import VaultCrypto
import VaultTestSupport

@testable import VaultCore
@testable import VaultServer

/// Abuse without an account (Docs/design.md §2): registration floods, oversized fields, password
/// guessing. Router tests all come from one address ("unknown"); where two addresses matter the test
/// talks to a `VaultService` over the same database, as the router would with two peers.
@Suite("API: abuse without an account")
struct AbuseAPITests {
    /// A service over the harness's database and clock, with limiters of its own.
    func service(_ api: APIClient) -> VaultService {
        VaultService(repository: api.repository, adminKey: api.admin.publicKey, clock: api.harness.clock.function)
    }

    /// The status and Retry-After of a login through `service`, as the router would answer it.
    func attempt(_ service: VaultService, _ r: LoginRequest, from address: String) async -> (HTTPResponse.Status, Int?) {
        do {
            _ = try await service.login(r, address: address)
            return (.ok, nil)
        } catch let e as APIError {
            return (e.status, e.headers[.retryAfter].flatMap { Int($0) })
        } catch {
            Issue.record("unexpected error \(error)")
            return (.internalServerError, nil)
        }
    }

    static func wrongKey(_ username: String) -> LoginRequest {
        LoginRequest(username: username, loginKey: Base64URL.encode(RandomBytes.bytes(count: 32)))
    }

    func rightKey(_ api: APIClient, _ user: TestUser, _ username: String) async throws -> LoginRequest {
        let params = try await api.loginParameters(username)
        let keys = try await PasswordKeys.derive(password: user.password, salt: params.salt, parameters: params.kdf)
        return LoginRequest(username: username, loginKey: Base64URL.encode(keys.loginKey.copyBytes()))
    }

    @Test func registrationFloodGets429PerAddress() async throws {
        try await APIHarness.run(.sqlite) { api in
            let (_, reg, first) = try await api.register("flood", role: .patient)
            #expect(first.status == .accepted)
            // The same registration again is idempotent, and still counts: a flood is a flood.
            for _ in 1..<RegistrationRateLimiter.Limits().perAddress {
                #expect(try await api.send(.post, Routes.register, json: reg).status == .ok)
            }
            let limited = try await api.send(.post, Routes.register, json: reg)
            #expect(limited.status == .tooManyRequests && api.errorCode(limited) == .rateLimited)
            #expect(Int(limited.headers[.retryAfter] ?? "") ?? 0 >= 1)
            // Even a body that would not decode is counted and refused before it is read.
            #expect(try await api.send(.post, Routes.register, rawBody: Array("{".utf8)).status == .tooManyRequests)
            // Per address: one address's flood does not stop another's registration, and the window ends.
            let service = service(api)
            for _ in 0..<RegistrationRateLimiter.Limits().perAddress { try service.admitRegistration(address: "192.0.2.1") }
            #expect(throws: APIError.self) { try service.admitRegistration(address: "192.0.2.1") }
            try service.admitRegistration(address: "192.0.2.2")
            api.harness.clock.advance(by: RegistrationRateLimiter.Limits().windowMs)
            try service.admitRegistration(address: "192.0.2.1")
        }
    }

    @Test func theOperatorSetsHowManyRegistrationsAnAddressMayMake() async throws {
        try await APIHarness.run(.sqlite, registrationsPerHour: 3) { api in
            for name in ["ann", "ben", "cat"] {
                let answer = try await api.register(name, role: .patient).2
                #expect(answer.status == .accepted)
            }
            let limited = try await api.register("dan", role: .patient).2
            #expect(limited.status == .tooManyRequests && api.errorCode(limited) == .rateLimited)
        }
        try await APIHarness.run(.sqlite, registrationsPerHour: 40) { api in
            for k in 0..<25 {
                let answer = try await api.register("bulk\(k)", role: .patient).2
                #expect(answer.status == .accepted, "registration \(k + 1) of 25 under a limit of 40")
            }
        }
    }

    @Test func oversizedFieldsAreRefusedFarBelowTheBodyLimit() async throws {
        try await APIHarness.run(.sqlite) { api in
            let (_, reg, _) = try await api.register("sizes", role: .patient)
            func registration(_ edit: (inout [String: Any]) -> Void) throws -> [UInt8] {
                var json = try JSONSerialization.jsonObject(with: APIClient.encoder.encode(reg)) as! [String: Any]
                edit(&json)
                return Array(try JSONSerialization.data(withJSONObject: json))
            }
            let cases: [(String, [UInt8], HTTPResponse.Status, String)] = [
                ("long username", try registration { $0["username"] = String(repeating: "a", count: 33) }, .badRequest, "username"),
                (
                    "long key bundle",
                    try registration { json in
                        var bundle = json["keyBundle"] as! [String: Any]
                        bundle["ciphertext"] = String(repeating: "A", count: APILimits.maxKeyBundleCiphertextLength + 4)
                        json["keyBundle"] = bundle
                    },
                    .badRequest, "keyBundle.ciphertext"
                ),
                ("long verifier", try registration { $0["loginVerifier"] = String(repeating: "A", count: 44) }, .badRequest, "loginVerifier"),
                (
                    "huge key bundle",
                    try registration { json in
                        var bundle = json["keyBundle"] as! [String: Any]
                        bundle["ciphertext"] = String(repeating: "A", count: APILimits.maxOpenBodyBytes)
                        json["keyBundle"] = bundle
                    }, .contentTooLarge, "larger than 65536 bytes"
                ),
            ]
            for (name, body, status, mention) in cases {
                let r = try await api.send(.post, Routes.register, rawBody: body)
                #expect(r.status == status, "\(name)")
                #expect((try? api.decode(APIErrorBody.self, r).error.message.contains(mention)) == true, "\(name)")
            }
            #expect(try await api.repository.user(id: reg.userID)?.registration == reg, "the stored registration is untouched")
            // Login and its parameters: a name no account can have is malformed, not unknown, and not audited.
            let before = try await api.repository.auditEntries(after: 0, limit: 1_000, patientID: nil).count
            let long = String(repeating: "m", count: 33)
            let login = try await api.send(.post, Routes.login, json: Self.wrongKey(long))
            #expect(login.status == .badRequest && api.errorCode(login) == .badRequest)
            let params = try await api.send(.post, Routes.loginParameters, json: LoginParametersRequest(username: long))
            #expect(params.status == .badRequest)
            let padded = LoginRequest(username: "sizes", loginKey: Base64URL.encode(RandomBytes.bytes(count: 32)) + "AAAA")
            #expect(try await api.send(.post, Routes.login, json: padded).status == .badRequest)
            let huge = try await api.send(.post, Routes.login, json: LoginRequest(username: String(repeating: "x", count: 70_000), loginKey: ""))
            #expect(huge.status == .contentTooLarge && api.errorCode(huge) == .payloadTooLarge)
            #expect(try await api.repository.auditEntries(after: 0, limit: 1_000, patientID: nil).count == before)
        }
    }

    @Test(arguments: Backend.allCases)
    func failedLoginsAtUnknownNamesAreAuditedWithoutTheName(backend: Backend) async throws {
        try await APIHarness.run(backend) { api in
            let probe = "Probe.Name-0042"
            #expect(try await api.wrongLogin(probe).status == .unauthorized)
            #expect(try await api.wrongLogin(probe.uppercased()).status == .unauthorized)
            let failed = try await api.repository.auditEntries(after: 0, limit: 1_000, patientID: nil).filter { $0.action == "login.failed" }
            try #require(failed.count == 2)
            for entry in failed {
                #expect(entry.actor == "unknown")
                #expect(entry.details["username"] == nil)
                let everything = ([entry.actor, entry.action] + entry.details.keys + entry.details.values).joined(separator: " ").lowercased()
                #expect(!everything.contains(probe.lowercased()), "the raw name is not in the log: \(entry.details)")
                let hash = try #require(entry.details["usernameHash"])
                #expect(hash.count == 32 && hash.allSatisfy(\.isHexDigit))
            }
            #expect(failed[0].details["usernameHash"] == failed[1].details["usernameHash"], "one name, one hash: repeated guesses show")
            // A known user's failed login still names the account.
            _ = try await api.user("known", role: .patient)
            _ = try await api.wrongLogin("known")
            let known = try await api.repository.auditEntries(after: 0, limit: 1_000, patientID: nil).last
            #expect(known?.action == "login.failed" && known?.details["username"] == "known" && known?.details["usernameHash"] == nil)
        }
    }

    @Test func theRightPasswordWorksAfterTenFailuresFromAnotherAddress() async throws {
        try await APIHarness.run(.sqlite) { api in
            let user = try await api.user("victim", role: .patient, password: "victim's password")
            let service = service(api)
            let right = try await rightKey(api, user, "victim")
            #expect(await attempt(service, right, from: "192.0.2.10").0 == .ok, "the user's usual address")
            // Someone else guesses from another address, waiting out every back-off.
            var failures = 0
            var waits: [Int] = []
            while failures < 10 {
                let (status, wait) = await attempt(service, Self.wrongKey("victim"), from: "203.0.113.66")
                if status == .tooManyRequests, let wait {
                    waits.append(wait)
                    api.harness.clock.advance(by: Int64(wait) * 1000)
                } else {
                    #expect(status == .unauthorized)
                    failures += 1
                }
            }
            #expect(!waits.isEmpty, "the guesser was slowed down")
            // The user's own address is not locked out; a third address meets the username's back-off.
            #expect(await attempt(service, right, from: "192.0.2.10").0 == .ok)
            let (stranger, wait) = await attempt(service, right, from: "198.51.100.5")
            #expect(stranger == .tooManyRequests && (wait ?? 0) >= 1, "an address the user never logged in from waits")
        }
    }

    @Test func theBackOffGrowsWithEachFailure() async throws {
        try await APIHarness.run(.sqlite) { api in
            let service = service(api)
            let limits = LoginRateLimiter.Limits()
            var waits: [Int] = []
            var failures = 0
            // Each attempt is answered at once: refused while a wait runs (then the clock moves past
            // it), checked and counted otherwise.
            for _ in 0..<40 where waits.count < 6 {
                let (status, wait) = await attempt(service, Self.wrongKey("ghost"), from: "203.0.113.7")
                if status == .tooManyRequests, let wait {
                    #expect(failures > limits.freeUsernameFailures, "no wait before the free failures are used")
                    waits.append(wait)
                    api.harness.clock.advance(by: Int64(wait) * 1000)
                } else {
                    #expect(status == .unauthorized)
                    failures += 1
                }
            }
            #expect(waits == [1, 2, 4, 8, 16, 32], "free failures first, then doubling waits")
            // The ceiling holds however long the guessing goes on.
            let limiter = LoginRateLimiter(repository: api.repository)
            #expect(limiter.delay(afterFailures: 1_000, free: 3) == limits.maxDelayMs)
        }
    }
}

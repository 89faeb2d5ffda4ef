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

/// Where the server and openapi.yaml disagreed (found by Scripts/fuzz-api), kept from coming back.
@Suite("API: the server and openapi.yaml agree")
struct SpecConformanceAPITests {
    /// The `pattern` of a schema under components/schemas of openapi.yaml.
    static func schemaPattern(_ name: String) throws -> String {
        let spec = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../openapi.yaml")
        let lines = try String(contentsOf: spec, encoding: .utf8).components(separatedBy: "\n")
        let start = try #require(lines.firstIndex(of: "    \(name):"), "schema \(name) in openapi.yaml")
        for line in lines[(start + 1)...].prefix(while: { $0.hasPrefix("      ") }) {
            let text = line.trimmingCharacters(in: .whitespaces)
            if text.hasPrefix("pattern: ") { return String(text.dropFirst("pattern: ".count).dropFirst().dropLast()) }
        }
        throw SpecError.noPattern(name)
    }

    enum SpecError: Error { case noPattern(String) }

    static func matches(_ pattern: String, _ text: String) throws -> Bool {
        let regex = try NSRegularExpression(pattern: pattern)
        return regex.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
    }

    /// `canonical` with its last character moved to the next one of the alphabet: the same bytes to a
    /// lenient decoder, since only unused low bits change, but not the canonical encoding.
    static func nonCanonical(_ canonical: String) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let last = alphabet.firstIndex(of: canonical.last!)!
        return String(canonical.dropLast()) + String(alphabet[last + 1])
    }

    @Test func unlistedMethodsOnKnownPathsAre405WithAllow() async throws {
        try await APIHarness.run(.sqlite) { api in
            let someID = UUID().uuidString
            let cases: [(HTTPRequest.Method, String, String)] = [
                (.trace, Routes.health, "GET"), (.trace, Routes.tresors, "GET, PUT"), (.options, Routes.login, "POST"),
                (.delete, Routes.shareRevoke(someID), "POST"), (.trace, Routes.adminAudit, "GET"), (.patch, Routes.records, "GET, POST"),
                (HTTPRequest.Method("PROPFIND")!, Routes.userByName("alice"), "GET"),
            ]
            for (method, path, allow) in cases {
                let r = try await api.send(method, path)
                #expect(r.status == .methodNotAllowed, "\(method) \(path)")
                #expect(r.headers[.allow] == allow, "\(method) \(path)")
                #expect(api.errorCode(r) == .badRequest)
            }
            let unknown = try await api.send(.trace, "/v1/nope")
            #expect(unknown.status == .notFound && unknown.headers[.allow] == nil, "an unknown path stays 404")
            let deeper = try await api.send(.trace, Routes.shareRevoke(someID) + "/more")
            #expect(deeper.status == .notFound)
        }
    }

    @Test func nonCanonicalBase64URLIsRefusedBySpecAndServer() async throws {
        try await APIHarness.run(.sqlite) { api in
            let (_, reg, _) = try await api.register("canon", role: .patient)
            let encoded = try JSONSerialization.jsonObject(with: APIClient.encoder.encode(reg)) as! [String: Any]
            // 16, 32 and 64 bytes: the three remainders of base64url's last group that have unused bits.
            for (field, schema) in [("salt", "Salt"), ("signingKey", "SigningPublicKey"), ("signature", "Signature")] {
                let canonical = try #require(encoded[field] as? String)
                let pattern = try Self.schemaPattern(schema)
                #expect(try Self.matches(pattern, canonical), "the spec accepts the canonical \(field)")
                let bent = Self.nonCanonical(canonical)
                #expect(try !Self.matches(pattern, bent), "the spec refuses a non-canonical \(field)")
                var json = encoded
                json[field] = bent
                let r = try await api.send(.post, Routes.register, rawBody: Array(try JSONSerialization.data(withJSONObject: json)))
                #expect(r.status == .badRequest && api.errorCode(r) == .invalidJSON, "the server refuses a non-canonical \(field)")
                #expect((try? api.decode(APIErrorBody.self, r).error.message.contains(field)) == true)
            }
            // A login key: same rule, 400 rather than wrong credentials.
            let key = Base64URL.encode(RandomBytes.bytes(count: 32))
            let login = try await api.send(.post, Routes.login, json: LoginRequest(username: "canon", loginKey: Self.nonCanonical(key)))
            #expect(login.status == .badRequest && api.errorCode(login) == .badRequest)
            #expect(try !Self.matches(Self.schemaPattern("SigningPublicKey"), Self.nonCanonical(key)))
        }
    }

    @Test func errorBodiesHaveSortedKeysAndUnescapedSlashes() async throws {
        try await APIHarness.run(.sqlite) { api in
            let r = try await api.send(.post, Routes.loginParameters, rawBody: Array("{}".utf8), contentType: "text/plain")
            #expect(r.status == .unsupportedMediaType)
            let text = String(decoding: r.body.readableBytesView, as: UTF8.self)
            #expect(text == #"{"error":{"code":"unsupported_media_type","message":"request body must be application/json"}}"#)
            #expect(r.headers[.contentType] == "application/json")
        }
    }
}

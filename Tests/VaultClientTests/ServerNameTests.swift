import Testing

@testable import VaultTLS

/// The host-name rules of `verify-full` (Docs/operations.md §1), piece by piece: what a certificate's
/// entry must be to name the host as given. The whole check against real certificates is in TLSTests and
/// PostgresTLSTests.
@Suite("TLS: a certificate's names against the host as given")
struct ServerNameTests {
    @Test func aNameMatchesItselfWhateverItsCaseAndATrailingDot() {
        for (pattern, host) in [("vault.internal", "vault.internal"), ("Vault.Internal", "vault.internal"), ("vault.internal.", "VAULT.internal")] {
            #expect(ServerName.matches(pattern: ServerName.normalized(pattern), host: ServerName.normalized(host)), "\(pattern) for \(host)")
        }
        #expect(!ServerName.matches(pattern: "vault.internal", host: "vault.internal.evil.example"))
        #expect(!ServerName.matches(pattern: "vault.internal.evil.example", host: "vault.internal"))
        #expect(!ServerName.matches(pattern: "", host: ""))
    }

    @Test func aWildcardIsOneWholeLeftmostLabelWithTwoLabelsAfterIt() {
        #expect(ServerName.matches(pattern: "*.clinic.example", host: "vault.clinic.example"))
        let refused = [
            ("*.clinic.example", "clinic.example"),  // no label for the wildcard
            ("*.clinic.example", ".clinic.example"),  // an empty label
            ("*.clinic.example", "a.vault.clinic.example"),  // one label only
            ("*.example", "clinic.example"),  // a whole top-level name
            ("v*.clinic.example", "vault.clinic.example"),  // a partial label
            ("vault.*.example", "vault.clinic.example"),  // not the leftmost label
            ("*.*.example", "a.b.example"),
        ]
        for (pattern, host) in refused { #expect(!ServerName.matches(pattern: pattern, host: host), "\(pattern) for \(host)") }
    }

    @Test func anAddressIsAnAddressOnlyAsBytes() {
        #expect(ServerName.isAddress("127.0.0.1") && ServerName.isAddress("[::1]") && ServerName.isAddress("::1"))
        #expect(!ServerName.isAddress("localhost") && !ServerName.isAddress("127.0.0.1.nip.io") && !ServerName.isAddress("[vault.internal]"))
        #expect(ServerName.addressBytes("127.0.0.1") == [127, 0, 0, 1])
        #expect(ServerName.addressBytes("::ffff:127.0.0.1") != [127, 0, 0, 1], "a mapped address is another entry's bytes")
        #expect(ServerName.addressText([127, 0, 0, 1]) == "127.0.0.1")
        #expect(ServerName.addressText(Array(repeating: 0, count: 15) + [1]) == "0:0:0:0:0:0:0:1")
        #expect(ServerName.addressText([1, 2, 3]) == "?")
    }
}

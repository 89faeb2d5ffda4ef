import Foundation
import Testing

@testable import VaultCrypto

@Suite("AEAD")
struct AEADTests {
    @Test func roundTripWithAssociatedData() throws {
        let key = SymmetricKey.generate()
        let nonce = AEADNonce.random()
        let sealed = AEAD.seal(Array("blood pressure 120/80".utf8), key: key, nonce: nonce, associatedData: [1, 2, 3])
        #expect(sealed.count == 21 + AEAD.tagByteCount)
        #expect(try AEAD.open(sealed, key: key, nonce: nonce, associatedData: [1, 2, 3]) == Array("blood pressure 120/80".utf8))
    }

    @Test func everyFlippedByteIsAnAuthenticationFailure() throws {
        let key = SymmetricKey.generate()
        let nonce = AEADNonce.random()
        let sealed = AEAD.seal(Array(repeating: 7, count: 40), key: key, nonce: nonce, associatedData: [9])
        for i in sealed.indices {
            var tampered = sealed
            tampered[i] ^= 0x01
            #expect(throws: CryptoError.authenticationFailed) { try AEAD.open(tampered, key: key, nonce: nonce, associatedData: [9]) }
        }
        #expect(throws: CryptoError.authenticationFailed) { try AEAD.open(sealed, key: key, nonce: nonce, associatedData: [8]) }
        #expect(throws: CryptoError.authenticationFailed) { try AEAD.open(sealed, key: .generate(), nonce: nonce, associatedData: [9]) }
        #expect(throws: CryptoError.authenticationFailed) { try AEAD.open(sealed, key: key, nonce: .random(), associatedData: [9]) }
        #expect(throws: CryptoError.self) { try AEAD.open([1, 2, 3], key: key, nonce: nonce) }
    }

    @Test func anEmptyPlaintextStillHasItsTagChecked() throws {
        // Output buffers are not zero-filled first; the empty case must still run the tag check.
        let key = SymmetricKey.generate()
        let nonce = AEADNonce.random()
        let sealed = AEAD.seal([], key: key, nonce: nonce, associatedData: [4, 5])
        #expect(sealed.count == AEAD.tagByteCount)
        #expect(try AEAD.open(sealed, key: key, nonce: nonce, associatedData: [4, 5]) == [])
        for i in sealed.indices {
            var tampered = sealed
            tampered[i] ^= 0x80
            #expect(throws: CryptoError.authenticationFailed) { try AEAD.open(tampered, key: key, nonce: nonce, associatedData: [4, 5]) }
        }
        #expect(throws: CryptoError.authenticationFailed) { try AEAD.open(sealed, key: key, nonce: nonce, associatedData: [4]) }
        // Sizes around allocation-class edges round-trip exactly (no stray capacity bytes).
        for n in [1, 15, 16, 17, 255, 256, 4_095, 4_096, 65_537] {
            let plain = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let c = AEAD.seal(plain, key: key, nonce: nonce)
            #expect(c.count == n + AEAD.tagByteCount)
            #expect(try AEAD.open(c, key: key, nonce: nonce) == plain)
        }
    }

    @Test func lengthsAreCheckedAtConstruction() {
        #expect(throws: CryptoError.invalidLength(what: "symmetric key", expected: 32, actual: 31)) {
            try SymmetricKey(bytes: [UInt8](repeating: 0, count: 31))
        }
        #expect(throws: CryptoError.invalidLength(what: AEADNonce.kindName, expected: 24, actual: 12)) {
            try AEADNonce(bytes: [UInt8](repeating: 0, count: 12))
        }
        #expect(throws: CryptoError.self) { try Signature(bytes: [UInt8](repeating: 0, count: 63)) }
        #expect(throws: CryptoError.self) { try SigningPublicKey(bytes: [UInt8](repeating: 0, count: 33)) }
        #expect(throws: CryptoError.self) { try BoxPublicKey(bytes: []) }
        #expect(throws: CryptoError.self) { try Salt(bytes: [UInt8](repeating: 0, count: 15)) }
    }
}

@Suite("Secrets are redacted and zeroed")
struct SecretHygieneTests {
    @Test func descriptionsNeverShowKeyBytes() {
        let key = SymmetricKey.generate()
        let hexKey = Hex.encode(key.copyBytes())
        for text in [
            String(describing: key), String(reflecting: key), "\(key.secret)", String(describing: SigningKeyPair.generate()),
            String(describing: BoxKeyPair.generate()),
        ] {
            #expect(!text.contains(hexKey))
            #expect(text.contains("redacted"))
        }
        var dumped = ""
        dump(key, to: &dumped)
        #expect(!dumped.contains(hexKey))
        #expect(!dumped.contains(Base64URL.encode(key.copyBytes())))
    }

    @Test func keysCompareInConstantTimeByValue() throws {
        let a = SymmetricKey.generate()
        #expect(a == (try SymmetricKey(bytes: a.copyBytes())))
        #expect(a != SymmetricKey.generate())
        #expect(ConstantTime.equals([1, 2, 3], [1, 2, 3]))
        #expect(!ConstantTime.equals([1, 2, 3], [1, 2, 4]))
        #expect(!ConstantTime.equals([1, 2, 3], [1, 2]))
    }
}

@Suite("Ed25519 and sealed boxes")
struct SignatureAndBoxTests {
    @Test func signVerifyAndTamper() throws {
        let pair = SigningKeyPair.generate()
        let message = Array("approve share 42".utf8)
        let sig = pair.sign(message)
        try pair.publicKey.verify(sig, for: message)
        #expect(throws: CryptoError.invalidSignature) { try pair.publicKey.verify(sig, for: Array("approve share 43".utf8)) }
        #expect(throws: CryptoError.invalidSignature) { try SigningKeyPair.generate().publicKey.verify(sig, for: message) }
        var bad = sig.bytes
        bad[10] ^= 0x80
        #expect(throws: CryptoError.invalidSignature) { try pair.publicKey.verify(Signature(bytes: bad), for: message) }
    }

    @Test func seedRecreatesTheSamePair() throws {
        let pair = SigningKeyPair.generate()
        let again = try SigningKeyPair(seed: pair.seed)
        #expect(again.publicKey == pair.publicKey)
        #expect(again.sign([1]) == pair.sign([1]), "Ed25519 is deterministic")
        let box = BoxKeyPair.generate()
        #expect(try BoxKeyPair(secretKey: box.secretKey).publicKey == box.publicKey)
    }

    @Test func sealedBoxOnlyOpensForItsRecipient() throws {
        let alice = BoxKeyPair.generate()
        let mallory = BoxKeyPair.generate()
        let sealed = SealedBox.seal(Array("epoch key".utf8), to: alice.publicKey)
        #expect(sealed.count == 9 + SealedBox.overhead)
        #expect(try SealedBox.open(sealed, with: alice).copyBytes() == Array("epoch key".utf8))
        #expect(throws: CryptoError.sealedBoxOpenFailed) { try SealedBox.open(sealed, with: mallory) }
        var tampered = sealed
        tampered[tampered.count - 1] ^= 1
        #expect(throws: CryptoError.sealedBoxOpenFailed) { try SealedBox.open(tampered, with: alice) }
        #expect(throws: CryptoError.self) { try SealedBox.open([1, 2, 3], with: alice) }
        #expect(SealedBox.seal([1], to: alice.publicKey) != SealedBox.seal([1], to: alice.publicKey), "ephemeral key per seal")
    }
}

@Suite("Argon2id, crypto_kdf, BLAKE2b, padding, encodings")
struct KeyDerivationTests {
    let password = "correct horse battery staple"
    let salt = try! Salt(bytes: Array(0..<16))

    // Known answers computed with the Argon2 reference implementation (argon2-cffi, Argon2id v1.3,
    // parallelism 1, which is what libsodium uses), so this checks libsodium against an independent one.
    /// Argon2id on a thread of `OffPool`, as the product runs it.
    func derive(_ password: String, _ salt: Salt, _ parameters: KDFParameters) async throws -> SymmetricKey {
        // blocking: on a thread of OffPool
        try await OffPool.run { try PasswordHasher.deriveKey(password: password, salt: salt, parameters: parameters) }
    }

    @Test func argon2idKnownAnswers() async throws {
        let interactive = try await derive(password, salt, .interactive)
        #expect(Hex.encode(interactive.copyBytes()) == "c05ce4c4dd7e0e45ee6011cc59d068ade47df1b01fc0cf9cd4678bdf68a5b7b0")
        let threePasses = try KDFParameters(opsLimit: 3, memLimitBytes: 64 * 1_048_576)
        let three = try await derive(password, salt, threePasses)
        #expect(Hex.encode(three.copyBytes()) == "0d1a3c6523c8f06e4e0af9c515aa5b5448cfebd6838f2d52c3d8b6ef8ddc3c2e")
    }

    @Test func argon2idDependsOnPasswordAndSalt() async throws {
        let a = try await derive(password, salt, .interactive)
        #expect(a != (try await derive(password + "!", salt, .interactive)))
        #expect(a != (try await derive(password, .random(), .interactive)))
        _ = try await derive("", salt, .interactive)
    }

    @Test func parametersBelowTheFloorOrAboveTheCeilingAreRefused() throws {
        let floor = KDFParameters.interactive
        #expect(throws: CryptoError.self) { try KDFParameters(opsLimit: floor.opsLimit - 1, memLimitBytes: floor.memLimitBytes) }
        #expect(throws: CryptoError.self) { try KDFParameters(opsLimit: floor.opsLimit, memLimitBytes: floor.memLimitBytes - 1) }
        #expect(throws: CryptoError.self) { try KDFParameters(opsLimit: 11, memLimitBytes: floor.memLimitBytes) }
        #expect(throws: CryptoError.self) { try KDFParameters(opsLimit: 2, memLimitBytes: 1 << 40) }
        #expect(throws: CryptoError.self) { try KDFParameters(algorithm: "argon2i13", opsLimit: 3, memLimitBytes: floor.memLimitBytes) }
        // A server cannot slip weak parameters past the client through JSON either.
        let weak = #"{"algorithm":"argon2id13","opsLimit":1,"memLimitBytes":8192}"#
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(KDFParameters.self, from: Data(weak.utf8)) }
        #expect(KDFParameters.moderate.opsLimit == 3 && KDFParameters.moderate.memLimitBytes == 256 * 1_048_576)
    }

    @Test func kdfSubkeysAreDistinctPerContextAndId() throws {
        let master = SymmetricKey.generate()
        let login = try master.deriveSubkey(id: 1, context: KDFContext("CVlogin_"))
        #expect(login == (try master.deriveSubkey(id: 1, context: KDFContext("CVlogin_"))))
        #expect(login != (try master.deriveSubkey(id: 1, context: KDFContext("CVwrap__"))))
        #expect(login != (try master.deriveSubkey(id: 2, context: KDFContext("CVlogin_"))))
        #expect(throws: CryptoError.invalidContext("short")) { try KDFContext("short") }
        #expect(throws: CryptoError.self) { try KDFContext("ninechars") }
    }

    /// Hashed in parts, a message gives the hash of the whole: every split of messages up to 300 bytes
    /// (across BLAKE2b's 128-byte blocks) into three parts, empty parts included.
    @Test func blake2bInPartsIsTheHashOfTheWhole() throws {
        #expect(Hex.encode(BLAKE2b.hash { _ in }) == "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8")
        for length in [0, 1, 127, 128, 129, 255, 256, 257, 300] {
            let message = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            let whole = try BLAKE2b.hash(message)
            for a in stride(from: 0, through: length, by: max(1, length / 7)) {
                for b in stride(from: a, through: length, by: max(1, length / 5)) {
                    let parts = BLAKE2b.hash { update in
                        message[..<a].withUnsafeBytes(update)
                        message[a..<b].withUnsafeBytes(update)
                        message[b...].withUnsafeBytes(update)
                    }
                    #expect(parts == whole, "\(length) split at \(a), \(b)")
                }
            }
        }
    }

    @Test func blake2bKnownAnswers() throws {
        // RFC 7693 Appendix A, and the BLAKE2 reference keyed KAT (key 00..3f, empty input).
        #expect(
            Hex.encode(try BLAKE2b.hash(Array("abc".utf8), outputLength: 64))
                == "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923"
        )
        #expect(Hex.encode(try BLAKE2b.hash([])) == "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8")
        #expect(
            Hex.encode(try BLAKE2b.hash([], key: SecureBytes(copying: Array(0..<64)), outputLength: 64))
                == "10ebb67700b1868efb4417987acf4690ae9d972fb7a590c2f02871799aaa4786b5e996e8f0f4eb981fc214b005f42d2ff4233499391653df7aefcbc13fc51568"
        )
        #expect(
            Hex.encode(try BLAKE2b.hash(Array("CareVault".utf8), key: SymmetricKey(bytes: Array(0..<32))))
                == "647519c5b0222daf1c7cd352593c507a9887bb76aab158c5a3167d4b8eadfde2"
        )
        #expect(throws: CryptoError.self) { try BLAKE2b.hash([], outputLength: 8) }
        #expect(throws: CryptoError.self) { try BLAKE2b.hash([], key: SecureBytes(copying: [1, 2, 3])) }
    }

    @Test func paddingKnownAnswerAndRejection() throws {
        #expect(try Padding.pad([1, 2, 3], blockSize: 8) == [1, 2, 3, 0x80, 0, 0, 0, 0])
        #expect(try Padding.pad(Array(repeating: 5, count: 8), blockSize: 8).count == 16, "a full block gains a block")
        for n in [0, 1, 255, 256, 1000] {
            let data = RandomBytes.bytes(count: n)
            let padded = try Padding.pad(data, blockSize: 256)
            #expect(padded.count % 256 == 0 && padded.count > n)
            #expect(try Padding.unpad(padded, blockSize: 256) == data)
        }
        #expect(throws: CryptoError.invalidPadding) { try Padding.unpad([1, 2, 3, 0, 0, 0, 0, 0], blockSize: 8) }
        #expect(throws: CryptoError.invalidPadding) { try Padding.unpad([1, 2, 3], blockSize: 8) }
        #expect(throws: CryptoError.invalidPadding) { try Padding.unpad([], blockSize: 8) }
    }

    @Test func base64urlIsStrict() throws {
        let bytes: [UInt8] = [0xfb, 0xff, 0xfe, 0x00, 0x10]
        #expect(Base64URL.encode(bytes) == "-__-ABA")
        #expect(try Base64URL.decode("-__-ABA") == bytes)
        for bad in ["-__-ABA=", "+//+ABA", "-__-AB A", "-__-ABA!"] {
            #expect(throws: CryptoError.self) { try Base64URL.decode(bad) }
        }
        let key = SigningKeyPair.generate().publicKey
        let json = try JSONEncoder().encode([key])
        #expect(try JSONDecoder().decode([SigningPublicKey].self, from: json) == [key])
        #expect(throws: DecodingError.self) { try JSONDecoder().decode([SigningPublicKey].self, from: Data(#"["AAAA"]"#.utf8)) }
        #expect(throws: CryptoError.self) { try Hex.decode("abc") }
        #expect(throws: CryptoError.self) { try Hex.decode("zz") }
    }
}

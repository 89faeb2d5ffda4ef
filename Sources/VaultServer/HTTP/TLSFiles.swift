import Foundation
import NIOSSL

/// The PEM files `carevault-server --tls-cert FILE --tls-key FILE` serves HTTPS with (Docs/operations.md).
public struct TLSFiles: Sendable {
    /// The server's certificate, then any intermediates, in PEM.
    public var certificateChain: String
    /// The certificate's private key, in PEM, unencrypted.
    public var privateKey: String

    /// The two files; nothing is read until `serverConfiguration()`.
    public init(certificateChain: String, privateKey: String) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
    }

    /// The TLS configuration of the files, checked before the server listens: an unreadable file, a file
    /// that is not PEM, or a key that does not belong to the certificate is a `ConfigurationError` in plain
    /// words, so the operator learns it at start and not from the first client's failed handshake.
    public func serverConfiguration() throws -> TLSConfiguration {
        let chain: [NIOSSLCertificate]
        do { chain = try NIOSSLCertificate.fromPEMFile(certificateChain) } catch {
            throw ConfigurationError.invalid("cannot read the TLS certificate '\(certificateChain)': \(Self.reason(certificateChain, "certificate"))")
        }
        guard !chain.isEmpty else {
            throw ConfigurationError.invalid("the TLS certificate file '\(certificateChain)' holds no PEM certificate")
        }
        let key: NIOSSLPrivateKey
        do { key = try NIOSSLPrivateKey(file: privateKey, format: .pem) } catch {
            throw ConfigurationError.invalid("cannot read the TLS private key '\(privateKey)': \(Self.reason(privateKey, "unencrypted private key"))")
        }
        let configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        // Building a context checks that the key matches the certificate (BoringSSL refuses a mismatch).
        do { _ = try NIOSSLContext(configuration: configuration) } catch {
            throw ConfigurationError.invalid("the TLS private key '\(privateKey)' does not belong to the certificate '\(certificateChain)'")
        }
        return configuration
    }

    /// Why a file could not be used: missing, unreadable, or not the expected PEM content.
    static func reason(_ path: String, _ expected: String) -> String {
        guard FileManager.default.fileExists(atPath: path) else { return "no such file" }
        guard FileManager.default.isReadableFile(atPath: path) else { return "permission denied" }
        return "it is not a PEM \(expected)"
    }
}

import Foundation
import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import VaultTLS

/// How the server's connections to PostgreSQL use TLS, from the database URL's `sslmode` and
/// `sslrootcert` (libpq's names; Docs/operations.md §1):
///
/// - `disable`: plain TCP.
/// - `require`: encrypted, the certificate not checked (protects against eavesdropping, not against
///   someone who can redirect the connection).
/// - `verify-full`: encrypted, the certificate must chain to `sslrootcert` (a PEM file; the system's
///   roots without it, or with `sslrootcert=system`) and name the host of the URL.
///
/// Without `sslmode` a loopback host gets `disable` and any other `verify-full`: a loopback connection
/// never leaves the machine and local clusters seldom have a certificate, while a connection over a
/// network carries the database password and every stored row, and must not silently go in clear or to
/// whoever answers on the path. libpq's `allow`, `prefer` and `verify-ca` are refused: the first two fall
/// back to plain text without a word, the last accepts any certificate the CA ever signed.
public struct PostgresTLS: Sendable, Equatable {
    /// The `sslmode` values the server accepts.
    public enum Mode: String, Sendable, CaseIterable {
        case disable
        case require
        case verifyFull = "verify-full"
    }

    public var mode: Mode
    /// A PEM file of the CA certificates to trust instead of the system's roots (`verify-full` only).
    public var rootCertificate: String?

    /// TLS as given.
    public init(mode: Mode, rootCertificate: String? = nil) {
        self.mode = mode
        self.rootCertificate = rootCertificate
    }

    /// TLS from the query of a database URL to `host`; throws a plain message for values it cannot honour.
    public init(query: [URLQueryItem], host: String) throws {
        let sslmode = query.last { $0.name == "sslmode" }?.value
        let root = query.last { $0.name == "sslrootcert" }?.value
        let modes = Mode.allCases.map(\.rawValue).joined(separator: ", ")
        if let sslmode {
            guard let mode = Mode(rawValue: sslmode) else {
                throw ConfigurationError.invalid("sslmode=\(sslmode) is not supported: use one of \(modes)")
            }
            self.mode = mode
        } else {
            self.mode = Self.isLoopback(host) ? .disable : .verifyFull
        }
        if let root, root != "system" {
            guard mode == .verifyFull else {
                throw ConfigurationError.invalid("sslrootcert is only used with sslmode=verify-full (now \(mode.rawValue))")
            }
            guard !root.isEmpty else { throw ConfigurationError.invalid("sslrootcert needs a file name") }
            rootCertificate = root
        }
    }

    /// Whether `host` names this machine's loopback interface.
    static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" { return true }
        guard let address = IPAddress(bare) else { return false }
        return address.bytes.count == 4 ? address.bytes[0] == 127 : address.bytes == [UInt8](repeating: 0, count: 15) + [1]
    }

    /// The NIOSSL client configuration, nil for `disable`. Reads and checks `rootCertificate` now, so a
    /// missing or empty file stops the start with a plain message rather than failing every connection.
    public func tlsConfiguration() throws -> TLSConfiguration? {
        var config = TLSConfiguration.makeClientConfiguration()
        switch mode {
        case .disable:
            return nil
        case .require:
            config.certificateVerification = .none
        case .verifyFull:
            config.certificateVerification = .fullVerification
            if let rootCertificate {
                let certificates: [NIOSSLCertificate]
                do { certificates = try NIOSSLCertificate.fromPEMFile(rootCertificate) } catch {
                    throw ConfigurationError.invalid("sslrootcert '\(rootCertificate)' cannot be read as PEM certificates")
                }
                guard !certificates.isEmpty else {
                    throw ConfigurationError.invalid("sslrootcert '\(rootCertificate)' holds no PEM certificate")
                }
                config.trustRoots = .certificates(certificates)
            }
        }
        return config
    }

    /// The setting for the pooled connections.
    func clientTLS() throws -> PostgresClient.Configuration.TLS {
        try tlsConfiguration().map { .require($0) } ?? .disable
    }

    /// The setting for a single connection (the pool's watch, the start-up check).
    func connectionTLS() throws -> PostgresConnection.Configuration.TLS {
        do {
            return try tlsConfiguration().map { .require(try NIOSSLContext(configuration: $0)) } ?? .disable
        } catch let e as ConfigurationError {
            throw e
        } catch {
            throw ConfigurationError.invalid("TLS to PostgreSQL cannot be set up: \(error)")
        }
    }

    /// A connection outside the pool to the database of `config`, encrypted as `tls` says.
    static func singleConnection(
        _ config: PostgresClient.Configuration,
        tls: PostgresConnection.Configuration.TLS
    ) -> PostgresConnection.Configuration {
        var connection = PostgresConnection.Configuration(
            host: config.host ?? "localhost",
            port: config.port ?? 5432,
            username: config.username,
            password: config.password,
            database: config.database,
            tls: tls
        )
        connection.options.connectTimeout = TimeAmount(config.options.connectTimeout)
        connection.options.tlsServerName = config.options.tlsServerName
        return connection
    }

    /// A failed connection in plain words, naming what to check.
    static func describe(_ error: any Error, host: String, port: Int, mode: Mode) -> String {
        let target = "PostgreSQL at \(host):\(port)"
        let noTLS = "\(target) does not offer TLS, which sslmode=\(mode.rawValue) requires (turn on ssl in its postgresql.conf)"
        // The name check's own connection (`checkServerName`) fails with NIO's and NIOSSL's errors directly.
        let cause: (any Error)?
        if let psql = error as? PSQLError {
            if psql.code == .sslUnsupported { return noTLS }
            if let message = psql.serverInfo?[.message] { return "\(target) refused the connection: \(message)" }
            cause = psql.underlying
        } else if let failure = error as? IdentityProbe.Failure {
            switch failure {
            case .noTLS: return noTLS
            case .notNamed: return "the certificate of \(target) does not pass sslmode=verify-full: \(failure)"
            case .closed, .timedOut: return "TLS with \(target) failed: \(failure)"
            }
        } else {
            cause = error
        }
        let underlying = cause.map { "\($0)" } ?? (error as? PSQLError).map { "\($0.code)" } ?? "\(error)"
        if let extra = cause as? NIOSSLExtraError, extra == .failedToValidateHostname {
            return "the certificate of \(target) is not issued for \(host)"
        }
        if underlying.contains("CERTIFICATE_VERIFY_FAILED") {
            return "the certificate of \(target) is not trusted: give the CA that issued it with sslrootcert=FILE"
        }
        if cause is NIOSSLError || cause is BoringSSLError {
            return "TLS with \(target) failed: \(underlying)"
        }
        return "cannot connect to \(target): \(underlying)"
    }
}

extension PostgresRepository {
    /// Connects once with the settings of `url` and closes again, so a server that cannot reach its
    /// database, or does not trust its certificate, says why at start. Throws `ConfigurationError` for a
    /// URL it cannot use and `RepositoryError.unavailable` with the reason when the connection fails.
    public static func checkConnection(url: String, logger: Logger) async throws {
        let (config, tls) = try settings(url: url)
        let connection = PostgresTLS.singleConnection(config, tls: try tls.connectionTLS())
        // The name first: no password goes to a server before its certificate was checked against the host.
        try await checkServerName(config, tls: tls)
        do {
            let conn = try await PostgresConnection.connect(configuration: connection, id: 0, logger: logger)
            try? await conn.close()
        } catch {
            throw RepositoryError.unavailable(
                PostgresTLS.describe(error, host: config.host ?? "localhost", port: config.port ?? 5432, mode: tls.mode)
            )
        }
    }

    /// PostgreSQL's SSL request (Int32 length 8, Int32 code 80877103) and the byte that accepts it.
    static let sslRequest: (bytes: [UInt8], accept: UInt8) = ([0, 0, 0, 8, 0x04, 0xD2, 0x16, 0x2F], UInt8(ascii: "S"))

    /// With `verify-full` to a host name, checks that PostgreSQL's certificate names that host as given
    /// (`IdentityProbe`), as libpq does: the pool's connections run NIOSSL's own check, which also takes an
    /// IP address entry matching the address reached (Docs/operations.md §1).
    static func checkServerName(_ config: PostgresClient.Configuration, tls: PostgresTLS) async throws {
        guard tls.mode == .verifyFull, let host = config.host, !ServerName.isAddress(host), let tlsConfig = try tls.tlsConfiguration() else { return }
        let port = config.port ?? 5432
        do {
            _ = try await IdentityProbe.check(
                host: host,
                port: port,
                configuration: tlsConfig,
                preamble: sslRequest,
                connectTimeout: TimeAmount(config.options.connectTimeout),
                // The handshake as the driver allows it: bounded, not as tight as the connection itself.
                handshakeTimeout: .seconds(30)
            )
        } catch {
            throw RepositoryError.unavailable(PostgresTLS.describe(error, host: host, port: port, mode: tls.mode))
        }
    }
}

extension PostgresPool {
    /// A pool for the database `url`, its watch connection using the same TLS settings.
    public convenience init(url: String, timing: Timing = Timing(), logger: Logger) throws {
        let (config, tls) = try PostgresRepository.settings(url: url)
        self.init(configuration: config, watchTLS: try tls.connectionTLS(), timing: timing, logger: logger)
    }
}

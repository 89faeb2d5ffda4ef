import AsyncHTTPClient
import Foundation
import NIOCore
import NIOSSL
import VaultTLS

/// The server's identity as `verify-full` means it (Docs/operations.md §1): over https to a host name, a
/// process first checks once that the server's certificate names that host as given (`IdentityProbe`,
/// stricter than NIOSSL's own check, which also takes an IP address entry matching the address reached),
/// and then sends every request of that server to the address that passed. A connection to it that is
/// refused or never made, or whose TLS handshake fails, forgets the address, so the next try looks the name
/// up and checks again (a service moved to another address). http and address literals need no such step: NIOSSL compares an
/// address given with the certificate's address entries exactly.
actor ServerIdentities {
    private var checked: [String: Task<String, any Error>] = [:]

    /// The address of `host`:`port` whose certificate names `host` under `trust`, checked once per process.
    func address(host: String, port: Int, trust: PrivateCA?, connect: Duration, handshake: Duration) async throws -> String {
        let key = Self.key(host, port, trust)
        if let task = checked[key] { return try await task.value }
        let configuration = ClientPool.tls(trust)
        let task = Task {
            try await IdentityProbe.check(
                host: host,
                port: port,
                configuration: configuration,
                connectTimeout: .nanoseconds(Transport.nanoseconds(connect)),
                handshakeTimeout: .nanoseconds(Transport.nanoseconds(handshake))
            )
        }
        checked[key] = task
        do {
            return try await task.value
        } catch {
            if checked[key] == task { checked[key] = nil }
            throw error
        }
    }

    /// Forgets the address checked for `host`:`port`, so the next request checks again.
    func forget(host: String, port: Int, trust: PrivateCA?) { checked[Self.key(host, port, trust)] = nil }

    static func key(_ host: String, _ port: Int, _ trust: PrivateCA?) -> String { "\(host.lowercased()):\(port) \(trust?.path ?? "")" }
}

extension Transport {
    static let identities = ServerIdentities()

    /// https to a host name (not an address literal): the host and port whose certificate is checked.
    var identityTarget: (host: String, port: Int)? {
        guard let url = URL(string: baseURL), url.scheme == "https", let host = url.host, !ServerName.isAddress(host) else { return nil }
        return (host, url.port ?? 443)
    }

    /// The client for requests that may wait `read` for the server, shared process-wide (`ClientPool`); over
    /// https to a host name, pinned to the address whose certificate was checked to name that host.
    func client(read: Duration) async throws -> HTTPClient {
        guard let target = identityTarget else { return Self.pool.client(connect: connectTimeout, read: read, trust: trust, pin: nil) }
        let address = try await Self.identities.address(
            host: target.host,
            port: target.port,
            trust: trust,
            connect: connectTimeout,
            handshake: readTimeout
        )
        return Self.pool.client(connect: connectTimeout, read: read, trust: trust, pin: ClientPool.Pin(host: target.host, address: address))
    }

    /// After `error` from a request: a connection refused or never made, or a TLS failure (the address may
    /// now serve another certificate), forgets the checked address.
    func forgetIdentity(after error: any Error) async {
        let tls = error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError
        guard Self.neverSent(error) || tls, let target = identityTarget else { return }
        await Self.identities.forget(host: target.host, port: target.port, trust: trust)
    }

    /// The probe's refusal in plain words, or nil for any other error.
    func identityProblem(_ error: any Error, target: String, host: String) -> String? {
        guard let failure = error as? IdentityProbe.Failure else { return nil }
        switch failure {
        case let .notNamed(_, names):
            let listed = names.isEmpty ? "no names" : names.joined(separator: ", ")
            return "the certificate of \(target) is not trusted: it is not issued for \(host) (it names \(listed); "
                + "an IP address entry counts only when --server gives that address)"
        case .noTLS, .closed, .timedOut:
            return "the secure connection to \(target) failed: \(failure)"
        }
    }
}

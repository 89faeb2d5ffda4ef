import Foundation
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import Testing
import VaultAPI
import VaultCore
import VaultCrypto
import VaultServer
import VaultTestSupport

@testable import VaultClient

/// A server in front of a real router that logs every request as "METHOD path", with " +auth" when it
/// carried an Authorization header, and can answer `GET /v1/deployment` with an id of its choosing (as
/// a relay copying another deployment's public id would).
struct RecordingFront: HTTPResponder {
    typealias Context = VaultRequestContext

    let inner: RouterResponder<VaultRequestContext>
    /// The id to answer `GET /v1/deployment` with; nil passes the request on.
    let deploymentID: NIOLockedValueBox<String?>
    let log: NIOLockedValueBox<[String]>

    func respond(to request: Request, context: VaultRequestContext) async throws -> Response {
        let path = request.uri.path
        let auth = request.headers[.authorization] != nil ? " +auth" : ""
        log.withLockedValue { $0.append("\(request.method.rawValue) \(path)\(auth)") }
        guard request.method == .get, path == Routes.deployment, let id = deploymentID.withLockedValue({ $0 }) else {
            return try await inner.respond(to: request, context: context)
        }
        let body = try JSONEncoder().encode(DeploymentResponse(deploymentID: id))
        return Response(
            status: .ok,
            headers: [.contentType: "application/json", .contentLength: "\(body.count)"],
            body: .init(byteBuffer: ByteBuffer(bytes: body))
        )
    }

    /// What has been logged since the last call.
    func take() -> [String] {
        log.withLockedValue {
            let seen = $0
            $0 = []
            return seen
        }
    }

    /// Runs `body` with the URL of a front over `repository`'s router.
    static func run(
        over repository: any VaultRepository,
        adminKey: SigningPublicKey,
        deploymentID: String?,
        _ body: @escaping @Sendable (String, RecordingFront) async throws -> Void
    ) async throws {
        let front = RecordingFront(
            inner: buildRouter(repository: repository, adminKey: adminKey).buildResponder(),
            deploymentID: NIOLockedValueBox(deploymentID),
            log: NIOLockedValueBox([])
        )
        let app = Application(responder: front, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in try await body("http://127.0.0.1:\(client.port!)", front) }
    }
}

/// What `account move` sends to a new address that is not the deployment of the profile (Docs/operations.md
/// §3): the checks that need no credential run first, so neither the session token nor a login reaches it.
@Suite("Client: a profile is not moved to another deployment, and sends it no credential")
struct ProfileMoveRelayTests {
    struct Unexpected: Error {}

    static func deploymentID(of url: String) async throws -> String {
        try await Transport(baseURL: url, maxAttempts: 2, baseDelayMs: 10).send(AdminEndpoints.deployment).deploymentID
    }

    @Test func anotherDeploymentGivingThisOnesIdButOtherParametersGetsNoSessionAndNoLogin() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (old, account) = try await ProfileMoveTests.patient(world, "a", "mona")
            let id = try await Self.deploymentID(of: world.baseURL)
            try await TestDatabase.with(.sqlite) { other in
                // Another deployment under the same admin key, with a 'mona' of the same password, behind a
                // front that copies this deployment's (public) id.
                try await RecordingFront.run(over: other, adminKey: world.admin.publicKey, deploymentID: nil) { url, front in
                    let theirs = try ProfileMoveTests.manager(world, "b", server: url)
                    _ = try await theirs.register(username: "mona", password: ProfileMoveTests.password, role: .patient)
                    try await AdminClient(baseURL: url, key: world.admin).approveAll()
                    front.deploymentID.withLockedValue { $0 = id }
                    _ = front.take()

                    let before = try ProfileMoveTests.files(old)
                    let there = try ProfileMoveTests.manager(world, "a", server: url)
                    do {
                        _ = try await old.moveProfile(to: url, through: there.transport, password: { ProfileMoveTests.password })
                        Issue.record("moved to another deployment")
                    } catch let ClientError.integrity(m) {
                        #expect(m.contains("other password-hashing parameters or salt") && m.contains("no session or password was sent"), "\(m)")
                    }
                    #expect(front.take() == ["GET \(Routes.deployment)", "POST \(Routes.loginParameters)"])
                    #expect(try ProfileMoveTests.files(old) == before)
                    #expect(try ProfileMoveTests.current(old) == [world.baseURL: "mona"])
                    #expect(try old.unlockRemembered()?.session?.token == account.session?.token)
                }
            }
        }
    }

    @Test func aRelayOfThisDeploymentGivingAnotherIdIsRefusedBeforeTheTokenIsSent() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (old, _) = try await ProfileMoveTests.patient(world, "a", "nora")
            let otherID = Base64URL.encode(RandomBytes.bytes(count: 16))
            // Everything passed on to this very deployment (the account's certificate and parameters are served as
            // they are) but the deployment id.
            try await RecordingFront.run(over: world.repository, adminKey: world.admin.publicKey, deploymentID: otherID) { url, front in
                let there = try ProfileMoveTests.manager(world, "a", server: url)
                do {
                    _ = try await old.moveProfile(to: url, through: there.transport, password: { throw Unexpected() })
                    Issue.record("moved to an address giving another deployment id")
                } catch let ClientError.integrity(m) {
                    #expect(m.contains("is another deployment than \(world.baseURL)") && m.contains("nothing was sent"), "\(m)")
                }
                #expect(front.take() == ["GET \(Routes.deployment)"])
                #expect(try ProfileMoveTests.current(old) == [world.baseURL: "nora"])
            }
        }
    }

    @Test func aRelayGivingThisDeploymentsIdPassesTheChecksAndGetsTheSession() async throws {
        try await ClientWorld.run(.sqlite) { world in
            let (old, account) = try await ProfileMoveTests.patient(world, "a", "olga")
            // What the checks cannot tell: a relay passing everything on to this deployment. The move goes
            // through, and the session token went to the relay: the reason to move only to an announced address.
            try await RecordingFront.run(over: world.repository, adminKey: world.admin.publicKey, deploymentID: nil) { url, front in
                let there = try ProfileMoveTests.manager(world, "a", server: url)
                let moved = try await old.moveProfile(to: url, through: there.transport, password: { throw Unexpected() })
                #expect(moved.check == .session && moved.deployment == .same)
                #expect(front.take() == ["GET \(Routes.deployment)", "POST \(Routes.loginParameters)", "GET \(Routes.me) +auth"])
                #expect(try there.unlockRemembered()?.session?.token == account.session?.token)
            }
        }
    }
}

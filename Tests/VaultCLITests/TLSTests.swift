import AsyncHTTPClient
import Foundation
import NIOSSL
import Testing
import VaultAPI
import VaultClient

/// A throwaway CA and a server certificate for 127.0.0.1 and localhost, made with openssl.
struct TestPKI {
    static let openssl = ["/usr/bin/openssl", "/usr/local/bin/openssl"].first { FileManager.default.isExecutableFile(atPath: $0) }
    let dir: URL
    var caCert: URL { dir.appendingPathComponent("ca.pem") }
    var serverCert: URL { dir.appendingPathComponent("server.pem") }
    var serverKey: URL { dir.appendingPathComponent("server.key") }

    /// A CA in `dir`, and, when `server` is set, a certificate it signed for `names` (subjectAltName).
    init(in dir: URL, server: Bool = true, names: String = "DNS:localhost,IP:127.0.0.1") async throws {
        self.dir = dir
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try await run(["req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=CareVault test CA", "-days", "2"])
        guard server else { return }
        try Data("subjectAltName=\(names)\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n".utf8)
            .write(to: dir.appendingPathComponent("ext.cnf"))
        try await run(["req"] + ec + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"])
        try await run([
            "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "server.pem",
            "-days", "2", "-extfile", "ext.cnf",
        ])
    }

    /// Runs openssl in `dir` to its end, waited for without holding a thread (`ChildProcess.exited`).
    func run(_ args: [String]) async throws {
        let p = ChildProcess()
        p.executableURL = URL(fileURLWithPath: try #require(Self.openssl))
        p.arguments = args
        p.currentDirectoryURL = dir
        p.standardOutput = .null
        p.standardError = .null
        try p.run()
        try await p.exited()
        try #require(p.terminationStatus == 0, "openssl \(args.joined(separator: " "))")
    }
}

/// HTTPS end to end (Docs/operations.md): the real server with a certificate from a private CA, the tools
/// trusting that CA through --ca-cert, and refusing a server their CA did not sign.
@Suite("TLS: HTTPS, HTTP/2 and a private CA", .serialized, .enabled(if: TestPKI.openssl != nil, "needs openssl (Scripts/setup installs it)"))
struct TLSTests {
    /// Starts carevault-server over HTTPS with JSON logs; returns it, its https URL and its stderr file.
    static func startServer(_ t: Tools, pki: TestPKI, adminPub: URL) async throws -> (ChildProcess, String, URL) {
        let p = ChildProcess()
        p.executableURL = Tools.bin.appendingPathComponent("carevault-server")
        p.arguments = [
            "--admin-key", adminPub.path, "--port", "0", "--database", "sqlite:" + t.root.appendingPathComponent("tls.sqlite").path,
            "--tls-cert", pki.serverCert.path, "--tls-key", pki.serverKey.path, "--log-format", "json", "--log-level", "debug",
        ]
        p.environment = t.env
        let out = t.root.appendingPathComponent("tls-server.out")
        let err = t.root.appendingPathComponent("tls-server.err")
        p.standardOutput = try ChildStdio.output(to: out)
        p.standardError = try ChildStdio.output(to: err)
        try p.run()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            if let text = try? String(contentsOf: out, encoding: .utf8),
                let r = text.range(of: "https://127.0.0.1:[0-9]+", options: .regularExpression)
            {
                return (p, String(text[r]), err)
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        p.signalIfRunning(SIGTERM)
        throw Tools.ToolMissing(path: "carevault-server with TLS did not start within 30 s")
    }

    @Test func patientOverHTTPSWithPrivateCAAndRefusalWithout() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let pki = try await TestPKI(in: t.root.appendingPathComponent("pki"))
        let rogue = try await TestPKI(in: t.root.appendingPathComponent("rogue"), server: false)
        let adminDir = t.root.appendingPathComponent("admin")
        #expect(try await t.run("carevault-admin", ["keygen", "--out", adminDir.path]).status == 0)
        let pub = adminDir.appendingPathComponent("admin.pub")
        let (server, url, serverLog) = try await Self.startServer(t, pki: pki, adminPub: pub)
        defer {
            server.stopIfRunning()
        }
        let password = "alice's long password"
        let common = [
            "CAREVAULT_SERVER": url, "CAREVAULT_ADMIN_KEY": pub.path, "CAREVAULT_ADMIN_SECRET": adminDir.appendingPathComponent("admin.key").path,
            "CAREVAULT_CA_CERT": pki.caCert.path,
        ]
        func patient(_ args: [String], extra: [String: String] = [:]) async throws -> Tools.Result {
            try await t.run("carevault-patient", args, home: "alice", password: password, extra: common.merging(extra) { _, b in b })
        }
        #expect(try await patient(["register", "--username", "alice"]).status == 0)
        #expect(try await t.run("carevault-admin", ["approve", "--all"], extra: common).status == 0)
        let login = try await patient(["login", "--username", "alice", "--remember"])
        #expect(login.status == 0, "\(login.stderr)")
        let add = try await patient([
            "activity", "add", "--id", "walk", "--title", "Walk", "--category", "interventions", "--schedule", "daily@08:00",
        ])
        #expect(add.status == 0, "\(add.stderr)")
        let sync = try await patient(["sync"])
        #expect(sync.status == 0, "\(sync.stderr)")

        // Without the private CA (the system's roots), and with another CA: no connection, exit 69, plain words.
        let noCA = try await patient(["sync"], extra: ["CAREVAULT_CA_CERT": ""])
        #expect(noCA.status == 69, "\(noCA.stderr)")
        // The error names the certificate (whose it is) and does not send the user looking for a stopped server.
        #expect(noCA.stderr.contains("the certificate of 127.0.0.1:") && noCA.stderr.contains("is not trusted"), "\(noCA.stderr)")
        #expect(noCA.stderr.contains("--ca-cert") && !noCA.stderr.contains("is carevault-server running"), "\(noCA.stderr)")
        let otherCA = try await patient(["sync", "--ca-cert", rogue.caCert.path])
        #expect(otherCA.status == 69, "\(otherCA.stderr)")
        #expect(otherCA.stderr.contains("not signed by the CA of --ca-cert"), "\(otherCA.stderr)")
        // A file that is no certificate is a usage error, before any request.
        let notPEM = try await patient(["sync", "--ca-cert", pki.serverKey.path])
        #expect(notPEM.status == 64 && notPEM.stderr.contains("not a PEM certificate"), "\(notPEM.stderr)")
        let missing = try await patient(["sync", "--ca-cert", t.root.appendingPathComponent("nope.pem").path])
        #expect(missing.status == 64 && missing.stderr.contains("cannot read"), "\(missing.stderr)")

        try await Self.checkProtocols(url: url, ca: pki.caCert)

        // --log-format json: every line one JSON object, and no password or session token in any of them.
        let log = try String(contentsOf: serverLog, encoding: .utf8)
        let lines = log.split(separator: "\n")
        #expect(lines.count > 3)
        for line in lines {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object?["message"] is String && object?["level"] is String && object?["time"] is String, "\(line)")
        }
        #expect(!log.contains(password) && !log.contains("Bearer"))
        #expect(log.contains("/v1/records"), "request logging reached the JSON handler")
    }

    /// HTTP/2 is negotiated through ALPN when the client offers it, and HTTP/1.1 still served to a client that does not.
    static func checkProtocols(url: String, ca: URL) async throws {
        for (version, expected) in [(HTTPClient.Configuration.HTTPVersion.automatic, "2"), (.http1Only, "1.1")] {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(ca.path))
            var config = HTTPClient.Configuration(tlsConfiguration: tls)
            config.httpVersion = version
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
            do {
                let response = try await client.execute(HTTPClientRequest(url: url + "/ready"), timeout: .seconds(10))
                #expect(response.status.code == 200)
                let seen = response.version.major == 2 ? "2" : "\(response.version.major).\(response.version.minor)"
                #expect(seen == expected, "the server answered over HTTP/\(seen)")
                _ = try await response.body.collect(upTo: 1 << 16)
            } catch {
                Issue.record("GET /ready over HTTP/\(expected): \(error)")
            }
            try await client.shutdown()
        }
    }

    /// verify-full as libpq and curl mean it (Docs/operations.md §1): the certificate must name the host as
    /// given. One for `IP:127.0.0.1` only is refused when the server is reached as `localhost`, though that
    /// name leads to that address (NIOSSL alone accepts it), and taken when `127.0.0.1` is given; one that
    /// names `localhost` is taken under that name, and every request then goes to the address checked.
    @Test func theCertificateMustNameTheHostAsGiven() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let ipOnly = try await TestPKI(in: t.root.appendingPathComponent("ip-only"), names: "IP:127.0.0.1")
        #expect(try await t.run("carevault-admin", ["keygen", "--out", t.root.appendingPathComponent("admin").path]).status == 0)
        let pub = t.root.appendingPathComponent("admin/admin.pub")
        let (server, url, _) = try await Self.startServer(t, pki: ipOnly, adminPub: pub)
        defer { server.stopIfRunning() }
        let byName = url.replacingOccurrences(of: "127.0.0.1", with: "localhost")
        let address = try Transport(baseURL: url, maxAttempts: 1, caCertificate: ipOnly.caCert.path)
        #expect(try await !address.send(AdminEndpoints.deployment).deploymentID.isEmpty, "the address given is the address named")
        do {
            _ = try await Transport(baseURL: byName, maxAttempts: 1, caCertificate: ipOnly.caCert.path).send(AdminEndpoints.deployment)
            Issue.record("a certificate for IP:127.0.0.1 only was taken for localhost")
        } catch let ClientError.serverUnreachable(message) {
            #expect(message.contains("is not issued for localhost (it names IP:127.0.0.1"), "\(message)")
        }
        // The tools say the same, with exit 69, before any credential leaves.
        let env = ["CAREVAULT_SERVER": byName, "CAREVAULT_CA_CERT": ipOnly.caCert.path, "CAREVAULT_ADMIN_KEY": pub.path]
        let register = try await t.run(
            "carevault-patient",
            ["register", "--username", "alice"],
            home: "alice",
            password: "alice's long password",
            extra: env
        )
        #expect(register.status == 69 && register.stderr.contains("is not issued for localhost"), "\(register.stderr)")
        await server.stop()

        // A certificate that names localhost is taken under that name.
        let named = try await TestPKI(in: t.root.appendingPathComponent("named"), names: "DNS:localhost")
        let (second, secondURL, _) = try await Self.startServer(t, pki: named, adminPub: pub)
        defer { second.stopIfRunning() }
        let good = try Transport(baseURL: secondURL.replacingOccurrences(of: "127.0.0.1", with: "localhost"), caCertificate: named.caCert.path)
        #expect(try await !good.send(AdminEndpoints.deployment).deploymentID.isEmpty)
        #expect(try await !good.send(AdminEndpoints.deployment).deploymentID.isEmpty, "a second request on the address checked")
        await second.stop()

        // One for another name: refused, and the message says which names it does carry.
        let other = try await TestPKI(in: t.root.appendingPathComponent("other"), names: "DNS:vault.internal")
        let (third, thirdURL, _) = try await Self.startServer(t, pki: other, adminPub: pub)
        defer { third.stopIfRunning() }
        do {
            let byOtherName = thirdURL.replacingOccurrences(of: "127.0.0.1", with: "localhost")
            _ = try await Transport(baseURL: byOtherName, maxAttempts: 1, caCertificate: other.caCert.path).send(AdminEndpoints.deployment)
            Issue.record("a certificate for vault.internal was taken for localhost")
        } catch let ClientError.serverUnreachable(message) {
            // The names come from a second handshake made only to read them (best effort; the refusal stands).
            #expect(message.contains("is not issued for localhost"), "\(message)")
            #expect(!message.contains("(it names") || message.contains("(it names DNS:vault.internal"), "\(message)")
        }
    }

    @Test func serverRefusesBadTLSFilesWithUsageStatus() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        let pki = try await TestPKI(in: t.root.appendingPathComponent("pki"))
        #expect(try await t.run("carevault-admin", ["keygen", "--out", t.root.appendingPathComponent("admin").path]).status == 0)
        let pub = t.root.appendingPathComponent("admin/admin.pub").path
        let cases: [([String], String)] = [
            (["--tls-cert", t.root.appendingPathComponent("nope.pem").path, "--tls-key", pki.serverKey.path], "no such file"),
            (["--tls-cert", pki.serverKey.path, "--tls-key", pki.serverKey.path], "not a PEM certificate"),
            (["--tls-cert", pki.caCert.path, "--tls-key", pki.serverKey.path], "does not belong to the certificate"),
            (["--tls-cert", pki.serverCert.path, "--tls-key", pki.serverCert.path], "not a PEM unencrypted private key"),
            (["--tls-cert", pki.serverCert.path], "go together"),
        ]
        for (args, message) in cases {
            let r = try await t.run("carevault-server", ["--admin-key", pub, "--port", "0", "--database", "sqlite::memory:"] + args)
            #expect(r.status == 64, "\(args): \(r.stderr)")
            #expect(r.stderr.contains(message), "\(args): \(r.stderr)")
        }
    }

    @Test func everyToolPrintsTheOneVersion() async throws {
        let t = try Tools()
        defer { try? FileManager.default.removeItem(at: t.root) }
        #expect(CareVaultVersion.current.hasPrefix(CareVaultVersion.release + " (API v1, envelope format 1)"))
        for tool in ["carevault-patient", "carevault-doctor", "carevault-admin", "carevault-server", "carevault-bench"] {
            let r = try await t.run(tool, ["--version"])
            #expect(r.status == 0, "\(tool)")
            #expect(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == CareVaultVersion.current, "\(tool): \(r.stdout)")
        }
    }
}

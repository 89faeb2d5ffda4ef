import Foundation
import Hummingbird
import Logging

/// Where `/metrics` is served when it has a listener of its own (Docs/operations.md §2): by default the
/// loopback address, so it stays off the public network without a proxy in front.
public struct MetricsAddress: Sendable, Equatable {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `HOST:PORT` (`[::1]:9464` for IPv6), or nil when it is not one.
    public init?(_ text: String) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65_535).contains(port) else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        self.init(host: host, port: port)
    }
}

/// The listener of `/metrics` alone (a router of one route), run beside the API's application.
func metricsApplication(_ address: MetricsAddress, logger: Logger) -> some ApplicationProtocol {
    let router = Router()
    router.get("/metrics") { _, _ in MonitoringController.expositionResponse(ServerMetrics.shared) }
    return Application(
        router: router,
        configuration: .init(address: .hostname(address.host, port: address.port), serverName: "carevault-metrics"),
        onServerRunning: { channel in
            // Through the log, so that --log-format json keeps every line of it one JSON object.
            let port = channel.localAddress?.port ?? address.port
            logger.notice("metrics listening", metadata: ["url": "http://\(address.host):\(port)/metrics"])
        },
        logger: logger
    )
}

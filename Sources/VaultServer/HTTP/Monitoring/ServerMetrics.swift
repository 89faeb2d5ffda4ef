import Foundation
import Metrics
import Prometheus

/// The server's metrics, exported by `GET /metrics` in Prometheus's text format (Docs/operations.md).
///
/// Hummingbird's `MetricsMiddleware` and the counters here report through swift-metrics, whose backend
/// is process-wide and set once: the first use of `shared` bootstraps it with this registry, so
/// `buildRouter` touches `shared` before any metric is created. Labels are route templates, methods and
/// status codes only: /metrics may be read by a monitoring system that must learn no usernames or ids.
public final class ServerMetrics: Sendable {
    /// The process's metrics.
    public static let shared = ServerMetrics()

    let registry = PrometheusCollectorRegistry()
    /// Envelopes stored by pushes (duplicates and refusals not counted).
    let recordsPushed: Metrics.Counter
    /// Envelopes handed out by pulls, to patients and doctors.
    let recordsPulled: Metrics.Counter
    /// Login attempts refused (wrong credentials, account not approved or rejected).
    let loginFailures: Metrics.Counter
    /// Transactions of `AuditBatcher`, each appending one batch of audit entries under one head lock.
    let auditBatches: Metrics.Counter
    /// Entries per batch (a histogram: its sum over its count is the mean batch).
    let auditBatchSize: Metrics.Recorder
    /// How long each batch's transaction took, waiting for the head's lock included.
    let auditAppendDuration: Metrics.Timer

    private init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.nameAndLabelSanitizer = { name, labels in
            (Self.names[name] ?? Self.sanitized(name), labels.map { (Self.labels[$0.0] ?? Self.sanitized($0.0), Self.value($0.0, $0.1)) })
        }
        factory.valueHistogramBuckets["carevault_audit_batch_size"] = [1, 2, 4, 8, 16, 32, 64, 128, 256]
        MetricsSystem.bootstrap(factory)
        recordsPushed = Counter(label: "carevault_records_pushed_total")
        recordsPulled = Counter(label: "carevault_records_pulled_total")
        loginFailures = Counter(label: "carevault_login_failures_total")
        auditBatches = Counter(label: "carevault_audit_batches_total")
        auditBatchSize = Recorder(label: "carevault_audit_batch_size")
        auditAppendDuration = Metrics.Timer(label: "carevault_audit_append_duration_seconds")
    }

    /// Prometheus names for the metrics Hummingbird's `MetricsMiddleware` reports under OpenTelemetry-style labels.
    static let names = [
        "hb.requests": "carevault_http_requests_total",
        "hb.request.errors": "carevault_http_request_errors_total",
        "http.server.request.duration": "carevault_http_request_duration_seconds",
        "http.server.active_requests": "carevault_http_active_requests",
    ]
    static let labels = ["http.route": "route", "http.request.method": "method", "http.response.status_code": "status", "error.type": "status"]

    /// The methods the API knows. Any other method becomes `OTHER`, so a client sending made-up methods
    /// cannot grow the exported series without bound.
    static let methods: Set<String> = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"]

    static func value(_ label: String, _ value: String) -> String {
        label == "http.request.method" && !methods.contains(value) ? "OTHER" : value
    }

    /// A Prometheus metric or label name: letters, digits and underscores.
    static func sanitized(_ name: String) -> String {
        String(name.map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "_" })
    }

    /// Every metric in Prometheus's text exposition format 0.0.4.
    public func exposition() -> [UInt8] {
        var bytes: [UInt8] = []
        registry.emit(into: &bytes)
        return bytes
    }
}

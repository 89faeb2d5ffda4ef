// swift-tools-version: 6.0
// CareVault: end-to-end encrypted sharing of care-plan data. See Docs/design.md §1 for the module
// map; dependencies only point down: CLIs -> VaultCLI -> VaultClient -> VaultAPI/VaultCore -> VaultCrypto.
import PackageDescription

let package = Package(
    name: "CareVault",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "VaultCrypto", targets: ["VaultCrypto"]),
        .library(name: "VaultCore", targets: ["VaultCore"]),
        .library(name: "VaultAPI", targets: ["VaultAPI"]),
        .library(name: "VaultServer", targets: ["VaultServer"]),
        .library(name: "VaultClient", targets: ["VaultClient"]),
        .executable(name: "carevault-server", targets: ["carevault-server"]),
        .executable(name: "carevault-patient", targets: ["carevault-patient"]),
        .executable(name: "carevault-doctor", targets: ["carevault-doctor"]),
        .executable(name: "carevault-admin", targets: ["carevault-admin"]),
        .executable(name: "carevault-bench", targets: ["carevault-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
    ],
    targets: [
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"]), .brew(["libsodium"])]
        ),
        .target(name: "VaultCrypto", dependencies: ["CSodium"]),
        // glibc's cap on its allocator's arenas, set by each tool and the server when they start
        // (Docs/benchmarks.md §5 and §7: one arena per thread kept memory no thread used any more).
        .target(name: "CAllocator"),
        .target(name: "VaultCore", dependencies: ["VaultCrypto"]),
        .target(name: "VaultAPI", dependencies: ["VaultCore", "VaultCrypto"]),
        .target(
            name: "VaultSQLite",
            dependencies: [.product(name: "GRDB", package: "GRDB.swift"), .product(name: "GRDBSQLite", package: "GRDB.swift")]
        ),
        .target(
            name: "VaultTLS",
            dependencies: [
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .target(
            name: "VaultServer",
            dependencies: [
                "VaultAPI", "VaultCore", "VaultCrypto", "VaultTLS",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                "VaultSQLite",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "VaultClient",
            dependencies: [
                "VaultAPI", "VaultCore", "VaultCrypto", "VaultTLS",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "GRDB", package: "GRDB.swift"),
                "VaultSQLite",
            ]
        ),
        .executableTarget(
            name: "carevault-server",
            dependencies: [
                "VaultServer", "VaultAPI", "VaultCrypto", "CAllocator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "VaultCLI",
            dependencies: [
                "VaultClient", "VaultAPI", "VaultCore", "VaultCrypto", "CAllocator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The local dashboard (Docs/dashboard.md): pages served by the user's own tool on 127.0.0.1 from its
        // decrypted view, escaped by the template engine.
        .target(
            name: "VaultDashboard",
            dependencies: [
                "VaultCLI", "VaultClient", "VaultAPI", "VaultCore", "VaultCrypto",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "carevault-patient",
            dependencies: [
                "VaultDashboard", "VaultCLI", "VaultClient", "VaultCore", "VaultCrypto", "VaultAPI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "carevault-doctor",
            dependencies: [
                "VaultDashboard", "VaultCLI", "VaultClient", "VaultCore", "VaultCrypto", "VaultAPI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "carevault-admin",
            dependencies: [
                "VaultCLI", "VaultClient", "VaultCore", "VaultCrypto", "VaultAPI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The clinic simulation's final audit, apart from the benchmark so that it is tested.
        .target(name: "ClinicAudit"),
        // Benchmarks against the physical floors (Scripts/bench builds it in release mode).
        .executableTarget(
            name: "carevault-bench",
            dependencies: [
                "ClinicAudit", "VaultServer", "VaultClient", "VaultAPI", "VaultCore", "VaultCrypto", "CSodium",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "VaultCryptoTests", dependencies: ["VaultCrypto"]),
        .testTarget(name: "VaultCoreTests", dependencies: ["VaultCore", "VaultCrypto"]),
        .testTarget(name: "ClinicAuditTests", dependencies: ["ClinicAudit"]),
        // Test-only helpers shared by the suites: fresh SQLite/PostgreSQL databases, a movable clock.
        .target(
            name: "VaultTestSupport",
            dependencies: [
                "VaultServer", "VaultCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/Support"
        ),
        .testTarget(
            name: "VaultServerTests",
            dependencies: [
                "VaultServer", "VaultAPI", "VaultCore", "VaultCrypto", "VaultSQLite", "VaultTestSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
        .testTarget(
            name: "VaultCLITests",
            dependencies: [
                "VaultCLI", "VaultClient", "VaultCore", "VaultCrypto", "VaultAPI", "VaultTestSupport", "CAllocator",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .testTarget(
            name: "VaultDashboardTests",
            dependencies: [
                "VaultDashboard", "VaultClient", "VaultCore", "VaultAPI",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
        .testTarget(
            name: "VaultClientTests",
            dependencies: [
                "VaultClient", "VaultServer", "VaultAPI", "VaultCore", "VaultCrypto", "VaultTestSupport", "VaultTLS",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// libFuzzer targets, one per decoder of untrusted bytes (Scripts/fuzz builds them with
// `--sanitize=fuzzer --sanitize=address` in .build-fuzz). Declared only when CAREVAULT_FUZZ is set, so the
// normal build and `swift test` never compile them.
if Context.environment["CAREVAULT_FUZZ"] != nil {
    package.targets.append(.target(name: "FuzzSupport", dependencies: ["VaultAPI", "VaultCore", "VaultCrypto"], path: "Fuzz/Support"))
    for name in ["envelope", "certificate", "approval", "grant", "keybundle", "registration", "payload", "schedule", "pushbody"] {
        package.targets.append(
            .executableTarget(
                name: "fuzz-\(name)",
                dependencies: ["FuzzSupport", "VaultAPI", "VaultCore", "VaultCrypto"],
                path: "Fuzz/Targets/\(name)"
            )
        )
    }
}

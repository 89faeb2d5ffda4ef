// swift-tools-version: 6.0
// CareVault: end-to-end encrypted sharing of care-plan data. See Docs/ and ../shared/DESIGN.md §1 for the
// module map; dependencies only point down: CLIs -> VaultCLI -> VaultClient -> VaultAPI/VaultCore -> VaultCrypto.
import PackageDescription

let package = Package(
    name: "CareVault",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "VaultCrypto", targets: ["VaultCrypto"]),
        .library(name: "VaultCore", targets: ["VaultCore"]),
    ],
    targets: [
        .systemLibrary(
            name: "CSodium",
            pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"]), .brew(["libsodium"])]
        ),
        .target(name: "VaultCrypto", dependencies: ["CSodium"]),
        .target(name: "VaultCore", dependencies: ["VaultCrypto"]),
        .testTarget(name: "VaultCryptoTests", dependencies: ["VaultCrypto"]),
        .testTarget(name: "VaultCoreTests", dependencies: ["VaultCore", "VaultCrypto"]),
    ],
    swiftLanguageModes: [.v6]
)

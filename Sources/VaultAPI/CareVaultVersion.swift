import VaultCore

/// The one version of the CareVault tools and server, printed by every tool's `--version`.
public enum CareVaultVersion {
    /// The release.
    public static let release = "0.9.0"
    /// The HTTP API the tools speak and the server serves (`/v1`, openapi.yaml).
    public static let api = "v1"
    /// `--version` text: the release with the API and envelope format versions (Docs/envelope-v1.md §4).
    public static let current = "\(release) (API \(api), envelope format \(Envelope.formatVersion))"
}

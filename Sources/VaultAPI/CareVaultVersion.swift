import VaultCore

/// The one version of the CareVault tools and server, printed by every tool's `--version`, and which
/// clients a server serves (Docs/design.md §8).
public enum CareVaultVersion {
    /// The release.
    public static let release = "0.10.0"
    /// The HTTP API the tools speak and the server serves (`/v1`, openapi.yaml).
    public static let api = "v1"
    /// `--version` text: the release with the API and envelope format versions (Docs/envelope-v1.md §4).
    public static let current = "\(release) (API \(api), envelope format \(Envelope.formatVersion))"

    /// The request header in which a client names its release, on every request (Docs/design.md §8).
    public static let clientHeader = "CareVault-Client"
    /// The oldest client release this server serves: the first that speaks only the binary record wire
    /// and names itself. A `/v1` request naming an older release, or none, is answered 426 `upgrade_required`.
    public static let minimumClient = Release(major: 0, minor: 10, patch: 0)

    /// A release number `major.minor.patch`, compared number by number.
    public struct Release: Sendable, Hashable, Comparable, CustomStringConvertible {
        public var major: Int
        public var minor: Int
        public var patch: Int

        public init(major: Int, minor: Int, patch: Int) {
            self.major = major
            self.minor = minor
            self.patch = patch
        }

        /// Reads `0.10.0`; a suffix after `-` or `+` (a pre-release or build tag) is ignored. Nil for
        /// anything else: three numbers of at most six digits each, no signs, no spaces.
        public init?(_ text: some StringProtocol) {
            let core = text.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)[0]
                .split(separator: "+", maxSplits: 1, omittingEmptySubsequences: false)[0]
            let parts = core.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count == 3 else { return nil }
            let numbers = parts.compactMap { part -> Int? in
                guard (1...6).contains(part.count), part.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
                return Int(part)
            }
            guard numbers.count == 3 else { return nil }
            self.init(major: numbers[0], minor: numbers[1], patch: numbers[2])
        }

        public var description: String { "\(major).\(minor).\(patch)" }

        public static func < (a: Release, b: Release) -> Bool {
            (a.major, a.minor, a.patch) < (b.major, b.minor, b.patch)
        }
    }
}

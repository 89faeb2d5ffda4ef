import CSodium

/// One-time, thread-safe initialisation of libsodium. Every entry point of VaultCrypto calls
/// `Sodium.ensureInitialized()` first; Swift runs a static `let` initialiser exactly once, even under contention.
public enum Sodium {
    private static let initResult: Int32 = sodium_init()

    /// Initialises libsodium if that has not happened yet. `sodium_init` returns 1 when it already ran,
    /// 0 on first success and -1 only if the library cannot work at all (no entropy source), which no
    /// caller could recover from, so that single case stops the process.
    @inline(__always)
    public static func ensureInitialized() {
        precondition(initResult >= 0, "libsodium could not be initialised (no entropy source)")
    }

    /// The libsodium version string the process is linked against, e.g. "1.0.18".
    public static var version: String {
        ensureInitialized()
        return String(cString: sodium_version_string())
    }
}

import Foundation
import NIOSSL

/// The host-name check that `verify-full` means (RFC 6125 §6, as libpq and curl apply it): a certificate
/// must name the host **as the user gave it**. NIOSSL's own check also accepts a certificate whose IP address
/// entry matches the address the connection reached, whatever name was asked for; a server reached as
/// `vault.internal` with a certificate for `IP:10.0.0.5` only passes it. This check does not.
public enum ServerName {
    /// Whether `certificate` names `host`: a DNS name by a dNSName entry (a wildcard only as the whole
    /// leftmost label, matching one label), an IP address by an iPAddress entry of the same bytes. A
    /// certificate without subject alternative names is left to NIOSSL's check of its common name, which
    /// compares names only.
    public static func certificate(_ certificate: NIOSSLCertificate, names host: String) -> Bool {
        let entries = certificate._subjectAlternativeNames()
        guard entries.startIndex != entries.endIndex else { return true }
        let bare = Self.bare(host)
        if let address = Self.addressBytes(bare) {
            return entries.contains { $0.nameType == .ipAddress && Array($0.contents) == address }
        }
        let wanted = Self.normalized(bare)
        return entries.contains { entry in
            entry.nameType == .dnsName && Self.matches(pattern: Self.normalized(String(decoding: Array(entry.contents), as: UTF8.self)), host: wanted)
        }
    }

    /// The names a certificate's subject alternative names give, for a message ("DNS:…", "IP:…"): printable
    /// ASCII only, each cut at 100 characters, the first 8 (the certificate is the server's words).
    public static func listed(_ certificate: NIOSSLCertificate) -> [String] {
        let names: [String] = certificate._subjectAlternativeNames().compactMap { entry in
            let bytes = Array(entry.contents)
            switch entry.nameType {
            case .dnsName: return "DNS:" + String(bytes.filter { (0x21...0x7E).contains($0) }.prefix(100).map { Character(UnicodeScalar($0)) })
            case .ipAddress: return "IP:" + Self.addressText(bytes)
            default: return nil
            }
        }
        return names.count > 8 ? Array(names.prefix(8)) + ["\(names.count - 8) more"] : names
    }

    /// Whether `host` is an IP address literal (brackets allowed), which NIOSSL's own check already
    /// compares with the certificate's iPAddress entries exactly.
    public static func isAddress(_ host: String) -> Bool { addressBytes(bare(host)) != nil }

    static func bare(_ host: String) -> String {
        host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    }

    static func normalized(_ name: String) -> String {
        let lower = name.lowercased()
        return lower.hasSuffix(".") ? String(lower.dropLast()) : lower
    }

    static func matches(pattern: String, host: String) -> Bool {
        guard !pattern.isEmpty, !host.isEmpty else { return false }
        guard pattern.hasPrefix("*.") else { return pattern == host }
        let rest = pattern.dropFirst(2)
        // "*.internal" would cover a whole top-level name: a wildcard needs two labels after it.
        guard rest.contains("."), !rest.contains("*"), let dot = host.firstIndex(of: ".") else { return false }
        return dot > host.startIndex && host[host.index(after: dot)...] == rest
    }

    static func addressBytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }

    static func addressText(_ bytes: [UInt8]) -> String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        guard bytes.count == 16 else { return "?" }
        return stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }.joined(separator: ":")
    }
}

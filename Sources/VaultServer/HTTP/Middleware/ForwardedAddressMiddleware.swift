import Foundation
import HTTPTypes
import Hummingbird

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Behind a reverse proxy every request comes from the proxy, so rate limits and the audit log would see
/// one address for everyone. With `--trusted-proxy CIDR` the client address is taken from
/// `X-Forwarded-For` instead, but only when the peer is a trusted proxy: each trusted proxy appends the
/// address it was connected from, so the chain is read from the right and the first address that is not
/// a trusted proxy is the client (Docs/operations.md §3). Anything left of it was written by the client
/// and is ignored; a peer that is not trusted has its header ignored altogether, so a client cannot pick
/// its own address to escape a rate limit.
struct ForwardedAddressMiddleware: RouterMiddleware {
    typealias Context = VaultRequestContext

    static let header = HTTPField.Name("X-Forwarded-For")!
    /// Chain entries looked at, at most; a longer chain stops at the last trusted hop.
    static let maxHops = 32

    let trustedProxies: [IPNetwork]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard !trustedProxies.isEmpty else { return try await next(request, context) }
        var context = context
        context.clientAddress = Self.clientAddress(
            peer: context.clientAddress,
            forwardedFor: request.headers[values: Self.header],
            trusted: trustedProxies
        )
        return try await next(request, context)
    }

    /// The client address for a request from `peer` carrying the `X-Forwarded-For` lines `forwardedFor`.
    static func clientAddress(peer: String, forwardedFor: [String], trusted: [IPNetwork]) -> String {
        guard let peerAddress = IPAddress(peer), trusted.contains(where: { $0.contains(peerAddress) }) else { return peer }
        let chain = forwardedFor.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        var lastTrusted = peerAddress
        for entry in chain.reversed().prefix(maxHops) {
            // A malformed entry was not written by a proxy that appends addresses: stop at the hop before it.
            guard let address = IPAddress(forwarded: entry) else { break }
            guard trusted.contains(where: { $0.contains(address) }) else { return address.description }
            lastTrusted = address
        }
        return lastTrusted.description
    }
}

/// An IPv4 or IPv6 address as its bytes; an IPv4-mapped IPv6 address is its IPv4 address.
public struct IPAddress: Sendable, Equatable, CustomStringConvertible {
    /// 4 bytes for IPv4, 16 for IPv6.
    public let bytes: [UInt8]

    /// Parses dotted IPv4 or textual IPv6; nil for anything else (names are not resolved).
    public init?(_ text: String) {
        var v4 = in_addr()
        var v6 = in6_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
        } else if inet_pton(AF_INET6, text, &v6) == 1 {
            let b = withUnsafeBytes(of: &v6) { Array($0) }
            bytes = b.prefix(12).elementsEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]) ? Array(b.suffix(4)) : b
        } else {
            return nil
        }
    }

    /// Parses an `X-Forwarded-For` entry, which some proxies write with a port (`192.0.2.1:443`, `[2001:db8::1]:443`).
    init?(forwarded text: String) {
        if let parsed = IPAddress(text) {
            self = parsed
        } else if text.hasPrefix("["), let end = text.firstIndex(of: "]") {
            guard let parsed = IPAddress(String(text[text.index(after: text.startIndex)..<end])) else { return nil }
            self = parsed
        } else if let colon = text.firstIndex(of: ":"), text.filter({ $0 == ":" }).count == 1,
            let parsed = IPAddress(String(text[..<colon])), parsed.bytes.count == 4
        {
            self = parsed
        } else {
            return nil
        }
    }

    /// The canonical text, so that one address always counts under one rate-limit key however it was written.
    public var description: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        let ok = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &buffer, socklen_t(buffer.count)) } != nil
        return ok ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "unknown"
    }
}

/// An address block in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`); a bare address is a block of one.
public struct IPNetwork: Sendable, Equatable, CustomStringConvertible {
    /// The first address of the block.
    public let address: IPAddress
    /// The number of leading bits that must match.
    public let prefixLength: Int

    /// Parses `ADDRESS/BITS` or `ADDRESS`; throws a plain message for anything else.
    public init(_ text: String) throws {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard let address = IPAddress(parts[0]) else {
            throw ConfigurationError.invalid("'\(text)' is not an address block: use CIDR notation such as 10.0.0.0/8 or 2001:db8::/32")
        }
        let maxLength = address.bytes.count * 8
        // ::ffff:10.0.0.0/104 is the IPv4 block 10.0.0.0/8.
        let mappedOffset = parts[0].contains(":") && address.bytes.count == 4 ? 96 : 0
        var length = maxLength
        if parts.count == 2 {
            guard parts[1].allSatisfy(\.isASCII), let n = Int(parts[1]), (0...maxLength).contains(n - mappedOffset) else {
                throw ConfigurationError.invalid("'\(text)': the prefix length after / must be a number from 0 to \(maxLength + mappedOffset)")
            }
            length = n - mappedOffset
        }
        self.address = address
        self.prefixLength = length
    }

    /// Whether `candidate` lies in this block (an IPv4 address is never in an IPv6 block, or the reverse).
    public func contains(_ candidate: IPAddress) -> Bool {
        guard candidate.bytes.count == address.bytes.count else { return false }
        var remaining = prefixLength
        for (a, b) in zip(address.bytes, candidate.bytes) where remaining > 0 {
            let bits = min(8, remaining)
            let mask = UInt8(truncatingIfNeeded: 0xff << (8 - bits))
            if a & mask != b & mask { return false }
            remaining -= bits
        }
        return true
    }

    /// `ADDRESS/BITS`.
    public var description: String { "\(address)/\(prefixLength)" }
}

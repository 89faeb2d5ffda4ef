import Foundation
import Hummingbird
import NIOCore
import VaultAPI

/// The response encoder of `VaultRequestContext`: every JSON answer of the API leaves through here, so
/// its bytes are the same whatever the route (sorted keys, slashes unescaped, `application/json`).
public struct VaultResponseEncoder: ResponseEncoder {
    /// The one JSON configuration of the server, also used for stored envelopes so that a pull hands
    /// them back exactly as a push encoded them (Docs/design.md §5).
    static let json: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// Creates the encoder; it has no state of its own.
    public init() {}

    /// Encodes `value` as a 200 response.
    public func encode(_ value: some Encodable, from request: Request, context: some RequestContext) throws -> Response {
        // The answer to a push in its common form is written directly, the same bytes (PushResponse+Direct).
        if let push = value as? PushResponse, let bytes = push.directJSON() { return Self.response(ByteBuffer(bytes: bytes)) }
        return Self.response(ByteBuffer(bytes: try Self.json.encode(value)))
    }

    /// A 200 response carrying JSON that is already encoded.
    static func response(_ json: ByteBuffer) -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: json))
    }
}

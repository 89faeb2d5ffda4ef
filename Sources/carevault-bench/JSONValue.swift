import Foundation

/// A JSON value with ordered object keys (the output keeps the order the issue lists them in).
/// Non-finite numbers become null.
indirect enum JSONValue: Sendable {
    case null
    case bool(Bool)
    case int(Int)
    case number(Double, digits: Int)
    case string(String)
    case array([JSONValue])
    case object([(String, JSONValue)])

    static func num(_ x: Double?, _ digits: Int) -> JSONValue {
        guard let x, x.isFinite else { return .null }
        return .number(x, digits: digits)
    }

    func render(indent: Int = 0) -> String {
        let pad = String(repeating: "  ", count: indent + 1)
        let end = String(repeating: "  ", count: indent)
        switch self {
        case .null: return "null"
        case let .bool(b): return b ? "true" : "false"
        case let .int(i): return String(i)
        case let .number(x, digits):
            guard x.isFinite else { return "null" }
            let r = Measure.round(x, digits)
            return r == r.rounded() && abs(r) < 1e15 ? String(Int64(r)) + (digits > 0 ? ".0" : "") : String(r)
        case let .string(s): return Self.quote(s)
        case let .array(items):
            if items.isEmpty { return "[]" }
            return "[\n" + items.map { pad + $0.render(indent: indent + 1) }.joined(separator: ",\n") + "\n" + end + "]"
        case let .object(fields):
            if fields.isEmpty { return "{}" }
            return "{\n" + fields.map { pad + Self.quote($0.0) + ": " + $0.1.render(indent: indent + 1) }.joined(separator: ",\n") + "\n" + end + "}"
        }
    }

    static func quote(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where u.value < 0x20: out += String(format: "\\u%04x", u.value)
            default: out.unicodeScalars.append(u)
            }
        }
        return out + "\""
    }
}

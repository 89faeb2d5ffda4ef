import Foundation
import VaultAPI
import VaultCore

/// What happened, as instances tell each other (Docs/events.md §7): the hub turns a notice into the
/// events of each subscriber it concerns.
enum EventNotice: Sendable, Equatable {
    /// A push stored versions in `tresors`; `sequence` is the owner's newest.
    case change(owner: UUID, sequence: UInt64, tresors: [UUID])
    /// A share changed; its doctor hears of it only once it was approved (`approved`): a request the admin
    /// never approved, withdrawn or not, is the patient's business alone (Docs/events.md §3).
    case share(id: UUID, patient: UUID, doctor: UUID, state: ShareState, approved: Bool)
    /// The account's standing or sessions changed: its streams check their session at once.
    case account(UUID)
    /// Every subscriber may have missed something.
    case resync(reason: String)

    /// At most this many tresors per notice, so a payload stays far below PostgreSQL's 8,000 bytes.
    static let maxTresors = 64

    private struct Wire: Codable {
        var k: String
        var o: UUID?
        var s: UInt64?
        var t: [UUID]?
        var id: UUID?
        var p: UUID?
        var d: UUID?
        var st: String?
        var a: UUID?
        var r: String?
        /// Whether the share was approved; absent (an instance from before) is read as approved.
        var ap: Bool?
    }

    /// The notification payload (compact JSON).
    var payload: String {
        var w: Wire
        switch self {
        case let .change(owner, sequence, tresors): w = Wire(k: "change", o: owner, s: sequence, t: tresors)
        case let .share(id, patient, doctor, state, approved):
            w = Wire(k: "share", id: id, p: patient, d: doctor, st: state.rawValue, ap: approved)
        case let .account(a): w = Wire(k: "account", a: a)
        case let .resync(reason): w = Wire(k: "resync", r: reason)
        }
        return String(decoding: (try? Self.encoder.encode(w)) ?? Data(), as: UTF8.self)
    }

    /// A payload read back; nil for one this version cannot read (it is ignored).
    init?(payload: String) {
        guard payload.utf8.count <= 8_000, let w = try? JSONDecoder().decode(Wire.self, from: Data(payload.utf8)) else { return nil }
        switch w.k {
        case "change":
            guard let o = w.o, let s = w.s, let t = w.t, t.count <= Self.maxTresors else { return nil }
            self = .change(owner: o, sequence: s, tresors: t)
        case "share":
            guard let id = w.id, let p = w.p, let d = w.d, let st = w.st.flatMap(ShareState.init(rawValue:)) else { return nil }
            self = .share(id: id, patient: p, doctor: d, state: st, approved: w.ap ?? true)
        case "account":
            guard let a = w.a else { return nil }
            self = .account(a)
        case "resync":
            self = .resync(reason: w.r ?? "publish-failed")
        default: return nil
        }
    }

    private static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// The change notices of a push: one per `maxTresors` tresors written (none when nothing was stored).
    static func changes(owner: UUID, sequence: UInt64?, tresors: Set<UUID>) -> [EventNotice] {
        guard let sequence, !tresors.isEmpty else { return [] }
        let sorted = tresors.sorted { $0.uuidString < $1.uuidString }
        return stride(from: 0, to: sorted.count, by: maxTresors).map {
            .change(owner: owner, sequence: sequence, tresors: Array(sorted[$0..<min($0 + maxTresors, sorted.count)]))
        }
    }
}

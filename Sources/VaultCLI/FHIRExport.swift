import Foundation
import VaultClient
import VaultCore

/// Builds a FHIR R4 `Bundle` (type collection) of one patient's shared care plan: a `Patient`, a
/// `CarePlan` with one activity per CareVault activity, and an `Observation` per recorded value.
public enum FHIRExport {
    static func iso(_ d: Date) -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime]
        return f.string(from: d)
    }

    public static func bundle(
        patientID: UUID,
        username: String,
        activities: [Activity],
        outcomes: [Outcome],
        integrity: ViewIntegrity? = nil,
        generated: Date = Date()
    ) -> [String: Any] {
        let overall = FHIRIntegrity.meta(integrity.map { $0.overall })
        let pid = patientID.uuidString.lowercased()
        let planID = "careplan-" + pid
        let patient: [String: Any] = [
            "resourceType": "Patient", "id": pid,
            "identifier": [["system": "urn:carevault:username", "value": username]],
            "meta": overall,
        ]
        let byID = activities.byID
        let plan: [String: Any] = [
            "resourceType": "CarePlan", "id": planID, "status": "active", "intent": "plan",
            "title": "CareVault shared care plan",
            "subject": ["reference": "Patient/\(pid)"],
            "created": iso(generated),
            "meta": overall,
            "activity": activities.map { a -> [String: Any] in
                var detail: [String: Any] = [
                    "status": "in-progress",
                    "code": ["text": a.title],
                    "scheduledString": CareInput.describe(a.schedule),
                ]
                if let i = a.instructions { detail["description"] = i }
                return ["detail": detail]
            },
        ]
        var observations: [[String: Any]] = []
        for o in outcomes {
            let title = byID[o.activityID]?.title ?? o.activityID
            let when = byID[o.activityID]?.schedule.event(occurrence: o.occurrence)?.start
            for v in o.liveValues {
                var obs: [String: Any] = [
                    "resourceType": "Observation", "id": "obs-" + Hex.safeID(v.id), "status": "final",
                    "code": ["text": title],
                    "subject": ["reference": "Patient/\(pid)"],
                    "basedOn": [["reference": "CarePlan/\(planID)"]],
                    "effectiveDateTime": iso(when ?? v.createdAt),
                    "issued": iso(v.createdAt),
                    "meta": FHIRIntegrity.meta(integrity.map { view in byID[o.activityID].map { view[$0.category] } ?? view.overall }),
                ]
                switch v.value {
                case let .number(n):
                    var q: [String: Any] = ["value": n]
                    if let u = v.units { q["unit"] = u }
                    obs["valueQuantity"] = q
                case let .boolean(b): obs["valueBoolean"] = b
                case let .text(t): obs["valueString"] = t
                }
                if let note = o.note { obs["note"] = [["text": note]] }
                observations.append(obs)
            }
        }
        let resources: [[String: Any]] = [patient, plan] + observations
        return [
            "resourceType": "Bundle", "type": "collection", "timestamp": iso(generated), "meta": overall,
            "entry": resources.map { r in ["fullUrl": "urn:uuid:\(UUID().uuidString.lowercased())", "resource": r] },
        ]
    }
}

/// The integrity of a doctor's view as FHIR security labels and tags (Docs/design.md §5.3): every resource and
/// the Bundle carry `meta.tag` `urn:carevault:integrity` with the state (`verified`, `behind`, `unconfirmed`,
/// or `own-device` for the patient's own export), and a doctor's export also `meta.security` with HL7's
/// integrity-confidence code (v3 ObservationValue: HRELIABLE, RELIABLE, UNCERTREL).
public enum FHIRIntegrity {
    public static let tagSystem = "urn:carevault:integrity"
    public static let securitySystem = "http://terminology.hl7.org/CodeSystem/v3-ObservationValue"

    /// The `meta` of a resource in one state; nil is the patient's own records.
    static func meta(_ state: CategoryIntegrity?) -> [String: Any] {
        guard let state else {
            return ["tag": [["system": tagSystem, "code": "own-device", "display": "the patient's own device"]]]
        }
        let (code, display): (String, String) =
            switch state {
            case .verified: ("HRELIABLE", "highly reliable")
            case .behind: ("RELIABLE", "reliable")
            case .unconfirmed: ("UNCERTREL", "uncertain reliability")
            }
        return [
            "tag": [["system": tagSystem, "code": state.rawValue, "display": label(state)]],
            "security": [["system": securitySystem, "code": code, "display": display]],
        ]
    }

    static func label(_ state: CategoryIntegrity) -> String {
        switch state {
        case .verified: "matches the patient's newest signed state"
        case .behind: "the patient's signed state as of an older commitment; the server is behind it"
        case .unconfirmed: "not confirmed complete and current"
        }
    }
}

enum Hex {
    /// FHIR ids allow [A-Za-z0-9\-\.]{1,64}.
    static func safeID(_ s: String) -> String {
        String(s.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." ? $0 : "-" }.prefix(60))
    }
}

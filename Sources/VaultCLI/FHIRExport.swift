import Foundation
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
        generated: Date = Date()
    ) -> [String: Any] {
        let pid = patientID.uuidString.lowercased()
        let planID = "careplan-" + pid
        let patient: [String: Any] = [
            "resourceType": "Patient", "id": pid,
            "identifier": [["system": "urn:carevault:username", "value": username]],
        ]
        let byID = activities.byID
        let plan: [String: Any] = [
            "resourceType": "CarePlan", "id": planID, "status": "active", "intent": "plan",
            "title": "CareVault shared care plan",
            "subject": ["reference": "Patient/\(pid)"],
            "created": iso(generated),
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
            "resourceType": "Bundle", "type": "collection", "timestamp": iso(generated),
            "entry": resources.map { r in ["fullUrl": "urn:uuid:\(UUID().uuidString.lowercased())", "resource": r] },
        ]
    }
}

enum Hex {
    /// FHIR ids allow [A-Za-z0-9\-\.]{1,64}.
    static func safeID(_ s: String) -> String {
        String(s.map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." ? $0 : "-" }.prefix(60))
    }
}

import Foundation

/// The clinic simulation's final audit (Docs/benchmarks.md, "The clinic"): what the clients were told
/// against what the database holds, so that a push acknowledged but lost, or stored twice, is counted.
/// Kept apart from the benchmark (which reads the database and the devices) so that the comparison itself
/// is tested.
public enum ClinicAudit {
    /// One record as a patient's device knows it: acknowledged by the server (a sync that returned without
    /// error or rejection carried it), and how many distinct versions of it the device pushed.
    public struct Acknowledged: Hashable, Sendable {
        public var owner: UUID
        public var recordID: String
        public var versions: Int
        public init(owner: UUID, recordID: String, versions: Int = 1) {
            self.owner = owner
            self.recordID = recordID
            self.versions = versions
        }
    }

    /// One row of the database's record heads (`heads`), or the number of stored versions of a record
    /// (`versions` grouped by owner and record).
    public struct Stored: Hashable, Sendable {
        public var owner: UUID
        public var recordID: String
        /// Head rows for this record (the schema allows one; a copy made underneath shows as more).
        public var heads: Int
        /// Version rows for this record.
        public var versions: Int
        public init(owner: UUID, recordID: String, heads: Int, versions: Int) {
            self.owner = owner
            self.recordID = recordID
            self.heads = heads
            self.versions = versions
        }
    }

    /// One row of a count read from the database: rows of one record of one owner.
    public struct Counted: Sendable {
        public var owner: UUID
        public var recordID: String
        public var n: Int
        public init(owner: UUID, recordID: String, n: Int) {
            self.owner = owner
            self.recordID = recordID
            self.n = n
        }
    }

    /// The head and version counts joined by record (a full outer join): a head without versions and
    /// versions without a head both show, with 0 for what is missing.
    public static func stored(heads: [Counted], versions: [Counted]) -> [Stored] {
        struct Key: Hashable {
            var owner: UUID
            var recordID: String
        }
        var out: [Key: Stored] = [:]
        for (counts, column) in [(heads, \Stored.heads), (versions, \Stored.versions)] {
            for c in counts {
                out[Key(owner: c.owner, recordID: c.recordID), default: Stored(owner: c.owner, recordID: c.recordID, heads: 0, versions: 0)][
                    keyPath: column
                ] += c.n
            }
        }
        return Array(out.values)
    }

    public struct Result: Equatable, Sendable {
        /// Acknowledged records the database holds no head of, or fewer versions than were pushed.
        public var lost = 0
        /// Rows beyond what was pushed: head rows beyond one, version rows beyond the versions pushed.
        public var duplicated = 0
        /// Records the database holds that no device pushed (or whose push never came back acknowledged).
        public var unexpected = 0
        /// A few of each, for the report (owner/record).
        public var examples: [String] = []
        public var clean: Bool { lost == 0 && duplicated == 0 && unexpected == 0 }
        public init() {}
    }

    /// Compares what the devices were acknowledged with what is stored. `owners` limits the stored side to
    /// the clinic's own patients (a database may hold others).
    public static func compare(acknowledged: [Acknowledged], stored: [Stored], owners: Set<UUID>? = nil) -> Result {
        var result = Result()
        var byKey: [String: Stored] = [:]
        for s in stored where owners?.contains(s.owner) ?? true {
            let key = Self.key(s.owner, s.recordID)
            if var seen = byKey[key] {
                // The same record listed twice by the reader: add its rows up.
                seen.heads += s.heads
                seen.versions += s.versions
                byKey[key] = seen
            } else {
                byKey[key] = s
            }
        }
        var expected = Set<String>()
        for a in acknowledged {
            let key = Self.key(a.owner, a.recordID)
            guard expected.insert(key).inserted else { continue }
            guard let s = byKey[key], s.heads > 0 else {
                result.lost += 1
                note(&result, "lost \(key)")
                continue
            }
            // A head whose version rows are gone (or fewer than were pushed) lost the record's contents.
            guard s.versions >= max(1, a.versions) else {
                result.lost += 1
                note(&result, "lost \(key) (\(s.heads) heads but \(s.versions) versions, \(a.versions) pushed)")
                continue
            }
            let extra = max(0, s.heads - 1) + max(0, s.versions - max(1, a.versions))
            if extra > 0 {
                result.duplicated += extra
                note(&result, "duplicated \(key) (\(s.heads) heads, \(s.versions) versions, \(a.versions) pushed)")
            }
        }
        for (key, s) in byKey where !expected.contains(key) {
            result.unexpected += 1
            note(&result, "unexpected \(key) (\(s.heads) heads, \(s.versions) versions)")
        }
        return result
    }

    static func key(_ owner: UUID, _ record: String) -> String { owner.uuidString.lowercased() + "/" + record.lowercased() }

    static func note(_ result: inout Result, _ line: String) {
        if result.examples.count < 10 { result.examples.append(line) }
    }
}

/// What a doctor's view must equal: the patient's own records in the categories shared with that doctor.
public enum ClinicViewAudit {
    /// A record as both sides can name it without keys in common: its activity, occurrence (none for the
    /// activity itself) and the values it holds, each as text, in order.
    public struct Item: Hashable, Sendable, CustomStringConvertible {
        public var activityID: String
        public var occurrence: Int?
        public var values: [String]
        public init(activityID: String, occurrence: Int?, values: [String]) {
            self.activityID = activityID
            self.occurrence = occurrence
            self.values = values.sorted()
        }
        public var description: String { occurrence.map { "\(activityID)#\($0) (\(values.count) values)" } ?? "activity \(activityID)" }
    }

    public struct Difference: Equatable, Sendable {
        /// In the patient's state, missing from the doctor's view.
        public var missing: [Item]
        /// In the doctor's view, not in the patient's state for the shared categories (stale, invented, or
        /// from a category not shared).
        public var extra: [Item]
        public var matches: Bool { missing.isEmpty && extra.isEmpty }
    }

    public static func compare(patient: [Item], doctor: [Item]) -> Difference {
        var want: [Item: Int] = [:]
        for i in patient { want[i, default: 0] += 1 }
        var have: [Item: Int] = [:]
        for i in doctor { have[i, default: 0] += 1 }
        var missing: [Item] = []
        var extra: [Item] = []
        for (item, n) in want where (have[item] ?? 0) < n { missing += Array(repeating: item, count: n - (have[item] ?? 0)) }
        for (item, n) in have where (want[item] ?? 0) < n { extra += Array(repeating: item, count: n - (want[item] ?? 0)) }
        let order: (Item, Item) -> Bool = { ($0.activityID, $0.occurrence ?? -1) < ($1.activityID, $1.occurrence ?? -1) }
        return Difference(missing: missing.sorted(by: order), extra: extra.sorted(by: order))
    }
}

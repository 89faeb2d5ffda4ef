import Foundation

/// What a username looks like, for warning the admin about names made to pass for another
/// (Docs/design.md §2, "Look-alike names"): two names with the same skeleton read alike.
///
/// The skeleton is this project's own mapping, applied in order:
/// 1. Unicode compatibility decomposition (NFKD: fullwidth and styled letters become plain ones), then
///    every combining mark dropped ("é" → "e") and the rest lowercased;
/// 2. letters of other scripts drawn like Latin ones mapped to them (`confusables`: Cyrillic "а", "о",
///    "р", Greek "ο", "ν", dotless "ı" and the like);
/// 3. the separators ".", "-" and "_" removed (before the next step, so "ber.nard" meets "rn" as "bernard");
/// 4. "rn" → "m", "vv" → "w" and "cl" → "d" (they run together in many fonts);
/// 5. digits and letters drawn alike mapped to one: "0" → "o"; "1", "i", "j", "|" → "l"; "5" → "s";
///    "8" → "b"; "2" → "z"; "6" → "b"; "9" → "g".
public enum NameSkeleton {
    /// Letters of other scripts (and symbols) that are drawn like a Latin letter or digit.
    static let confusables: [Character: Character] = [
        // Cyrillic
        "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c",
        "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "ԁ": "d", "ԛ": "q", "ԝ": "w",
        "һ": "h", "ӏ": "l", "ь": "b",
        // Greek
        "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t",
        "υ": "u", "χ": "x", "ω": "w", "ϲ": "c",
        // Latin look-alikes and symbols
        "ı": "i", "ȷ": "j", "ℓ": "l", "ɑ": "a", "ɡ": "g", "ʏ": "y", "ǀ": "l", "ꓲ": "l", "׀": "l",
    ]

    /// Characters drawn alike within Latin letters and digits, mapped to one of them.
    static let alike: [Character: Character] = ["0": "o", "1": "l", "i": "l", "j": "l", "|": "l", "5": "s", "8": "b", "2": "z", "6": "b", "9": "g"]

    /// The skeleton of `name`.
    public static func of(_ name: String) -> String {
        let plain = name.decomposedStringWithCompatibilityMapping.unicodeScalars
            .filter { !$0.properties.isDiacritic && $0.properties.generalCategory != .nonspacingMark }
        var text = String(String.UnicodeScalarView(plain)).lowercased()
        // Separators first: "ber.nard" must meet the "rn" rule as "bernard" does.
        text = String(text.map { confusables[$0] ?? $0 }.filter { !".-_".contains($0) })
        text = text.replacingOccurrences(of: "rn", with: "m").replacingOccurrences(of: "vv", with: "w")
            .replacingOccurrences(of: "cl", with: "d")
        return String(text.map { alike[$0] ?? $0 })
    }
}

extension CertificateLedger {
    /// Certified names other than `username` that look like it (the same skeleton).
    public func lookalikes(of username: String) -> [Entry] {
        let skeleton = NameSkeleton.of(username)
        return all().filter { $0.username != username && NameSkeleton.of($0.username) == skeleton }
    }

    /// The review's words on a name never certified before: a warning when it looks like one that was.
    public func firstCertificateNote(username: String) -> String {
        let similar = lookalikes(of: username).map { "'\($0.username)' (id \($0.userID.uuidString.lowercased()))" }
        guard !similar.isEmpty else { return "first certificate for this name and id" }
        return "WARNING: first certificate for this name and id, but '\(username)' looks like the certified "
            + similar.joined(separator: ", ") + ": check out of band that this is someone else"
    }
}

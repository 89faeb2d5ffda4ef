import Foundation
import VaultCore
import VaultCrypto

/// What a patient's device keeps between access-log checks besides the checkpoint and marks (Docs/design.md
/// §6, Docs/envelope-v1.md §2.5): the point the next check resumes at (`access-log-resume.json`) and the mark
/// that the next check must walk the whole chain (`access-log-full-check.json`). The mark is set on every
/// integrity failure of a check, resumed or full, and only a passing full walk clears it; while it is set, no
/// check resumes. Every change of the two files, and the read of the mark before one, happens under a lock
/// (`access-log.lock`), so that a check running at the same time (the dashboard and the command line) cannot
/// keep a point after a failure, nor clear a mark set after its own walk began.
struct AccessLogCheckState {
    /// The profile folder.
    let folder: URL

    var pointURL: URL { folder.appendingPathComponent("access-log-resume.json") }
    var markURL: URL { folder.appendingPathComponent("access-log-full-check.json") }
    var lockURL: URL { folder.appendingPathComponent("access-log.lock") }

    /// The mark's bytes, nil when none is set. Any file there counts as a mark, readable or not.
    func mark() throws -> Data? {
        try locked { try markBytes() }
    }

    /// The point to resume at: nil while the mark is set, when none is kept, or when it cannot be read.
    func resumePoint() throws -> AccessLogResumePoint? {
        try locked { try markBytes() == nil ? AccessLogResumePoint.load(pointURL) : nil }
    }

    /// Sets the mark (a new one each time, saying `reason`) and forgets the point. A failure to do either
    /// is thrown, never ignored: the caller reports it with the integrity failure that called for it.
    func requireFullCheck(reason: String, now: UnixMillis = Date().unixMillis) throws {
        let mark = FullCheckMark(reason: reason, at: now, nonce: Hex.encode(RandomBytes.bytes(count: 16)))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(mark)
        try locked {
            try SecureFiles.write(data, to: markURL)
            if FileManager.default.fileExists(atPath: pointURL.path) { try FileManager.default.removeItem(at: pointURL) }
        }
    }

    /// Keeps `point` after a passing walk. A resumed walk keeps it only while no mark is set. A full walk
    /// (`full`) that began under `markAtStart` clears that mark and keeps the point, unless another mark
    /// was set since, which then stays, and the point is not kept. Returns whether the point was kept.
    @discardableResult
    func keep(_ point: AccessLogResumePoint?, full: Bool, markAtStart: Data?) throws -> Bool {
        try locked { () throws -> Bool in
            let now = try markBytes()
            guard now == nil || (full && now == markAtStart) else { return false }
            if now != nil { try FileManager.default.removeItem(at: markURL) }
            if let point { try point.save(pointURL) }
            return true
        }
    }

    private func markBytes() throws -> Data? {
        do { return try SecureFiles.read(markURL) } catch {
            // Present but unreadable: still a mark.
            guard FileManager.default.fileExists(atPath: markURL.path) else { throw error }
            return Data("unreadable".utf8)
        }
    }

    /// Runs `body` holding an exclusive `flock` on `access-log.lock` (mode 0600). The sections it guards
    /// are short file operations, never network calls.
    private func locked<T>(_ body: () throws -> T) throws -> T {
        try SecureFiles.ensureDirectory(folder)
        let fd = open(lockURL.path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ClientError.localState("cannot open the lock file \(lockURL.path) (errno \(errno))") }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 {
            guard errno == EINTR else { throw ClientError.localState("cannot lock \(lockURL.path) (errno \(errno))") }
        }
        defer { flock(fd, LOCK_UN) }
        return try body()
    }

    /// The content of `access-log-full-check.json`.
    struct FullCheckMark: Codable {
        var version = 1
        /// The failure that set it, in plain words.
        var reason: String
        /// When, Unix milliseconds.
        var at: UnixMillis
        /// 32 random hex digits: a mark set again is never the same bytes as the one a walk began under.
        var nonce: String
    }
}

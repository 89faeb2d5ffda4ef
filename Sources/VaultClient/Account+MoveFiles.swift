import Foundation
import VaultCore
import VaultCrypto

/// Where a test stops `AccountManager.move` (through `@testable import`, with `AccountManager.$moveFault`).
enum MoveFault: Sendable, Equatable {
    /// The process dies after step N (1 to 7): nothing is put back.
    case crash(after: Int)
    /// Step N+1 fails (N from 0 to 4): everything is put back.
    case fail(after: Int)
}

/// The process died where `MoveFault.crash` said: nothing is put back.
struct MoveCrashed: Error {}

extension AccountManager {
    /// Set by tests only.
    @TaskLocal static var moveFault: MoveFault? = nil

    /// Step `step` of `move` is done.
    static func reached(_ step: Int) throws {
        switch moveFault {
        case .crash(let after)? where after == step: throw MoveCrashed()
        case .fail(let after)? where after == step && step < 5: throw ClientError.localState("step \(step + 1) failed (a test's fault)")
        default: break
        }
    }

    /// Moves the profile folder `store` (kept for `old`) to `destination`, with `profile` (already naming the
    /// new address), `session` when a login at the new address opened one (else the stored one stays), and
    /// the remembered keys sealed again for the new address.
    ///
    /// The order keeps the profile usable at one address whenever the process dies:
    /// 0. The `current.json` entry of the new address, `profile.json` and `session.json` are read, to be put back.
    /// 1. With a remembered key, a second copy of the keys sealed for the new address under the same device
    ///    key (`device-identity.next.json`) beside the copy in use, which is not touched: an unlock opens the
    ///    copy sealed for the address `profile.json` names, so no step leaves the remembered key without one.
    /// 2. `current.json` names the user for the new address too (replacing another user's entry there, as a
    ///    login would); the old entry stays. The new address finds no folder yet: "not logged in".
    /// 3. `session.json`: the session a login at the new address opened (same deployment: it works at the
    ///    old address too). Without a login, the stored session stays.
    /// 4. `profile.json` names the new address. The folder still serves the old one (its commands connect to
    ///    the URL they are given); an unlock there opens the staged copy and makes it the copy in use.
    /// 5. The folder is renamed without replacing anything (`SecureFiles.renameNoReplace`): the commit point.
    /// 6. The staged copy replaces the old one (a rename in the folder); if the process dies first, the next
    ///    unlock does it.
    /// 7. The old address's entry leaves `current.json` (if the process dies first it names a folder that is
    ///    gone: "not logged in"), and its folder of profiles goes when it is empty.
    /// A failure in steps 1 to 5 puts back what was read in step 0, keeps the copy in use sealed for the
    /// address `profile.json` then names, erases the staged copy and an empty folder of profiles the rename
    /// step made, so the device is as it was; running the move again after a crash in steps 1 to 4 finishes it. Nothing else in the
    /// folder names the address: the store, pins, audit marks and checkpoint move as they are.
    static func move(
        _ store: ProfileStore,
        to destination: ProfileStore,
        profile: Profile,
        session: StoredSession?,
        remembered: Identity?,
        home: Home,
        from old: String
    ) throws {
        let new = profile.server
        let previous = home.currentEntry(server: new)
        let savedProfile = try SecureFiles.read(store.profileURL)
        let savedSession = try SecureFiles.read(store.sessionURL)
        do {
            try reached(0)
            if let remembered { try store.stage(remembered, server: new) }
            try reached(1)
            try home.setCurrent(server: new, username: profile.username)
            try reached(2)
            if let session { try store.save(session) }
            try reached(3)
            try store.save(profile)
            try reached(4)
            try renameFolder(store, to: destination, username: profile.username, server: new)
            try reached(5)
        } catch let crash as MoveCrashed {
            throw crash
        } catch {
            var failed: [String] = []
            func putBack(_ what: String, _ body: () throws -> Void) {
                do { try body() } catch { failed.append("\(what) (\(error))") }
            }
            putBack(store.profileURL.path) { if let savedProfile { try SecureFiles.write(savedProfile, to: store.profileURL) } }
            if session != nil {
                putBack(store.sessionURL.path) {
                    if let savedSession { try SecureFiles.write(savedSession, to: store.sessionURL) } else { SecureFiles.erase(store.sessionURL) }
                }
            }
            // The copy in use must open for the address profile.json names now (an unlock at the old address
            // while this ran may have made the staged copy the one in use).
            if let remembered, let server = (try? store.loadProfile())?.server {
                putBack(store.rememberedIdentityURL.path) { try store.keepCopy(of: remembered, for: server) }
            }
            SecureFiles.erase(store.stagedIdentityURL)
            putBack(home.currentURL.path) { try home.restoreCurrent(server: new, to: previous) }
            // The new address's folder of profiles, when the rename step made it and nothing else is in it.
            _ = rmdir(destination.folder.deletingLastPathComponent().path)
            let note =
                failed.isEmpty
                ? "nothing was moved" : "nothing was moved, but putting back \(failed.joined(separator: ", ")) failed: run the move again"
            switch error {
            case let ClientError.invalidRequest(m):
                throw ClientError.invalidRequest(m.contains("nothing was moved") && failed.isEmpty ? m : "\(m); \(note)")
            case let ClientError.localState(m): throw ClientError.localState("\(m); \(note)")
            default: throw ClientError.localState("\(error); \(note)")
            }
        }
        SecureFiles.syncFolder(destination.folder.deletingLastPathComponent())
        SecureFiles.syncFolder(store.folder.deletingLastPathComponent())
        // After the commit point nothing fails the move: what is left undone here the next unlock or a
        // "not logged in" at the old address covers.
        if remembered != nil { try? destination.promoteStagedIdentity() }
        try reached(6)
        try? home.removeCurrent(server: old, username: profile.username)
        _ = rmdir(store.folder.deletingLastPathComponent().path)
        try reached(7)
    }

    /// Renames the profile folder to the new address's, never over anything: a folder made there after the
    /// check (even an empty one, which a plain `rename` replaces) stops it.
    static func renameFolder(_ store: ProfileStore, to destination: ProfileStore, username: String, server: String) throws {
        try SecureFiles.ensureDirectory(destination.folder.deletingLastPathComponent())
        try requireNoProfile(at: destination, username: username, server: server)
        let failure = SecureFiles.renameNoReplace(store.folder, to: destination.folder)
        switch failure {
        case 0: return
        case EEXIST, ENOTEMPTY: throw alreadyThere(destination, username, server)
        case ENOSYS, EINVAL:
            throw ClientError.localState(
                "cannot move \(store.folder.path) to \(destination.folder.path): this system or file system cannot rename without "
                    + "replacing what is there (\(String(cString: strerror(failure))))"
            )
        default:
            throw ClientError.localState("cannot move \(store.folder.path) to \(destination.folder.path): \(String(cString: strerror(failure)))")
        }
    }
}

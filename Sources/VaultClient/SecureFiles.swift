import Foundation

/// Files and folders under the CareVault home: folders 0700, files 0600, written atomically (temporary
/// file in the same folder, then rename) so a crash never leaves half a profile or key file.
public enum SecureFiles {
    /// Creates `url` and its parents with mode 0700 where missing. An existing folder is left as it is:
    /// it may be a folder the user chose (an export into /tmp must not make /tmp private).
    public static func ensureDirectory(_ url: URL) throws {
        let fm = FileManager.default
        if !fm.fileExists(atPath: url.path) {
            do {
                try fm.createDirectory(at: url, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw ClientError.localState("cannot create the folder \(url.path)")
            }
        }
    }

    /// Writes `data` to `url` with mode 0600, atomically.
    public static func write(_ data: Data, to url: URL) throws {
        try write(to: url) { fd in
            if let failure = data.withUnsafeBytes({ writeAll($0, to: fd) }) {
                throw ClientError.localState("cannot write \(url.path): \(String(cString: strerror(failure)))")
            }
        }
    }

    /// Writes all of `bytes` to `fd`, retrying short and interrupted writes. Returns the errno of a write
    /// that failed, nil when everything was written.
    public static func writeAll(_ bytes: UnsafeRawBufferPointer, to fd: Int32) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let n = Foundation.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return n == 0 ? EIO : errno }
            offset += n
        }
        return nil
    }

    /// Writes to `url` with mode 0600, atomically, what `body` writes to the descriptor it is given (a
    /// large export is written as it is made, never held whole). Nothing is left at `url` when `body` throws.
    public static func write(to url: URL, _ body: (Int32) throws -> Void) throws {
        try ensureDirectory(url.deletingLastPathComponent())
        let temp = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString).tmp")
        let fd = open(temp.path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { throw ClientError.localState("cannot write \(url.path): \(String(cString: strerror(errno)))") }
        do {
            try body(fd)
            guard fsync(fd) == 0 else { throw ClientError.localState("cannot write \(url.path): \(String(cString: strerror(errno)))") }
        } catch {
            close(fd)
            unlink(temp.path)
            throw error
        }
        close(fd)
        guard rename(temp.path, url.path) == 0 else {
            unlink(temp.path)
            throw ClientError.localState("cannot write \(url.path)")
        }
    }

    /// Renames `source` to `target` in one step unless something exists at `target` (Linux
    /// `renameat2` with `RENAME_NOREPLACE`, macOS `renamex_np` with `RENAME_EXCL`), where a plain `rename`
    /// would replace an empty folder made there. Returns 0, else the errno: `EEXIST` when something is
    /// there, `ENOSYS` or `EINVAL` when this system or file system cannot rename that way.
    public static func renameNoReplace(_ source: URL, to target: URL) -> Int32 {
        #if os(Linux)
        // Looked up at run time: the C library has it since glibc 2.28, its header declares it for GNU sources only.
        typealias Renameat2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "renameat2") else { return ENOSYS }
        let renameat2 = unsafeBitCast(symbol, to: Renameat2.self)
        let noReplace: UInt32 = 1  // RENAME_NOREPLACE
        return renameat2(AT_FDCWD, source.path, AT_FDCWD, target.path, noReplace) == 0 ? 0 : errno
        #elseif canImport(Darwin)
        return renamex_np(source.path, target.path, UInt32(RENAME_EXCL)) == 0 ? 0 : errno
        #else
        return ENOSYS
        #endif
    }

    /// Flushes a folder's entries to disk (after a rename in it), best effort.
    public static func syncFolder(_ url: URL) {
        let fd = open(url.path, O_RDONLY | O_DIRECTORY)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        close(fd)
    }

    /// Reads a file, or nil when it does not exist.
    public static func read(_ url: URL) throws -> Data? {
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return try Data(contentsOf: url)
    }

    /// Overwrites a secret file with zeros before removing it.
    public static func erase(_ url: URL) {
        if let size = (try? FileManager.default.attributesOfItem(atPath: url.path))?[.size] as? Int, size > 0,
            let handle = FileHandle(forWritingAtPath: url.path)
        {
            handle.write(Data(count: size))
            try? handle.synchronize()
            try? handle.close()
        }
        try? FileManager.default.removeItem(at: url)
    }

    /// The POSIX permission bits of a file (for tests and checks).
    public static func permissions(_ url: URL) -> Int? {
        (try? FileManager.default.attributesOfItem(atPath: url.path))?[.posixPermissions] as? Int
    }
}

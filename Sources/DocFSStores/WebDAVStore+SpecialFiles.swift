// FIFOs, sockets and device nodes on WebDAV: an empty resource (so the name is taken on the
// server and other clients see an empty file), marked as what it is by the dead property
// `special` (with `mode`) where the server keeps dead properties (see WebDAVDeadProperties.swift).
// Where it does not (rclone's, `docfs serve`), only this machine's catalog knows the type: the
// core keeps it while the resource stays the empty version it made (Catalog+Listing), and
// another machine sees an empty file.

import DocFSStore
import Foundation

extension WebDAVStore {
    public func makeSpecial(_ path: StorePath, _ special: SpecialFile, mode: UInt32) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .alreadyExists(path) }
        let empty = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-empty-\(UUID().uuidString)").path
        guard FileManager.default.createFile(atPath: empty, contents: Data()) else { throw .localIO(errno: errno, message: "cannot make an empty file at \(empty)") }
        defer { try? FileManager.default.removeItem(atPath: empty) }
        var entry = try await write(path, fromLocalFile: empty, condition: .mustNotExist)
        if await !deadProperties.isRefused {
            let body = PosixProperties.proppatchBody(special: special, mode: mode)
            let kept = try await deadProperties.ifKept { () throws(StoreError) in
                try await self.proppatch(path, body: body, collection: false)
            }
            if kept { entry = try await stat(path) }
        }
        entry.kind = .special(special)
        entry.size = 0
        entry.mode = mode & 0o7777
        return entry
    }
}

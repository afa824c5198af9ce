import Synchronization

/// How far the uploads of watched local files have got: what `user.docfs.progress` shows
/// while an item is uploading. One per store (`Store.uploadMeter`): the core watches an
/// upload's snapshot file by its path for the upload's duration; the store, streaming the file
/// from disk, counts the bytes it reads (`record`). A retry starts its count again (`restart`);
/// parts sent in parallel add up. Files nobody watches are not counted, so the table holds
/// only uploads under way.
public final class UploadMeter: Sendable {
    private let table = Mutex<[String: (sent: Int64, total: Int64)]>([:])

    public init() {}

    /// Starts counting the upload of `path` (`total` bytes).
    public func watch(_ path: String, total: Int64) {
        table.withLock { $0[path] = (0, total) }
    }

    /// Stops counting `path`.
    public func unwatch(_ path: String) {
        table.withLock { $0[path] = nil }
    }

    /// A new attempt reads `path` from its start.
    public func restart(_ path: String) {
        table.withLock { table in table[path]?.sent = 0 }
    }

    /// `count` more bytes of `path` were read for sending.
    public func record(_ path: String, _ count: Int) {
        table.withLock { table in
            guard var entry = table[path] else { return }
            entry.sent = min(entry.sent + Int64(count), entry.total)
            table[path] = entry
        }
    }

    /// Bytes sent and total of `path`'s upload, if it is watched.
    public func progress(_ path: String) -> (sent: Int64, total: Int64)? {
        table.withLock { $0[path] }
    }
}

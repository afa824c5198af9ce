import DocFSStore

/// A download's bytes and the version they are taken for must belong together: that version is
/// the next edit's base. A server writing in place can pair a new ETag with old or torn bytes.
extension Provider {
    /// Under the listed ETag the size must match the listing; under another, the store is asked
    /// once, and if it still holds that version the size must match. A mismatch is answered as
    /// busy, so the download is retried, finally failing (`EIO`): no copy of no known version.
    static func confirmDownloadedVersion(_ entry: RemoteEntry, of item: Item, whole: Bool, store: any Store) async throws(StoreError) {
        guard let version = entry.etag else { return }  // a store without versions: nothing to pair
        if let listed = item.etag, ETag.sameVersion(version, listed) {
            guard entry.size != item.size else { return }
            throw .busy(status: 200, retryAfter: .zero,
                        message: "download of \(item.path): \(entry.size) bytes for a version listed with \(item.size)")
        }
        guard whole else { return }
        let now = try await store.stat(item.path)
        guard now.kind == .file, let current = now.etag, ETag.sameVersion(current, version), now.size != entry.size else { return }
        throw .busy(status: 200, retryAfter: .zero,
                    message: "download of \(item.path): \(entry.size) bytes under version \(version.value), which has \(now.size)")
    }
}

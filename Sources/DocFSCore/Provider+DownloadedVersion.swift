import DocFSStore

/// The bytes of a download and the version they are taken for must belong together: that
/// version is the base of the next edit here, and the edit's upload replaces it on the store
/// without a conflict. A server that writes files in place can pair them wrongly while another
/// client saves the file: `rclone serve webdav` answered a GET sent during a PUT with the
/// new version's ETag and the old bytes (or a torn body), and the edit made on those bytes
/// then replaced the other client's version with no conflict copy (test_two_mounts[rclone]).
extension Provider {
    /// Checks a download (`entry`: the version the GET named, and the size received, or for a
    /// `whole` one the size of the file) against what else is known of that version:
    /// - under the ETag the listing gave, the file must have the listed size;
    /// - under another ETag (the file changed since the listing), the store is asked once more
    ///   (a stat, one request, only then): where it still holds that version, the size must be
    ///   the one received. Where it holds another by now, the bytes are taken as the version
    ///   named: an edit of them meets the newer one as a conflict, whatever they are.
    /// A mismatch is answered as busy, so the download is made again (`RetryPolicy`); after the
    /// last try it fails (`EIO`): no copy is made of bytes of no known version.
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

import DocFSStore
import Logging

/// Pushes permission bits and times to a store that can carry them (a local directory, S3's
/// metadata, WebDAV properties), and records the version the store has afterwards: on such a
/// store a chmod or utimensat changes the entry's ETag, and a stale one would make the next
/// upload look like a conflict. A local copy based on the old version is based on the new one
/// (same content): its base moves too, but only from the version the catalog knew. When the
/// store had another client's version by then, the attributes go onto that version and the
/// copy stays based on the one it started from: its upload meets theirs as a conflict, instead
/// of replacing content it never saw. (The check is a stat before the change: a version saved
/// by another client in the moment between the two requests is taken for ours.)
enum AttributeSync {
    static func push(_ attributes: StoreAttributes, of item: Item, to store: any Store, catalog: Catalog, provider: Provider,
                     logger: Logger) async {
        guard !attributes.isEmpty, item.onStore else { return }
        do {
            let before = try await store.stat(item.path)
            guard try await store.setAttributes(item.path, attributes) else { return }
            guard before.etag == item.etag else {
                logger.info("attributes set on a version changed on the store since it was listed; the local copy keeps its base",
                            metadata: ["path": "\(item.path)"])
                return
            }
            let entry = try await store.stat(item.path)
            try catalog.recordVersion(of: item.inode, etag: entry.etag)
            await provider.storeVersionChanged(item.inode, from: item.etag, to: entry.etag)
        } catch {
            logger.info("store did not take attributes", metadata: ["path": "\(item.path)", "error": "\(error)"])
        }
    }
}

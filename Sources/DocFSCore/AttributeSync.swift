import DocFSStore
import Logging

/// Pushes permission bits and times to a store that can carry them (a local directory), and
/// records the version the store has afterwards: on such a store a chmod or utimensat changes
/// the entry's ETag, and a stale one would make the next upload look like a conflict. A local
/// copy based on the old version is based on the new one (same content): its base moves too.
enum AttributeSync {
    static func push(_ attributes: StoreAttributes, of item: Item, to store: any Store, catalog: Catalog, provider: Provider,
                     logger: Logger) async {
        guard !attributes.isEmpty, item.onStore else { return }
        do {
            guard try await store.setAttributes(item.path, attributes) else { return }
            let entry = try await store.stat(item.path)
            try catalog.recordVersion(of: item.inode, etag: entry.etag)
            await provider.storeVersionChanged(item.inode, from: item.etag, to: entry.etag)
        } catch {
            logger.info("store did not take attributes", metadata: ["path": "\(item.path)", "error": "\(error)"])
        }
    }
}

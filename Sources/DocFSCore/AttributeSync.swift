import DocFSStore
import Logging

/// Pushes mode and times to a store that carries them and records its new version, or the next
/// upload would look like a conflict. A copy's base moves only from the version the catalog
/// knew: if another client's version is there, the copy keeps its base and its upload meets
/// theirs as a conflict. (The check is a stat before the change.)
enum AttributeSync {
    static func push(_ attributes: StoreAttributes, of item: Item, to store: any Store, catalog: Catalog, provider: Provider,
                     logger: Logger) async {
        guard !attributes.isEmpty, item.onStore, !item.isDirectory || store.capabilities.keepsFolderAttributes else { return }
        do {
            // A folder has no content for a version to guard: its attributes are simply set.
            if item.isDirectory {
                _ = try await store.setAttributes(item.path, attributes)
                return
            }
            let before = try await store.stat(item.path)
            guard try await store.setAttributes(item.path, attributes) else { return }
            guard before.etag == item.etag else {
                logger.info("attributes set on a version changed on the store since it was listed; the local copy keeps its base",
                            metadata: ["path": "\(item.path)"])
                return
            }
            let entry = try await store.stat(item.path)
            try await provider.storeVersionChanged(item.inode, from: item.etag, to: entry.etag)
        } catch let error as FSError {
            logger.warning("cannot record the store's new version after an attribute change", metadata: ["path": "\(item.path)", "error": "\(error)"])
        } catch {
            logger.info("store did not take attributes", metadata: ["path": "\(item.path)", "error": "\(error)"])
        }
    }
}

import DocFSStore
import Logging

/// Pushes mode and times to a store that carries them and records its new version, or the next
/// upload would look like a conflict. A copy's base moves only from the version the catalog
/// knew, and only to the version the change made: if another client's version is there before
/// or lands meanwhile, the copy keeps its base and its upload meets theirs as a conflict. Where
/// the store cannot tell which version its change made (WebDAV), a stat right after can still
/// take another client's for it.
enum AttributeSync {
    static func push(_ attributes: StoreAttributes, of item: Item, to store: any Store, provider: Provider, logger: Logger) async {
        guard !attributes.isEmpty, item.onStore, !item.isDirectory || store.capabilities.keepsFolderAttributes else { return }
        // A folder has no version to move, and no reader waits for one.
        let movesVersion = !item.isDirectory
        if movesVersion { await provider.versionMayMove(item.inode) }
        await pushToStore(attributes, of: item, to: store, provider: provider, logger: logger)
        if movesVersion { await provider.versionMoveEnded(item.inode) }
    }

    private static func pushToStore(_ attributes: StoreAttributes, of item: Item, to store: any Store, provider: Provider, logger: Logger) async {
        do {
            // A folder has no content for a version to guard: its attributes are simply set.
            guard !item.isDirectory, let version = item.etag else {
                _ = try await store.setAttributes(item.path, attributes)
                return
            }
            let outcome: AttributesSet
            do throws(StoreError) {
                outcome = try await store.setAttributes(item.path, attributes, onVersion: version)
            } catch {
                guard case .versionMismatch = error else { throw error }
                logger.info("attributes set on a version changed on the store since it was listed; the local copy keeps its base",
                            metadata: ["path": "\(item.path)"])
                _ = try await store.setAttributes(item.path, attributes)
                return
            }
            let made: ETag?
            switch outcome {
            case .notKept: return
            case .kept(let newVersion?): made = newVersion
            case .kept(nil): made = try await store.stat(item.path).etag
            }
            try await provider.storeVersionChanged(item.inode, from: version, to: made, named: outcome != .kept(newVersion: nil))
        } catch let error as FSError {
            logger.warning("cannot record the store's new version after an attribute change", metadata: ["path": "\(item.path)", "error": "\(error)"])
        } catch {
            logger.info("store did not take attributes", metadata: ["path": "\(item.path)", "error": "\(error)"])
        }
    }
}

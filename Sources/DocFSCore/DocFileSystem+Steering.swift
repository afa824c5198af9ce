// DocFileSystem+Steering: pin ("keep downloaded"), unpin and evict ("free up space"): what the
// user decides about which copies stay local.

import DocFSStore
import Foundation
import Logging

extension DocFileSystem {
    /// Pins `inode` ("keep downloaded") and downloads it now; a folder with everything below
    /// it (listing what was never listed). What is added to a pinned folder later is pinned too.
    /// The first failure is thrown once every other file was tried.
    public func pin(_ inode: Inode) async throws(FSError) {
        let item = try item(inode)
        try catalog.setPinned(item, true)
        await provider.pinsChanged(item.isDirectory ? nil : [inode])
        var failure: FSError?
        try await download(item, failure: &failure)
        if let failure { throw failure }
    }

    private func download(_ item: Item, failure: inout FSError?) async throws(FSError) {
        switch item.kind {
        case .file:
            do {
                _ = try await provider.open(item, intent: .content)
                await provider.release(item.inode)
            } catch {
                logger.warning("cannot download a pinned file", metadata: ["path": "\(item.path)", "error": "\(error)"])
                if failure == nil { failure = error }
            }
        case .directory:
            for child in try await children(of: item.inode) {
                try await download(child, failure: &failure)
            }
        default:
            return
        }
    }

    /// Returns `inode` (and everything below a folder) to the default policy: copies nobody
    /// uses go now, as on their last release.
    public func unpin(_ inode: Inode) async throws(FSError) {
        let item = try item(inode)
        try catalog.setPinned(item, false)
        await provider.pinsChanged(item.isDirectory ? nil : [inode])
        for file in try catalog.filesWithCopies(under: item) {
            guard let held = try catalog.item(file), held.state == .local else { continue }
            // A pinned copy kept from an earlier mount and not opened since.
            if provider.downloadProgress(of: file) == nil, provider.presentCopies.withLock({ $0[file] == nil }) {
                try await provider.evictNow(held)
            }
        }
    }

    /// Makes `inode` (every file below a folder) a placeholder now, and unpins it. Refuses
    /// (`.busy`, naming each) files that are open or hold changes the store does not have;
    /// the others are evicted all the same.
    public func evict(_ inode: Inode) async throws(FSError) {
        let item = try item(inode)
        var refused: [String] = []
        for file in try catalog.filesWithCopies(under: item) {
            guard let held = try catalog.item(file) else { continue }
            do { try await provider.evictNow(held) } catch {
                if case .busy(let why) = error { refused.append(why) } else { throw error }
            }
        }
        if refused.isEmpty || item.isDirectory {
            try catalog.setPinned(item, false)
            await provider.pinsChanged(item.isDirectory ? nil : [inode])
        }
        guard refused.isEmpty else {
            logger.notice("eviction refused", metadata: ["refused": "\(refused.joined(separator: "; "))"])
            throw .busy(refused.joined(separator: "; "))
        }
    }
}

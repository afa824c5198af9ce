// Pin ("keep downloaded"), unpin and evict: which copies stay local.

import DocFSStore
import Logging

extension DocFileSystem {
    /// Downloads now; a folder with everything below it. The first failure is thrown once every
    /// other file was tried.
    public func pin(_ inode: Inode) async throws(FSError) {
        let item = try item(inode)
        try await Blocking.run { [catalog] () throws(FSError) in try catalog.setPinned(item, true) }
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

    /// Copies nobody uses go now, as on their last release.
    public func unpin(_ inode: Inode) async throws(FSError) {
        let item = try item(inode)
        try await Blocking.run { [catalog] () throws(FSError) in try catalog.setPinned(item, false) }
        await provider.pinsChanged(item.isDirectory ? nil : [inode])
        for file in try catalog.filesWithCopies(under: item) {
            guard let held = try catalog.item(file), held.state == .local else { continue }
            // A pinned copy kept from an earlier mount and not opened since.
            if provider.downloadProgress(of: file) == nil, provider.presentCopies.withLock({ $0[file] == nil }) {
                try await provider.evictNow(held)
            }
        }
    }

    /// Also unpins. Files open or holding changes are refused (`.busy`, naming each); the others go.
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
            try await Blocking.run { [catalog] () throws(FSError) in try catalog.setPinned(item, false) }
            await provider.pinsChanged(item.isDirectory ? nil : [inode])
        }
        guard refused.isEmpty else {
            logger.notice("eviction refused", metadata: ["refused": "\(refused.joined(separator: "; "))"])
            throw .busy(refused.joined(separator: "; "))
        }
    }
}

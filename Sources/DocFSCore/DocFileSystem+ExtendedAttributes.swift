import DocFSStore
import Foundation

/// docfs's attributes are answered by name and never listed (`listxattr` is empty), as kernel
/// file systems do with virtual ones (CephFS's `ceph.*`, kAFS's `afs.*`): `cp -a`, `mv`,
/// `rsync -X`, `tar --xattrs` and a file manager's copy restore what they list: a listed
/// `user.docfs.id` or pin would go with the copy, and names they may not set would fail them.
extension DocFileSystem {
    public static let stateAttribute = "user.docfs.state"
    public static let identifierAttribute = "user.docfs.id"
    public static let etagAttribute = "user.docfs.etag"
    public static let errorAttribute = "user.docfs.error"
    public static let conflictAttribute = "user.docfs.conflict"
    public static let progressAttribute = "user.docfs.progress"
    /// Set to `1`/`0` (or removed) to pin or unpin.
    public static let pinnedAttribute = "user.docfs.pinned"
    /// Set to make the item, or every file below a folder, a placeholder now.
    public static let evictAttribute = "user.docfs.evict"
    /// On the root: one line per download under way.
    public static let transfersAttribute = "user.docfs.transfers"

    public func extendedAttribute(_ name: String, of inode: Inode) throws(FSError) -> [UInt8] {
        // Other names are "not supported": `ls -l` then stops asking for labels and ACLs on the device.
        guard name.hasPrefix("user.docfs.") else { throw .notSupported }
        let item = try item(inode)
        let value: String?
        switch name {
        case Self.stateAttribute: value = try shownState(of: item)
        case Self.progressAttribute: value = transferProgress(of: item).map { "\($0.done)/\($0.total)" }
        case Self.pinnedAttribute: value = try catalog.isPinned(inode) ? "1" : nil
        case Self.identifierAttribute: value = item.id
        case Self.etagAttribute: value = item.etag?.value
        case Self.errorAttribute: value = item.uploadError
        case Self.conflictAttribute: value = item.conflictCopy
        case Self.eventsAttribute where inode == Item.rootInode: value = stateFeed.socketPath.withLock { $0 }
        case Self.transfersAttribute where inode == Item.rootInode:
            let ahead = prefetcher.underWay.withLock { $0 }
            var lines = ""
            for inode in provider.downloadsUnderWay() {
                guard let path = try catalog.item(inode)?.path.description else { continue }
                lines += "\(ahead.contains(inode) ? "prefetching" : ItemState.downloading.rawValue)\t\(path)\n"
            }
            value = lines
        default: value = nil
        }
        guard let value else { throw .noAttribute }
        return Array(value.utf8)
    }

    /// For a folder, `pinned` and counts per state, from one query.
    func shownState(of item: Item) throws(FSError) -> String {
        let pinned = try catalog.isPinned(item.inode)
        guard item.isDirectory else {
            // A streamed copy is `local` in the catalog; while ranges still come, it shows as downloading.
            if item.state == .local, provider.downloadProgress(of: item.inode) != nil { return ItemState.downloading.rawValue }
            return item.state == .local && pinned ? "pinned" : item.state.rawValue
        }
        let counts = try catalog.stateCounts(parent: item.inode).map { "\($0.state)=\($0.count)" }
        let summary = counts.isEmpty ? (item.listedAt == nil ? "unlisted" : "empty") : counts.joined(separator: " ")
        return pinned ? "pinned " + summary : summary
    }

    public func transferProgress(of item: Item) -> (done: Int64, total: Int64)? {
        guard item.kind == .file else { return nil }
        if let download = provider.downloadProgress(of: item.inode) {
            return (download.done, max(download.total, item.size))
        }
        if let streamed = uploadStreams?.progress(of: item.inode) {
            return (streamed.sent, streamed.total)
        }
        if item.state == .uploading, let upload = store.uploadMeter?.progress(provider.snapshotPath(for: item)) {
            return (upload.sent, upload.total)
        }
        return nil
    }

    public func setExtendedAttribute(_ name: String, value: [UInt8], of inode: Inode) async throws(FSError) {
        let text = String(decoding: value, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines.union(CharacterSet(charactersIn: "\0")))
        switch name {
        case Self.pinnedAttribute:
            switch text.lowercased() {
            case "1", "true", "yes", "on": try await pin(inode)
            case "0", "false", "no", "off", "": try await unpin(inode)
            default: throw .invalidArgument
            }
        case Self.evictAttribute:
            try await evict(inode)
        default:
            throw name.hasPrefix("user.docfs.") ? .notPermitted : .notSupported
        }
    }

    public func removeExtendedAttribute(_ name: String, of inode: Inode) async throws(FSError) {
        guard name == Self.pinnedAttribute else { throw name.hasPrefix("user.docfs.") ? .notPermitted : .notSupported }
        try await unpin(inode)
    }
}

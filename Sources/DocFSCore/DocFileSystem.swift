import DocFSStore
import Foundation
import Logging
import Synchronization

/// The filesystem as the FUSE adapter sees it, in FUSE-free terms: items by inode, open
/// handles, reads, attributes. It ties the catalog (metadata), the enumerator (listings) and
/// the provider (local copies) together. Everything that may touch the network is `async`;
/// what only touches the catalog or a local copy is synchronous and cheap.
public final class DocFileSystem: Sendable {
    public let catalog: Catalog
    public let provider: Provider
    public let enumerator: DirectoryEnumerator
    public let readOnly: Bool
    private let logger: Logger
    private let handles = Mutex(HandleTable())

    /// An open file: which item, and the local copy it reads.
    public struct OpenFile: Sendable {
        public var inode: Inode
        public var copy: LocalCopy
        public var size: Int64
    }

    private struct HandleTable {
        var next: UInt64 = 1
        var open: [UInt64: OpenFile] = [:]
    }

    public init(store: any Store, catalog: Catalog, cacheDirectory: String, directoryTTL: Double, readOnly: Bool, logger: Logger) {
        self.catalog = catalog
        self.readOnly = readOnly
        self.logger = logger
        self.provider = Provider(store: store, catalog: catalog, cacheDirectory: cacheDirectory, logger: logger)
        self.enumerator = DirectoryEnumerator(store: store, catalog: catalog, ttl: directoryTTL, logger: logger)
    }

    // MARK: Metadata

    public func item(_ inode: Inode) throws(FSError) -> Item {
        guard let item = try catalog.item(inode) else { throw .notFound }
        return item
    }

    /// Finds `name` in `parent`, listing the parent first if it never was.
    public func lookup(parent: Inode, name: String) async throws(FSError) -> Item {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let directory = try item(parent)
        try await enumerator.ensureListed(directory)
        guard let child = try catalog.child(of: parent, named: name) else { throw .notFound }
        return child
    }

    /// The children of a directory, listing it first if it never was.
    public func children(of inode: Inode) async throws(FSError) -> [Item] {
        let directory = try item(inode)
        try await enumerator.ensureListed(directory)
        return try catalog.children(of: inode)
    }

    /// 512-byte blocks the item's local copy uses: 0 for a placeholder, so `du` tells what is local.
    public func localBlocks(of inode: Inode) -> Int64 {
        provider.presentCopies.withLock { $0[inode]?.allocatedBlocks } ?? 0
    }

    // MARK: Content

    /// Opens a file for reading: provides its local copy. Returns the handle number.
    public func open(_ inode: Inode, forWriting: Bool) async throws(FSError) -> (handle: UInt64, file: OpenFile) {
        if forWriting { throw .readOnly }
        let item = try item(inode)
        let (copy, size) = try await provider.open(item)
        let file = OpenFile(inode: inode, copy: copy, size: size)
        let handle = handles.withLock { table in
            let handle = table.next
            table.next += 1
            table.open[handle] = file
            return handle
        }
        return (handle, file)
    }

    /// Reads from an open handle's local copy. Never touches the network.
    public func read(handle: UInt64, offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws(FSError) -> Int {
        guard let file = handles.withLock({ $0.open[handle] }) else { throw .invalidArgument }
        return try file.copy.read(into: buffer, at: offset, fileSize: file.size)
    }

    /// Closes a handle; the last close of an item evicts its local copy.
    public func release(handle: UInt64) async {
        guard let file = handles.withLock({ $0.open.removeValue(forKey: handle) }) else { return }
        let outcome = await provider.release(file.inode)
        logger.trace("released", metadata: ["inode": "\(file.inode)", "eviction": "\(outcome)"])
    }

    /// Evicts every local copy. Called when the mount goes away.
    public func shutdown() async {
        handles.withLock { $0.open.removeAll() }
        await provider.evictAll()
    }

    // MARK: Extended attributes

    public static let stateAttribute = "user.docfs.state"
    public static let identifierAttribute = "user.docfs.id"
    public static let etagAttribute = "user.docfs.etag"

    public func extendedAttributeNames(of inode: Inode) throws(FSError) -> [String] {
        let item = try item(inode)
        var names = [Self.stateAttribute, Self.identifierAttribute]
        if item.etag != nil { names.append(Self.etagAttribute) }
        return names
    }

    public func extendedAttribute(_ name: String, of inode: Inode) throws(FSError) -> [UInt8] {
        let item = try item(inode)
        switch name {
        case Self.stateAttribute: return Array(item.state.rawValue.utf8)
        case Self.identifierAttribute: return Array(item.id.utf8)
        case Self.etagAttribute:
            guard let etag = item.etag else { throw .noAttribute }
            return Array(etag.value.utf8)
        default: throw .noAttribute
        }
    }
}

import CFuse
import DocFSCore
import DocFSStore
import Glibc
import Logging
import Synchronization

/// Turns kernel requests into calls on the core and the core's answers into replies.
///
/// Handlers copy their C arguments into Swift values first (libfuse frees `name` and `fi`
/// when the callback returns), answer at once what the catalog or a local copy can answer,
/// and hand anything that may touch the network to a Swift task, replying from there: a FUSE
/// worker thread never waits on the network.
final class FuseAdapter: Sendable {
    let fs: DocFileSystem
    let logger: Logger
    private let attributes: FileAttributes
    private let cacheDirectory: String
    /// How long the kernel may trust an entry (or its absence) or attributes before asking again.
    private let entryTimeout: Double
    private let attributeTimeout: Double
    /// Which processes get content only when it is local already (`--no-fetch-for`).
    private let fetchPolicy: FetchPolicy

    /// Open directory handles: a snapshot of the children taken at opendir, so successive
    /// readdir calls see one consistent listing with stable offsets.
    private let directories = Mutex(DirectoryHandles())
    /// The store version each inode's pages in the kernel's page cache came from (see `open`).
    private let cachedVersions = Mutex<[Inode: ETag]>([:])
    /// The session, for notifications to the kernel (set once the session exists).
    let session = Mutex<SessionPointer?>(nil)
    /// Every reply and notification passes here; shut before the session is destroyed.
    let gate = ReplyGate()
    /// The tasks answering requests (see `respond`), settled before the session is destroyed.
    let inFlight = InFlightRequests()

    struct DirectoryHandles {
        var next: UInt64 = 1
        var open: [UInt64: DirectorySnapshot] = [:]
    }

    init(fs: DocFileSystem, cacheDirectory: String, entryTimeout: Double, attributeTimeout: Double,
         access: LocalAccess = LocalAccess(), fetchPolicy: FetchPolicy = .default, logger: Logger) {
        self.fs = fs
        self.fetchPolicy = fetchPolicy
        self.entryTimeout = entryTimeout
        self.attributeTimeout = attributeTimeout
        self.logger = logger
        self.cacheDirectory = cacheDirectory
        self.attributes = FileAttributes(owner: getuid(), group: getgid(), access: access)
    }

    /// The request for a handler that answers on the FUSE worker thread.
    func request(_ req: fuse_req_t) -> FuseRequest {
        FuseRequest(RequestToken(raw: req), gate: gate)
    }

    /// Runs `work` in a tracked Swift task; `work` owns the request and must reply. A FUSE
    /// interrupt of the request cancels that task (see `FuseAdapter+Interrupts.swift`).
    func respond(_ req: fuse_req_t, _ work: @escaping @Sendable (consuming FuseRequest) async -> Void) {
        let token = RequestToken(raw: req)
        let gate = self.gate
        // Only after the loop ended (never in practice: its workers are joined by then).
        guard let id = inFlight.reserve() else { return FuseRequest(token, gate: gate).reply(errno: ENOTCONN) }
        registerInterrupt(req, id: id)
        let started = inFlight.start(id) { await work(FuseRequest(token, gate: gate)) }
        if !started { FuseRequest(token, gate: gate).reply(errno: ENOTCONN) }
    }

    // MARK: Entries and attributes

    func attributes(of item: Item) -> stat {
        attributes.stat(for: item, localBlocks: item.kind == .file ? fs.localBlocks(of: item) : 0)
    }

    /// An entry for the kernel. The kernel's lookup references are not counted: an inode is a
    /// catalog row id, never reused, and a row never waits for the kernel to forget it (an inode
    /// the kernel asks about after its row went is answered ENOENT). Counting them cost a table
    /// of 4 MiB for a 100,000-entry folder, and a lock on every lookup, for nothing read.
    func entry(for item: Item) -> fuse_entry_param {
        var entry = fuse_entry_param()
        entry.ino = item.inode
        entry.generation = 0
        entry.attr = attributes(of: item)
        entry.attr_timeout = attributeTimeout
        entry.entry_timeout = entryTimeout
        return entry
    }

    /// Tells the kernel to forget the cached attributes of `inode` (not its pages).
    func invalidateAttributes(of inode: Inode) {
        notifyInvalid(inode, from: -1)
    }

    /// `fuse_lowlevel_notify_inval_inode`: the attributes, and the pages from `offset` on (-1:
    /// none).
    private func notifyInvalid(_ inode: Inode, from offset: off_t) {
        gate.pass {
            guard let session = session.withLock({ $0 }) else { return }
            _ = fuse_lowlevel_notify_inval_inode(session.pointer, inode, offset, 0)
        }
    }

    /// Tells the kernel to forget the cached attributes and pages of `inode`, from another
    /// thread: the caller may be answering a request that holds those pages.
    func invalidateContent(of inode: Inode) {
        Task.detached { [self] in notifyInvalid(inode, from: 0) }
    }

    // MARK: Handlers

    /// Answers a lookup on this thread when the catalog can (the parent was listed); returns
    /// false, without replying, when a listing must come first. A name that is not there is
    /// answered as a negative entry, which the kernel keeps for the entry timeout.
    func lookupFromCatalog(_ raw: fuse_req_t, parent: Inode, name: String) -> Bool {
        let answer: Result<Item, FSError>
        do {
            guard let item = try fs.lookupIfListed(parent: parent, name: name) else { return false }
            answer = .success(item)
        } catch {
            answer = .failure(error)
        }
        let request = request(raw)
        switch answer {
        case .success(let item): request.replyEntry(entry(for: item))
        case .failure(.notFound): request.replyEntry(negativeEntry())
        case .failure(let error): request.fail(error)
        }
        return true
    }

    /// "No such name", cached by the kernel for the entry timeout (inode 0).
    func negativeEntry() -> fuse_entry_param {
        var entry = fuse_entry_param()
        entry.ino = 0
        entry.entry_timeout = entryTimeout
        return entry
    }

    func lookup(_ request: consuming FuseRequest, parent: Inode, name: String) async {
        do {
            let item = try await shielded { [fs] () throws(FSError) in try await fs.lookup(parent: parent, name: name) }
            request.replyEntry(entry(for: item))
        } catch {
            request.fail(error)
        }
    }

    func getattr(_ request: consuming FuseRequest, inode: Inode) {
        do {
            request.replyAttributes(attributes(of: try fs.item(inode)), timeout: attributeTimeout)
        } catch {
            request.fail(error)
        }
    }

    func readlink(_ request: consuming FuseRequest, inode: Inode) {
        do {
            let item = try fs.item(inode)
            guard item.kind == .symlink, let target = item.symlinkTarget else { throw FSError.invalidArgument }
            request.replyReadlink(target)
        } catch {
            request.fail(error)
        }
    }

    func open(_ request: consuming FuseRequest, inode: Inode, flags: Int32) async {
        do {
            let before = try? fs.item(inode)
            var mode = Self.openMode(flags)
            // Who asks matters only when the open would fetch: a complete local copy is served
            // to anyone, without reading /proc.
            mode.mayFetch = fs.hasCompleteLocalCopy(inode) || fetchPolicy.mayFetch(pid: request.callerPID)
            // The kernel's pages of the version it cached stay if that is still the store's (see
            // keepsPageCache): the open need not fetch, reads the page cache misses will.
            if !mode.writable { mode.cachedVersion = cachedVersions.withLock { $0[inode] } }
            // A writer's large file is fetched as it is used (`touch` uses none of it): by the
            // ranges its reads ask for, what its writes did not cover at its close, whole at a
            // truncate; all of the version opened, whose size the kernel was given.
            mode.fetchOnFirstUse = true
            let handle = try await fs.open(inode, mode: mode)
            let after = try? fs.item(inode)
            // The fetch found the content changed on the store: the kernel's cached size and
            // times are stale, and reads would stop at the old size. Drop them before open returns.
            if let before, let after, !before.showsSameContent(as: after) {
                invalidateAttributes(of: inode)
            }
            request.replyOpen(handle: handle, keepCache: keepsPageCache(inode, version: fs.cleanVersion(handle: handle)))
        } catch .fetchRefused(let what) {
            // Expected, and frequent (a thumbnailer walking a folder): not worth an info line each.
            logger.debug("open refused to a process under --no-fetch-for", metadata: ["item": "\(what)"])
            request.fail(.fetchRefused(what))
        } catch {
            logger.info("open failed", metadata: ["inode": "\(inode)", "error": "\(error)"])
            request.fail(error)
        }
    }

    /// Whether the kernel may keep the pages it cached of `inode`: only when the version opened
    /// now is the one it cached them from, with no local change pending. Otherwise open drops
    /// them (no `keep_cache`), and the version opened now is remembered for the next open.
    private func keepsPageCache(_ inode: Inode, version: ETag?) -> Bool {
        return cachedVersions.withLock { versions in
            defer { versions[inode] = version }
            return version != nil && versions[inode] == version
        }
    }

    /// A read: answered here from the copy's descriptor when its bytes are local, else in a
    /// task once they are fetched.
    func read(_ raw: fuse_req_t, handle: UInt64, offset: Int64, size: Int) {
        let loan: DescriptorLoan?
        do {
            loan = try fs.lendForRead(handle: handle, offset: offset, count: size)
        } catch {
            return request(raw).fail(error)
        }
        switch consume loan {
        case .some(let local):
            request(raw).replyData(from: local.descriptor, count: local.count, at: offset)
        case .none:
            respond(raw) { request in await self.readWhenFetched(request, handle: handle, offset: offset, size: size) }
        }
    }

    /// A read whose bytes are local: answered from the copy's descriptor, not through a buffer.
    func read(_ request: consuming FuseRequest, handle: UInt64, offset: Int64, size: Int) {
        do {
            let loan = try fs.lendLocalBytes(handle: handle, offset: offset, count: size)
            request.replyData(from: loan.descriptor, count: loan.count, at: offset)
        } catch {
            request.fail(error)
        }
    }

    /// A read whose bytes must be fetched first (a sparse copy of a large file).
    func readWhenFetched(_ request: consuming FuseRequest, handle: UInt64, offset: Int64, size: Int) async {
        do {
            try await fs.waitForContent(handle: handle, offset: offset, count: size)
        } catch {
            logger.info("read failed", metadata: ["handle": "\(handle)", "offset": "\(offset)", "error": "\(error)"])
            return request.fail(error)
        }
        read(request, handle: handle, offset: offset, size: size)
    }

    static func openMode(_ flags: Int32) -> DocFileSystem.OpenMode {
        let accessMode = flags & O_ACCMODE
        let writable = accessMode == O_WRONLY || accessMode == O_RDWR
        return DocFileSystem.OpenMode(writable: writable, truncate: flags & O_TRUNC != 0, append: flags & O_APPEND != 0)
    }

    func create(_ request: consuming FuseRequest, parent: Inode, name: String, mode: UInt32, flags: Int32,
                caller: (uid: UInt32, gid: UInt32)) async {
        do {
            let (item, handle) = try await shielded({ [fs] () throws(FSError) in
                try await fs.create(in: parent, name: name, mode: mode, owner: caller.uid, group: caller.gid,
                                    exclusive: flags & O_EXCL != 0, truncate: flags & O_TRUNC != 0)
            }, abandoned: { [fs] created in Task { await fs.release(handle: created.handle) } })
            request.replyCreate(entry(for: item), handle: handle)
        } catch {
            request.fail(error)
        }
    }

    /// A write: into the local copy, on this thread (a sparse copy too). An append that landed
    /// elsewhere than the kernel's offset (it computed it from a size the open's fetch proved
    /// stale) leaves the kernel's size and pages of the file wrong: they are dropped once the
    /// write is answered (the kernel holds the pages locked until then).
    func write(_ raw: fuse_req_t, handle: UInt64, offset: Int64, bytes: UnsafeRawBufferPointer) {
        do {
            let landed = try fs.writeLanding(handle: handle, offset: offset, bytes: bytes)
            request(raw).replyWrite(count: landed.count)
            if landed.offset != offset { invalidateContent(of: landed.inode) }
        } catch {
            request(raw).fail(error)
        }
    }

    /// A flush (every close): on this thread, unless a sparse copy's holes must be fetched
    /// before its changes are committed (in a task then).
    func flush(_ raw: fuse_req_t, handle: UInt64) {
        do {
            if try fs.flushIfComplete(handle: handle) { return request(raw).reply(errno: 0) }
        } catch {
            return request(raw).fail(error)
        }
        respond(raw) { [fs] request in
            do {
                try await fs.flush(handle: handle)
                request.reply(errno: 0)
            } catch {
                request.fail(error)
            }
        }
    }

    func fsync(_ request: consuming FuseRequest, handle: UInt64) async {
        do {
            try await shielded { [fs] () throws(FSError) in try await fs.fsync(handle: handle) }
            request.reply(errno: 0)
        } catch {
            request.fail(error)
        }
    }

    func setattr(_ request: consuming FuseRequest, inode: Inode, changes: DocFileSystem.AttributeChanges, handle: UInt64?) async {
        do {
            let item = try await fs.setAttributes(of: inode, changes, handle: handle)
            request.replyAttributes(attributes(of: item), timeout: attributeTimeout)
        } catch {
            request.fail(error)
        }
    }

    func mkdir(_ request: consuming FuseRequest, parent: Inode, name: String, mode: UInt32, caller: (uid: UInt32, gid: UInt32)) async {
        do {
            let item = try await shielded { [fs] () throws(FSError) in
                try await fs.makeDirectory(in: parent, name: name, mode: mode, owner: caller.uid, group: caller.gid)
            }
            request.replyEntry(entry(for: item))
        } catch {
            request.fail(error)
        }
    }

    /// mknod of a regular file is a create without an open; a FIFO, socket or device node is
    /// a special file (see `SpecialFile`); other types are refused.
    func mknod(_ request: consuming FuseRequest, parent: Inode, name: String, mode: UInt32, rdev: UInt64,
               caller: (uid: UInt32, gid: UInt32)) async {
        if let type = SpecialFile.FileType(mode: mode) {
            await mknodSpecial(request, parent: parent, name: name, SpecialFile(type: type, rdev: rdev), mode: mode, caller: caller)
            return
        }
        guard mode & S_IFMT == S_IFREG || mode & S_IFMT == 0 else {
            request.reply(errno: EPERM)
            return
        }
        do {
            let (item, handle) = try await fs.create(in: parent, name: name, mode: mode, owner: caller.uid, group: caller.gid,
                                                     exclusive: true, truncate: false)
            await fs.release(handle: handle)
            request.replyEntry(entry(for: item))
        } catch {
            request.fail(error)
        }
    }

    func symlink(_ request: consuming FuseRequest, parent: Inode, name: String, target: String, caller: (uid: UInt32, gid: UInt32)) async {
        do {
            let item = try await fs.makeSymlink(in: parent, name: name, target: target, owner: caller.uid, group: caller.gid)
            request.replyEntry(entry(for: item))
        } catch {
            request.fail(error)
        }
    }

    /// link(2): EPERM where the store has no hard links.
    func link(_ request: consuming FuseRequest, inode: Inode, newParent: Inode, newName: String) async {
        do {
            let item = try await fs.makeHardLink(to: inode, in: newParent, name: newName)
            // The kernel keeps the source's attributes (its link count) until told.
            invalidateAttributes(of: inode)
            request.replyEntry(entry(for: item))
        } catch {
            request.fail(error)
        }
    }

    func remove(_ request: consuming FuseRequest, parent: Inode, name: String, directory: Bool) async {
        do {
            try await shielded { [fs] () throws(FSError) in try await fs.remove(from: parent, name: name, directory: directory) }
            request.reply(errno: 0)
        } catch {
            request.fail(error)
        }
    }

    func rename(_ request: consuming FuseRequest, parent: Inode, name: String, newParent: Inode, newName: String, flags: UInt32) async {
        // RENAME_EXCHANGE cannot be done atomically on a store; RENAME_WHITEOUT is for overlays.
        guard flags & ~UInt32(1) == 0 else {
            request.reply(errno: EINVAL)
            return
        }
        do {
            try await shielded { [fs] () throws(FSError) in
                try await fs.rename(from: parent, name: name, to: newParent, newName: newName, noReplace: flags & 1 != 0)
            }
            request.reply(errno: 0)
        } catch {
            request.fail(error)
        }
    }

    /// fallocate: mode 0 (allocate, extending the size) is a truncate up; the rest is not supported.
    func fallocate(_ request: consuming FuseRequest, inode: Inode, mode: Int32, offset: Int64, length: Int64, handle: UInt64) async {
        guard mode == 0 else {
            request.reply(errno: EOPNOTSUPP)
            return
        }
        do {
            let item = try fs.item(inode)
            if offset + length > item.size {
                _ = try await fs.setAttributes(of: inode, .init(size: offset + length), handle: handle)
            }
            request.reply(errno: 0)
        } catch {
            request.fail(error)
        }
    }

    func release(_ request: consuming FuseRequest, handle: UInt64) async {
        await fs.release(handle: handle)
        request.reply(errno: 0)
    }

    func opendir(_ request: consuming FuseRequest, inode: Inode) async {
        do {
            let directory = try fs.item(inode)
            guard directory.isDirectory else { throw FSError.notADirectory }
            let parent = directory.parent ?? inode
            // The children stream from the catalog into the snapshot, never all decoded at once.
            let snapshot = try await shielded { [fs] () throws(FSError) -> DirectorySnapshot in
                var snapshot = DirectorySnapshot()
                snapshot.append(name: ".", inode: inode, type: .directoryLink, format: S_IFDIR)
                snapshot.append(name: "..", inode: parent, type: .directoryLink, format: S_IFDIR)
                try await fs.forEachChild(of: inode) { child in
                    // Told from the row the kind comes from: asked apart, a sweep confirming a
                    // link in between left it typed DT_REG, and `find -type l` passed it by.
                    snapshot.append(name: child.name, inode: child.inode, type: fs.kindUnconfirmed(child) ? .unconfirmed : .child,
                                    format: Self.format(of: child.kind))
                }
                return snapshot
            }
            let handle = directories.withLock { table in
                let handle = table.next
                table.next += 1
                table.open[handle] = snapshot
                return handle
            }
            request.replyOpen(handle: handle)
        } catch {
            request.fail(error)
        }
    }

    /// The `S_IFMT` bits of an item of `kind`.
    static func format(of kind: Item.Kind) -> mode_t {
        switch kind {
        case .file: return S_IFREG
        case .directory: return S_IFDIR
        case .symlink: return S_IFLNK
        case .fifo: return S_IFIFO
        case .characterDevice: return S_IFCHR
        case .blockDevice: return S_IFBLK
        case .socket: return S_IFSOCK
        }
    }

    /// Fills one readdir(plus) reply from the handle's snapshot, starting after `offset`.
    /// readdirplus reads each child's attributes as it hands the child out; a child gone since
    /// opendir, or one whose kind is still to be confirmed, goes without (the kernel looks it up).
    func readdir(_ request: consuming FuseRequest, raw: fuse_req_t, handle: UInt64, offset: Int64, size: Int, plus: Bool) {
        guard let snapshot = directories.withLock({ $0.open[handle] }) else {
            request.fail(.invalidArgument)
            return
        }
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(size, 1))
        defer { buffer.deallocate() }
        var used = 0
        var index = Int(max(offset, 0))
        // The attributes of about as many children as the reply can hold, in one catalog read.
        var attributed: [Inode: Item] = [:]
        if plus, index < snapshot.count {
            let batch = (index..<min(snapshot.count, index + size / 128 + 1)).filter { snapshot.type(at: $0) == .child }
            attributed = (try? fs.items(batch.map { snapshot.inode(at: $0) })) ?? [:]
        }
        while index < snapshot.count {
            let inode = snapshot.inode(at: index)
            let remaining = size - used
            let needed: Int
            if plus {
                var param = fuse_entry_param()
                param.attr.st_ino = ino_t(inode)
                param.attr.st_mode = snapshot.format(at: index)
                if snapshot.type(at: index) == .child, let item = try? attributed[inode] ?? fs.item(inode) {
                    param.ino = inode
                    param.attr = attributes(of: item)
                    param.attr_timeout = attributeTimeout
                    param.entry_timeout = entryTimeout
                }
                needed = snapshot.withName(at: index) { name in
                    fuse_add_direntry_plus(raw, buffer + used, remaining, name, &param, off_t(index + 1))
                }
            } else {
                var st = stat()
                st.st_ino = ino_t(inode)
                st.st_mode = snapshot.format(at: index)
                needed = snapshot.withName(at: index) { name in
                    fuse_add_direntry(raw, buffer + used, remaining, name, &st, off_t(index + 1))
                }
            }
            if needed > remaining { break }
            used += needed
            index += 1
        }
        request.replyBuffer(UnsafeRawBufferPointer(start: buffer, count: used))
    }

    func releasedir(_ request: consuming FuseRequest, handle: UInt64) {
        let released = directories.withLock { $0.open.removeValue(forKey: handle) }
        request.reply(errno: 0)
        // A big folder's snapshot and the rows read for it leave free pages behind.
        if let released, released.count >= 10_000 { MallocTuning.releaseFreePages() }
    }

    func statfs(_ request: consuming FuseRequest) {
        var host = statvfs()
        _ = statvfs(cacheDirectory, &host)
        var result = statvfs()
        result.f_bsize = 4096
        result.f_frsize = 4096
        let scale = UInt(max(host.f_frsize, 1)) 
        result.f_blocks = fsblkcnt_t(UInt(host.f_blocks) * scale / 4096)
        result.f_bfree = fsblkcnt_t(UInt(host.f_bfree) * scale / 4096)
        result.f_bavail = fsblkcnt_t(UInt(host.f_bavail) * scale / 4096)
        let items = (try? fs.itemCount()) ?? 0
        result.f_files = fsfilcnt_t(items)
        result.f_ffree = fsfilcnt_t(1 << 32)
        result.f_favail = result.f_ffree
        result.f_namemax = 255
        request.replyStatfs(result)
    }

    func getxattr(_ request: consuming FuseRequest, inode: Inode, name: String, size: Int) {
        do {
            request.replyXattr(try fs.extendedAttribute(name, of: inode), callerBufferSize: size)
        } catch {
            request.fail(error)
        }
    }

    /// Empty: docfs's attributes are asked by name (see DocFileSystem+ExtendedAttributes).
    func listxattr(_ request: consuming FuseRequest, inode: Inode, size: Int) {
        do {
            _ = try fs.item(inode)
            request.replyXattr([], callerBufferSize: size)
        } catch {
            request.fail(error)
        }
    }

    func access(_ request: consuming FuseRequest, inode: Inode, mask: Int32) {
        do {
            _ = try fs.item(inode)
            if mask & W_OK != 0 && fs.readOnly {
                request.fail(.readOnly)
            } else {
                request.reply(errno: 0)
            }
        } catch {
            request.fail(error)
        }
    }
}

extension FuseRequest {
    consuming func fail(_ error: any Error) {
        fail((error as? FSError) ?? .io("\(error)"))
    }
}

/// The session pointer, shareable: libfuse's notify calls are safe from any thread.
struct SessionPointer: @unchecked Sendable {
    let pointer: OpaquePointer
}

// WebDAVStore+ConditionalWrites: how an upload that must not replace another client's version
// is made safe on the server at hand.
//
// A server with WebDAV locks (`DAV: 2` in OPTIONS) gets every conditional upload under an
// exclusive lock of its path: LOCK, the version checked under it, the PUT (and the PROPPATCH of
// its mode and time) with the lock's token, UNLOCK (after the upload returns: PendingUnlocks.swift). Another docfs mount, and any client that
// honours locks, waits meanwhile (HTTP 423, retried). `If-Match` alone is not enough there:
// Apache, WsgiDAV and sabre/dav check a condition when a request starts and write when its body
// has arrived, so two uploads over one version, or two creations of one name, both pass. Two
// docfs mounts of Apache, both keeping a conflict copy under the same name in the same second,
// lost one of them that way.
//
// Without locks, the server's conditions are what there is. Found out once per store, at its
// first conditional upload: an empty scratch file is PUT beside that file, then PUT again with
// an `If-Match` no version has, and with `If-None-Match: *`, then deleted. 412 to both: the
// server honours conditions (`docfs serve` applies them with the write). A 2xx to either: it
// ignores them (`rclone serve webdav`'s library has no preconditions on PUT; nginx ignores
// both); then a new file is PUT to a hidden name and moved in place with `Overwrite: F`
// (`putThenMove`), which no client's file can be lost to, and an upload over a version is
// checked one request before the PUT: the log and `docfs status` say what that risks.

import AsyncHTTPClient
import DocFSStore
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization

/// Whether a server checks the conditions of a PUT, as a probe found.
public enum ConditionSupport: Sendable, Equatable {
    /// `If-Match` of a version no file has was refused (412): conditions hold on the server.
    case honoured
    /// The PUT went through: conditions are ignored. `locks`: the server has WebDAV locks,
    /// under which docfs makes its check and its PUT one step.
    case ignored(locks: Bool)
    /// The probe could not tell (the folder refused the scratch file): treated as honoured,
    /// and the version is still checked just before each upload.
    case unknown
}

/// The probe's outcome, shared by every upload of the store (one probe, whoever asks first).
final class ConditionProbe: Sendable {
    let running = Mutex<Task<ConditionSupport, Never>?>(nil)
    let found = Mutex<ConditionSupport?>(nil)
    let handlers = Mutex<[@Sendable (ConditionSupport) -> Void]>([])
    /// Whether the server has WebDAV locks, once asked (false from the first LOCK it refused
    /// as a method, whatever OPTIONS said).
    let locks = Mutex<Bool?>(nil)
    /// The warning about weak tags without locks was logged.
    let weakNoted = Mutex(false)
    /// Empty files this mount's LOCKs made, until their PUT (LockMadeFiles.swift).
    let lockMadeFiles = LockMadeFiles()
}

extension ConditionSupport: CustomStringConvertible {
    /// For `docfs status`.
    public var description: String {
        switch self {
        case .honoured: return "honoured by the server"
        case .ignored(locks: true): return "ignored by the server: uploads over a version take a WebDAV lock"
        case .ignored(locks: false): return "ignored by the server, which has no locks: new files are moved in place (Overwrite: F), but a version another client saves while docfs uploads over it may be replaced"
        case .unknown: return "not known (the probe was refused): checked just before each upload"
        }
    }
}

/// An exclusive write lock held on one path.
struct HeldLock: Sendable {
    var token: String
    /// The LOCK made the resource (it did not exist): an empty file stands there until the PUT.
    var created: Bool
}

extension WebDAVStore {
    /// What the store found out about conditions on PUT, if it has yet.
    public var conditionSupport: ConditionSupport? { conditionProbe.found.withLock { $0 } }

    /// Calls `handler` once the probe found out (at once if it has).
    public func whenConditionsFound(_ handler: @escaping @Sendable (ConditionSupport) -> Void) {
        let found = conditionProbe.found.withLock { found in
            if found == nil { conditionProbe.handlers.withLock { $0.append(handler) } }
            return found
        }
        if let found { handler(found) }
    }

    /// Runs `put` (given the headers its request must carry, and any request that belongs to the
    /// same write must carry) under `condition`, in the way this server makes safe: under an
    /// exclusive lock where it has locks; else the condition sent along, after a check of the
    /// version; or, where the server cannot check it (it ignores conditions, or the tag is
    /// weak), the check just before the PUT.
    func underCondition<T: Sendable>(_ path: StorePath, _ condition: WriteCondition, bytes: Int64,
                                     _ put: ([String: String]) async throws(StoreError) -> T) async throws(StoreError) -> T {
        // Every PUT and LOCK of an upload passes here: docfs's own lock on the path goes first.
        await pendingUnlocks.settle(path)
        if condition == .always { return try await put([:]) }
        // Asked even where locks make it moot: `docfs status` says what the server does.
        _ = await probeConditions(near: path)
        if await hasLocks(near: path), let result = try await underLock(path, condition, bytes: bytes, put) { return result }
        let current = try await check(path, condition)
        guard case .ifMatch = condition, let tag = current?.etag else { return try await put(["If-None-Match": "*"]) }
        guard tag.isWeak else { return try await put(["If-Match": tag.value]) }
        // A weak tag (Apache's, for a second after a change, or one docfs made from time and
        // size) never matches If-Match: RFC 9110 compares it strongly. Sending it would make
        // every quick second save a false conflict.
        if let seconds = tag.madeFromSeconds {
            // A version made from the server's own time: `If-Unmodified-Since` on it is checked
            // with the write by the servers that check conditions (to the second).
            return try await put(["If-Unmodified-Since": HTTPDate.format(seconds)])
        }
        if conditionProbe.weakNoted.withLock({ noted in defer { noted = true }; return !noted }) {
            logger.warning("the server gives weak ETags and has no locks: an upload over a version it marks weak is checked just before it, not with it")
        }
        return try await put([:])
    }

    /// The store's entry at `path` if `condition` holds there now (nil: nothing there, for
    /// `.mustNotExist`); else the error the upload would meet.
    private func check(_ path: StorePath, _ condition: WriteCondition) async throws(StoreError) -> RemoteEntry? {
        try Self.verify(try await statIfExists(path), at: path, condition)
    }

    /// `current` if `condition` holds over it (nil: nothing there); else the error the upload
    /// would meet.
    private static func verify(_ current: RemoteEntry?, at path: StorePath, _ condition: WriteCondition) throws(StoreError) -> RemoteEntry? {
        switch condition {
        case .always:
            return current
        case .ifMatch(let etag):
            guard let current, current.kind == .file, let currentETag = current.etag, Self.sameVersion(currentETag, etag) else {
                if current?.kind == .directory { throw .isADirectory(path) }
                throw .versionMismatch(path)
            }
            return current
        case .mustNotExist:
            if current != nil { throw .alreadyExists(path) }
            return nil
        }
    }

    /// `put` with the check of `condition` made under an exclusive lock of `path`, the lock's
    /// token sent along; nil when the server refuses LOCK as a method (then it has no locks).
    private func underLock<T: Sendable>(_ path: StorePath, _ condition: WriteCondition, bytes: Int64,
                                        _ put: ([String: String]) async throws(StoreError) -> T) async throws(StoreError) -> T? {
        // Long enough for the PUT at 512 KiB/s, and no longer: a lock the server loses track of
        // (Apache's lock database, under concurrent LOCKs, brings a released one back) blocks
        // every writer of the file until it times out.
        guard let lock = try await lockExclusively(path, seconds: 10 + Int(min(bytes >> 19, 7200))) else { return nil }
        do throws(StoreError) {
            switch condition {
            case .always:
                break
            case .ifMatch:
                // A lock that made the resource found nothing at the path: not the version wanted.
                if lock.created { throw StoreError.versionMismatch(path) }
                try await checkUnderLock(path, condition, lock)
            case .mustNotExist:
                try await checkUnderLock(path, condition, lock)
            }
            let result: T
            do {
                result = try await put(["If": "(<\(lock.token)>)"])
            } catch .versionMismatch, .alreadyExists {
                // 412 to a PUT whose condition held under the lock: the server lost the lock (two
                // LOCKs at once in one folder of Apache can), not a conflict. Busy: tried again.
                if !(lock.created && condition == .mustNotExist) { _ = try await check(path, condition) }
                throw StoreError.busy(status: 412, retryAfter: nil, message: "PUT \(path): the server lost docfs's lock")
            }
            conditionProbe.lockMadeFiles.forget(path)
            pendingUnlocks.start(path) { await self.unlock(path, lock) }
            return result
        } catch {
            if lock.created { await deleteUnderLock(path, lock) }
            await unlock(path, lock)
            throw error
        }
    }

    /// `condition` checked under `lock`, in one PROPFIND that also asks which locks the server
    /// holds on the path. A lock granted beside docfs's is a server that let two exclusive
    /// LOCKs through at once (sabre/dav's PDO backend looks for a conflict, then inserts): busy,
    /// tried again. An empty file where the LOCK said it made one is that LOCK's; one with
    /// bytes is another client's, written between that server's look and its answer.
    private func checkUnderLock(_ path: StorePath, _ condition: WriteCondition, _ lock: HeldLock) async throws(StoreError) {
        var current: RemoteEntry?
        var othersLocked = false
        do {
            if let match = try await propfindItself(path, body: propfindBody(lockDiscovery: true)) {
                current = match.isLockNull ? nil : entry(path, match)
                othersLocked = match.lockTokens.contains { $0 != lock.token }
            } else {
                current = try await head(path)
            }
        } catch .notFound {
            current = nil
        }
        if condition == .mustNotExist, let made = current,
           conditionProbe.lockMadeFiles.isOurs(made, at: path, under: lock) {
            current = nil
        }
        _ = try Self.verify(current, at: path, condition)
        if othersLocked { throw .busy(status: 423, retryAfter: nil, message: "\(path): the server granted another client's lock beside docfs's") }
    }

    /// The probe of conditions on PUT (see the top of the file), run once, near `path`.
    func probeConditions(near path: StorePath) async -> ConditionSupport {
        let task = conditionProbe.running.withLock { running in
            if let running { return running }
            let task = Task { await self.runProbe(near: path) }
            running = task
            return task
        }
        return await task.value
    }

    private func runProbe(near path: StorePath) async -> ConditionSupport {
        let support = await probe(near: path)
        let handlers = conditionProbe.found.withLock { found in
            found = support
            return conditionProbe.handlers.withLock { handlers in
                defer { handlers.removeAll() }
                return handlers
            }
        }
        for handler in handlers { handler(support) }
        switch support {
        case .honoured:
            logger.debug("the server honours If-Match and If-None-Match on PUT")
        case .ignored(locks: true):
            logger.notice("the server ignores If-Match and If-None-Match on PUT: each upload over a version checks it under a WebDAV lock")
        case .ignored(locks: false):
            logger.warning("""
                the server ignores If-Match and If-None-Match on PUT and has no locks: another client's version \
                saved between docfs's check of a file and its upload would be replaced
                """)
        case .unknown:
            logger.info("cannot tell whether the server honours If-Match on PUT: the version is checked just before each upload")
        }
        return support
    }

    /// How the probe's scratch name begins; 16 hex digits follow. Listings leave it out: it
    /// exists for the moment of the probe.
    static let probePrefix = ".docfs-probe-"

    private func probe(near path: StorePath) async -> ConditionSupport {
        let name = Self.scratchName(Self.probePrefix)
        guard let scratch = try? (path.parent ?? .root).appending(name) else { return .unknown }
        func put(_ headers: [String: String]) async -> Int? {
            try? await transport.metadata(.PUT, url: url(scratch), path: scratch, headers: headers,
                                          body: .bytes(ByteBuffer()), timeout: Self.metadataTimeout).status
        }
        // Some servers check If-Match only on a file that exists (WsgiDAV): ask over one.
        guard let made = await put([:]), (200..<300).contains(made) else { return .unknown }
        let overVersion = await put(["If-Match": "\"docfs-probe-no-such-version\""])
        let overFile = overVersion == 412 ? await put(["If-None-Match": "*"]) : nil
        _ = try? await transport.metadata(.DELETE, url: url(scratch), path: scratch, headers: [:], body: nil,
                                          timeout: Self.metadataTimeout)
        switch (overVersion, overFile) {
        case (412, 412):
            return .honoured
        case (.some(200..<300), _), (412, .some(200..<300)):
            return .ignored(locks: await hasLocks(near: path))
        default:
            return .unknown
        }
    }

    /// Whether the server says it has WebDAV locks (`DAV: 1, 2`), asked once (OPTIONS).
    func hasLocks(near path: StorePath) async -> Bool {
        if let known = conditionProbe.locks.withLock({ $0 }) { return known }
        let directory = path.parent ?? .root
        guard let answer = try? await transport.metadata(.OPTIONS, url: url(directory, collection: true), path: directory,
                                                         headers: [:], body: nil, timeout: Self.metadataTimeout) else { return false }
        let locks = answer.headers[canonicalForm: "DAV"].contains { $0.trimmingCharacters(in: .whitespaces) == "2" }
        conditionProbe.locks.withLock { $0 = locks }
        traitsMayHaveChanged()
        return locks
    }

    static let lockBody = """
        <?xml version="1.0" encoding="utf-8"?>
        <D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope><D:locktype><D:write/></D:locktype><D:owner>docfs</D:owner></D:lockinfo>
        """

    /// An exclusive write lock of `path` for at most `seconds`; nil when the server refuses
    /// LOCK (403, 405, 501), which it is then taken not to have. A path another client
    /// holds locked (423) is asked again for a few seconds, then the call fails as busy (retried).
    func lockExclusively(_ path: StorePath, seconds: Int) async throws(StoreError) -> HeldLock? {
        var wait = Duration.milliseconds(20)
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let answer = try await transport.metadata(.LOCK, url: url(path), path: path,
                                                      headers: ["Timeout": "Second-\(seconds)", "Depth": "0",
                                                                "Content-Type": "application/xml; charset=utf-8"],
                                                      body: .bytes(ByteBuffer(string: Self.lockBody)), timeout: Self.metadataTimeout)
            switch answer.status {
            case 200, 201:
                guard let header = answer.headers.first(name: "Lock-Token") else {
                    throw .protocolError("LOCK \(path): no Lock-Token in the answer")
                }
                let token = header.trimmingCharacters(in: CharacterSet(charactersIn: "<> "))
                return HeldLock(token: token, created: answer.status == 201)
            case 423 where ContinuousClock.now < deadline:
                try? await Task.sleep(for: wait)
                wait = min(wait * 2, .milliseconds(500))
            case 403, 405, 501:
                // 403: LOCK forbidden where PUT may not be (a server limiting methods); a path not
                // writable at all meets its 403 again at the PUT.
                logger.notice("the server refuses LOCK (HTTP \(answer.status)) although it names locks: uploads rely on its conditions")
                conditionProbe.locks.withLock { $0 = false }
                return nil
            default:
                throw answer.error(method: "LOCK", path: path)
            }
        }
    }

    func unlock(_ path: StorePath, _ lock: HeldLock) async {
        do {
            let answer = try await transport.metadata(.UNLOCK, url: url(path), path: path, headers: ["Lock-Token": "<\(lock.token)>"],
                                                      body: nil, timeout: Self.metadataTimeout)
            if !(200..<300).contains(answer.status) {
                logger.info("UNLOCK \(path): HTTP \(answer.status); the lock expires by itself")
            }
        } catch {
            logger.info("UNLOCK \(path) failed (\(error)); the lock expires by itself")
        }
    }

    /// Removes the empty resource a LOCK made, when no PUT filled it. Only an empty file, and
    /// only that version of it: a server that granted another client's lock beside docfs's
    /// (sabre/dav) takes docfs's token for a DELETE of the file that client wrote meanwhile.
    private func deleteUnderLock(_ path: StorePath, _ lock: HeldLock) async {
        let found: RemoteEntry?
        do { found = try await statIfExists(path) } catch { return }  // still recorded: found again at the next try
        guard let found else {
            conditionProbe.lockMadeFiles.forget(path)
            return
        }
        guard found.kind == .file, found.size == 0 else { return }
        let condition = found.etag.map { "(<\(lock.token)> [\($0.value)])" } ?? "(<\(lock.token)>)"
        let answer = try? await transport.metadata(.DELETE, url: url(path), path: path, headers: ["If": condition], body: nil,
                                                   timeout: Self.metadataTimeout)
        if let answer, (200..<300).contains(answer.status) || answer.status == 404 {
            conditionProbe.lockMadeFiles.forget(path)
        }
    }
}

extension WebDAVStore {
    /// Whether a new file must be created by `putThenMove`, whose MOVE with `Overwrite: F`
    /// every server checks: the server ignores
    /// `If-None-Match: *` and has no locks to make the check and the PUT one step.
    func createsByMoving(near path: StorePath) async -> Bool {
        if case .ignored(locks: false) = await probeConditions(near: path) { return true }
        return false
    }
}

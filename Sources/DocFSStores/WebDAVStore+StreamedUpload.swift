import AsyncHTTPClient
import DocFSStore
import Foundation
import NIOCore
import Synchronization

// A PUT whose body is sent while the file is still being written (`GrowingContent`): chunked
// transfer encoding, since the length is known only at the end. Used for a new file copied in
// order (see the core's `StreamedUpload`); everything else is uploaded from a finished snapshot.
//
// The body goes to a temporary name in the same folder, and one MOVE (Overwrite: F for a new
// file) puts it in place once it is whole and its size checked: a server that writes a body in
// place (rclone's) would otherwise show a torn file under the real name while it streams, and
// keep one when the stream is cancelled. The temporary name is never listed (see
// `isStreamedUploadName`), and is deleted when the upload does not complete. A server that
// refuses a part of this (a chunked body, MOVE; a reverse proxy that does not rewrite MOVE's
// Destination answers 502) is not asked again in this mount: its files go up at close.
// A temporary file is recorded (UploadLedger.swift) until it is moved or deleted, so that the
// next mount deletes one a killed daemon left on a server that writes bodies in place.

extension WebDAVStore {
    /// How a streamed upload's temporary name begins; 16 hex digits follow.
    static let streamedUploadPrefix = ".docfs-upload-"

    /// What is recorded of a streamed upload under way.
    struct TemporaryUpload: Codable, Equatable, Sendable {
        /// The store path of its temporary file.
        var temporary: String
    }

    /// Records the streamed uploads of this run in `directory/webdav-uploads`, and deletes the
    /// temporary files of those an earlier run recorded there and never ended; the empty files
    /// its LOCKs make in `directory/webdav-locks` (LockMadeFiles.swift).
    public func keepUnfinishedWork(in directory: String) async {
        conditionProbe.lockMadeFiles.adopt(directory + "/webdav-locks", logger: logger,
                                           unlock: { path, token in await self.unlock(path, HeldLock(token: token, created: false)) },
                                           stat: { path throws(StoreError) in try await self.statIfExists(path) })
        let ledger = UploadLedger<TemporaryUpload>(directory: directory + "/webdav-uploads", logger: logger)
        uploadLedger.withLock { $0 = ledger }
        ledger.endUnfinished(what: "a streamed upload's temporary file", path: \.temporary) { upload throws(StoreError) in
            let temporary = try StorePath(upload.temporary)
            guard Self.isStreamedUploadName(temporary.name) else { return }  // never a user's file
            do throws(StoreError) { try await self.delete(temporary, isDirectory: false) } catch .notFound {}  // moved in place, or never written
        }
    }

    /// Whether `name` is a streamed upload's temporary name: listings leave it out.
    static func isStreamedUploadName(_ name: String) -> Bool {
        isScratchName(name, prefix: streamedUploadPrefix)
    }

    /// Whether `name` is `prefix` and 16 lowercase hex digits: a name of docfs's own work.
    static func isScratchName(_ name: String, prefix: String) -> Bool {
        let bytes = Array(name.utf8)
        let prefix = Array(prefix.utf8)
        guard bytes.count == prefix.count + 16, bytes.starts(with: prefix) else { return false }
        return bytes[prefix.count...].allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// Attributes go as dead properties afterwards (`setAttributes`), as after any PUT.
    public func write(_ path: StorePath, growing content: any GrowingContent, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .isADirectory(path) }
        if let refusal = streamedUploadRefusal.withLock({ $0 }) { throw .notSupported(refusal) }
        // The MOVE's `Overwrite: F` keeps what stands there. Whether the name is free is asked
        // while the body goes (asked first, it cost a round trip before the first byte), and
        // answered before the MOVE: a name another client took meanwhile costs that body, which
        // is then deleted once the server answered for it (a PUT cut off mid-body could still be
        // writing the file when the DELETE came). Not asked in a folder made here a moment ago.
        let replace: Bool
        switch condition {
        case .mustNotExist: replace = false
        case .always: replace = true
        case .ifMatch: throw .notSupported("a streamed upload over a version")
        }
        let nameIsFree: Task<Result<Void, StoreError>, Never>? = replace || knownFolders.isFresh(path) ? nil : Task {
            do throws(StoreError) {
                return try await self.statIfExists(path) == nil ? .success(()) : .failure(.alreadyExists(path))
            } catch {
                return .failure(error)
            }
        }
        return try await putThenMove(path, replace: replace, put: { (temporary) throws(StoreError) in
            do throws(StoreError) {
                try await self.putGrowing(content, to: temporary, for: path)
            } catch {
                nameIsFree?.cancel()
                throw error
            }
            try await nameIsFree?.value.get()
        }, moveFailed: { error in
            switch error {
            case .notSupported(let why), .accessDenied(let why): return refused(why)
            case .serverError(let status, let why) where status == 502: return refused(why)
            default: return error
            }
        })
    }

    /// The PUT of a streamed upload's body to its temporary name, checked.
    private func putGrowing(_ content: any GrowingContent, to temporary: StorePath, for path: StorePath) async throws(StoreError) {
        let (answer, sent): (HTTPTransport.Answer, Int64)
        let givenUp = GivenUp()
        do {
            // No fixed deadline (the length is unknown): the transfer fails once it falls
            // behind the minimum rate, as a download does, besides the client's idle timeouts.
            (answer, sent) = try await HTTPTransport.withTransferDeadline(transport.timeouts, what: "PUT \(path)") { progress in
                let body = HTTPClientRequest.Body.stream(GrowingChunks(content: content, progress: progress, givenUp: givenUp),
                                                         length: .unknown)
                let answer = try await self.transport.metadata(.PUT, url: self.url(temporary), path: temporary,
                                                               headers: ["If-None-Match": "*"], body: body, timeout: .hours(24))
                return (answer, progress.bytes)
            }
        } catch {
            throw HTTPTransport.storeError(error, method: "PUT", path: path)
        }
        if [411, 501].contains(answer.status) { throw refused("PUT with a chunked body: HTTP \(answer.status)") }
        // The core gave up on the body: it was ended short, and the server is done with it.
        if givenUp.yes { throw .timedOut("the upload was cancelled") }
        try await checkPUT(answer, temporary, .mustNotExist)
        // A server or proxy that mishandles a chunked body keeps less than was sent. It does so
        // every time: asked until one body as long as this one was found whole (a round trip
        // less for the uploads after).
        guard sent > chunkedBodiesKeptWhole.withLock({ $0 }) else { return }
        let stored = try await stat(temporary)
        guard stored.kind == .file, stored.size == sent else {
            throw refused("PUT with a chunked body: the server kept \(stored.size) of \(sent) bytes")
        }
        chunkedBodiesKeptWhole.withLock { $0 = max($0, sent) }
    }

    /// A name of docfs's own work: `prefix` and 16 random hex digits (`isScratchName`).
    static func scratchName(_ prefix: String) -> String {
        prefix + String(format: "%016llx", UInt64.random(in: 0...UInt64.max))
    }

    /// Sends a body to a fresh hidden temporary name beside `path` (`put`), then puts it in place
    /// with one MOVE (`Overwrite: F` unless `replace`), and returns the entry the MOVE made. The
    /// temporary file is recorded until it is moved or deleted; when anything fails, whatever the
    /// server kept of it is deleted.
    func putThenMove(_ path: StorePath, replace: Bool, put: (StorePath) async throws(StoreError) -> Void,
                     moveFailed: (StoreError) -> StoreError = { $0 }) async throws(StoreError) -> RemoteEntry {
        guard let parent = path.parent else { throw .isADirectory(path) }
        let temporary = try parent.appending(Self.scratchName(Self.streamedUploadPrefix))
        let ledger = uploadLedger.withLock { $0 }
        let record = ledger?.record(TemporaryUpload(temporary: temporary.description), identity: temporary.description, path: path)
        let entry: RemoteEntry
        do throws(StoreError) {
            try await put(temporary)
            do throws(StoreError) {
                entry = try await move(temporary, to: path, replace: replace, isDirectory: false)
            } catch {
                throw moveFailed(error)
            }
        } catch {
            // Whatever the server kept of it goes (a body cut short, or one whose MOVE failed),
            // also when the upload was cancelled (an unstructured task does not inherit that).
            await Task {
                do throws(StoreError) {
                    do throws(StoreError) { try await self.delete(temporary, isDirectory: false) } catch .notFound {}
                    if let record { ledger?.remove(record) }
                } catch {
                    self.logger.info("cannot delete an upload's temporary file; the next mount tries again",
                                     metadata: ["path": "\(temporary)", "error": "\(error)"])
                }
            }.value
            throw error
        }
        if let record { ledger?.remove(record) }
        return entry
    }

    /// Streamed uploads stop for this mount: the server (or a proxy before it) refused one.
    private func refused(_ why: String) -> StoreError {
        logger.info("the server does not take streamed uploads; files go up after their close", metadata: ["why": "\(why)"])
        streamedUploadRefusal.withLock { $0 = why }
        return .notSupported(why)
    }
}

/// Whether the core gave up on a streamed body (`GrowingExtent.cancelled`).
final class GivenUp: Sendable {
    private let flag = Mutex(false)

    var yes: Bool { flag.withLock { $0 } }

    func note() { flag.withLock { $0 = true } }
}

/// The bytes of growing content as they are written, in chunks of at most 1 MiB. When the core
/// gives up on it, the body ends there, short but well framed, and `givenUp` says so: a body
/// cut off mid-stream leaves the server writing a file we cannot know when to delete.
struct GrowingChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    static let chunkSize = 1 << 20

    let content: any GrowingContent
    let progress: TransferProgress
    let givenUp: GivenUp

    struct AsyncIterator: AsyncIteratorProtocol {
        let content: any GrowingContent
        let progress: TransferProgress
        let givenUp: GivenUp
        var offset: Int64 = 0

        mutating func next() async throws -> ByteBuffer? {
            let upTo: Int64
            switch await content.next(after: offset) {
            case .end: return nil
            case .cancelled:
                givenUp.note()
                return nil
            case .written(let end): upTo = end
            }
            guard upTo > offset else { return nil }
            let buffer = try content.buffer(at: offset, count: Int(Swift.min(Int64(GrowingChunks.chunkSize), upTo - offset)))
            offset += Int64(buffer.readableBytes)
            progress.add(buffer.readableBytes)
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(content: content, progress: progress, givenUp: givenUp)
    }
}

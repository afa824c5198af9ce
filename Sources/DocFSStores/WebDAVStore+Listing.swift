// WebDAVStore+Listing: directory listings over PROPFIND Depth 1, read as the body streams and
// handed to the core in pages. The first page sends the PROPFIND and parses until a page of
// children is ready; the rest of the answer stays on its connection, unread, with the parser,
// under an id the page token carries, until the core asks for the next page (TCP holds the
// server back meanwhile). A 100,000-entry folder never sits in memory as XML, and no body is
// held twice. Each page has the metadata deadline; the whole listing is bounded by entries
// (`ListingLimits`), so a body that never ends is cut with an error.
//
// A token whose listing was dropped (too many at once, idle too long, or the daemon
// restarted) still works: it carries the last name returned, and the next page sends the
// PROPFIND again and starts after that name (or fails, when the name is gone).
//
// Hostile names (empty, `.`, `..`, with `/` or NUL once decoded, over 255 bytes, not UTF-8,
// outside the collection, deeper than one level) are skipped and logged once per listing with
// a count; the rest of the listing still shows.

import AsyncHTTPClient
import DocFSStore
import Foundation
import NIOCore
import Synchronization

extension WebDAVStore {
    public func list(_ directory: StorePath, page: PageToken?) async throws(StoreError) -> ListPage {
        try await listPage(directory, page: page).page
    }

    struct Listing {
        var children: [RemoteEntry]
        /// Members the server listed that we could not accept (unsafe or undecodable names).
        var skipped: Int
    }

    /// Every child of `directory` (used to check that a folder is empty before it is removed
    /// or replaced: a folder holding only unsafe names is not empty).
    func propfindChildren(_ directory: StorePath) async throws(StoreError) -> Listing {
        var listing = Listing(children: [], skipped: 0)
        var token: PageToken?
        repeat {
            let (page, skipped) = try await listPage(directory, page: token)
            listing.children += page.entries
            listing.skipped = skipped
            token = page.next
        } while token != nil
        return listing
    }

    /// One page, and the count of entries skipped so far in this listing.
    func listPage(_ directory: StorePath, page: PageToken?) async throws(StoreError) -> (page: ListPage, skipped: Int) {
        let session: PropfindListing
        if let page {
            let token = ListingToken(page.value)
            if let kept = propfindListings.take(token.listing), kept.directory == directory, kept.lastName == token.after {
                session = kept
            } else {
                guard let after = token.after, StorePath.isValidName(after) else {
                    throw .protocolError("PROPFIND \(directory): a page token docfs did not make")
                }
                session = try await startPropfind(directory)
                session.resumeAfter = after
            }
        } else {
            _ = propfindListings.take(nil)  // drops listings left idle
            session = try await startPropfind(directory)
        }
        let what = "PROPFIND \(directory): no page of the listing within \(Int(Self.metadataSeconds)) s"
        let result: ListPage
        do {
            result = try await HTTPTransport.withDeadline(seconds: Self.metadataSeconds, what: what) {
                try await self.readPage(session)
            }
        } catch {
            throw HTTPTransport.storeError(error, method: "PROPFIND", path: directory)
        }
        if result.next == nil {
            if session.skipped > 1 {
                logger.warning("skipped unsafe names in a listing",
                               metadata: ["directory": "\(directory)", "count": "\(session.skipped)"])
            }
            return (result, session.skipped)
        }
        let id = propfindListings.keep(session)
        return (ListPage(entries: result.entries, next: PageToken(ListingToken(listing: id, after: session.lastName).value)),
                session.skipped)
    }

    static var metadataSeconds: Double { Double(metadataTimeout.nanoseconds) / 1_000_000_000 }

    /// Sends the PROPFIND and checks its status; the body is read by `readPage`.
    private func startPropfind(_ directory: StorePath) async throws(StoreError) -> PropfindListing {
        let response = try await transport.start(.PROPFIND, url: url(directory, collection: true), path: directory,
                                                 headers: ["Depth": "1", "Content-Type": "application/xml; charset=utf-8"],
                                                 body: .bytes(ByteBuffer(string: propfindBody())), timeout: Self.metadataTimeout)
        switch Int(response.status.code) {
        case 207: break
        case 404, 409:
            await HTTPTransport.discard(response)
            // Listing a file with a trailing slash gives 404 on some servers: say what it is.
            if let entry = try? await stat(directory), entry.kind != .directory { throw .notADirectory(directory) }
            throw .notFound(directory)
        default:
            let answer = await HTTPTransport.Answer(consuming: response)
            throw answer.error(method: "PROPFIND", path: directory)
        }
        return PropfindListing(directory: directory, body: response.body.makeAsyncIterator(), limits: listingLimits)
    }

    /// Reads the body until a page of children is ready or the body ends.
    private func readPage(_ session: PropfindListing) async throws(StoreError) -> ListPage {
        let prefix = baseComponents + session.directory.components
        var entries: [RemoteEntry] = []
        while entries.count < listingLimits.pageSize {
            guard session.nextPending < session.pending.count else {
                if session.ended { break }
                var body = session.body
                let chunk: ByteBuffer?
                do {
                    chunk = try await body.next()
                } catch {
                    throw HTTPTransport.storeError(error, method: "PROPFIND", path: session.directory)
                }
                session.body = body
                if let chunk {
                    session.pending = try session.stream.feed(chunk.readableBytesView)
                } else {
                    session.pending = try session.stream.finish()
                    session.ended = true
                }
                session.nextPending = 0
                continue
            }
            let response = session.pending[session.nextPending]
            session.nextPending += 1
            switch try child(of: session.directory, prefix: prefix, response) {
            case .entry(let entry):
                if let after = session.resumeAfter {
                    if entry.name.utf8.elementsEqual(after.utf8) { session.resumeAfter = nil }
                    continue
                }
                guard session.seen.insert(entry.name).inserted else { continue }
                session.lastName = entry.name
                entries.append(entry)
            case .skipped(let why):
                session.skipped += 1
                if session.skipped == 1 {
                    logger.warning("skipping \(why)", metadata: ["directory": "\(session.directory)", "href": "\(response.href.debugDescription)"])
                }
            case .ignored:
                continue
            }
        }
        if session.resumeAfter != nil, session.ended {
            throw .protocolError("PROPFIND \(session.directory): the listing changed while it was read; list it again")
        }
        let more = !(session.ended && session.nextPending >= session.pending.count)
        return ListPage(entries: entries, next: more ? PageToken("") : nil)
    }

    /// What one response of a Depth 1 answer is to the listing of `directory`.
    enum Child {
        case entry(RemoteEntry)
        /// Not accepted: an unsafe or undecodable name, or a path outside the collection.
        case skipped(String)
        /// The collection itself, or a member the server reports with an error status.
        case ignored
    }

    func child(of directory: StorePath, prefix: [String], _ response: WebDAVResponse) throws(StoreError) -> Child {
        guard let components = PercentEncoding.decodedPathComponents(of: response.href) else {
            return .skipped("an href that does not decode to UTF-8")
        }
        guard components.count >= prefix.count,
              zip(components, prefix).allSatisfy({ $0.utf8.elementsEqual($1.utf8) }) else {
            return .skipped("an href outside the listed collection")
        }
        let rest = components[prefix.count...]
        if rest.isEmpty {
            if !response.isCollection, response.status == nil { throw .notADirectory(directory) }
            return .ignored
        }
        if let status = response.status, !(200..<300).contains(status) { return .ignored }
        guard rest.count == 1, let name = rest.first, StorePath.isValidName(name) else {
            return .skipped("an unsafe name")
        }
        // A streamed upload under way (or one a crash left): not a file of the store's.
        if Self.isStreamedUploadName(name) || Self.isScratchName(name, prefix: Self.probePrefix) { return .ignored }
        // A name another client holds locked before writing it: nothing is there yet.
        if response.isLockNull { return .ignored }
        return .entry(entry(StorePath(validated: directory.components + [name]), response))
    }

    /// The children of `directory` among a whole Depth 1 answer's responses: the collection's
    /// own entry and anything not exactly one safe name below it are left out.
    func listing(of directory: StorePath, from responses: [WebDAVResponse]) throws(StoreError) -> Listing {
        let prefix = baseComponents + directory.components
        var children: [RemoteEntry] = []
        var seen = Set<FileName>()  // by bytes: NFC and NFD `café` are two entries
        var skipped = 0
        for response in responses {
            switch try child(of: directory, prefix: prefix, response) {
            case .entry(let entry):
                if seen.insert(entry.name.fileName).inserted { children.append(entry) }
            case .skipped(let why):
                skipped += 1
                if skipped == 1 {
                    logger.warning("skipping \(why)", metadata: ["directory": "\(directory)", "href": "\(response.href.debugDescription)"])
                }
            case .ignored:
                break
            }
        }
        return Listing(children: children, skipped: skipped)
    }
}

/// One PROPFIND answer being read page by page.
///
/// `@unchecked Sendable`: a listing is used by one page at a time — `PropfindListings.take`
/// removes it from the registry before a page reads it, and only the page that holds it
/// touches its fields (the body iterator included) until it is kept again.
final class PropfindListing: @unchecked Sendable {
    let directory: StorePath
    var body: HTTPClientResponse.Body.AsyncIterator
    var stream: MultistatusStream
    /// Responses parsed and not yet looked at.
    var pending: [WebDAVResponse] = []
    var nextPending = 0
    var ended = false
    /// Names handed out so far, by bytes (NFC and NFD `café` are two): a server that repeats
    /// an entry on a later page shows it once.
    var seen = NameSet()
    var skipped = 0
    var lastName = ""
    /// Resuming a dropped listing: children up to and including this name were handed out.
    var resumeAfter: String?

    init(directory: StorePath, body: HTTPClientResponse.Body.AsyncIterator, limits: ListingLimits) {
        self.directory = directory
        self.body = body
        self.stream = MultistatusStream(limits: .init(maximumEntries: limits.maximumEntries,
                                                      maximumEntryBytes: limits.maximumEntryBytes))
    }
}

/// The PROPFIND answers kept between pages. Dropping one closes its connection.
final class PropfindListings: Sendable {
    /// Listings kept at once; the oldest is dropped beyond it. Each holds a connection and a
    /// server-side request, so few are kept: a caller that gave up on a listing leaves little.
    static let capacity = 4
    /// A listing no page asked for in this long is dropped.
    static let idleSeconds: Double = 30

    private struct Kept {
        var listing: PropfindListing
        var since: ContinuousClock.Instant
    }

    private struct State {
        var next: UInt64 = 1
        var kept: [UInt64: Kept] = [:]
    }

    private let state = Mutex(State())

    func keep(_ listing: PropfindListing) -> UInt64 {
        // Dropped listings are released outside the lock: their deinit cancels a request.
        var dropped: [PropfindListing] = []
        let id = state.withLock { state in
            let now = ContinuousClock.now
            let id = state.next
            state.next += 1
            dropped = Self.dropIdle(&state, now: now)
            state.kept[id] = Kept(listing: listing, since: now)
            while state.kept.count > Self.capacity, let oldest = state.kept.min(by: { $0.value.since < $1.value.since })?.key {
                dropped.append(state.kept.removeValue(forKey: oldest)!.listing)
            }
            return id
        }
        dropped.removeAll()
        return id
    }

    func take(_ id: UInt64?) -> PropfindListing? {
        var dropped: [PropfindListing] = []
        let taken: PropfindListing? = state.withLock { state in
            dropped = Self.dropIdle(&state, now: .now)
            guard let id else { return nil }
            return state.kept.removeValue(forKey: id)?.listing
        }
        dropped.removeAll()
        return taken
    }

    /// Takes out the listings idle too long (the caller releases them outside the lock).
    private static func dropIdle(_ state: inout State, now: ContinuousClock.Instant) -> [PropfindListing] {
        var dropped: [PropfindListing] = []
        for (key, kept) in state.kept where now - kept.since > .seconds(idleSeconds) {
            dropped.append(kept.listing)
            state.kept[key] = nil
        }
        return dropped
    }

    /// Drops every kept listing (the store shuts down).
    func removeAll() {
        let dropped = state.withLock { state in
            defer { state.kept = [:] }
            return Array(state.kept.values)
        }
        _ = dropped
    }
}

// S3Store+Listing: directories on a flat namespace. `a/b` is a directory when a zero-byte
// marker key `a/b/` exists or when any key starts with `a/b/`. Listings are ListObjectsV2 with
// `delimiter=/`, one S3 page (≤ 1000 keys) per ListPage, the continuation token (with the
// pages and entries so far) as the PageToken, so a prefix with any number of keys is listed
// without holding it in memory. A listing is bounded (`ListingLimits`): a server that keeps
// saying "truncated" is cut with an error, never followed without end. Keys whose name below
// the listed prefix is not a safe file name (`..`, an empty segment from `a//b`, NUL, over 255
// bytes, not UTF-8) are skipped with one warning per page; the rest of the page still shows.
// A name that is both a file `x` and a directory `x/` is shown once, as the directory, when both are on the same page (S3 pages may split them;
// then both are shown). Keys are compared as bytes, never as Swift strings.

import DocFSStore
import Foundation

extension S3Store {
    /// One ListObjectsV2 call. `delimiter` nil lists everything below `prefix`.
    func listObjects(prefix: String, delimiter: String?, maxKeys: Int, continuation: String?,
                     path: StorePath) async throws(StoreError) -> S3ListResult {
        var call = Call(method: .GET, key: nil)
        call.query = [("list-type", "2"), ("prefix", prefix), ("max-keys", String(maxKeys)), ("encoding-type", "url")]
        if let delimiter { call.query.append(("delimiter", delimiter)) }
        if let continuation { call.query.append(("continuation-token", continuation)) }
        let answer = try await send(call, path: path)
        guard answer.status == 200 else { throw error(answer, method: "LIST", path: path) }
        return try S3XML.parseList(answer.body)
    }

    /// A key from a listing with `encoding-type=url`: `%XX` decoded, `+` a space (AWS encodes
    /// spaces as `+` and a `+` as `%2B`). nil when it does not decode to UTF-8.
    static func decodeListedKey(_ raw: String, encoded: Bool) -> String? {
        guard encoded else { return raw }
        return PercentEncoding.decode(Substring(raw.replacingOccurrences(of: "+", with: " ")))
    }

    /// `string` without its first `prefix.utf8.count` bytes (compared byte-wise by the caller:
    /// `String.hasPrefix` compares by canonical equivalence, keys are bytes).
    static func dropping(_ prefix: String, from string: String) -> String {
        String(decoding: string.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
    }

    /// Whether any key lies below `path/`, and the marker's time when the first key is the marker.
    func directoryExists(_ path: StorePath) async throws(StoreError) -> (exists: Bool, modified: Double?) {
        if path.isRoot { return (true, nil) }
        let marker = directoryPrefix(path)
        let result = try await listObjects(prefix: marker, delimiter: nil, maxKeys: 1, continuation: nil, path: path)
        let first = result.objects.first
        let isMarker = first.flatMap { Self.decodeListedKey($0.key, encoded: result.urlEncoded) }?.utf8.elementsEqual(marker.utf8) ?? false
        return (first != nil || !result.commonPrefixes.isEmpty, isMarker ? first?.lastModified : nil)
    }

    /// Where a listing stands between pages: the page token carries it, so a server that
    /// answers "truncated" without end is cut after `ListingLimits.maximumPages` pages or
    /// `maximumEntries` entries, and one that repeats its continuation token at once.
    struct ListingProgress: Equatable {
        var pages = 0
        var entries = 0
        var continuation: String?

        /// `PAGES ENTRIES TOKEN`: the counts never hold a space; the token may.
        init(pages: Int = 0, entries: Int = 0, continuation: String? = nil) {
            self.pages = pages
            self.entries = entries
            self.continuation = continuation
        }

        init(_ token: PageToken?) {
            guard let value = token?.value else {
                self.init()
                return
            }
            let parts = value.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
            if parts.count == 3, let pages = Int(parts[0]), let entries = Int(parts[1]) {
                self.init(pages: pages, entries: entries, continuation: String(parts[2]))
            } else {
                self.init(continuation: value)  // a bare S3 token
            }
        }

        var token: PageToken { PageToken("\(pages) \(entries) \(continuation ?? "")") }
    }

    public func list(_ directory: StorePath, page: PageToken?) async throws(StoreError) -> ListPage {
        let listedPrefix = directoryPrefix(directory)
        var progress = ListingProgress(page)
        let result = try await listObjects(prefix: listedPrefix, delimiter: "/", maxKeys: 1000,
                                           continuation: progress.continuation, path: directory)
        let limits = configuration.listingLimits
        progress.pages += 1
        progress.entries += result.objects.count + result.commonPrefixes.count
        if progress.entries > limits.maximumEntries {
            throw .protocolError("LIST \(directory): more than \(limits.maximumEntries) entries; the listing is cut")
        }
        if result.isTruncated {
            if let next = result.nextContinuationToken, next == progress.continuation {
                throw .protocolError("LIST \(directory): the server repeats its continuation token; the listing is cut")
            }
            if progress.pages >= limits.maximumPages {
                throw .protocolError("LIST \(directory): still truncated after \(progress.pages) pages; the listing is cut")
            }
        }
        let entries = self.entries(of: result, in: directory)
        let next = result.isTruncated
            ? result.nextContinuationToken.map { ListingProgress(pages: progress.pages, entries: progress.entries, continuation: $0).token }
            : nil
        if result.isTruncated, next == nil { throw .protocolError("LIST \(directory): truncated without a continuation token") }
        let sawAnything = !result.objects.isEmpty || !result.commonPrefixes.isEmpty || result.undecodableKeys > 0
        if page == nil, !sawAnything, next == nil, !directory.isRoot {
            // Nothing below `dir/`: a file, or nothing at all.
            if try await headObject(directory) != nil { throw .notADirectory(directory) }
            throw .notFound(directory)
        }
        return ListPage(entries: entries, next: next)
    }

    /// The entries one ListObjectsV2 page of `directory` shows: one per safe name directly
    /// below it, a directory where a file and a directory share a name. No I/O.
    func entries(of result: S3ListResult, in directory: StorePath) -> [RemoteEntry] {
        let listedPrefix = directoryPrefix(directory)
        var skipped = 0
        var firstSkipped: (why: String, key: String)?
        if result.undecodableKeys > 0 {
            skipped = result.undecodableKeys
            firstSkipped = ("a key that is not UTF-8", "")
        }
        func skip(_ why: String, _ key: String) {
            skipped += 1
            if firstSkipped == nil { firstSkipped = (why, key) }
        }
        defer {
            if let firstSkipped {
                logger.warning("skipping \(firstSkipped.why)\(skipped > 1 ? " (and \(skipped - 1) more unsafe keys on this page)" : "")",
                               metadata: ["directory": "\(directory)", "key": "\(firstSkipped.key.debugDescription)"])
            }
        }
        // Keyed by bytes: `café` in NFC and in NFD are two keys, and two entries.
        var byName: [FileName: RemoteEntry] = [:]
        var order: [FileName] = []
        func add(_ entry: RemoteEntry) {
            if let existing = byName[entry.name.fileName] {
                // A file `x` and keys under `x/`: the directory wins, the file is not reachable.
                if existing.kind == .directory { return }
                logger.warning("a file and a directory share a name; showing the directory",
                               metadata: ["directory": "\(directory)", "name": "\(entry.name.debugDescription)"])
            } else {
                order.append(entry.name.fileName)
            }
            byName[entry.name.fileName] = entry
        }
        /// The one name `key` adds below the listed prefix, and whether it is a directory.
        func child(_ key: String) -> (name: String, isDirectory: Bool)? {
            guard key.utf8.starts(with: listedPrefix.utf8) else {
                skip("a key outside the listed prefix", key)
                return nil
            }
            var rest = Substring(Self.dropping(listedPrefix, from: key))
            var isDirectory = false
            if rest.hasSuffix("/") {
                rest = rest.dropLast()
                isDirectory = true
            }
            let name = String(rest)
            guard StorePath.isValidName(name) else {
                skip("an unsafe name", key)
                return nil
            }
            return (name, isDirectory)
        }
        for raw in result.commonPrefixes {
            guard let decoded = Self.decodeListedKey(raw, encoded: result.urlEncoded) else {
                skip("a prefix that does not decode to UTF-8", raw)
                continue
            }
            guard let (name, _) = child(decoded) else { continue }
            add(RemoteEntry(path: StorePath(validated: directory.components + [name]), kind: .directory, size: 0, modified: 0))
        }
        for object in result.objects {
            guard let decoded = Self.decodeListedKey(object.key, encoded: result.urlEncoded) else {
                skip("a key that does not decode to UTF-8", object.key)
                continue
            }
            if decoded.utf8.elementsEqual(listedPrefix.utf8) { continue }  // the directory's own marker
            guard let (name, isDirectory) = child(decoded) else { continue }
            let path = StorePath(validated: directory.components + [name])
            if isDirectory {
                add(RemoteEntry(path: path, kind: .directory, size: 0, modified: object.lastModified ?? 0))
            } else {
                add(RemoteEntry(path: path, kind: .file, size: max(0, object.size), modified: object.lastModified ?? 0,
                                etag: object.etag.map(ETag.normalized)))
            }
        }
        return order.compactMap { byName[$0] }
    }
}

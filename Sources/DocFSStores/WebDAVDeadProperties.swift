// POSIX attributes as WebDAV dead properties (RFC 4918 §4, PROPPATCH §9.2), on servers that keep
// them (wsgidav with a property manager, Apache mod_dav, …). Servers that do not (rclone's, `docfs
// serve`) refuse each property with 403; the first answer is remembered for the store's life and,
// until it comes, one PROPPATCH at a time is sent, so such a server sees one PROPPATCH per mount
// however many uploads run at once, and docfs keeps the attributes in its catalog only.
//
// The properties, in the namespace `urn:x-docfs:posix`:
// - `mode`: the permission bits, in octal (`644`).
// - `mtime`: the modification time, seconds since 1970 with a fraction; and `mtime-of`: the ETag
//   of the content it was set for. Dead properties outlive a PUT by another client, whose new
//   content has a new time of its own: `mtime` is believed only while the ETag is the same.
// - `special`: a FIFO, socket or device node (see WebDAVStore+SpecialFiles.swift): its type bits
//   in octal and its device number, `10000 0` or `20000 259`; believed only of an empty resource.

import AsyncHTTPClient
import DocFSStore
import Foundation
import NIOCore
import Synchronization

/// docfs's dead properties of one resource, as a PROPFIND reported them.
struct PosixProperties: Sendable, Equatable {
    static let namespace = "urn:x-docfs:posix"
    /// The `<D:prop>` children that ask for them in a PROPFIND (with `xmlns:P` declared).
    static let propfindNames = "<P:mode/><P:mtime/><P:mtime-of/><P:special/>"

    var mode: UInt32?
    var modified: Double?
    var modifiedOf: String?
    var special: SpecialFile?

    /// Takes one property's text; values that do not parse are ignored.
    mutating func set(_ name: String, to value: String) {
        switch name {
        case "mode": mode = UInt32(value, radix: 8).map { $0 & 0o7777 }
        case "mtime": modified = Timestamp.representableSeconds(value)  // saturated; NaN is no time
        case "mtime-of": modifiedOf = value.isEmpty ? nil : value
        case "special": special = Self.special(from: value)
        default: break
        }
    }

    mutating func merge(_ other: PosixProperties) {
        mode = other.mode ?? mode
        modified = other.modified ?? modified
        modifiedOf = other.modifiedOf ?? modifiedOf
        special = other.special ?? special
    }

    /// `"<type bits in octal> <rdev>"`, as `proppatchBody(special:mode:)` writes it.
    static func special(from value: String) -> SpecialFile? {
        let parts = value.split(separator: " ")
        guard parts.count == 2, let bits = UInt32(parts[0], radix: 8), let type = SpecialFile.FileType(mode: bits),
              let rdev = UInt64(parts[1]) else { return nil }
        return SpecialFile(type: type, rdev: rdev)
    }

    /// A PROPPATCH body that marks a resource as the special file `special` with `mode`.
    static func proppatchBody(special: SpecialFile, mode: UInt32) -> String {
        let props = "<P:special>" + String(special.type.rawValue, radix: 8) + " " + String(special.rdev) + "</P:special>"
            + "<P:mode>" + String(mode & 0o7777, radix: 8) + "</P:mode>"
        return """
            <?xml version="1.0" encoding="utf-8"?>
            <D:propertyupdate xmlns:D="DAV:" xmlns:P="\(namespace)"><D:set><D:prop>\(props)</D:prop></D:set></D:propertyupdate>
            """
    }

    /// The modification time set through docfs, if it was set for content version `etag`.
    func modified(forVersion etag: ETag?) -> Double? {
        guard let modified, let modifiedOf, let etag else { return nil }
        return WebDAVStore.sameVersion(WebDAVStore.normalizedETag(modifiedOf), etag) ? modified : nil
    }

    /// A PROPPATCH body that sets `attributes` (the time for content version `version`).
    static func proppatchBody(_ attributes: StoreAttributes, version: ETag?) -> String {
        var props = ""
        if let mode = attributes.mode { props += "<P:mode>" + String(mode & 0o7777, radix: 8) + "</P:mode>" }
        if let modified = attributes.modified, let version {
            props += "<P:mtime>" + modified.decimalSeconds + "</P:mtime><P:mtime-of>" + XMLText.escaped(version.value) + "</P:mtime-of>"
        }
        return """
            <?xml version="1.0" encoding="utf-8"?>
            <D:propertyupdate xmlns:D="DAV:" xmlns:P="\(namespace)"><D:set><D:prop>\(props)</D:prop></D:set></D:propertyupdate>
            """
    }
}

/// Whether a server keeps dead properties: unknown until its first answer to a PROPPATCH, and
/// until then only one PROPPATCH is in flight (the others wait for its answer).
actor DeadPropertySupport {
    private enum State { case unknown, kept, refused }
    private var state = State.unknown
    private var asking = false
    private var waiting: [CheckedContinuation<Void, Never>] = []
    /// Whether the server keeps them, once its first answer said (readable without a hop).
    nonisolated let decided = Mutex<Bool?>(nil)

    /// Runs `proppatch` unless the server is known to refuse; returns whether it kept them.
    func ifKept(_ proppatch: @Sendable () async throws(StoreError) -> Bool) async throws(StoreError) -> Bool {
        while state == .unknown && asking {
            await withCheckedContinuation { waiting.append($0) }
        }
        switch state {
        case .refused: return false
        case .kept: return try await proppatch()
        case .unknown: break
        }
        asking = true
        defer {
            asking = false
            let resumed = waiting
            waiting.removeAll()
            for continuation in resumed { continuation.resume() }
        }
        let kept = try await proppatch()
        state = kept ? .kept : .refused
        decided.withLock { $0 = kept }
        return kept
    }

    var isRefused: Bool { state == .refused }
}

extension WebDAVStore {
    /// Mode and mtime as dead properties, where the server keeps them; false (the caller keeps
    /// them locally) where it does not. Owners stay in the catalog: WebDAV has no place for them.
    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes) async throws(StoreError) -> Bool {
        try await settingAttributes(path, attributes, onVersion: nil)
    }

    /// The version is checked with the stat the PROPPATCH needs anyway; which version the
    /// PROPPATCH made, WebDAV does not say.
    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes, onVersion version: ETag) async throws(StoreError) -> AttributesSet {
        try await settingAttributes(path, attributes, onVersion: version) ? .kept(newVersion: nil) : .notKept
    }

    private func settingAttributes(_ path: StorePath, _ attributes: StoreAttributes, onVersion version: ETag?) async throws(StoreError) -> Bool {
        let attributes = attributes.withoutOwner
        guard !attributes.isEmpty, !path.isRoot, await !deadProperties.isRefused else { return false }
        let current = try await stat(path)
        // Apache's weak ETag of a file just written turns strong a second later: the same version.
        if let version, !(current.etag.map { WebDAVStore.sameVersion($0, version) } ?? false) { throw .versionMismatch(path) }
        defer { traitsMayHaveChanged() }
        return try await deadProperties.ifKept { () throws(StoreError) in
            try await self.proppatch(path, attributes, version: current.etag, collection: current.kind == .directory)
        }
    }

    /// A PUT, then the attributes as dead properties for the version the PUT made, under the
    /// PUT's lock where it took one.
    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        let attributes = attributes.withoutOwner
        guard !attributes.isEmpty, await !deadProperties.isRefused else { return try await write(path, fromLocalFile: localFile, condition: condition) }
        let (written, kept) = try await upload(path, fromLocalFile: localFile, condition: condition) { (version, headers) throws(StoreError) in
            try await self.deadProperties.ifKept { () throws(StoreError) in
                try await self.proppatch(path, body: PosixProperties.proppatchBody(attributes, version: version), collection: false,
                                         headers: headers)
            }
        }
        traitsMayHaveChanged()
        guard kept == true else { return written }
        // What the server reports now: its version, should a PROPPATCH have changed it, and the
        // time and mode as they will be read back.
        return written.versionAfterAttributes(try await stat(path))
    }

    /// One PROPPATCH. True when the server kept every property; false when it refused them.
    private func proppatch(_ path: StorePath, _ attributes: StoreAttributes, version: ETag?, collection: Bool) async throws(StoreError) -> Bool {
        try await proppatch(path, body: PosixProperties.proppatchBody(attributes, version: version), collection: collection)
    }

    /// One PROPPATCH of `body`. True when the server kept every property; false when it refused them.
    func proppatch(_ path: StorePath, body: String, collection: Bool, headers: [String: String] = [:]) async throws(StoreError) -> Bool {
        if headers["If"] == nil { await pendingUnlocks.settle(path) }
        let answer = try await transport.metadata(.PROPPATCH, url: url(path, collection: collection), path: path,
                                                  headers: headers.merging(["Content-Type": "application/xml; charset=utf-8"]) { $1 },
                                                  body: .bytes(ByteBuffer(string: body)), timeout: Self.metadataTimeout)
        switch answer.status {
        case 207:
            let statuses = try WebDAVMultistatus.parse(answer.body).flatMap(\.propstatStatuses)
            if !statuses.isEmpty, statuses.allSatisfy({ (200..<300).contains($0) }) { return true }
            if statuses.contains(where: { [401, 423].contains($0) }) { throw answer.error(method: "PROPPATCH", path: path) }
        case 200, 204:
            return true
        case 403, 405, 409, 501:
            break
        case 412 where headers["If"] != nil:
            // Under docfs's lock its token was the only condition: the server lost the lock
            // (Apache's lock database, under concurrent LOCKs), which is no refusal. Tried again.
            throw .busy(status: 412, retryAfter: nil, message: "PROPPATCH \(path): the server lost docfs's lock")
        default:
            throw answer.error(method: "PROPPATCH", path: path)
        }
        logger.info("the server keeps no dead properties: modes and times stay in docfs's catalog", metadata: ["path": "\(path)"])
        return false
    }
}

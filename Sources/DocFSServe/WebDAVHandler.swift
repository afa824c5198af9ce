// WebDAVHandler: answers one request (RFC 4918 class 1) from the served directory.
// First `admit` (before any `100 Continue`): the Host names this server, the credentials hold,
// a declared body fits `--max-upload`. Then it dispatches on the method; every failure is a
// DAVError answered with its own status. The handler never throws: the server loop only
// writes what it returns. Changes guarded by a precondition run under PathLocks.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Hummingbird
import Logging
import NIOCore

typealias FieldName = HTTPFields.Element.Name

extension HTTPFields.Element.Name {
    static let dav = FieldName("DAV")!
    static let depth = FieldName("Depth")!
    static let destination = FieldName("Destination")!
    static let overwrite = FieldName("Overwrite")!
    static let msAuthorVia = FieldName("MS-Author-Via")!
}

extension HTTPRequest.Method {
    static let propfind = HTTPRequest.Method("PROPFIND")!
    static let proppatch = HTTPRequest.Method("PROPPATCH")!
    static let mkcol = HTTPRequest.Method("MKCOL")!
    static let copy = HTTPRequest.Method("COPY")!
    static let move = HTTPRequest.Method("MOVE")!
}

struct WebDAVHandler: Sendable {
    let directory: ServedDirectory
    let logger: Logger
    /// Who requests must be addressed to (Host, Destination).
    let origin: ServedOrigin
    /// Nil: no authentication (loopback, or `--no-auth`).
    let auth: BasicAuth?
    /// The largest PUT body accepted; nil: no limit.
    let maxUpload: Int64?
    /// Thumbnails of images and videos (nil: none made; PROPFIND then says nothing of them).
    let previews: ServedPreviews?
    let locks = PathLocks()

    init(directory: ServedDirectory, logger: Logger, origin: ServedOrigin, auth: BasicAuth? = nil, maxUpload: Int64? = nil,
         previews: ServedPreviews? = nil) {
        self.previews = previews
        self.directory = directory
        self.logger = logger
        self.origin = origin
        self.auth = auth
        self.maxUpload = maxUpload
    }

    static let allowedMethods = "OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE"
    static let chunkSize = 256 * 1024
    static let maxXMLBody = 1024 * 1024

    /// The checks every request passes before anything else, and before `100 Continue` is
    /// sent: nil when admitted, else the refusal (its body, if any, has been drained).
    func admit(_ request: Request, port: Int) async -> Response? {
        do throws(DAVError) {
            try origin.checkHost(request.head.authority, port: port)
            try auth?.check(request.headers[.authorization])
            if let maxUpload, let declared = request.headers[.contentLength].flatMap({ Int64($0) }), declared > maxUpload {
                throw DAVError(.contentTooLarge, "body of \(declared) bytes exceeds --max-upload \(maxUpload)")
            }
            return nil
        } catch {
            logger.debug("\(request.method) \(request.uri.path): \(error)")
            await Self.discardBody(of: request)
            return errorResponse(error, isHead: request.method == .head)
        }
    }

    func respond(to request: Request, port: Int) async -> Response {
        do {
            return try await dispatch(request, port: port)
        } catch let error as DAVError {
            if error.status.code >= 500 && error.status.code != 502 {
                logger.error("\(request.method) \(request.uri.path): \(error)")
            } else {
                logger.debug("\(request.method) \(request.uri.path): \(error)")
            }
            return errorResponse(error, isHead: request.method == .head)
        } catch {
            logger.error("\(request.method) \(request.uri.path): \(error)")
            return errorResponse(DAVError(.internalServerError, "\(error)"), isHead: request.method == .head)
        }
    }

    private func dispatch(_ request: Request, port: Int) async throws -> Response {
        let davPath = try DAVPath(percentEncoded: request.uri.path)
        switch request.method {
        case .options: return options()
        case .get where request.uri.queryParameters["preview"] == "1": return try await preview(request, davPath)
        case .get: return try await get(request, davPath, isHead: false)
        case .head: return try await get(request, davPath, isHead: true)
        case .put: return try await put(request, davPath)
        case .delete: return try await delete(request, davPath)
        case .propfind: return try await propfind(request, davPath)
        case .proppatch: return try await proppatch(request, davPath)
        case .mkcol: return try await mkcol(request, davPath)
        case .copy: return try await copyOrMove(request, davPath, move: false, port: port)
        case .move: return try await copyOrMove(request, davPath, move: true, port: port)
        default:
            var error = DAVError(.methodNotAllowed, "method \(request.method) not supported")
            error.headers = [("Allow", Self.allowedMethods)]
            throw error
        }
    }

    // MARK: OPTIONS

    private func options() -> Response {
        var headers = HTTPFields()
        headers[.dav] = "1"
        headers[.allow] = Self.allowedMethods
        headers[.msAuthorVia] = "DAV"
        headers[.acceptRanges] = "bytes"
        headers[.contentLength] = "0"
        return Response(status: .ok, headers: headers)
    }

    // MARK: GET / HEAD

    private func get(_ request: Request, _ davPath: DAVPath, isHead: Bool) async throws -> Response {
        let directory = self.directory
        let (file, info) = try await blocking { () throws -> (OpenFile?, FileInfo) in
            try directory.openForReading(davPath, wantDescriptor: !isHead)
        }

        var headers = HTTPFields()
        headers[.eTag] = info.etag
        headers[.lastModified] = info.lastModified
        if let ifMatch = request.headers[.ifMatch], !ETagMatch.matches(ifMatch, etag: info.etag, weak: false) {
            throw DAVError(.preconditionFailed, "If-Match does not match")
        }
        if let ifNoneMatch = request.headers[.ifNoneMatch], ETagMatch.matches(ifNoneMatch, etag: info.etag, weak: true) {
            return Response(status: .notModified, headers: headers)
        }

        if info.isDirectory {
            return try await directoryListing(davPath, headers: headers, isHead: isHead)
        }
        guard info.isRegularFile else { throw DAVError(.forbidden, "not a regular file") }

        headers[.contentType] = ContentType.forName(davPath.name)
        headers[.acceptRanges] = "bytes"
        var range: ClosedRange<Int64>? = nil
        var status = HTTPResponse.Status.ok
        if let rangeHeader = request.headers[.range], let requested = ByteRangeRequest(header: rangeHeader) {
            let ifRangeHolds = request.headers[.ifRange].map { ETagMatch.matches($0, etag: info.etag, weak: false) } ?? true
            if ifRangeHolds {
                guard let resolved = requested.resolve(size: info.size) else {
                    var error = DAVError(.rangeNotSatisfiable, "range \(rangeHeader) outside 0..<\(info.size)")
                    error.headers = [("Content-Range", "bytes */\(info.size)")]
                    throw error
                }
                range = resolved
                status = .partialContent
                headers[.contentRange] = "bytes \(resolved.lowerBound)-\(resolved.upperBound)/\(info.size)"
            }
        }
        let length = range.map { Int($0.upperBound - $0.lowerBound + 1) } ?? Int(info.size)
        headers[.contentLength] = String(length)
        guard !isHead, let file, length > 0 else {
            return Response(status: status, headers: headers)
        }
        let sendRange = range ?? 0...(info.size - 1)
        let body = ResponseBody(contentLength: length) { writer in
            var offset = sendRange.lowerBound
            let end = sendRange.upperBound + 1
            while offset < end {
                let want = Int(min(Int64(Self.chunkSize), end - offset))
                let at = offset
                let chunk = try await blocking { () throws -> ByteBuffer in
                    var buffer = ByteBufferAllocator().buffer(capacity: want)
                    var readError: Int32 = 0
                    _ = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: want) { raw in
                        while true {
                            let n = pread(file.fd, raw.baseAddress!, want, off_t(at))
                            if n < 0 && errno == EINTR { continue }
                            if n < 0 { readError = errno; return 0 }
                            return n
                        }
                    }
                    if readError != 0 { throw DAVError.errno(readError, "pread") }
                    return buffer
                }
                // A file that shrank under us cannot honour the Content-Length already sent:
                // fail the body so the connection is closed instead of sending short data as good.
                guard chunk.readableBytes > 0 else { throw DAVError(.internalServerError, "file shrank while sending") }
                offset += Int64(chunk.readableBytes)
                try await writer.write(chunk)
            }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }

    /// ownCloud's preview request, `GET FILE?preview=1&x=W&y=H&a=1`: a PNG fitting the larger
    /// of W and H (ServedPreviews.swift), never the file itself.
    private func preview(_ request: Request, _ davPath: DAVPath) async throws -> Response {
        guard let previews else { throw DAVError(.notFound, "this server makes no previews") }
        let directory = self.directory
        let (file, info) = try await blocking { () throws -> (OpenFile?, FileInfo) in
            try directory.openForReading(davPath, wantDescriptor: true)
        }
        guard let file, previews.canPreview(name: davPath.name, info: info) else { throw DAVError(.notFound, "no preview for this file") }
        let parameters = request.uri.queryParameters
        let side = max(Int(parameters["x"].map(String.init) ?? "") ?? 256, Int(parameters["y"].map(String.init) ?? "") ?? 256)
        let png: [UInt8]
        do {
            png = try await previews.preview(of: file, name: davPath.name, info: info, side: side)
        } catch let error as PreviewError {
            throw error.davError
        }
        var headers = HTTPFields()
        headers[.contentType] = "image/png"
        headers[.eTag] = info.etag
        headers[.lastModified] = info.lastModified
        headers[.contentLength] = String(png.count)
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: png)))
    }

    private func directoryListing(_ davPath: DAVPath, headers: HTTPFields, isHead: Bool) async throws -> Response {
        let directory = self.directory
        let entries = try await blocking { () throws in try directory.entries(davPath) }
        var html = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>\(Multistatus.escape(davPath.href(isDirectory: true)))</title></head><body><ul>\n"
        for entry in entries {
            let name = entry.name
            let isDir = entry.info.isDirectory
            let href = davPath.appending(name).href(isDirectory: isDir)
            html += "<li><a href=\"\(Multistatus.escape(href, attribute: true))\">\(Multistatus.escape(name))\(isDir ? "/" : "")</a></li>\n"
        }
        html += "</ul></body></html>\n"
        var headers = headers
        headers[.contentType] = "text/html; charset=utf-8"
        let buffer = ByteBuffer(string: html)
        headers[.contentLength] = String(buffer.readableBytes)
        return Response(status: .ok, headers: headers, body: isHead ? ResponseBody() : ResponseBody(byteBuffer: buffer))
    }

    // MARK: PUT

    private func put(_ request: Request, _ davPath: DAVPath) async throws -> Response {
        do {
            try await checkPut(request, davPath)
        } catch {
            // Refused before its body was read: read it (bounded) before answering, or a client
            // still sending it sees the connection close under it instead of our answer.
            await Self.discardBody(of: request)
            throw error
        }
        return try await storePut(request, davPath)
    }

    /// Reads and drops a request body nobody read, up to `maxDiscardedBody` bytes.
    private static func discardBody(of request: Request) async {
        var seen = 0
        do {
            for try await chunk in request.body {
                seen += chunk.readableBytes
                if seen > maxDiscardedBody { return }
            }
        } catch {}
    }

    static let maxDiscardedBody = 16 * 1024 * 1024

    /// A PUT's preconditions, checked early so a refused PUT does not send its body for
    /// nothing. They are checked again, under the path's lock, just before the rename.
    private func checkPut(_ request: Request, _ davPath: DAVPath) async throws {
        if davPath.isRoot { throw DAVError(.methodNotAllowed, "cannot PUT the root collection") }
        if request.headers[.contentRange] != nil { throw DAVError(.badRequest, "partial PUT (Content-Range) not supported") }
        let directory = self.directory
        let existing = try await blocking { () throws -> FileInfo? in
            let parent = try directory.openParent(davPath)
            return try ServedDirectory.info(in: parent.fd, davPath.name)
        }
        try Self.checkPutPreconditions(request, existing: existing)
    }

    /// Throws 405 for a collection, 403 for a symlink, 412 when If-Match / If-None-Match fail.
    private static func checkPutPreconditions(_ request: Request, existing: FileInfo?) throws(DAVError) {
        if let existing, existing.isDirectory { throw DAVError(.methodNotAllowed, "a collection exists at this path") }
        try ServedDirectory.refuseSymlink(existing)
        if let ifMatch = request.headers[.ifMatch] {
            guard ETagMatch.matches(ifMatch, etag: existing?.etag, weak: false) else {
                throw DAVError(.preconditionFailed, "If-Match does not match")
            }
        }
        if let ifNoneMatch = request.headers[.ifNoneMatch], ETagMatch.matches(ifNoneMatch, etag: existing?.etag, weak: true) {
            throw DAVError(.preconditionFailed, "If-None-Match matches")
        }
    }

    /// Streams the body into a temporary file next to the target, then, under the path's lock,
    /// checks the preconditions against what is there now and renames into place.
    private func storePut(_ request: Request, _ davPath: DAVPath) async throws -> Response {
        let directory = self.directory
        let (parent, temporary, output) = try await blocking { () throws -> (OpenFile, String, OpenFile) in
            let parent = try directory.openParent(davPath)
            let (name, file) = try ServedDirectory.makeTemporaryFile(in: parent.fd)
            return (parent, name, file)
        }
        var committed = false
        defer {
            if !committed { unlinkat(parent.fd, temporary, 0) }
        }
        let createOnly = request.headers[.ifNoneMatch]?.trimmingSpaces == "*"
        var received: Int64 = 0
        var pending = ByteBufferAllocator().buffer(capacity: Self.chunkSize)
        var body = request.body.makeAsyncIterator()
        while var chunk = try await body.next() {
            received += Int64(chunk.readableBytes)
            if let maxUpload, received > maxUpload {
                // A chunked body (no Content-Length) found too large on the way: nothing is kept.
                // Read on (bounded) so the client, still sending, gets to read the answer.
                var drained = 0
                while drained <= Self.maxDiscardedBody, let more = try? await body.next() { drained += more.readableBytes }
                throw DAVError(.contentTooLarge, "body exceeds --max-upload \(maxUpload)")
            }
            pending.writeBuffer(&chunk)
            if pending.readableBytes >= Self.chunkSize {
                let full = pending
                try await blocking { () throws in try ServedDirectory.writeAll(output.fd, full) }
                pending.clear()
            }
        }
        let rest = pending
        if rest.readableBytes > 0 { try await blocking { () throws in try ServedDirectory.writeAll(output.fd, rest) } }
        let name = davPath.name
        let (info, existed) = try await locks.withLocks([davPath]) {
            try await blocking { () throws -> (FileInfo, Bool) in
                let existing = try ServedDirectory.info(in: parent.fd, name)
                try Self.checkPutPreconditions(request, existing: existing)
                if createOnly {
                    // linkat fails when the name exists: create-only even against other writers.
                    guard linkat(parent.fd, temporary, parent.fd, name, 0) == 0 else {
                        if errno == EEXIST { throw DAVError(.preconditionFailed, "If-None-Match: * and the file exists") }
                        throw DAVError.errno(errno, "link")
                    }
                    unlinkat(parent.fd, temporary, 0)
                } else {
                    guard renameat(parent.fd, temporary, parent.fd, name) == 0 else {
                        if errno == EISDIR { throw DAVError(.methodNotAllowed, "a collection exists at this path") }
                        throw DAVError.errno(errno, "rename")
                    }
                }
                // The written descriptor is the file now in place: its stat is the new version.
                return (try ServedDirectory.info(of: output.fd), existing != nil)
            }
        }
        committed = true
        var headers = HTTPFields()
        headers[.eTag] = info.etag
        headers[.lastModified] = info.lastModified
        headers[.contentLength] = "0"
        return Response(status: existed ? .noContent : .created, headers: headers)
    }

    // MARK: DELETE

    private func delete(_ request: Request, _ davPath: DAVPath) async throws -> Response {
        if davPath.isRoot { throw DAVError(.forbidden, "cannot delete the root collection") }
        let ifMatch = request.headers[.ifMatch]
        let directory = self.directory
        try await locks.withLocks([davPath]) {
            try await blocking { () throws in
                // A symlink is removed itself (unlinkat), never what it points to.
                let parent = try directory.openDirectory(davPath.parent)
                guard let info = try ServedDirectory.info(in: parent.fd, davPath.name) else { throw DAVError(.notFound, "no such resource") }
                if let ifMatch {
                    guard ETagMatch.matches(ifMatch, etag: info.etag, weak: false) else {
                        throw DAVError(.preconditionFailed, "If-Match does not match")
                    }
                }
                try ServedDirectory.removeTree(in: parent.fd, davPath.name)
            }
        }
        return emptyResponse(.noContent)
    }

    // MARK: MKCOL

    private func mkcol(_ request: Request, _ davPath: DAVPath) async throws -> Response {
        if let length = request.headers[.contentLength].flatMap({ Int($0) }), length > 0 {
            throw DAVError(.unsupportedMediaType, "MKCOL with a body is not supported")
        }
        if request.headers[.transferEncoding] != nil {
            throw DAVError(.unsupportedMediaType, "MKCOL with a body is not supported")
        }
        if davPath.isRoot { throw DAVError(.methodNotAllowed, "the root collection exists") }
        let directory = self.directory
        try await blocking { () throws in
            let parent = try directory.openParent(davPath)
            guard mkdirat(parent.fd, davPath.name, 0o755) == 0 else {
                if errno == EEXIST { throw DAVError(.methodNotAllowed, "resource exists") }
                throw DAVError.errno(errno, "mkdir")
            }
        }
        return emptyResponse(.created)
    }

    // MARK: COPY / MOVE

    private func copyOrMove(_ request: Request, _ source: DAVPath, move: Bool, port: Int) async throws -> Response {
        guard let destinationHeader = request.headers[.destination] else { throw DAVError(.badRequest, "missing Destination header") }
        try origin.checkDestination(destinationHeader, port: port)
        guard let destinationRaw = DAVPath.destinationPath(destinationHeader) else {
            throw DAVError(.badRequest, "bad Destination header")
        }
        let destination = try DAVPath(percentEncoded: destinationRaw)
        let overwrite = try DAVHeaders.overwrite(request.headers[.overwrite])
        let recursive = try DAVHeaders.copyRecursive(request.headers[.depth], move: move)
        if source.isRoot || destination.isRoot { throw DAVError(.forbidden, "cannot \(move ? "move" : "copy") the root collection") }
        if source == destination { throw DAVError(.forbidden, "source and destination are the same") }
        let ifMatch = request.headers[.ifMatch]
        let directory = self.directory

        let existed = try await locks.withLocks([source, destination]) {
            try await blocking { () throws -> Bool in
                let sourceParent = try directory.openDirectory(source.parent)
                guard let sourceInfo = try ServedDirectory.info(in: sourceParent.fd, source.name) else { throw DAVError(.notFound, "no such resource") }
                try ServedDirectory.refuseSymlink(sourceInfo)
                if sourceInfo.isDirectory && destination.isSame(orInside: source) {
                    throw DAVError(.conflict, "destination is inside the source collection")
                }
                let destinationParent = try directory.openParent(destination)
                if let ifMatch {
                    guard ETagMatch.matches(ifMatch, etag: sourceInfo.etag, weak: false) else {
                        throw DAVError(.preconditionFailed, "If-Match does not match the source")
                    }
                }
                let destinationInfo = try ServedDirectory.info(in: destinationParent.fd, destination.name)
                if let destinationInfo {
                    guard overwrite else { throw DAVError(.preconditionFailed, "destination exists and Overwrite is F") }
                    // A file moved over a file is one atomic rename; anything else deletes the target first.
                    let bothFiles = !sourceInfo.isDirectory && !destinationInfo.isDirectory
                    if !(move && bothFiles) {
                        try ServedDirectory.removeTree(in: destinationParent.fd, destination.name)
                    }
                }
                if move {
                    if renameat(sourceParent.fd, source.name, destinationParent.fd, destination.name) != 0 {
                        let error = errno
                        guard error == EXDEV else { throw DAVError.errno(error, "rename") }
                        try ServedDirectory.copyTree(in: sourceParent.fd, source.name, to: destinationParent.fd, destination.name, recursive: true)
                        try ServedDirectory.removeTree(in: sourceParent.fd, source.name)
                    }
                } else {
                    try ServedDirectory.copyTree(in: sourceParent.fd, source.name, to: destinationParent.fd, destination.name, recursive: recursive)
                }
                return destinationInfo != nil
            }
        }
        var response = emptyResponse(existed ? .noContent : .created)
        if !existed {
            response.headers[.location] = destination.href(isDirectory: false)
        }
        return response
    }

    // MARK: PROPFIND / PROPPATCH

    private func propfind(_ request: Request, _ davPath: DAVPath) async throws -> Response {
        let depth = try DAVHeaders.propfindDepth(request.headers[.depth])
        let body = try await collectXMLBody(request)
        if !body.isEmpty && !body.contains("propfind") {
            throw DAVError(.badRequest, "request body is not a propfind element")
        }
        let directory = self.directory
        let entries = try await blocking { () throws -> [PropfindEntry] in
            guard let info = try directory.info(davPath) else { throw DAVError(.notFound, "no such resource") }
            try ServedDirectory.refuseSymlink(info)
            var entries = [PropfindEntry(href: davPath.href(isDirectory: info.isDirectory), name: davPath.name, info: info,
                                         hasPreview: previews?.canPreview(name: davPath.name, info: info))]
            guard depth == 1, info.isDirectory else { return entries }
            // Symlinks, devices and entries that vanished meanwhile are left out of the listing.
            for entry in try directory.entries(davPath) {
                let child = davPath.appending(entry.name)
                entries.append(PropfindEntry(href: child.href(isDirectory: entry.info.isDirectory), name: entry.name, info: entry.info,
                                             hasPreview: previews?.canPreview(name: entry.name, info: entry.info)))
            }
            return entries
        }
        return xmlResponse(.multiStatus, Multistatus.propfind(entries))
    }

    /// We keep no dead properties: every property in a PROPPATCH is refused (403 in a 207).
    private func proppatch(_ request: Request, _ davPath: DAVPath) async throws -> Response {
        let body = try await collectXMLBody(request)
        let directory = self.directory
        guard let info = try await blocking({ () throws in try directory.info(davPath) }) else {
            throw DAVError(.notFound, "no such resource")
        }
        try ServedDirectory.refuseSymlink(info)
        guard body.contains("propertyupdate") else { throw DAVError(.badRequest, "request body is not a propertyupdate element") }
        return xmlResponse(.multiStatus, Multistatus.proppatchRefused(href: davPath.href(isDirectory: info.isDirectory), properties: []))
    }

    private func collectXMLBody(_ request: Request) async throws -> String {
        var collected = ByteBuffer()
        for try await chunk in request.body {
            var chunk = chunk
            collected.writeBuffer(&chunk)
            if collected.readableBytes > Self.maxXMLBody { throw DAVError(.contentTooLarge, "XML request body too large") }
        }
        return String(buffer: collected)
    }

    // MARK: Responses

    private func emptyResponse(_ status: HTTPResponse.Status) -> Response {
        var headers = HTTPFields()
        headers[.contentLength] = "0"
        return Response(status: status, headers: headers)
    }

    private func xmlResponse(_ status: HTTPResponse.Status, _ xml: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/xml; charset=utf-8"
        let buffer = ByteBuffer(string: xml)
        headers[.contentLength] = String(buffer.readableBytes)
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: buffer))
    }

    private func errorResponse(_ error: DAVError, isHead: Bool) -> Response {
        var headers = HTTPFields()
        for (name, value) in error.headers {
            if let field = FieldName(name) { headers[field] = value }
        }
        let text: String
        if let precondition = error.precondition {
            headers[.contentType] = "application/xml; charset=utf-8"
            text = Multistatus.error(precondition: precondition)
        } else {
            headers[.contentType] = "text/plain; charset=utf-8"
            text = "\(error.status.code) \(error.status.reasonPhrase): \(error.reason)\n"
        }
        let buffer = ByteBuffer(string: text)
        headers[.contentLength] = String(buffer.readableBytes)
        return Response(status: error.status, headers: headers, body: isHead ? ResponseBody() : ResponseBody(byteBuffer: buffer))
    }
}

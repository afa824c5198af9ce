// WebDAVHandler: answers one request (RFC 4918 class 1) from the served directory.
// Dispatches on the method; every failure is a DAVError answered with its own status.
// The handler never throws: the server loop only writes what it returns.

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

    static let allowedMethods = "OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, PROPPATCH, MKCOL, COPY, MOVE"
    static let chunkSize = 256 * 1024
    static let maxXMLBody = 1024 * 1024

    func respond(to request: Request) async -> Response {
        do {
            return try await dispatch(request)
        } catch let error as DAVError {
            if error.status.code >= 500 {
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

    private func dispatch(_ request: Request) async throws -> Response {
        let davPath = try DAVPath(percentEncoded: request.uri.path)
        switch request.method {
        case .options: return options()
        case .get: return try await get(request, davPath, isHead: false)
        case .head: return try await get(request, davPath, isHead: true)
        case .put: return try await put(request, davPath)
        case .delete: return try await delete(request, davPath)
        case .propfind: return try await propfind(request, davPath)
        case .proppatch: return try await proppatch(request, davPath)
        case .mkcol: return try await mkcol(request, davPath)
        case .copy: return try await copyOrMove(request, davPath, move: false)
        case .move: return try await copyOrMove(request, davPath, move: true)
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
        try directory.checkInside(davPath)
        let path = directory.path(davPath)
        let opened: (OpenFile?, FileInfo) = try await blocking { () throws -> (OpenFile?, FileInfo) in
            guard let info = try ServedDirectory.info(path) else { throw DAVError(.notFound, "no such file") }
            if info.isDirectory || isHead { return (nil, info) }
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw DAVError.errno(errno, "open") }
            let file = OpenFile(fd: fd)
            var st = stat()
            guard fstat(fd, &st) == 0 else { throw DAVError.errno(errno, "fstat") }
            return (file, FileInfo(st))
        }
        let (file, info) = opened

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

    private func directoryListing(_ davPath: DAVPath, headers: HTTPFields, isHead: Bool) async throws -> Response {
        let path = directory.path(davPath)
        let names = try await blocking { () throws in try ServedDirectory.names(in: path) }
        var html = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>\(Multistatus.escape(davPath.href(isDirectory: true)))</title></head><body><ul>\n"
        for name in names {
            let isDir = (try? ServedDirectory.info(path + "/" + name))??.isDirectory ?? false
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
        let checked: (createOnly: Bool, existed: Bool)
        do {
            checked = try await checkPut(request, davPath)
        } catch {
            // Refused before its body was read: read it (bounded) before answering, or a client
            // still sending it sees the connection close under it instead of our answer.
            await Self.discardBody(of: request)
            throw error
        }
        return try await storePut(request, davPath, createOnly: checked.createOnly, existed: checked.existed)
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

    /// A PUT's preconditions; returns whether it may only create, and whether the file exists.
    private func checkPut(_ request: Request, _ davPath: DAVPath) async throws -> (createOnly: Bool, existed: Bool) {
        if davPath.isRoot { throw DAVError(.methodNotAllowed, "cannot PUT the root collection") }
        if request.headers[.contentRange] != nil { throw DAVError(.badRequest, "partial PUT (Content-Range) not supported") }
        try directory.checkInside(davPath)
        let path = directory.path(davPath)
        let parentPath = directory.path(davPath.parent)
        let existing = try await blocking { () throws -> FileInfo? in
            guard let parent = try ServedDirectory.info(parentPath), parent.isDirectory else {
                throw DAVError(.conflict, "parent collection does not exist")
            }
            return try ServedDirectory.info(path)
        }
        if let existing, existing.isDirectory { throw DAVError(.methodNotAllowed, "a collection exists at this path") }
        if let ifMatch = request.headers[.ifMatch] {
            guard ETagMatch.matches(ifMatch, etag: existing?.etag, weak: false) else {
                throw DAVError(.preconditionFailed, "If-Match does not match")
            }
        }
        if let ifNoneMatch = request.headers[.ifNoneMatch] {
            if ETagMatch.matches(ifNoneMatch, etag: existing?.etag, weak: true) {
                throw DAVError(.preconditionFailed, "If-None-Match matches")
            }
            return (ifNoneMatch.trimmingSpaces == "*", existing != nil)
        }
        return (false, existing != nil)
    }

    private func storePut(_ request: Request, _ davPath: DAVPath, createOnly: Bool, existed: Bool) async throws -> Response {
        let path = directory.path(davPath)
        let parentPath = directory.path(davPath.parent)
        let (temporary, fd) = try await blocking { () throws in try ServedDirectory.makeTemporaryFile(in: parentPath) }
        let output = OpenFile(fd: fd)
        var committed = false
        defer {
            if !committed { unlink(temporary) }
        }
        var pending = ByteBufferAllocator().buffer(capacity: Self.chunkSize)
        for try await chunk in request.body {
            var chunk = chunk
            pending.writeBuffer(&chunk)
            if pending.readableBytes >= Self.chunkSize {
                let full = pending
                try await blocking { () throws in try ServedDirectory.writeAll(output.fd, full) }
                pending.clear()
            }
        }
        let rest = pending
        let info = try await blocking { () throws -> FileInfo in
            if rest.readableBytes > 0 { try ServedDirectory.writeAll(output.fd, rest) }
            if createOnly {
                // link(2) fails when the name exists: create-only without a race.
                guard link(temporary, path) == 0 else {
                    if errno == EEXIST { throw DAVError(.preconditionFailed, "If-None-Match: * and the file exists") }
                    throw DAVError.errno(errno, "link")
                }
                unlink(temporary)
            } else {
                guard rename(temporary, path) == 0 else {
                    if errno == EISDIR { throw DAVError(.methodNotAllowed, "a collection exists at this path") }
                    throw DAVError.errno(errno, "rename")
                }
            }
            guard let info = try ServedDirectory.info(path) else { throw DAVError(.internalServerError, "file vanished after PUT") }
            return info
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
        try directory.checkInside(davPath)
        let path = directory.path(davPath)
        let ifMatch = request.headers[.ifMatch]
        try await blocking { () throws in
            guard let linkInfo = try ServedDirectory.linkInfo(path) else { throw DAVError(.notFound, "no such resource") }
            if let ifMatch {
                let current = try ServedDirectory.info(path) ?? linkInfo
                guard ETagMatch.matches(ifMatch, etag: current.etag, weak: false) else {
                    throw DAVError(.preconditionFailed, "If-Match does not match")
                }
            }
            try ServedDirectory.removeTree(path)
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
        try directory.checkInside(davPath)
        let path = directory.path(davPath)
        let parentPath = directory.path(davPath.parent)
        try await blocking { () throws in
            if try ServedDirectory.linkInfo(path) != nil { throw DAVError(.methodNotAllowed, "resource exists") }
            guard let parent = try ServedDirectory.info(parentPath), parent.isDirectory else {
                throw DAVError(.conflict, "parent collection does not exist")
            }
            guard mkdir(path, 0o755) == 0 else {
                throw DAVError.errno(errno, "mkdir")
            }
        }
        return emptyResponse(.created)
    }

    // MARK: COPY / MOVE

    private func copyOrMove(_ request: Request, _ source: DAVPath, move: Bool) async throws -> Response {
        guard let destinationHeader = request.headers[.destination] else { throw DAVError(.badRequest, "missing Destination header") }
        guard let destinationRaw = DAVPath.destinationPath(destinationHeader) else {
            throw DAVError(.badRequest, "bad Destination header")
        }
        let destination = try DAVPath(percentEncoded: destinationRaw)
        let overwrite: Bool
        switch request.headers[.overwrite]?.trimmingSpaces.uppercased() {
        case nil, "T": overwrite = true
        case "F": overwrite = false
        default: throw DAVError(.badRequest, "bad Overwrite header")
        }
        let recursive: Bool
        switch request.headers[.depth]?.trimmingSpaces.lowercased() {
        case nil, "infinity": recursive = true
        case "0" where !move: recursive = false
        default: throw DAVError(.badRequest, "bad Depth header for \(move ? "MOVE" : "COPY")")
        }
        if source.isRoot || destination.isRoot { throw DAVError(.forbidden, "cannot \(move ? "move" : "copy") the root collection") }
        if source == destination { throw DAVError(.forbidden, "source and destination are the same") }
        try directory.checkInside(source)
        try directory.checkInside(destination)
        let sourcePath = directory.path(source)
        let destinationPath = directory.path(destination)
        let destinationParent = directory.path(destination.parent)

        let existed = try await blocking { () throws -> Bool in
            guard let sourceInfo = try ServedDirectory.linkInfo(sourcePath) else { throw DAVError(.notFound, "no such resource") }
            if sourceInfo.isDirectory && destination.isSame(orInside: source) {
                throw DAVError(.conflict, "destination is inside the source collection")
            }
            guard let parent = try ServedDirectory.info(destinationParent), parent.isDirectory else {
                throw DAVError(.conflict, "destination parent collection does not exist")
            }
            if let ifMatch = request.headers[.ifMatch] {
                let current = try ServedDirectory.info(sourcePath) ?? sourceInfo
                guard ETagMatch.matches(ifMatch, etag: current.etag, weak: false) else {
                    throw DAVError(.preconditionFailed, "If-Match does not match the source")
                }
            }
            let destinationInfo = try ServedDirectory.linkInfo(destinationPath)
            if destinationInfo != nil {
                guard overwrite else { throw DAVError(.preconditionFailed, "destination exists and Overwrite is F") }
                // A file moved over a file is one atomic rename; anything else deletes the target first.
                let bothFiles = !sourceInfo.isDirectory && !(destinationInfo?.isDirectory ?? false)
                if !(move && bothFiles) {
                    try ServedDirectory.removeTree(destinationPath)
                }
            }
            if move {
                if rename(sourcePath, destinationPath) != 0 {
                    let error = errno
                    guard error == EXDEV else { throw DAVError.errno(error, "rename") }
                    try ServedDirectory.copyTree(from: sourcePath, to: destinationPath, recursive: true)
                    try ServedDirectory.removeTree(sourcePath)
                }
            } else {
                try ServedDirectory.copyTree(from: sourcePath, to: destinationPath, recursive: recursive)
            }
            return destinationInfo != nil
        }
        var response = emptyResponse(existed ? .noContent : .created)
        if !existed {
            response.headers[.location] = destination.href(isDirectory: false)
        }
        return response
    }

    // MARK: PROPFIND / PROPPATCH

    private func propfind(_ request: Request, _ davPath: DAVPath) async throws -> Response {
        let depth: Int
        switch request.headers[.depth]?.trimmingSpaces.lowercased() {
        case "0": depth = 0
        case "1": depth = 1
        case nil, "infinity":
            var error = DAVError(.forbidden, "PROPFIND with Depth: infinity is not supported")
            error.precondition = "propfind-finite-depth"
            throw error
        default: throw DAVError(.badRequest, "bad Depth header")
        }
        let body = try await collectXMLBody(request)
        if !body.isEmpty && !body.contains("propfind") {
            throw DAVError(.badRequest, "request body is not a propfind element")
        }
        try directory.checkInside(davPath)
        let path = directory.path(davPath)
        let directory = self.directory
        let entries = try await blocking { () throws -> [PropfindEntry] in
            guard let info = try ServedDirectory.info(path) else { throw DAVError(.notFound, "no such resource") }
            var entries = [PropfindEntry(href: davPath.href(isDirectory: info.isDirectory), name: davPath.name, info: info)]
            guard depth == 1, info.isDirectory else { return entries }
            for name in try ServedDirectory.names(in: path) {
                let childPath = path + "/" + name
                if ServedDirectory.isSymlink(childPath) && !directory.staysInside(childPath) { continue }
                // An entry that vanished or cannot be stat'ed (dangling link) is left out of the listing.
                guard let childInfo = (try? ServedDirectory.info(childPath)) ?? nil else { continue }
                let child = davPath.appending(name)
                entries.append(PropfindEntry(href: child.href(isDirectory: childInfo.isDirectory), name: name, info: childInfo))
            }
            return entries
        }
        return xmlResponse(.multiStatus, Multistatus.propfind(entries))
    }

    /// We keep no dead properties: every property in a PROPPATCH is refused (403 in a 207).
    private func proppatch(_ request: Request, _ davPath: DAVPath) async throws -> Response {
        let body = try await collectXMLBody(request)
        try directory.checkInside(davPath)
        let path = directory.path(davPath)
        guard let info = try await blocking({ () throws in try ServedDirectory.info(path) }) else {
            throw DAVError(.notFound, "no such resource")
        }
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

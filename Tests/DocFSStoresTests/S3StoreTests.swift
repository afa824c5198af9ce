// S3Store against a real S3 server: moto, started per test on 127.0.0.1 (see S3TestSupport.swift).
// Fixtures are made, and results checked, with boto3 — an independent client — where it matters.

#if canImport(Glibc)
import Glibc
#endif
import DocFSStore
@testable import DocFSStores
import DocFSTesting
import Foundation
import Synchronization
import Testing

@Suite("S3Store on moto")
struct S3StoreTests {
    func names(_ entries: [RemoteEntry]) -> [String] { entries.map(\.name).sorted() }

    @Test("list: nested prefixes with and without markers, hostile keys skipped")
    func listNested() async throws {
        try await withS3Store { store, server in
            try await server.python("""
                for key, body in [("a.txt", b"hello"), ("marked/", b""), ("marked/inner.txt", b"in"),
                                  ("implicit/deep/x.txt", b"x"), ("emptydir/", b""), ("with space/\\u00fc.txt", b"u"),
                                  ("weird/../escape.txt", b"e"), ("weird/./dot", b"d"), ("z//double", b"z"),
                                  ("both", b"file"), ("both/child", b"c"), ("sym/a+b %c&d=.txt", b"s"),
                                  ("sym/sp ace/", b"")]:
                    s3.put_object(Bucket=B, Key=key, Body=body)
                """, bucket: "docfs-test")
            let root = try await listAll(store, .root)
            #expect(names(root) == ["a.txt", "both", "emptydir", "implicit", "marked", "sym", "weird", "with space", "z"])
            let byName = Dictionary(root.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
            #expect(byName["a.txt"]?.kind == .file)
            #expect(byName["a.txt"]?.size == 5)
            #expect(byName["a.txt"]?.etag != nil)
            #expect(byName["a.txt"]?.modified ?? 0 > 1_600_000_000)
            #expect(byName["both"]?.kind == .directory, "a directory wins over a file of the same name")
            for name in ["emptydir", "implicit", "marked", "weird", "with space", "z"] {
                #expect(byName[name]?.kind == .directory, "\(name)")
            }
            #expect(names(try await listAll(store, path("implicit"))) == ["deep"])
            #expect(names(try await listAll(store, path("implicit/deep"))) == ["x.txt"])
            #expect(names(try await listAll(store, path("marked"))) == ["inner.txt"], "the marker is not listed")
            #expect(try await listAll(store, path("emptydir")).isEmpty)
            #expect(names(try await listAll(store, path("with space"))) == ["ü.txt"])
            #expect(names(try await listAll(store, path("sym"))) == ["a+b %c&d=.txt", "sp ace"], "URL-encoded keys decoded")
            #expect(try await readAll(store, path("sym/a+b %c&d=.txt")) == Array("s".utf8))
            #expect(try await store.stat(path("sym/sp ace")).modified > 1_600_000_000)
            #expect(try await listAll(store, path("weird")).isEmpty, "`..` and `.` are skipped")
            #expect(try await listAll(store, path("z")).isEmpty, "an empty segment is skipped")
            await expectStoreError(.notADirectory(path("a.txt"))) { () throws(StoreError) in try await store.list(path("a.txt"), page: nil) }
            await expectStoreError(.notFound(path("missing"))) { () throws(StoreError) in try await store.list(path("missing"), page: nil) }
        }
    }

    @Test("list: a store rooted at a prefix sees only what lies below it")
    func listUnderPrefix() async throws {
        try await withS3Store(prefix: "base/inner") { store, server in
            try await server.python("""
                for key in ["outside.txt", "base/inner/f.txt", "base/inner/d/g.txt", "base/innerx/h.txt"]:
                    s3.put_object(Bucket=B, Key=key, Body=b"1")
                """, bucket: "docfs-test")
            #expect(names(try await listAll(store, .root)) == ["d", "f.txt"])
            #expect(try await store.stat(path("d/g.txt")).size == 1)
            #expect(store.identity.description.contains("s3://docfs-test/base/inner/"))
        }
    }

    @Test("list: 2,500 keys under one prefix, page by page, complete")
    func paging() async throws {
        try await withS3Store { store, server in
            try await server.python("""
                keys = ["many/file-%05d.bin" % i for i in range(2500)] + ["many/sub-%d/x" % i for i in range(5)]
                with concurrent.futures.ThreadPoolExecutor(32) as pool:
                    list(pool.map(lambda k: s3.put_object(Bucket=B, Key=k, Body=b"12"), keys))
                """, bucket: "docfs-test")
            var pages = 0
            var seen: [String] = []
            var token: PageToken?
            repeat {
                let page = try await store.list(path("many"), page: token)
                #expect(page.entries.count <= 1000)
                seen += page.entries.map(\.name)
                token = page.next
                pages += 1
            } while token != nil
            #expect(pages >= 3)
            #expect(seen.count == 2505)
            #expect(Set(seen).count == 2505, "no duplicates across pages")
            #expect(Set(seen).contains("file-02499.bin"))
            #expect(Set(seen).contains("sub-4"))
        }
    }

    @Test("stat: a file, a marked and an implicit directory, the root, a missing entry")
    func stat() async throws {
        try await withS3Store { store, server in
            try await server.python("""
                s3.put_object(Bucket=B, Key="dir/file.bin", Body=b"x" * 1234)
                s3.put_object(Bucket=B, Key="marked/", Body=b"")
                """, bucket: "docfs-test")
            let file = try await store.stat(path("dir/file.bin"))
            #expect(file.kind == .file)
            #expect(file.size == 1234)
            #expect(file.etag?.value.hasPrefix("\"") == true)
            #expect(file.path == path("dir/file.bin"))
            #expect(try await store.stat(path("dir")).kind == .directory)
            let marked = try await store.stat(path("marked"))
            #expect(marked.kind == .directory)
            #expect(marked.modified > 1_600_000_000, "a marker gives its time")
            #expect(try await store.stat(.root).kind == .directory)
            await expectStoreError(.notFound(path("nope"))) { () throws(StoreError) in try await store.stat(path("nope")) }
            await expectStoreError(.notFound(path("dir/file.bin/x"))) { () throws(StoreError) in try await store.stat(path("dir/file.bin/x")) }
        }
    }

    @Test("read: whole and ranges, byte-identical, streamed in order")
    func read() async throws {
        let content = randomBytes(1_300_000, seed: 3)
        try await withS3Store { store, server in
            let file = try s3LocalFile(content)
            defer { unlink(file) }
            try await server.python("s3.upload_file('\(file)', B, 'big.bin')", bucket: "docfs-test")
            let sink = CollectingSink()
            let entry = try await store.read(path("big.bin"), range: nil, ifMatch: nil, into: sink)
            #expect(sink.bytes() == content)
            #expect(sink.isContiguous(from: 0))
            #expect(sink.writeCount > 1, "delivered chunk by chunk")
            #expect(entry.size == Int64(content.count))
            #expect(entry.etag == (try await store.stat(path("big.bin"))).etag)

            let middle = CollectingSink()
            let ranged = try await store.read(path("big.bin"), range: 1000..<300_000, ifMatch: nil, into: middle)
            #expect(middle.bytes(from: 1000) == Array(content[1000..<300_000]))
            #expect(middle.isContiguous(from: 1000))
            #expect(ranged.size == Int64(content.count))

            let tail = CollectingSink()
            try await store.read(path("big.bin"), range: 1_299_990..<1_400_000, ifMatch: nil, into: tail)
            #expect(tail.bytes(from: 1_299_990) == Array(content[1_299_990...]))

            let beyond = CollectingSink()
            let beyondEntry = try await store.read(path("big.bin"), range: 2_000_000..<2_000_100, ifMatch: nil, into: beyond)
            #expect(beyond.writeCount == 0)
            #expect(beyondEntry.size == Int64(content.count))

            try await server.python("s3.put_object(Bucket=B, Key='d/empty', Body=b'')", bucket: "docfs-test")
            let empty = CollectingSink()
            #expect(try await store.read(path("d/empty"), range: nil, ifMatch: nil, into: empty).size == 0)
            #expect(empty.bytes().isEmpty)
            await expectStoreError(.isADirectory(path("d"))) { () throws(StoreError) in
                try await store.read(path("d"), range: nil, ifMatch: nil, into: CollectingSink())
            }
            await expectStoreError(.notFound(path("missing"))) { () throws(StoreError) in
                try await store.read(path("missing"), range: nil, ifMatch: nil, into: CollectingSink())
            }
        }
    }

    @Test("read: ifMatch with the current and a stale version")
    func readIfMatch() async throws {
        try await withS3Store { store, server in
            try await server.python("s3.put_object(Bucket=B, Key='f.txt', Body=b'version one')", bucket: "docfs-test")
            let etag = try #require(try await store.stat(path("f.txt")).etag)
            let sink = CollectingSink()
            try await store.read(path("f.txt"), range: nil, ifMatch: etag, into: sink)
            #expect(sink.bytes() == Array("version one".utf8))
            try await server.python("s3.put_object(Bucket=B, Key='f.txt', Body=b'version two!')", bucket: "docfs-test")
            let stale = CollectingSink()
            await expectStoreError(.versionMismatch(path("f.txt"))) { () throws(StoreError) in
                try await store.read(path("f.txt"), range: nil, ifMatch: etag, into: stale)
            }
            await expectStoreError(.versionMismatch(path("f.txt"))) { () throws(StoreError) in
                try await store.read(path("f.txt"), range: 2..<5, ifMatch: etag, into: stale)
            }
            #expect(stale.writeCount == 0, "no byte is delivered on a version mismatch")
        }
    }

    @Test("write: single PUT with always, mustNotExist and ifMatch; parents and directories")
    func writeSingle() async throws {
        try await withS3Store { store, server in
            _ = try await store.makeDirectory(path("d"))
            let one = randomBytes(700_000, seed: 1)
            let target = path("d/new.bin")
            let created = try await store.write(target, fromLocalFile: try s3LocalFile(one), condition: .mustNotExist)
            #expect(created.size == Int64(one.count))
            #expect(created.kind == .file)
            let createdETag = try #require(created.etag)
            #expect(try await store.stat(target).etag == createdETag)
            #expect(try await readAll(store, target) == one)
            let boto = try await server.python("print(s3.head_object(Bucket=B, Key='d/new.bin')['ETag'])", bucket: "docfs-test")
            #expect(boto.trimmingCharacters(in: .whitespacesAndNewlines) == createdETag.value)

            await expectStoreError(.alreadyExists(target)) { () throws(StoreError) in
                try await store.write(target, fromLocalFile: try! s3LocalFile([1, 2, 3]), condition: .mustNotExist)
            }
            let two = randomBytes(1000, seed: 2)
            let updated = try await store.write(target, fromLocalFile: try s3LocalFile(two), condition: .ifMatch(createdETag))
            #expect(updated.etag != nil && updated.etag != createdETag)
            #expect(try await readAll(store, target) == two)
            await expectStoreError(.versionMismatch(target)) { () throws(StoreError) in
                try await store.write(target, fromLocalFile: try! s3LocalFile([9]), condition: .ifMatch(createdETag))
            }
            await expectStoreError(.versionMismatch(path("d/none"))) { () throws(StoreError) in
                try await store.write(path("d/none"), fromLocalFile: try! s3LocalFile([1]), condition: .ifMatch(createdETag))
            }
            #expect(try await readAll(store, target) == two)
            _ = try await store.write(target, fromLocalFile: try s3LocalFile(Array("three".utf8)), condition: .always)
            #expect(try await readAll(store, target) == Array("three".utf8))
            await expectStoreError(.notFound(path("nodir"))) { () throws(StoreError) in
                try await store.write(path("nodir/x"), fromLocalFile: try! s3LocalFile([1]), condition: .always)
            }
            await expectStoreError(.isADirectory(path("d"))) { () throws(StoreError) in
                try await store.write(path("d"), fromLocalFile: try! s3LocalFile([1]), condition: .always)
            }
            #expect(names(try await listAll(store, path("d"))) == ["new.bin"])
        }
    }

    @Test("write: multipart above the part size, in parallel parts, read back identical")
    func multipart() async throws {
        let content = randomBytes(12 * 1024 * 1024 + 12345, seed: 9)
        try await withS3Store(partSize: 5 * 1024 * 1024) { store, server in
            let file = try s3LocalFile(content)
            defer { unlink(file) }
            let written = try await store.write(path("big.bin"), fromLocalFile: file, condition: .mustNotExist)
            let etag = try #require(written.etag)
            #expect(etag.value.hasSuffix("-3\""), "a three-part multipart ETag: \(etag)")
            #expect(written.size == Int64(content.count))
            let remote = try await server.python("""
                head = s3.head_object(Bucket=B, Key='big.bin')
                print(head['ETag'], head['ContentLength'], len(s3.list_multipart_uploads(Bucket=B).get('Uploads', [])))
                """, bucket: "docfs-test").split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            #expect(remote == [etag.value, String(content.count), "0"])
            #expect(server.log().contains("?uploads"), "moto saw CreateMultipartUpload")
            #expect(try await readAll(store, path("big.bin")) == content)

            // A second multipart write conditional on that version; a stale one is refused.
            let next = try await store.write(path("big.bin"), fromLocalFile: file, condition: .ifMatch(etag))
            #expect(next.etag?.value.hasSuffix("-3\"") == true)
            await expectStoreError(.versionMismatch(path("big.bin"))) { () throws(StoreError) in
                try await store.write(path("big.bin"), fromLocalFile: file, condition: .ifMatch(ETag("\"stale-3\"")))
            }
            await expectStoreError(.alreadyExists(path("big.bin"))) { () throws(StoreError) in
                try await store.write(path("big.bin"), fromLocalFile: file, condition: .mustNotExist)
            }
        }
    }

    @Test("write growing content: each part goes once the writer passed it; nothing shows before the end")
    func growingContent() async throws {
        let content = randomBytes(12 * 1024 * 1024 + 12345, seed: 19)
        try await withS3Store(partSize: 5 * 1024 * 1024) { store, server in
            let growing = GrowingBytes(content)
            let upload = Task { () throws(StoreError) -> RemoteEntry in
                try await store.write(path("copied.bin"), growing: growing, condition: .mustNotExist,
                                      attributes: StoreAttributes(mode: 0o100640))
            }
            growing.grow(to: 6 * 1024 * 1024)
            try await eventually("part 1 on the server", timeout: .seconds(60)) { server.log().contains("partNumber=1") }
            #expect(server.log().contains("partNumber=1"), "the first part went before the end")
            #expect(!server.log().contains("partNumber=2"), "a part goes only once the writer passed its end")
            let before = try await server.python("print(s3.list_objects_v2(Bucket=B)['KeyCount'])", bucket: "docfs-test")
            #expect(before.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "nothing shows before the end")
            growing.grow(to: Int64(content.count))
            growing.end()
            let written = try await upload.value
            #expect(written.size == Int64(content.count))
            #expect(written.etag?.value.hasSuffix("-3\"") == true, "\(String(describing: written.etag))")
            #expect(written.mode == 0o100640)
            #expect(try await readAll(store, path("copied.bin")) == content)
            let remote = try await server.python("""
                head = s3.head_object(Bucket=B, Key='copied.bin')
                print(head['Metadata'].get('mode'), len(s3.list_multipart_uploads(Bucket=B).get('Uploads', [])))
                """, bucket: "docfs-test").trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(remote == "\(0o100640) 0", "mode as s3fs keeps it; no upload left")
        }
    }

    @Test("write growing content: cancelled by the core, the upload is aborted and nothing is left")
    func growingContentCancelled() async throws {
        let content = randomBytes(8 * 1024 * 1024, seed: 21)
        try await withS3Store(partSize: 5 * 1024 * 1024) { store, server in
            let growing = GrowingBytes(content)
            let upload = Task { () throws(StoreError) -> RemoteEntry in
                try await store.write(path("zip.bin"), growing: growing, condition: .mustNotExist, attributes: StoreAttributes())
            }
            growing.grow(to: 6 * 1024 * 1024)
            try await eventually("part 1 on the server", timeout: .seconds(60)) { server.log().contains("partNumber=1") }
            growing.cancel()
            await #expect(throws: StoreError.self) { _ = try await upload.value }
            let remote = try await server.python("""
                print(len(s3.list_multipart_uploads(Bucket=B).get('Uploads', [])), s3.list_objects_v2(Bucket=B)['KeyCount'])
                """, bucket: "docfs-test").trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(remote == "0 0", "no upload in progress, no object")
        }
    }

    @Test("write growing content over a name another client holds: the questions asked alongside stop it; nothing is left")
    func growingContentOverATakenName() async throws {
        let content = randomBytes(8 * 1024 * 1024, seed: 23)
        try await withS3Store(partSize: 5 * 1024 * 1024) { store, server in
            _ = try await server.python("s3.put_object(Bucket=B, Key='taken.bin', Body=b'theirs')", bucket: "docfs-test")
            // The writer stops past the first part and never ends: only the answer can end the upload.
            let growing = GrowingBytes(content)
            growing.grow(to: 6 * 1024 * 1024)
            await expectStoreError(.alreadyExists(path("taken.bin"))) { () throws(StoreError) in
                try await store.write(path("taken.bin"), growing: growing, condition: .mustNotExist, attributes: StoreAttributes())
            }
            let remote = try await server.python("""
                print(len(s3.list_multipart_uploads(Bucket=B).get('Uploads', [])), s3.get_object(Bucket=B, Key='taken.bin')['Body'].read())
                """, bucket: "docfs-test").trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(remote == "0 b'theirs'", "the upload begun alongside was aborted; theirs stays")
        }
    }

    @Test("write: a failing part aborts the multipart upload; nothing is left behind")
    func multipartAbort() async throws {
        let content = randomBytes(11 * 1024 * 1024, seed: 4)
        try await withS3Store(partSize: 5 * 1024 * 1024, partHook: { part in
            if part == 2 { throw StoreError.protocolError("injected failure of part 2") }
        }) { store, server in
            let file = try s3LocalFile(content)
            defer { unlink(file) }
            await expectStoreError(.protocolError("injected failure of part 2")) { () throws(StoreError) in
                try await store.write(path("doomed.bin"), fromLocalFile: file, condition: .always)
            }
            let remote = try await server.python("""
                print(len(s3.list_multipart_uploads(Bucket=B).get('Uploads', [])), s3.list_objects_v2(Bucket=B)['KeyCount'])
                """, bucket: "docfs-test").trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(remote == "0 0", "no upload in progress, no object")
            #expect(server.log().contains("DELETE /docfs-test/doomed.bin?uploadId="), "AbortMultipartUpload was sent")
        }
    }

    @Test("write: a racing writer makes CompleteMultipartUpload fail its condition; the upload is aborted")
    func multipartRace() async throws {
        let content = randomBytes(6 * 1024 * 1024, seed: 5)
        let endpointBox = EndpointBox()
        try await withS3Store(partSize: 5 * 1024 * 1024, partHook: { part in
            // The HEAD check has passed; another client creates the key before we complete.
            if part == 1, let endpoint = endpointBox.endpoint {
                try await runPython(boto3Prelude + "s3.put_object(Bucket=B, Key='race.bin', Body=b'theirs')",
                              environment: ["S3_ENDPOINT": endpoint, "S3_BUCKET": "docfs-test"])
            }
        }) { store, server in
            endpointBox.endpoint = server.endpoint
            let file = try s3LocalFile(content)
            defer { unlink(file) }
            await expectStoreError(.alreadyExists(path("race.bin"))) { () throws(StoreError) in
                try await store.write(path("race.bin"), fromLocalFile: file, condition: .mustNotExist)
            }
            #expect(try await readAll(store, path("race.bin")) == Array("theirs".utf8), "their version stays")
            let uploads = try await server.python("print(len(s3.list_multipart_uploads(Bucket=B).get('Uploads', [])))", bucket: "docfs-test")
            #expect(uploads.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        }
    }

    @Test("makeDirectory and delete: markers, notEmpty, isADirectory")
    func directories() async throws {
        try await withS3Store { store, server in
            let made = try await store.makeDirectory(path("new dir"))
            #expect(made.kind == .directory)
            let keys = try await server.python("print(sorted(o['Key'] for o in s3.list_objects_v2(Bucket=B)['Contents']))", bucket: "docfs-test")
            #expect(keys.contains("'new dir/'"), "a zero-byte marker: \(keys)")
            _ = try await store.makeDirectory(path("new dir/nested"))
            #expect(names(try await listAll(store, path("new dir"))) == ["nested"])
            await expectStoreError(.alreadyExists(path("new dir"))) { () throws(StoreError) in try await store.makeDirectory(path("new dir")) }
            await expectStoreError(.notFound(path("missing"))) { () throws(StoreError) in try await store.makeDirectory(path("missing/child")) }

            _ = try await store.write(path("new dir/f.txt"), fromLocalFile: try s3LocalFile([1]), condition: .always)
            await expectStoreError(.alreadyExists(path("new dir/f.txt"))) { () throws(StoreError) in
                try await store.makeDirectory(path("new dir/f.txt"))
            }
            await expectStoreError(.notEmpty(path("new dir"))) { () throws(StoreError) in try await store.delete(path("new dir"), isDirectory: true) }
            await expectStoreError(.isADirectory(path("new dir"))) { () throws(StoreError) in try await store.delete(path("new dir"), isDirectory: false) }
            await expectStoreError(.notADirectory(path("new dir/f.txt"))) { () throws(StoreError) in
                try await store.delete(path("new dir/f.txt"), isDirectory: true)
            }
            try await store.delete(path("new dir/f.txt"), isDirectory: false)
            await expectStoreError(.notFound(path("new dir/f.txt"))) { () throws(StoreError) in try await store.stat(path("new dir/f.txt")) }
            await expectStoreError(.notFound(path("new dir/f.txt"))) { () throws(StoreError) in
                try await store.delete(path("new dir/f.txt"), isDirectory: false)
            }
            try await store.delete(path("new dir/nested"), isDirectory: true)
            try await store.delete(path("new dir"), isDirectory: true)
            await expectStoreError(.notFound(path("new dir"))) { () throws(StoreError) in try await store.stat(path("new dir")) }
            #expect(try await listAll(store, .root).isEmpty)
        }
    }

    @Test("symlinks: written and read as s3fs does, kept by setAttributes and move")
    func symlinks() async throws {
        try await withS3Store { store, server in
            let made = try await store.makeSymlink(path("link"), target: "dir/target file")
            #expect(made.kind == .symlink(target: "dir/target file"))
            let head = try await server.python("""
                o = s3.get_object(Bucket=B, Key="link")
                print(o["Metadata"]["mode"], o["Body"].read().decode())
                """, bucket: "docfs-test")
            #expect(head.trimmingCharacters(in: .whitespacesAndNewlines) == "\(0o120777) dir/target file", "s3fs's layout: \(head)")
            #expect(try await store.stat(path("link")).kind == .symlink(target: "dir/target file"))
            // A listing cannot tell: the link is a small file there, and the store says so.
            #expect(try await listAll(store, .root).map(\.kind) == [.file])
            #expect(store.capabilities.symlinkDiscovery == .byStat(maximumTargetBytes: 4095))
            await expectStoreError(.alreadyExists(path("link"))) { () throws(StoreError) in
                try await store.makeSymlink(path("link"), target: "other")
            }
            await expectStoreError(.notFound(path("missing"))) { () throws(StoreError) in
                try await store.makeSymlink(path("missing/link"), target: "x")
            }

            // A link s3fs made; an object marked as a link but too large to be one.
            try await server.python("""
                s3.put_object(Bucket=B, Key="s3fs-link", Body=b"../up", Metadata={"mode": str(0o120777)})
                s3.put_object(Bucket=B, Key="not-a-link", Body=b"x" * 5000, Metadata={"mode": str(0o120777)})
                """, bucket: "docfs-test")
            #expect(try await store.stat(path("s3fs-link")).kind == .symlink(target: "../up"))
            #expect(try await store.stat(path("not-a-link")).kind == .file)

            #expect(try await store.setAttributes(path("link"), StoreAttributes(modified: Timestamp(seconds: 1_600_000_000))))
            #expect(try await store.stat(path("link")).kind == .symlink(target: "dir/target file"))
            _ = try await store.move(path("link"), to: path("moved link"), replace: false)
            let moved = try await store.stat(path("moved link"))
            #expect(moved.kind == .symlink(target: "dir/target file"))
            #expect(moved.modified == 1_600_000_000)
        }
    }

    @Test("setAttributes on a version: only there, and it names the version its copy made")
    func setAttributesOnAVersion() async throws {
        try await withS3Store { store, server in
            try await server.python("s3.put_object(Bucket=B, Key='a.txt', Body=b'AAA')", bucket: "docfs-test")
            let before = try await store.stat(path("a.txt"))
            let version = try #require(before.etag)
            let set = try await store.setAttributes(path("a.txt"), StoreAttributes(mode: 0o600), onVersion: version)
            let after = try await store.stat(path("a.txt"))
            #expect(set == .kept(newVersion: after.etag))
            #expect(after.mode == 0o600)
            await expectStoreError(.versionMismatch(path("a.txt"))) { () throws(StoreError) in
                _ = try await store.setAttributes(path("a.txt"), StoreAttributes(mode: 0o644), onVersion: ETag("\"another\""))
            }
            #expect(try await store.stat(path("a.txt")).mode == 0o600, "nothing set on another version")
        }
    }

    @Test("move: files with and without replace, directories recursively")
    func move() async throws {
        try await withS3Store { store, server in
            try await server.python("""
                for key, body in [("a.txt", b"AAA"), ("b.txt", b"BB"), ("tree/", b""), ("tree/x.txt", b"x"),
                                  ("tree/sub/y z.txt", b"yz"), ("dest/", b"")]:
                    s3.put_object(Bucket=B, Key=key, Body=body)
                """, bucket: "docfs-test")
            let moved = try await store.move(path("a.txt"), to: path("dest/renamed a.txt"), replace: false)
            #expect(moved.path == path("dest/renamed a.txt"))
            #expect(moved.size == 3)
            #expect(try await readAll(store, path("dest/renamed a.txt")) == Array("AAA".utf8))
            await expectStoreError(.notFound(path("a.txt"))) { () throws(StoreError) in try await store.stat(path("a.txt")) }

            await expectStoreError(.alreadyExists(path("dest/renamed a.txt"))) { () throws(StoreError) in
                try await store.move(path("b.txt"), to: path("dest/renamed a.txt"), replace: false)
            }
            #expect(try await readAll(store, path("b.txt")) == Array("BB".utf8))
            let replaced = try await store.move(path("b.txt"), to: path("dest/renamed a.txt"), replace: true)
            #expect(replaced.size == 2)
            #expect(try await readAll(store, path("dest/renamed a.txt")) == Array("BB".utf8))

            let movedTree = try await store.move(path("tree"), to: path("dest/tree2"), replace: false)
            #expect(movedTree.kind == .directory)
            #expect(names(try await listAll(store, path("dest/tree2"))) == ["sub", "x.txt"])
            #expect(try await readAll(store, path("dest/tree2/sub/y z.txt")) == Array("yz".utf8))
            await expectStoreError(.notFound(path("tree"))) { () throws(StoreError) in try await store.stat(path("tree")) }
            let keys = try await server.python("print(sorted(o['Key'] for o in s3.list_objects_v2(Bucket=B)['Contents']))", bucket: "docfs-test")
            #expect(keys.trimmingCharacters(in: .whitespacesAndNewlines)
                == "['dest/', 'dest/renamed a.txt', 'dest/tree2/', 'dest/tree2/sub/y z.txt', 'dest/tree2/x.txt']")

            await expectStoreError(.notFound(path("nowhere"))) { () throws(StoreError) in
                try await store.move(path("dest/tree2/x.txt"), to: path("nowhere/x.txt"), replace: false)
            }
            await expectStoreError(.notFound(path("missing"))) { () throws(StoreError) in
                try await store.move(path("missing"), to: path("elsewhere"), replace: false)
            }
            await expectStoreError(.invalidName("cannot move /dest into itself (/dest/tree2/inner)")) { () throws(StoreError) in
                try await store.move(path("dest"), to: path("dest/tree2/inner"), replace: false)
            }
        }
    }

    @Test("errors: no such bucket, a refused connection, anonymous access, no secret in messages")
    func errors() async throws {
        try await withS3Store { store, server in
            var configuration = store.configuration
            configuration.bucket = "no-such-bucket"
            configuration.credentials = S3Credentials(accessKeyId: "AKIDMOTOTEST", secretAccessKey: "SECRET-SHOULD-NOT-LEAK")
            let missingBucket = try S3Store(configuration: configuration, logger: testLogger)
            do throws(StoreError) {
                _ = try await missingBucket.stat(.root)
                Issue.record("stat of a missing bucket succeeded")
            } catch {
                #expect(error == .notFound(.root))
                #expect(!"\(error)".contains("SECRET-SHOULD-NOT-LEAK"))
            }
            #expect(!missingBucket.identity.description.contains("SECRET"))
            await missingBucket.shutdown()

            // Anonymous: no Authorization header at all (moto lets it through).
            var anonymous = store.configuration
            anonymous.noSignRequest = true
            let unsigned = try S3Store(configuration: anonymous, logger: testLogger)
            #expect(unsigned.prepare(.init(method: .GET, key: "x")).headers["Authorization"] == nil)
            _ = try await unsigned.write(path("public.txt"), fromLocalFile: try s3LocalFile([1, 2]), condition: .always)
            #expect(try await listAll(unsigned, .root).map(\.name) == ["public.txt"])
            await unsigned.shutdown()
            _ = server
        }
        try await withRefusingPort { port in
            let closed = try S3Store(configuration: .init(bucket: "b-u-c-k-e-t", endpoint: "http://127.0.0.1:\(port)",
                                                          credentials: s3TestCredentials), logger: testLogger)
            do throws(StoreError) {
                _ = try await closed.stat(path("x"))
                Issue.record("a refused connection succeeded")
            } catch {
                guard case .unreachable = error else { Issue.record("expected unreachable, got \(error)"); await closed.shutdown(); return }
                #expect(error.isTransient)
            }
            await closed.shutdown()
        }
    }

    @Test("error codes map onto StoreError")
    func errorTable() {
        let p = path("k")
        func map(_ code: String, _ status: Int) -> StoreError {
            S3Store.error(code: code, status: status, method: "GET", path: p, logger: testLogger)
        }
        #expect(map("NoSuchKey", 404) == .notFound(p))
        #expect(map("NoSuchBucket", 404) == .notFound(p))
        #expect(map("AccessDenied", 403) == .accessDenied("GET /k: S3 AccessDenied"))
        #expect(map("SignatureDoesNotMatch", 403) == .accessDenied("GET /k: S3 SignatureDoesNotMatch"))
        #expect(map("InvalidAccessKeyId", 403) == .accessDenied("GET /k: S3 InvalidAccessKeyId"))
        #expect(map("PreconditionFailed", 412) == .versionMismatch(p))
        #expect(map("SlowDown", 503).isTransient)
        #expect(map("InternalError", 500).isTransient)
        #expect(map("SomethingNew", 503).isTransient)
        #expect(map("NotImplemented", 501) == .notSupported("GET /k: S3 NotImplemented"))
        #expect(S3XML.parseError(Data("<Error><Code>SlowDown</Code><Message>Reduce</Message></Error>".utf8))
            == S3ErrorBody(code: "SlowDown", message: "Reduce"))
        #expect(S3XML.parseError(Data("not xml".utf8)) == nil)
    }

    @Test("multipart part layout: sizes, the last part, the 10,000-part limit")
    func partLayout() {
        let mib = 1024 * 1024
        let parts = S3Store.parts(size: Int64(12 * mib + 1), partSize: 5 * mib)
        #expect(parts.map(\.number) == [1, 2, 3])
        #expect(parts.map { $0.range.upperBound - $0.range.lowerBound } == [Int64(5 * mib), Int64(5 * mib), Int64(2 * mib + 1)])
        let huge = S3Store.parts(size: Int64(100_000) * Int64(mib), partSize: 5 * mib)
        #expect(huge.count <= 10_000)
        #expect(huge.last?.range.upperBound == Int64(100_000) * Int64(mib))
    }
}

/// Hands the server's endpoint to a part hook created before the server.
/// `@unchecked Sendable`: every access to `value` is under `lock`.
final class EndpointBox: @unchecked Sendable {
    private let lock = NSLock()
    private var value: String?
    var endpoint: String? {
        get { lock.lock(); defer { lock.unlock() }; return value }
        set { lock.lock(); defer { lock.unlock() }; value = newValue }
    }
}

/// Content a test writes bit by bit, as the core's `StreamedUpload` gives a store a file being written.
final class GrowingBytes: GrowingContent, Sendable {
    private let bytes: [UInt8]
    private let state = Mutex((written: Int64(0), ended: false, cancelled: false))

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    func grow(to count: Int64) { state.withLock { $0.written = count } }
    func end() { state.withLock { $0.ended = true } }
    func cancel() { state.withLock { $0.cancelled = true } }

    func next(after offset: Int64) async -> GrowingExtent {
        while true {
            let now = state.withLock { $0 }
            // As the core's stream: the caller's cancelled task is told so (see StreamedUpload).
            if now.cancelled || Task.isCancelled { return .cancelled }
            if offset < now.written { return .written(upTo: now.written) }
            if now.ended { return .end }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(StoreError) -> Int {
        let count = min(buffer.count, bytes.count - Int(offset))
        guard count > 0 else { return 0 }
        bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[Int(offset)..<(Int(offset) + count)])) }
        return count
    }
}

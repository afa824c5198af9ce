// The store conformance suite: the same expectations, run against every backend
// (a local directory, rclone's WebDAV server, docfs's own WebDAV server).

import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

/// Names that must survive a round trip through every store.
let awkwardNames = ["with space.txt", "ünïcödé-日本.txt", "100%.txt", "hash#tag.txt", "plus+and&amp=.txt", "percent%2Fslash.txt"]

func path(_ string: String) -> StorePath {
    // Test paths are known to be valid.
    try! StorePath(string)
}

func listAll(_ store: any Store, _ directory: StorePath) async throws -> [RemoteEntry] {
    var entries: [RemoteEntry] = []
    var token: PageToken?
    repeat {
        let page = try await store.list(directory, page: token)
        entries += page.entries
        token = page.next
    } while token != nil
    return entries
}

/// Expects `body` to throw exactly `expected`.
func expectStoreError<T>(_ expected: StoreError, sourceLocation: SourceLocation = #_sourceLocation,
                         _ body: () async throws(StoreError) -> T) async {
    do {
        _ = try await body()
        Issue.record("expected \(expected), got success", sourceLocation: sourceLocation)
    } catch {
        #expect(error == expected, sourceLocation: sourceLocation)
    }
}

func readAll(_ store: any Store, _ p: StorePath) async throws -> [UInt8] {
    let sink = CollectingSink()
    try await store.read(p, range: nil, ifMatch: nil, into: sink)
    return sink.bytes()
}

@Suite("Store conformance")
struct StoreConformanceTests {
    @Test("list: files, directories, an empty file, awkward names", arguments: Backend.allCases)
    func listMixedDirectory(backend: Backend) async throws {
        try await withStore(backend, seed: { dir in
            try dir.write("a.txt", "hello")
            try dir.write("empty", [])
            for name in awkwardNames { try dir.write(name, name) }
            try dir.write("sub/inner.txt", "inner")
            try dir.mkdir("emptydir")
        }) { store, dir in
            let entries = try await listAll(store, .root)
            let byName = Dictionary(entries.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
            #expect(Set(byName.keys) == Set(["a.txt", "empty", "sub", "emptydir"] + awkwardNames))
            #expect(entries.count == byName.count, "no duplicates")
            #expect(byName["a.txt"]?.kind == .file)
            #expect(byName["a.txt"]?.size == 5)
            #expect(byName["a.txt"]?.path == path("a.txt"))
            #expect(byName["empty"]?.size == 0)
            #expect(byName["empty"]?.kind == .file)
            #expect(byName["sub"]?.kind == .directory)
            #expect(byName["emptydir"]?.kind == .directory)
            for name in awkwardNames {
                #expect(byName[name]?.size == Int64(name.utf8.count), "\(name)")
            }
            // Modification times are the files' (WebDAV has one-second resolution).
            let attributes = try FileManager.default.attributesOfItem(atPath: dir.file("a.txt"))
            let mtime = (attributes[.modificationDate] as! Date).timeIntervalSince1970
            #expect(abs((byName["a.txt"]?.modified ?? 0) - mtime) < 2)

            let inner = try await listAll(store, path("sub"))
            #expect(inner.map(\.name) == ["inner.txt"])
            #expect(inner.first?.path == path("sub/inner.txt"))
            #expect(try await listAll(store, path("emptydir")).isEmpty)
            // Awkward names are addressable too.
            for name in awkwardNames {
                #expect(try await readAll(store, path(name)) == Array(name.utf8), "\(name)")
            }
        }
    }

    @Test("stat: a file, a directory, the root", arguments: Backend.allCases)
    func statEntries(backend: Backend) async throws {
        try await withStore(backend, seed: { dir in
            try dir.write("dir/file.bin", randomBytes(1234))
        }) { store, _ in
            let file = try await store.stat(path("dir/file.bin"))
            #expect(file.kind == .file)
            #expect(file.size == 1234)
            #expect(file.etag != nil)
            #expect(file.path == path("dir/file.bin"))
            let directory = try await store.stat(path("dir"))
            #expect(directory.kind == .directory)
            #expect(try await store.stat(.root).kind == .directory)
        }
    }

    @Test("not found, and listing a file", arguments: Backend.allCases)
    func notFoundErrors(backend: Backend) async throws {
        try await withStore(backend, seed: { dir in try dir.write("file.txt", "x") }) { store, _ in
            let missing = path("missing")
            await expectStoreError(.notFound(missing)) { () throws(StoreError) in try await store.stat(missing) }
            await expectStoreError(.notFound(missing)) { () throws(StoreError) in try await store.list(missing, page: nil) }
            await expectStoreError(.notFound(missing)) { () throws(StoreError) in
                try await store.read(missing, range: nil, ifMatch: nil, into: CollectingSink())
            }
            await expectStoreError(.notFound(missing)) { () throws(StoreError) in try await store.delete(missing, isDirectory: false) }
            await expectStoreError(.notFound(missing)) { () throws(StoreError) in
                try await store.move(missing, to: path("elsewhere"), replace: false)
            }
            await expectStoreError(.notADirectory(path("file.txt"))) { () throws(StoreError) in
                try await store.list(path("file.txt"), page: nil)
            }
        }
    }

    @Test("read: whole content, byte for byte, in order", arguments: Backend.allCases)
    func fullRead(backend: Backend) async throws {
        let content = randomBytes(1_300_000)
        try await withStore(backend, seed: { dir in try dir.write("big.bin", content) }) { store, dir in
            let sink = CollectingSink()
            let entry = try await store.read(path("big.bin"), range: nil, ifMatch: nil, into: sink)
            #expect(sink.bytes() == content)
            #expect(sink.isContiguous(from: 0))
            #expect(entry.size == Int64(content.count))
            #expect(entry.etag != nil)
            #expect(entry.etag == (try await store.stat(path("big.bin"))).etag)

            let empty = CollectingSink()
            _ = try await store.write(path("empty"), fromLocalFile: try dir.uploadSource([]), condition: .always)
            let emptyEntry = try await store.read(path("empty"), range: nil, ifMatch: nil, into: empty)
            #expect(empty.bytes().isEmpty)
            #expect(emptyEntry.size == 0)
        }
    }

    @Test("read: byte ranges at absolute offsets", arguments: Backend.allCases)
    func rangeRead(backend: Backend) async throws {
        let content = randomBytes(1_300_000, seed: 7)
        try await withStore(backend, seed: { dir in try dir.write("big.bin", content) }) { store, _ in
            let sink = CollectingSink()
            let entry = try await store.read(path("big.bin"), range: 1000..<300_000, ifMatch: nil, into: sink)
            #expect(sink.bytes(from: 1000) == Array(content[1000..<300_000]))
            #expect(sink.isContiguous(from: 1000))
            #expect(entry.size == Int64(content.count), "the size is the file's, not the range's")

            let tail = CollectingSink()
            try await store.read(path("big.bin"), range: 1_299_990..<1_400_000, ifMatch: nil, into: tail)
            #expect(tail.bytes(from: 1_299_990) == Array(content[1_299_990...]))
            #expect(tail.isContiguous(from: 1_299_990))

            let beyond = CollectingSink()
            let beyondEntry = try await store.read(path("big.bin"), range: 2_000_000..<2_000_100, ifMatch: nil, into: beyond)
            #expect(beyond.writeCount == 0)
            #expect(beyondEntry.size == Int64(content.count))
        }
    }

    @Test("read: ifMatch with the current and a stale version", arguments: Backend.allCases)
    func readIfMatch(backend: Backend) async throws {
        try await withStore(backend, seed: { dir in try dir.write("f.txt", "version one") }) { store, dir in
            let first = try await store.stat(path("f.txt"))
            let etag = try #require(first.etag)
            let sink = CollectingSink()
            try await store.read(path("f.txt"), range: nil, ifMatch: etag, into: sink)
            #expect(sink.bytes() == Array("version one".utf8))

            _ = try await store.write(path("f.txt"), fromLocalFile: try dir.uploadSource(Array("version two!".utf8)), condition: .always)
            let stale = CollectingSink()
            await expectStoreError(.versionMismatch(path("f.txt"))) { () throws(StoreError) in
                try await store.read(path("f.txt"), range: nil, ifMatch: etag, into: stale)
            }
            #expect(stale.writeCount == 0, "no byte is delivered on a version mismatch")
            await expectStoreError(.versionMismatch(path("f.txt"))) { () throws(StoreError) in
                try await store.read(path("f.txt"), range: 2..<5, ifMatch: etag, into: stale)
            }
            #expect(stale.writeCount == 0)
        }
    }

    @Test("write: always, mustNotExist, ifMatch", arguments: Backend.allCases)
    func writeConditions(backend: Backend) async throws {
        try await withStore(backend, seed: { dir in try dir.mkdir("d") }) { store, dir in
            let target = path("d/new.bin")
            let one = randomBytes(700_000, seed: 1)
            let created = try await store.write(target, fromLocalFile: try dir.uploadSource(one), condition: .mustNotExist)
            #expect(created.size == Int64(one.count))
            #expect(created.kind == .file)
            #expect(created.path == target)
            #expect(dir.read("d/new.bin") == one)
            #expect(try await readAll(store, target) == one)
            let createdETag = try #require(created.etag)
            #expect(try await store.stat(target).etag == createdETag)

            // mustNotExist on an existing entry: refused, content unchanged.
            await expectStoreError(.alreadyExists(target)) { () throws(StoreError) in
                try await store.write(target, fromLocalFile: try! dir.uploadSource([1, 2, 3]), condition: .mustNotExist)
            }
            #expect(dir.read("d/new.bin") == one)

            // ifMatch with the current version: goes ahead, new version.
            let two = randomBytes(1000, seed: 2)
            let updated = try await store.write(target, fromLocalFile: try dir.uploadSource(two), condition: .ifMatch(createdETag))
            #expect(dir.read("d/new.bin") == two)
            #expect(updated.size == 1000)
            #expect(updated.etag != nil && updated.etag != createdETag)

            // ifMatch with the stale version: refused, content unchanged.
            await expectStoreError(.versionMismatch(target)) { () throws(StoreError) in
                try await store.write(target, fromLocalFile: try! dir.uploadSource([9, 9]), condition: .ifMatch(createdETag))
            }
            #expect(dir.read("d/new.bin") == two)

            // ifMatch on nothing: the version we started from is gone.
            await expectStoreError(.versionMismatch(path("d/none"))) { () throws(StoreError) in
                try await store.write(path("d/none"), fromLocalFile: try! dir.uploadSource([1]), condition: .ifMatch(createdETag))
            }

            // always: overwrites.
            let three = Array("three".utf8)
            _ = try await store.write(target, fromLocalFile: try dir.uploadSource(three), condition: .always)
            #expect(dir.read("d/new.bin") == three)

            // Into a missing directory: the parent is not found.
            await expectStoreError(.notFound(path("nodir"))) { () throws(StoreError) in
                try await store.write(path("nodir/x"), fromLocalFile: try! dir.uploadSource([1]), condition: .always)
            }
            // Onto a directory.
            await expectStoreError(.isADirectory(path("d"))) { () throws(StoreError) in
                try await store.write(path("d"), fromLocalFile: try! dir.uploadSource([1]), condition: .always)
            }
            // No temporary files left behind, and none listed.
            #expect(try await listAll(store, path("d")).map(\.name) == ["new.bin"])
        }
    }

    @Test("makeDirectory", arguments: Backend.allCases)
    func makeDirectory(backend: Backend) async throws {
        try await withStore(backend) { store, dir in
            let made = try await store.makeDirectory(path("new dir"))
            #expect(made.kind == .directory)
            #expect(made.path == path("new dir"))
            var isDirectory: ObjCBool = false
            #expect(FileManager.default.fileExists(atPath: dir.file("new dir"), isDirectory: &isDirectory) && isDirectory.boolValue)
            _ = try await store.makeDirectory(path("new dir/nested"))
            #expect(try await listAll(store, path("new dir")).map(\.name) == ["nested"])
            await expectStoreError(.alreadyExists(path("new dir"))) { () throws(StoreError) in try await store.makeDirectory(path("new dir")) }
            await expectStoreError(.notFound(path("missing"))) { () throws(StoreError) in try await store.makeDirectory(path("missing/child")) }
        }
    }

    @Test("delete: a file, an empty directory, a non-empty directory", arguments: Backend.allCases)
    func delete(backend: Backend) async throws {
        try await withStore(backend, seed: { dir in
            try dir.write("file.txt", "x")
            try dir.mkdir("empty")
            try dir.write("full/keep.txt", "keep")
        }) { store, dir in
            try await store.delete(path("file.txt"), isDirectory: false)
            await expectStoreError(.notFound(path("file.txt"))) { () throws(StoreError) in try await store.stat(path("file.txt")) }
            #expect(!FileManager.default.fileExists(atPath: dir.file("file.txt")))

            try await store.delete(path("empty"), isDirectory: true)
            #expect(!FileManager.default.fileExists(atPath: dir.file("empty")))

            await expectStoreError(.notEmpty(path("full"))) { () throws(StoreError) in try await store.delete(path("full"), isDirectory: true) }
            #expect(dir.read("full/keep.txt") == Array("keep".utf8))
            // A file delete that meets a directory never removes a tree.
            await expectStoreError(.isADirectory(path("full"))) { () throws(StoreError) in try await store.delete(path("full"), isDirectory: false) }
            #expect(dir.read("full/keep.txt") == Array("keep".utf8))
        }
    }

    @Test("move: with and without replace, files and directories", arguments: Backend.allCases)
    func move(backend: Backend) async throws {
        try await withStore(backend, seed: { dir in
            try dir.write("a.txt", "AAA")
            try dir.write("b.txt", "BB")
            try dir.write("tree/x.txt", "x")
            try dir.mkdir("dest")
        }) { store, dir in
            let moved = try await store.move(path("a.txt"), to: path("dest/renamed a.txt"), replace: false)
            #expect(moved.path == path("dest/renamed a.txt"))
            #expect(moved.size == 3)
            #expect(dir.read("dest/renamed a.txt") == Array("AAA".utf8))
            #expect(dir.read("a.txt") == nil)

            // Without replace, an existing target stays, and so does the source.
            await expectStoreError(.alreadyExists(path("dest/renamed a.txt"))) { () throws(StoreError) in
                try await store.move(path("b.txt"), to: path("dest/renamed a.txt"), replace: false)
            }
            #expect(dir.read("b.txt") == Array("BB".utf8))
            #expect(dir.read("dest/renamed a.txt") == Array("AAA".utf8))

            // With replace, the target takes the source's content.
            let replaced = try await store.move(path("b.txt"), to: path("dest/renamed a.txt"), replace: true)
            #expect(replaced.size == 2)
            #expect(dir.read("dest/renamed a.txt") == Array("BB".utf8))
            #expect(dir.read("b.txt") == nil)

            // A directory moves with what it holds.
            let movedTree = try await store.move(path("tree"), to: path("dest/tree2"), replace: false)
            #expect(movedTree.kind == .directory)
            #expect(dir.read("dest/tree2/x.txt") == Array("x".utf8))
            #expect(try await listAll(store, path("dest/tree2")).map(\.name) == ["x.txt"])

            // Into a missing directory.
            await expectStoreError(.notFound(path("nowhere"))) { () throws(StoreError) in
                try await store.move(path("dest/tree2/x.txt"), to: path("nowhere/x.txt"), replace: false)
            }
        }
    }
}

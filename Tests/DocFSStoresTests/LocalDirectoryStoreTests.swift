// What only the local directory store has: symlinks (listed, never traversed), paging,
// names that are not UTF-8, and its ETags.

#if canImport(Glibc)
import Glibc
#endif
import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

@Suite("LocalDirectoryStore")
struct LocalDirectoryStoreTests {
    /// A second name for a file, counted on both; a write over a version keeps every name
    /// (in place), where a write by a temporary file and a rename would leave the other name
    /// with the old bytes.
    @Test func hardLinksAreCountedAndKeptByWrites() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.write("a.txt", "one")
        try dir.write("d/keep.txt", "x")
        let store = try LocalDirectoryStore(root: dir.path, logger: testLogger)
        let linked = try await store.makeHardLink(path("d/b.txt"), to: path("a.txt"))
        #expect(linked.links == 2)
        #expect(try await store.stat(path("a.txt")).links == 2)
        let before = try await store.stat(path("a.txt"))
        let written = try await store.write(path("d/b.txt"), fromLocalFile: try dir.uploadSource(Array("two".utf8)),
                                            condition: .ifMatch(try #require(before.etag)))
        #expect(written.links == 2)
        #expect(dir.read("a.txt") == Array("two".utf8))
        await expectStoreError(.alreadyExists(path("d/keep.txt"))) { () throws(StoreError) in
            try await store.makeHardLink(path("d/keep.txt"), to: path("a.txt"))
        }
        try await store.delete(path("d/b.txt"), isDirectory: false)
        #expect(try await store.stat(path("a.txt")).links == 1)
    }

    @Test func symlinksAreListedAndNeverTraversed() async throws {
        let outside = try TemporaryDirectory()
        defer { outside.remove() }
        try outside.write("secret.txt", "secret")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.write("real/file.txt", "inside")
        symlink(outside.path, dir.file("escape"))
        symlink("real/file.txt", dir.file("link.txt"))
        let store = try LocalDirectoryStore(root: dir.path, logger: testLogger)

        let entries = try await store.list(.root, page: nil).entries
        let byName = Dictionary(uniqueKeysWithValues: entries.map { ($0.name, $0) })
        #expect(byName["escape"]?.kind == .symlink(target: outside.path))
        #expect(byName["link.txt"]?.kind == .symlink(target: "real/file.txt"))

        await expectStoreError(.notADirectory(path("escape"))) { () throws(StoreError) in try await store.list(path("escape"), page: nil) }
        await expectStoreError(.notADirectory(path("escape"))) { () throws(StoreError) in try await store.stat(path("escape/secret.txt")) }
        await expectStoreError(.notADirectory(path("escape"))) { () throws(StoreError) in
            try await store.read(path("escape/secret.txt"), range: nil, ifMatch: nil, into: CollectingSink())
        }
        await expectStoreError(.notADirectory(path("escape"))) { () throws(StoreError) in
            try await store.write(path("escape/new.txt"), fromLocalFile: try! dir.uploadSource([1]), condition: .always)
        }
        await expectStoreError(.notADirectory(path("escape"))) { () throws(StoreError) in try await store.delete(path("escape/secret.txt"), isDirectory: false) }
        #expect(outside.read("secret.txt") == Array("secret".utf8))
        #expect(!FileManager.default.fileExists(atPath: outside.file("new.txt")))
        // Reading a symlink itself does not follow it either.
        await #expect(throws: StoreError.self) { try await store.read(path("link.txt"), range: nil, ifMatch: nil, into: CollectingSink()) }
        // Deleting the link removes the link, not its target.
        try await store.delete(path("escape"), isDirectory: false)
        #expect(outside.read("secret.txt") == Array("secret".utf8))
    }

    @Test func pagesOfAThousand() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        for index in 0..<2345 { _ = FileManager.default.createFile(atPath: dir.file("f\(index)"), contents: nil) }
        let store = try LocalDirectoryStore(root: dir.path, logger: testLogger)
        var names: [String] = []
        var token: PageToken?
        var pages = 0
        repeat {
            let page = try await store.list(.root, page: token)
            #expect(page.entries.count <= 1000)
            names += page.entries.map(\.name)
            token = page.next
            pages += 1
        } while token != nil
        #expect(pages == 3)
        #expect(names.count == 2345)
        #expect(Set(names).count == 2345)
    }

    @Test func namesThatAreNotUTF8AreSkipped() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let bad: [CChar] = Array((dir.path + "/bad-").utf8CString.dropLast()) + [CChar(bitPattern: 0xFF), 0]
        let fd = open(bad, O_CREAT | O_WRONLY, 0o644)
        close(fd)
        try dir.write("good", "g")
        let store = try LocalDirectoryStore(root: dir.path, logger: testLogger)
        #expect(try await store.list(.root, page: nil).entries.map(\.name) == ["good"])
    }

    @Test func etagsFollowTheContent() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.write("f", "one")
        chmod(dir.file("f"), 0o640)  // a mode no umask gives by default: the store must report the file's own
        let store = try LocalDirectoryStore(root: dir.path, logger: testLogger)
        let first = try await store.stat(path("f"))
        let value = try #require(first.etag?.value)
        #expect(value.hasPrefix("\"") && value.hasSuffix("\"") && value.split(separator: "-").count == 3)
        #expect(try await store.stat(path("f")).etag == first.etag)
        _ = try await store.write(path("f"), fromLocalFile: try dir.uploadSource(Array("two".utf8)), condition: .always)
        #expect(try await store.stat(path("f")).etag != first.etag)
        #expect(first.mode == 0o640)
        #expect(try await store.stat(path("f")).mode == 0o640, "the write keeps the mode of the file it replaced")
    }

    @Test func writeKeepsTheModeOfTheFileItReplaces() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.write("script.sh", "#!/bin/sh\n")
        chmod(dir.file("script.sh"), 0o750)
        let store = try LocalDirectoryStore(root: dir.path, logger: testLogger)
        let entry = try await store.write(path("script.sh"), fromLocalFile: try dir.uploadSource(Array("echo\n".utf8)), condition: .always)
        #expect(entry.mode == 0o750)
    }

    @Test func rootMustBeADirectory() throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.write("file", "x")
        #expect(throws: StoreError.notADirectory(.root)) { try LocalDirectoryStore(root: dir.file("file")) }
        #expect(throws: StoreError.notFound(.root)) { try LocalDirectoryStore(root: dir.file("missing")) }
    }
}

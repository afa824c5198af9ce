// `user.docfs.progress` of an upload comes from UploadMeter: the store counts the bytes it reads
// of the snapshot it sends. Every store kind must count them — the local directory store, WebDAV
// (rclone's server and docfs serve), S3 with one PUT and S3 multipart — or an upload on that
// store shows 0/TOTAL until it ends.

#if canImport(Glibc)
import Glibc
#endif
import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

@Suite("UploadMeter on every store")
struct UploadMeterTests {
    /// Writes `bytes` from a watched source file and returns what the meter saw at the end.
    func meteredWrite(_ store: any Store, to target: StorePath, source: String, size: Int) async throws -> (sent: Int64, total: Int64)? {
        let meter = try #require(store.uploadMeter)
        meter.watch(source, total: Int64(size))
        defer { meter.unwatch(source) }
        #expect(meter.progress(source)! == (0, Int64(size)))
        let written = try await store.write(target, fromLocalFile: source, condition: .always)
        #expect(written.size == Int64(size))
        return meter.progress(source)
    }

    @Test("a write counts every byte of the file it sends", arguments: Backend.allCases)
    func storesCountTheirUploads(backend: Backend) async throws {
        let content = randomBytes(3 * LocalDirectoryStore.chunkSize + 1234, seed: 5)
        try await withStore(backend) { store, dir in
            let source = try dir.uploadSource(content)
            let seen = try #require(try await meteredWrite(store, to: path("up.bin"), source: source, size: content.count))
            #expect(seen == (Int64(content.count), Int64(content.count)), "\(backend): the meter saw \(seen.sent) of \(content.count) bytes")
            #expect(dir.read("up.bin") == content)
        }
    }

    @Test("S3: one PUT and a multipart upload in parallel parts count every byte")
    func s3CountsItsUploads() async throws {
        let small = randomBytes(700_000, seed: 6)
        let large = randomBytes(11 * 1024 * 1024 + 77, seed: 7)
        try await withS3Store(partSize: 5 * 1024 * 1024) { store, _ in
            for (name, content) in [("put.bin", small), ("multipart.bin", large)] {
                let source = try s3LocalFile(content)
                defer { unlink(source) }
                let seen = try #require(try await meteredWrite(store, to: path(name), source: source, size: content.count))
                #expect(seen == (Int64(content.count), Int64(content.count)), "\(name): the meter saw \(seen.sent) of \(content.count) bytes")
            }
        }
    }

    @Test("each store counts only its own uploads")
    func eachStoreHasItsOwnMeter() async throws {
        try await withStore(.local) { one, _ in
            try await withStore(.local) { other, _ in
                let meter = try #require(one.uploadMeter)
                meter.watch("/a/snapshot", total: 10)
                defer { meter.unwatch("/a/snapshot") }
                #expect(other.uploadMeter?.progress("/a/snapshot") == nil, "another mount's meter sees nothing of it")
            }
        }
    }

    @Test("a new attempt counts from 0: the local store restarts the count it finds")
    func localRestartsItsCount() async throws {
        let content = randomBytes(2 * LocalDirectoryStore.chunkSize, seed: 8)
        try await withStore(.local) { store, dir in
            let source = try dir.uploadSource(content)
            // Twice as many bytes as the file, so the count of a first attempt that was not
            // restarted would stop at the total, and one that was shows exactly the file.
            let meter = try #require(store.uploadMeter)
            meter.watch(source, total: Int64(2 * content.count))
            defer { meter.unwatch(source) }
            meter.record(source, content.count / 2)  // what an attempt that failed had sent
            _ = try await store.write(path("again.bin"), fromLocalFile: source, condition: .always)
            #expect(meter.progress(source)?.sent == Int64(content.count))
        }
    }
}

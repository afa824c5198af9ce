import DocFSStore
import Foundation
import NIOCore

// Reading growing content into the buffers a request body is made of, for the stores that
// stream it (WebDAVStore+StreamedUpload.swift, S3Store+StreamedUpload.swift).

extension GrowingContent {
    /// Up to `count` written bytes at `offset`, in a new buffer. Throws when none are there
    /// (the local file is shorter than what was said to be written).
    func buffer(at offset: Int64, count: Int) throws(StoreError) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: count)
        var failure: StoreError?
        let got = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { pointer in
            do throws(StoreError) {
                return try read(into: UnsafeMutableRawBufferPointer(rebasing: pointer[0..<count]), at: offset)
            } catch {
                failure = error
                return 0
            }
        }
        if let failure { throw failure }
        guard got > 0 else { throw .localIO(errno: EIO, message: "the file being uploaded is shorter than written") }
        return buffer
    }
}

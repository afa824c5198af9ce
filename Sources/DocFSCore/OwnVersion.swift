import Crypto
import DocFSStore
import Foundation
import Synchronization

/// Versions an item's uploads sent whose answer never came: the connection broke or timed out
/// after the body went out, so the store may hold the bytes under a version docfs never heard
/// of. The next upload of the item then meets that version as a change made elsewhere (a 412 on
/// `If-Match`, or "exists" on `If-None-Match: *`). Keeping a conflict copy of it would keep a
/// copy of our own bytes; `Uploader` looks first (`SnapshotComparison`), and only a version that
/// is neither the content being sent nor one of these is another client's.
///
/// Kept in memory: what a restart forgets is at worst a conflict copy too many, never a loss.
struct SentVersions {
    /// A SHA-256, as bytes (swift-crypto's digest type is not `Sendable`).
    typealias Digest = [UInt8]
    /// At most this many per item: a long outage repeats the same few.
    static let keptPerItem = 8
    private var digests: [Inode: [Digest]] = [:]

    /// Whether a failed upload's error leaves open that the store took the body: the answer
    /// was lost (a reset, a timeout) or the server failed after reading it. A refusal it sent
    /// (busy, a 4xx) says the store did not take it.
    static func mayHaveReachedTheStore(_ error: StoreError) -> Bool {
        switch error {
        case .unreachable, .timedOut, .serverError: return true
        default: return false
        }
    }

    mutating func remember(_ digest: Digest, for inode: Inode) {
        var kept = digests[inode] ?? []
        guard !kept.contains(digest) else { return }
        kept.append(digest)
        digests[inode] = Array(kept.suffix(Self.keptPerItem))
    }

    func sentAny(_ inode: Inode) -> Bool { digests[inode] != nil }

    func sent(_ digest: Digest, for inode: Inode) -> Bool { digests[inode]?.contains(digest) ?? false }

    /// The item's upload is confirmed (or its content settled otherwise): what was sent before
    /// is history.
    mutating func forget(_ inode: Inode) { digests[inode] = nil }

    /// The SHA-256 of a file's content, read in 1 MiB pieces.
    static func digest(ofFile path: String) throws(FSError) -> Digest {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .local(errno: errno, "cannot read \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset: off_t = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .local(errno: errno, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            offset += off_t(n)
        }
        return Array(hasher.finalize())
    }
}

/// A download of the store's version compared, as its bytes arrive, with an upload's snapshot,
/// and hashed, so one GET tells whether the store holds the content being sent (then there is
/// nothing to keep twice) or one that an upload of this item sent before (`SentVersions`).
/// Nothing is written anywhere.
final class SnapshotComparison: ContentSink, Sendable {
    private struct State {
        var hasher = SHA256()
        /// The bytes arrived so far, in order; anything else (a gap, a range twice) spoils the hash.
        var next: Int64 = 0
        var inOrder = true
        var identical = true
        var closed = false
    }
    private let descriptor: Int32
    /// The snapshot's length.
    let length: Int64
    private let state = Mutex(State())

    init(snapshot path: String) throws(FSError) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .local(errno: errno, "cannot read the upload snapshot \(path): \(String(cString: strerror(errno)))") }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            close(fd)
            throw .local(errno: errno, "cannot stat the upload snapshot \(path)")
        }
        descriptor = fd
        length = Int64(info.st_size)
    }

    deinit { close(descriptor) }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
        guard bytes.count > 0 else { return }
        var local = [UInt8](repeating: 0, count: bytes.count)
        let got = offset < length ? local.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, off_t(offset)) } : 0
        let same = got == bytes.count && local.withUnsafeBytes { memcmp($0.baseAddress!, bytes.baseAddress!, bytes.count) } == 0
        let incoming = Array(bytes)
        state.withLock { state in
            if offset != state.next { state.inOrder = false }
            state.next = offset + Int64(incoming.count)
            state.hasher.update(data: incoming)
            if !same { state.identical = false }
        }
    }

    /// Whether the version read (`size` bytes) is the snapshot byte for byte, and its SHA-256
    /// (nil when its bytes did not arrive whole and in order).
    func result(size: Int64) -> (identical: Bool, digest: SentVersions.Digest?) {
        state.withLock { state in
            let whole = state.inOrder && state.next == size
            return (whole && state.identical && size == length, whole ? Array(state.hasher.finalize()) : nil)
        }
    }
}

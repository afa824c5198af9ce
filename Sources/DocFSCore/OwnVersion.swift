import Crypto
import DocFSStore
import Foundation
import Synchronization

/// Versions whose upload answer never came, so our own bytes on the store get no conflict copy.
/// In memory: a restart forgets at worst a conflict copy too many.
struct SentVersions {
    /// swift-crypto's digest type is not `Sendable`.
    typealias Digest = [UInt8]
    static let keptPerItem = 8
    private var digests: [Inode: [Digest]] = [:]

    /// The answer was lost or the server failed after reading; a refusal it sent says it did not.
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

    mutating func forget(_ inode: Inode) { digests[inode] = nil }

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

/// One GET tells whether the store holds the content being sent or one sent before.
final class SnapshotComparison: ContentSink, Sendable {
    private struct State {
        var hasher = SHA256()
        /// A gap or a range twice spoils the hash.
        var next: Int64 = 0
        var inOrder = true
        var identical = true
    }
    private let descriptor: Int32
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

    func result(size: Int64) -> (identical: Bool, digest: SentVersions.Digest?) {
        state.withLock { state in
            let whole = state.inOrder && state.next == size
            return (whole && state.identical && size == length, whole ? Array(state.hasher.finalize()) : nil)
        }
    }
}

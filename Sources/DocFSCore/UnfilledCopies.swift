import DocFSStore
import Foundation
import Logging

/// Before `CrashRecovery`: copies left changed while sparse get their holes (per `HeldLog`)
/// fetched `If-Match` their base, so the unsaved copy is that version with the user's writes.
/// If the store has another version or is unreachable, holes stay zeros; user bytes are kept.
struct UnfilledCopies {
    let catalog: Catalog
    let cacheDirectory: String
    let store: any Store
    let logger: Logger

    func fill() async {
        let items: [Item]
        do {
            items = try catalog.itemsWithUncommittedWrites()
        } catch {
            logger.error("cannot read which copies the last mount left unfilled; they stay as they are", metadata: ["error": "\(error)"])
            return
        }
        for item in items {
            let copyPath = cacheDirectory + "/" + item.id
            guard let held = HeldLog.read(copyPath: copyPath) else { continue }
            defer { HeldLog.remove(copyPath: copyPath) }
            var info = stat()
            guard stat(copyPath, &info) == 0 else { continue }
            let holes = held.missing(in: 0..<Int64(info.st_size))
            guard !holes.isEmpty else { continue }
            let missing = holes.reduce(Int64(0)) { $0 + ($1.upperBound - $1.lowerBound) }
            guard let base = item.baseEtag else {
                logger.warning("an unsaved copy lacks bytes of a version it cannot name: they stay zeros",
                               metadata: ["path": "\(item.path)", "bytes": "\(missing)"])
                continue
            }
            let descriptor = open(copyPath, O_WRONLY | O_CLOEXEC)
            guard descriptor >= 0 else { continue }
            defer { close(descriptor) }
            do throws(StoreError) {
                for hole in holes {
                    _ = try await store.read(item.path, range: hole, ifMatch: base, into: HoleSink(descriptor: descriptor, hole: hole))
                }
                logger.info("fetched what a copy changed while sparse lacked", metadata: ["path": "\(item.path)", "bytes": "\(missing)"])
            } catch {
                logger.warning("an unsaved copy keeps zeros where the store's bytes could not be fetched",
                               metadata: ["path": "\(item.path)", "bytes": "\(missing)", "error": "\(error)"])
            }
        }
    }

    /// Writes nothing outside the hole.
    private struct HoleSink: ContentSink {
        let descriptor: Int32
        let hole: ByteRange

        func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
            let start = max(offset, hole.lowerBound)
            let end = min(offset + Int64(bytes.count), hole.upperBound)
            guard start < end else { return }
            let inHole = UnsafeRawBufferPointer(rebasing: bytes[Int(start - offset)..<Int(end - offset)])
            if let code = LocalCopy.writeAll(descriptor, inHole, at: start) {
                throw .localIO(errno: code, message: "filling an unsaved copy: \(String(cString: strerror(code)))")
            }
        }
    }
}

import Dispatch

/// Runs blocking work (POSIX file calls, SQLite, `fdatasync`, copying a file) on a dispatch
/// queue of its own, so that it never holds a thread of Swift's cooperative pool: that pool has
/// one thread per core, and a slow disk or a big directory must not stall every other task
/// (the lookups of the mount among them) while it waits.
public enum Blocking {
    private static let queue = DispatchQueue(label: "docfs.blocking", attributes: .concurrent)

    public static func run<T: Sendable, Failure: Error>(_ body: @escaping @Sendable () throws(Failure) -> T) async throws(Failure) -> T {
        let result: Result<T, Failure> = await withCheckedContinuation { continuation in
            queue.async {
                do throws(Failure) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}

import DocFSStore

/// Runs `work` while `question` is asked, where asking first would cost a round trip before any
/// byte goes (is the name of a new file free?). The question's failure (a taken name, no
/// answer) cancels the work and is what the caller sees; when it answers well, the work's own
/// result stands, and it is returned only once the question answered.
func asking<T: Sendable>(_ question: (@Sendable () async throws(StoreError) -> Void)?,
                         alongside work: @escaping @Sendable () async throws(StoreError) -> T) async throws(StoreError) -> T {
    guard let question else { return try await work() }
    let result: Result<T, StoreError> = await withTaskGroup(of: AskedAlongside<T>.self) { group in
        group.addTask {
            do throws(StoreError) { try await question() } catch { return .failed(error) }
            return .answered
        }
        group.addTask {
            do throws(StoreError) { return .done(try await work()) } catch { return .failed(error) }
        }
        var value: T?
        while let outcome = await group.next() {
            switch outcome {
            case .answered: continue
            case .done(let done): value = done
            case .failed(let error):
                group.cancelAll()
                return .failure(error)
            }
        }
        // The work's task always ends in `done` or `failed`.
        guard let value else { preconditionFailure("the work ended without a result") }
        return .success(value)
    }
    return try result.get()
}

/// What each side of `asking(_:alongside:)` ended with.
private enum AskedAlongside<T: Sendable>: Sendable {
    case answered
    case done(T)
    case failed(StoreError)
}

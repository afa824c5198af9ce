import DocFSStore

/// Why the last upload did not reach the store: what `docfs unmount` decides on.
public enum UploadTrouble: String, Sendable, Equatable {
    /// The store refused this content for good: not sent again.
    case refused
    /// Unreachable or timed out: tried again.
    case unreachable
    /// Anything else (a 5xx, the local disk): tried again.
    case failed

    init(retried error: any Error) {
        switch error {
        case StoreError.unreachable, StoreError.timedOut, FSError.storeUnreachable, FSError.timedOut: self = .unreachable
        default: self = .failed
        }
    }
}

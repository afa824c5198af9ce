import DocFSStore

/// Why an item's last upload did not reach the store, as the uploader recorded it beside the
/// message (`Item.uploadError`): what `docfs unmount` decides on.
public enum UploadTrouble: String, Sendable, Equatable {
    /// The store said no to this content for good (`StoreError.isPermanent`): not sent again.
    case refused
    /// The store did not answer (unreachable, timed out): tried again.
    case unreachable
    /// Anything else (a 5xx, the local disk): tried again.
    case failed

    /// The trouble `error` is, for an upload that will be tried again.
    init(retried error: any Error) {
        switch error {
        case StoreError.unreachable, StoreError.timedOut: self = .unreachable
        case FSError.storeUnreachable, FSError.timedOut: self = .unreachable
        default: self = .failed
        }
    }
}

/// What `Store.setAttributes(_:_:onVersion:)` did.
public enum AttributesSet: Sendable, Equatable {
    /// The store cannot carry them: the caller keeps them.
    case notKept
    /// Kept. `newVersion`: the version the change made, where the store can tell it for certain
    /// (S3's copy answer); nil where it cannot, and a stat after may see another client's.
    case kept(newVersion: ETag?)
}

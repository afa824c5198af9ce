/// Content that is still being written while a store uploads it: a new file copied into the
/// mount in order, whose upload starts before the copy is done (`Store.write(_:growing:condition:)`),
/// so that the store has it about when `close()` returns instead of an upload's time later.
///
/// The store asks `next(after:)` how far it may read, reads those bytes with `read(into:at:)`,
/// and ends the body when told `.end`: the content is whole then. `.cancelled` means the core
/// gave up on it (the writer went out of order): the store must leave nothing of it behind, and
/// the core uploads the file from its local copy later, as any other.
public protocol GrowingContent: Sendable {
    /// Waits until bytes at `offset` are written, then says up to where they may be read;
    /// `.end` when the content ends at `offset`.
    func next(after offset: Int64) async -> GrowingExtent

    /// Reads bytes `next` said are written; returns how many it read (0 only at the end of the
    /// local file, which is an error for a caller that was told the bytes are there).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(StoreError) -> Int
}

/// How far growing content may be read (see `GrowingContent.next(after:)`).
public enum GrowingExtent: Sendable, Equatable {
    /// The bytes before this offset are written and may be sent.
    case written(upTo: Int64)
    /// The content ends where the caller is, whole.
    case end
    /// The core gave up on this upload: nothing of it may stay on the store.
    case cancelled
}

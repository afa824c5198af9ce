// ListingLimits: how far docfs follows a directory listing before it calls it hostile. A
// listing is bounded by its entries, never by its bytes alone: a folder of a million names is
// a folder, but a server that keeps answering "there is more" (S3's IsTruncated with fresh
// tokens, a WebDAV body that never ends) must be cut with an error, not followed until memory
// runs out. Shared by the WebDAV and S3 stores.

/// The bounds of one directory listing.
public struct ListingLimits: Sendable, Equatable {
    /// Entries one listing may hold (all pages together).
    public var maximumEntries: Int
    /// Bytes one WebDAV `<response>` (and what stands before it) may take.
    public var maximumEntryBytes: Int
    /// Entries a store hands the core per page.
    public var pageSize: Int

    public init(maximumEntries: Int = 1_000_000, maximumEntryBytes: Int = 1 << 20, pageSize: Int = 1000) {
        self.maximumEntries = max(1, maximumEntries)
        self.maximumEntryBytes = max(1024, maximumEntryBytes)
        self.pageSize = max(1, pageSize)
    }

    public static let standard = ListingLimits()

    /// The limits with `DOCFS_MAX_LISTING_ENTRIES` applied (a positive count; anything else is ignored).
    public init(environment: [String: String]) {
        self.init()
        if let value = environment["DOCFS_MAX_LISTING_ENTRIES"].flatMap(Int.init), value > 0 {
            maximumEntries = value
        }
    }

    /// Pages one S3 listing may take: a truncated page of a real server is full (1,000 keys),
    /// so a listing averaging under 100 entries a page, beyond the first ten, is a server
    /// sending pages without end.
    public var maximumPages: Int { 10 + maximumEntries / 100 }
}

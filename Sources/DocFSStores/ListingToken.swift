/// The page token of a listing a store keeps between pages (the local store's sorted names,
/// WebDAV's PROPFIND answer still streaming): `LISTING-ID/LAST-NAME`. The id finds what was
/// kept; the last name handed out lets a page whose listing was dropped start over and resume
/// after it. A name never holds `/`, and an id never does either.
struct ListingToken {
    var listing: UInt64?
    var after: String?

    init(listing: UInt64, after: String) {
        self.listing = listing
        self.after = after
    }

    init(_ value: String) {
        guard let slash = value.firstIndex(of: "/") else {
            // A bare name: a token from an earlier version.
            self.after = value.isEmpty ? nil : value
            return
        }
        self.listing = UInt64(value[..<slash])
        self.after = String(value[value.index(after: slash)...])
    }

    var value: String { "\(listing ?? 0)/\(after ?? "")" }
}

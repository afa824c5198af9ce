/// A path inside a store, relative to the store's root, as a list of names.
///
/// Names are kept decoded (a WebDAV store percent-encodes them on the wire, a local store
/// uses them as they are). A name is never empty, `.` or `..`, and never contains `/` or NUL:
/// `StorePath` refuses such names so that a hostile listing cannot escape the store's root.
/// Paths compare, hash and sort by the bytes of their names (see `FileName`): `café` in NFC
/// and in NFD are two paths, as they are two files on every store.
public struct StorePath: Sendable, Hashable, CustomStringConvertible, Comparable {
    public private(set) var components: [String]

    public static let root = StorePath(validated: [])

    public init(validated components: [String]) {
        self.components = components
    }

    /// Parses `a/b/c` (leading and trailing slashes ignored). Throws on a hostile component.
    public init(_ string: String) throws(StoreError) {
        var parts: [String] = []
        // Split on the byte `/`: `split(separator: "/")` works on Characters, and a `/` followed
        // by a combining mark is another Character, so it would stay inside a name.
        for part in string.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            let name = String(Substring(part))
            guard StorePath.isValidName(name) else { throw .invalidName(name) }
            parts.append(name)
        }
        self.components = parts
    }

    /// Checked on bytes: `String.contains("/")` compares Characters, and misses a `/` (or a
    /// NUL) that a combining mark follows.
    public static func isValidName(_ name: String) -> Bool {
        let bytes = name.utf8
        return !bytes.isEmpty && bytes.count <= 255 && !bytes.elementsEqual(".".utf8) && !bytes.elementsEqual("..".utf8)
            && !bytes.contains(UInt8(ascii: "/")) && !bytes.contains(0)
    }

    public var isRoot: Bool { components.isEmpty }
    public var name: String { components.last ?? "" }
    public var parent: StorePath? {
        isRoot ? nil : StorePath(validated: Array(components.dropLast()))
    }

    public func appending(_ name: String) throws(StoreError) -> StorePath {
        guard StorePath.isValidName(name) else { throw .invalidName(name) }
        return StorePath(validated: components + [name])
    }

    /// `/a/b/c`, or `/` for the root.
    public var description: String { "/" + components.joined(separator: "/") }

    public static func == (lhs: StorePath, rhs: StorePath) -> Bool {
        lhs.components.elementsEqual(rhs.components) { $0.utf8.elementsEqual($1.utf8) }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(components.count)
        for component in components { hasher.combine(FileName(component)) }
    }

    public static func < (lhs: StorePath, rhs: StorePath) -> Bool {
        lhs.components.lexicographicallyPrecedes(rhs.components) { FileName($0) < FileName($1) }
    }

    /// True when `self` is `other` or lies below it (names compared by bytes).
    public func isSame(orInside other: StorePath) -> Bool {
        components.count >= other.components.count
            && zip(components, other.components).allSatisfy { $0.utf8.elementsEqual($1.utf8) }
    }
}

/// A path inside a store, relative to the store's root, as a list of names.
///
/// Names are kept decoded (a WebDAV store percent-encodes them on the wire, a local store
/// uses them as they are). A name is never empty, `.` or `..`, and never contains `/` or NUL:
/// `StorePath` refuses such names so that a hostile listing cannot escape the store's root.
public struct StorePath: Sendable, Hashable, CustomStringConvertible, Comparable {
    public private(set) var components: [String]

    public static let root = StorePath(validated: [])

    public init(validated components: [String]) {
        self.components = components
    }

    /// Parses `a/b/c` (leading and trailing slashes ignored). Throws on a hostile component.
    public init(_ string: String) throws(StoreError) {
        var parts: [String] = []
        for part in string.split(separator: "/", omittingEmptySubsequences: true) {
            let name = String(part)
            guard StorePath.isValidName(name) else { throw .invalidName(name) }
            parts.append(name)
        }
        self.components = parts
    }

    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.contains("/") && !name.contains("\0")
            && name.utf8.count <= 255
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

    public static func < (lhs: StorePath, rhs: StorePath) -> Bool {
        lhs.components.lexicographicallyPrecedes(rhs.components)
    }
}

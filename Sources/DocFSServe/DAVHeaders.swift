// DAVHeaders: the WebDAV request headers that steer a method (Depth, Overwrite) and the
// `--max-upload` size, parsed in one place as pure functions, so the fuzz test can feed them
// anything a client might send.

enum DAVHeaders {
    /// PROPFIND's Depth: 0 or 1; `infinity` (or none) is refused with `propfind-finite-depth`.
    static func propfindDepth(_ header: String?) throws(DAVError) -> Int {
        switch header?.trimmingSpaces.lowercased() {
        case "0": return 0
        case "1": return 1
        case nil, "infinity":
            var error = DAVError(.forbidden, "PROPFIND with Depth: infinity is not supported")
            error.precondition = "propfind-finite-depth"
            throw error
        default: throw DAVError(.badRequest, "bad Depth header")
        }
    }

    /// COPY/MOVE's Depth: true for `infinity` (the default), false for COPY's `0`.
    static func copyRecursive(_ header: String?, move: Bool) throws(DAVError) -> Bool {
        switch header?.trimmingSpaces.lowercased() {
        case nil, "infinity": return true
        case "0" where !move: return false
        default: throw DAVError(.badRequest, "bad Depth header for \(move ? "MOVE" : "COPY")")
        }
    }

    /// Overwrite: T (the default) or F.
    static func overwrite(_ header: String?) throws(DAVError) -> Bool {
        switch header?.trimmingSpaces.uppercased() {
        case nil, "T": return true
        case "F": return false
        default: throw DAVError(.badRequest, "bad Overwrite header")
        }
    }
}

/// A size as given on the command line: `1048576`, `512K`, `10M`, `10G`, `1T` (powers of 1024,
/// an optional `B`/`iB`), or `unlimited`. Nil from `parse` means "not a size".
public enum ByteSize {
    public enum Value: Sendable, Equatable {
        case bytes(Int64)
        case unlimited
    }

    public static func parse(_ text: String) -> Value? {
        var value = text.trimmingSpaces.uppercased()
        if value == "UNLIMITED" || value == "NONE" { return .unlimited }
        if value.hasSuffix("IB") { value.removeLast(2) } else if value.hasSuffix("B") { value.removeLast() }
        var multiplier: Int64 = 1
        if let last = value.last, let shift = ["K": 10, "M": 20, "G": 30, "T": 40][String(last)] {
            multiplier = Int64(1) << shift
            value.removeLast()
        }
        guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              let number = Int64(value) else { return nil }
        let (product, overflow) = number.multipliedReportingOverflow(by: multiplier)
        guard !overflow else { return nil }
        return .bytes(product)
    }
}

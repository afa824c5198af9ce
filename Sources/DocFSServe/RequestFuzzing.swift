/// Entry points for libFuzzer (`Sources/DocFSFuzz`, `make fuzz`, issue 10 item 10): what
/// `docfs serve` reads from a client before it touches a file: the request path, `Destination`,
/// `Host`, `Depth`, `Overwrite`, `Range` and sizes. A crash or a hang here is a bug; a refusal
/// is an answer. `make test` runs the same under a seeded generator (ServeFuzzTests).
public enum RequestFuzzing {
    public static func pathAndHeaders(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        _ = try? DAVPath(percentEncoded: text)
        if let raw = DAVPath.destinationPath(text) { _ = try? DAVPath(percentEncoded: raw) }
        _ = ServedOrigin.authority(text)
        _ = try? DAVHeaders.propfindDepth(text)
        _ = try? DAVHeaders.copyRecursive(text, move: bytes.count % 2 == 0)
        _ = try? DAVHeaders.overwrite(text)
        _ = ByteRangeRequest(header: text)
        _ = ByteSize.parse(text)
    }
}

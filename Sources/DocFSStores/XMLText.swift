/// Text for the XML bodies the stores send (S3's CompleteMultipartUpload, WebDAV's PROPPATCH).
enum XMLText {
    /// `text` with the five characters XML gives meaning to written as entities, so it can go
    /// in element content or in a quoted attribute.
    static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "'", with: "&apos;")
    }
}

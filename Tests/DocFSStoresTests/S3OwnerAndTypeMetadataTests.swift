// What s3fs writes on an object and docfs must read the same way: the file type in
// `x-amz-meta-mode` (special files: empty objects whose mode names them), the device number in
// `x-amz-meta-rdev`, and the owner in `x-amz-meta-uid` / `x-amz-meta-gid`. The values are written
// by anyone: junk is no value, never a trap.

import DocFSStore
@testable import DocFSStores
import NIOHTTP1
import Testing

@Suite("S3 object metadata: file types and owners as s3fs keeps them")
struct S3OwnerAndTypeMetadataTests {
    @Test("each special type is read from the mode s3fs writes", arguments: SpecialFile.FileType.allCases)
    func specialTypes(type: SpecialFile.FileType) throws {
        // s3fs writes the decimal st_mode, type bits included; a device's rdev beside it.
        let headers = HTTPHeaders([(S3Metadata.modeHeader, String(type.rawValue | 0o640)),
                                   (S3Metadata.rdevHeader, "1795")])
        let special = try #require(S3Metadata.special(in: headers))
        #expect(special.type == type)
        #expect(special.rdev == (type.isDevice ? 1795 : 0))
        #expect(S3Metadata.mode(in: headers) == 0o640)
    }

    @Test("a file, a folder or a link is no special file", arguments: [0o100644, 0o040755, 0o120777] as [UInt32])
    func notSpecial(mode: UInt32) {
        #expect(S3Metadata.special(in: HTTPHeaders([(S3Metadata.modeHeader, String(mode))])) == nil)
    }

    @Test("a device without x-amz-meta-rdev (Debian's s3fs writes none) is device 0")
    func deviceWithoutNumber() throws {
        let headers = HTTPHeaders([(S3Metadata.modeHeader, String(SpecialFile.FileType.characterDevice.rawValue | 0o600))])
        #expect(try #require(S3Metadata.special(in: headers)).rdev == 0)
    }

    @Test("owner and group go up with the mode and come back")
    func ownerRoundTrip() {
        let sent = S3Metadata.headers(for: StoreAttributes(mode: 0o600, owner: 1234, group: 5678))
        let headers = HTTPHeaders(sent.map { ($0.name, $0.value) })
        #expect(headers.first(name: S3Metadata.uidHeader) == "1234")
        #expect(headers.first(name: S3Metadata.gidHeader) == "5678")
        #expect(S3Metadata.owner(in: headers) == 1234)
        #expect(S3Metadata.group(in: headers) == 5678)
    }

    @Test("no owner given: none sent, so s3fs and docfs show the mounting user")
    func noOwnerNoHeader() {
        let sent = S3Metadata.headers(for: StoreAttributes(mode: 0o644))
        #expect(!sent.contains { $0.name == S3Metadata.uidHeader || $0.name == S3Metadata.gidHeader })
    }

    @Test("an owner written by anyone", arguments: [
        ("0", 0), (" 1000 ", 1000), ("4294967295", 4_294_967_295),
        ("-1", nil), ("4294967296", nil), ("root", nil), ("", nil), ("1e3", nil),
    ] as [(String, UInt32?)])
    func ownerFromAnyone(value: String, expected: UInt32?) {
        #expect(S3Metadata.owner(in: HTTPHeaders([(S3Metadata.uidHeader, value)])) == expected)
        #expect(S3Metadata.group(in: HTTPHeaders([(S3Metadata.gidHeader, value)])) == expected)
    }
}

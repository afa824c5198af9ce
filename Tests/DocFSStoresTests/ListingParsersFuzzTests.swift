// Seeded fuzzing of the parsers that read what a server wrote (issue 10, item 10): the WebDAV
// multistatus stream, the S3 ListObjectsV2 parser and the HTTP date parser. Thousands of
// generated documents per run, each also mutated (cut short, bytes flipped, markup spliced in,
// nested deep, attributes made huge, entity tricks), fed in random chunk sizes. Nothing may
// trap, and what comes out must hold: only safe, distinct names directly in the listed
// directory; for an unmutated document exactly the safe names the generator put in; the same
// responses whatever the chunking. A failure prints its seed. The loops yield often: they are
// CPU-bound, and on a 2-core machine they would otherwise hold the cooperative pool's threads
// while other suites' network tests wait past their timeouts.

import DocFSStore
@testable import DocFSStores
import DocFSTesting
import Foundation
import Testing


/// A name the generator may list, as it goes on the wire, and whether docfs must show it.
struct FuzzName {
    var wire: String
    var decoded: String?
    var safe: Bool
}

enum FuzzNames {
    static func pick(_ random: inout SeededGenerator, index: Int) -> FuzzName {
        switch random.below(14) {
        case 0: return FuzzName(wire: "../outside\(index)", decoded: nil, safe: false)
        case 1: return FuzzName(wire: ".", decoded: ".", safe: false)
        case 2: return FuzzName(wire: "..", decoded: "..", safe: false)
        case 3: return FuzzName(wire: "a%2Fb\(index)", decoded: "a/b\(index)", safe: false)
        case 4: return FuzzName(wire: "nul%00\(index)", decoded: nil, safe: false)
        case 5: return FuzzName(wire: String(repeating: "x", count: 256) + "\(index)", decoded: nil, safe: false)
        case 6: return FuzzName(wire: "bad%FF%FE\(index)", decoded: nil, safe: false)
        case 7:
            let name = String(repeating: "y", count: 250) + String(format: "%05d", index)  // exactly 255 bytes
            return FuzzName(wire: name, decoded: name, safe: true)
        case 8: return FuzzName(wire: "caf%C3%A9-\(index)", decoded: "café-\(index)", safe: true)
        case 9: return FuzzName(wire: "sp%20ace%26amp\(index)", decoded: "sp ace&amp\(index)", safe: true)
        case 10: return FuzzName(wire: "deep\(index)/inner", decoded: nil, safe: false)
        case 11: return FuzzName(wire: "%E2%80%AEtxt.exe\(index)", decoded: "\u{202E}txt.exe\(index)", safe: true)
        default: return FuzzName(wire: "file-\(index).txt", decoded: "file-\(index).txt", safe: true)
        }
    }
}

@Suite("Listing parsers under fuzzing")
struct ListingParsersFuzzTests {
    static let base = "/dav/dir"

    /// A multistatus document for `/dav/dir/` and the names it lists.
    static func multistatus(_ random: inout SeededGenerator) -> (xml: [UInt8], names: [FuzzName]) {
        let dav = ["D", "d", "lp1", ""][random.below(4)]
        let p = dav.isEmpty ? "" : dav + ":"
        let declaration = dav.isEmpty ? "xmlns=\"DAV:\"" : "xmlns:\(dav)=\"DAV:\""
        var out = random.chance(50) ? "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n" : ""
        if random.chance(10) { out += "<!-- a comment -- with dashes -->" }
        out += "<\(p)multistatus \(declaration) xmlns:P=\"urn:x-docfs:posix\">"
        func href(_ path: String) -> String {
            let text = random.chance(30) ? "http://127.0.0.1:8080" + path : path
            switch random.below(4) {
            case 0: return "<![CDATA[\(text)]]>"
            case 1: return text.replacingOccurrences(of: "&", with: "&amp;")
            default: return text.replacingOccurrences(of: "&", with: "&#38;")
            }
        }
        func response(_ path: String, collection: Bool, size: Int) -> String {
            var r = "<\(p)response>"
            if random.chance(10) { r += "\n  <?pi inside?>" }
            r += "<\(p)href>\(href(path))</\(p)href><\(p)propstat><\(p)prop>"
            r += collection ? "<\(p)resourcetype><\(p)collection/></\(p)resourcetype>" : "<\(p)resourcetype/>"
            r += "<\(p)getcontentlength>\(size)</\(p)getcontentlength>"
            r += "<\(p)getlastmodified>Sun, 06 Nov 1994 08:49:37 GMT</\(p)getlastmodified>"
            r += "<\(p)getetag>&quot;e\(size)&quot;</\(p)getetag><P:mode>644</P:mode>"
            r += "</\(p)prop><\(p)status>HTTP/1.1 200 OK</\(p)status></\(p)propstat></\(p)response>\n"
            return r
        }
        out += response(base + "/", collection: true, size: 0)
        var names: [FuzzName] = []
        for index in 0..<random.below(20) {
            let name = FuzzNames.pick(&random, index: index)
            names.append(name)
            out += response(base + "/" + name.wire, collection: random.chance(20), size: random.below(1 << 20))
        }
        out += "</\(p)multistatus>"
        return (Array(out.utf8), names)
    }

    /// A document changed the way a broken or hostile server would change it.
    static func mutate(_ document: [UInt8], _ random: inout SeededGenerator) -> [UInt8] {
        var bytes = document
        switch random.below(9) {
        case 0:  // cut short
            bytes = Array(bytes.prefix(random.below(bytes.count + 1)))
        case 1:  // flip bytes
            for _ in 0..<(1 + random.below(8)) where !bytes.isEmpty {
                bytes[random.below(bytes.count)] ^= UInt8(truncatingIfNeeded: 1 << random.below(8))
            }
        case 2:  // random bytes spliced in
            let at = random.below(bytes.count + 1)
            bytes.insert(contentsOf: (0..<random.below(64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }, at: at)
        case 3:  // deep nesting
            let at = random.below(bytes.count + 1)
            let depth = random.below(2000)
            bytes.insert(contentsOf: Array((String(repeating: "<x>", count: depth) + String(repeating: "</x>", count: random.chance(50) ? depth : 0)).utf8), at: at)
        case 4:  // a huge attribute
            let at = random.below(bytes.count + 1)
            bytes.insert(contentsOf: Array("<a b=\"\(String(repeating: "v", count: random.below(80_000)))\"/>".utf8), at: at)
        case 5:  // entity tricks
            let tricks = ["&#0;", "&#xD800;", "&#99999999;", "&#x110000;", "&unknown;", "&", "&#;", "&#x;", "&amp", "&lt;&gt;",
                          "<!DOCTYPE d [<!ENTITY a \"&a;&a;\"><!ENTITY b SYSTEM \"file:///etc/passwd\">]>", "&a;&b;",
                          "<![CDATA[</D:response>]]>", "]]>", "<!-->", "<?", "</D:multistatus>", "<D:response>"]
            let at = random.below(bytes.count + 1)
            bytes.insert(contentsOf: Array(tricks[random.below(tricks.count)].utf8), at: at)
        case 6:  // invalid UTF-8 inside an href
            if let at = bytes.indices.first(where: { bytes[$0] == UInt8(ascii: "/") && random.chance(5) }) {
                bytes.insert(contentsOf: [0xFF, 0xC0, 0x80], at: at + 1)
            }
        case 7:  // a byte order mark, or a broken one
            bytes.insert(contentsOf: random.chance(50) ? [0xEF, 0xBB, 0xBF] : [0xEF, 0xBB], at: 0)
        default:  // another document's tail
            bytes += bytes.suffix(random.below(bytes.count + 1))
        }
        return bytes
    }

    /// Feeds `bytes` in random chunks; the responses, or the error.
    static func parse(_ bytes: [UInt8], _ random: inout SeededGenerator, limits: MultistatusStream.Limits = .unlimited)
        -> Result<[WebDAVResponse], StoreError> {
        var stream = MultistatusStream(limits: limits)
        var responses: [WebDAVResponse] = []
        var rest = bytes[...]
        do {
            while !rest.isEmpty {
                let size = random.chance(20) ? 1 : 1 + random.below(4096)
                responses += try stream.feed(rest.prefix(size))
                rest = rest.dropFirst(size)
            }
            responses += try stream.finish()
            return .success(responses)
        } catch {
            return .failure(error)
        }
    }

    /// Feeds `bytes` in the chunks `parse` would cut with the same generator, both ways: as
    /// slices of an array (long runs are taken whole, `XMLPushParser.feedRuns`) and as chunks
    /// that are not contiguous in memory (every byte through the one-byte-at-a-time path).
    static func parseBothWays(_ bytes: [UInt8], _ random: inout SeededGenerator, limits: MultistatusStream.Limits)
        -> (runs: Result<[WebDAVResponse], StoreError>, bytewise: Result<[WebDAVResponse], StoreError>) {
        var sizes: [Int] = []
        var left = bytes.count
        while left > 0 {
            let size = random.chance(20) ? 1 : 1 + random.below(4096)
            sizes.append(size)
            left -= size
        }
        func run(contiguous: Bool) -> Result<[WebDAVResponse], StoreError> {
            var stream = MultistatusStream(limits: limits)
            var responses: [WebDAVResponse] = []
            var rest = bytes[...]
            do {
                for size in sizes {
                    let chunk = rest.prefix(size)
                    responses += contiguous ? try stream.feed(chunk) : try stream.feed(chunk.lazy.map { $0 })
                    rest = rest.dropFirst(size)
                }
                responses += try stream.finish()
                return .success(responses)
            } catch {
                return .failure(error)
            }
        }
        return (run(contiguous: true), run(contiguous: false))
    }

    /// Every entry is a safe name directly in `directory`, and no name shows twice.
    static func checkInvariants(_ entries: [RemoteEntry], in directory: StorePath, seed: UInt64) {
        var seen = Set<FileName>()
        for entry in entries {
            #expect(StorePath.isValidName(entry.name), "seed \(seed): unsafe name \(entry.name.debugDescription)")
            #expect(entry.path.parent == directory, "seed \(seed): \(entry.path) is not in \(directory)")
            #expect(seen.insert(entry.name.fileName).inserted, "seed \(seed): \(entry.name.debugDescription) twice")
            #expect(entry.size >= 0, "seed \(seed)")
        }
    }

    @Test func multistatusDocumentsNeverTrapAndListOnlySafeNames() async throws {
        let store = try WebDAVStore(baseURL: "http://127.0.0.1:1/dav/", logger: testLogger)
        defer { Task { await store.shutdown() } }
        let directory = try StorePath("dir")
        var parsed = 0, refused = 0
        for seed in UInt64(1)...800 {
            await Task.yield()  // CPU-bound: leave the cooperative pool to the tests running beside it
            var random = SeededGenerator(seed: seed)
            let (document, names) = Self.multistatus(&random)
            // The document as generated: exactly its safe names, in order, however it is chunked.
            let whole = try WebDAVMultistatus.parse(Data(document))
            guard case .success(let chunked) = Self.parse(document, &random) else {
                Issue.record("seed \(seed): a well-formed document was refused in chunks")
                continue
            }
            #expect(chunked == whole, "seed \(seed): chunking changed the responses")
            let listing = try store.listing(of: directory, from: whole)
            Self.checkInvariants(listing.children, in: directory, seed: seed)
            var expected: [String] = []
            for name in names where name.safe {
                if let decoded = name.decoded, !expected.contains(where: { $0.utf8.elementsEqual(decoded.utf8) }) { expected.append(decoded) }
            }
            #expect(listing.children.map(\.name) == expected, "seed \(seed)")
            #expect(listing.skipped == names.filter { !$0.safe }.count, "seed \(seed)")
            // Mutated: anything may be refused, nothing may trap, what is accepted is safe.
            for _ in 0..<3 {
                let mutated = Self.mutate(document, &random)
                let limits = MultistatusStream.Limits(maximumEntries: 30, maximumEntryBytes: 64 * 1024)
                let (result, bytewise) = Self.parseBothWays(mutated, &random, limits: limits)
                // Runs taken whole and bytes taken one at a time accept and refuse alike.
                switch (result, bytewise) {
                case (.success(let runs), .success(let bytewise)): #expect(runs == bytewise, "seed \(seed): the two paths read it differently")
                case (.failure, .failure): break
                default: Issue.record("seed \(seed): one path accepted what the other refused")
                }
                switch result {
                case .success(let responses):
                    parsed += 1
                    #expect(responses.count <= 30, "seed \(seed)")
                    if let listing = try? store.listing(of: directory, from: responses) {
                        Self.checkInvariants(listing.children, in: directory, seed: seed)
                    }
                case .failure(let error):
                    refused += 1
                    guard case .protocolError = error else {
                        Issue.record("seed \(seed): \(error) is not a protocol error")
                        continue
                    }
                }
            }
        }
        // Both sides were exercised.
        print("multistatus fuzz: \(parsed) mutated documents parsed, \(refused) refused")
        #expect(parsed > 100 && refused > 1000, "parsed \(parsed), refused \(refused)")
    }

    /// A ListObjectsV2 page for prefix `dir/` and the names it lists.
    static func listBucketResult(_ random: inout SeededGenerator) -> (xml: [UInt8], names: [FuzzName], encoded: Bool) {
        let encoded = random.chance(70)
        var out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
        out += random.chance(50) ? "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">" : "<ListBucketResult>"
        out += "<Name>b</Name><Prefix>dir/</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter>"
        if encoded { out += "<EncodingType>url</EncodingType>" }
        out += "<IsTruncated>false</IsTruncated>"
        var names: [FuzzName] = []
        var raw: [UInt8] = Array(out.utf8)
        for index in 0..<random.below(30) {
            var name = FuzzNames.pick(&random, index: index)
            let key: [UInt8]
            if encoded {
                key = Array(("dir/" + name.wire).utf8)
            } else {
                // Unencoded: the decoded bytes as they are (invalid UTF-8 raw, `/` a real slash).
                guard let decoded = name.decoded ?? (name.wire.contains("%FF") ? "x" : nil) else { continue }
                if name.wire.contains("%FF") {
                    key = Array("dir/bad".utf8) + [0xFF, 0xFE] + Array("\(index)".utf8)
                    name = FuzzName(wire: name.wire, decoded: nil, safe: false)
                } else {
                    key = Array(("dir/" + decoded).utf8)
                    name.safe = name.safe && !decoded.contains("/") && !decoded.isEmpty
                }
            }
            names.append(name)
            let escaped = key.flatMap { byte -> [UInt8] in
                switch byte {
                case UInt8(ascii: "&"): return Array("&amp;".utf8)
                case UInt8(ascii: "<"): return Array("&lt;".utf8)
                default: return [byte]
                }
            }
            raw += Array("<Contents><Key>".utf8) + escaped
            raw += Array("</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified><ETag>&quot;abc&quot;</ETag><Size>\(random.below(1000))</Size><StorageClass>STANDARD</StorageClass></Contents>".utf8)
        }
        raw += Array("</ListBucketResult>".utf8)
        return (raw, names, encoded)
    }

    @Test func listObjectsPagesNeverTrapAndListOnlySafeNames() async throws {
        let store = try S3Store(configuration: .init(bucket: "b", endpoint: "http://127.0.0.1:1", pathStyle: true, noSignRequest: true),
                                logger: testLogger)
        defer { Task { await store.shutdown() } }
        let directory = try StorePath("dir")
        var parsed = 0, refused = 0
        for seed in UInt64(1)...800 {
            await Task.yield()  // CPU-bound: leave the cooperative pool to the tests running beside it
            var random = SeededGenerator(seed: seed &* 7919)
            let (document, names, _) = Self.listBucketResult(&random)
            let result = try S3XML.parseList(Data(document))
            let entries = store.entries(of: result, in: directory)
            Self.checkInvariants(entries, in: directory, seed: seed)
            var expected: [String] = []
            for name in names where name.safe {
                if let decoded = name.decoded, !expected.contains(where: { $0.utf8.elementsEqual(decoded.utf8) }) { expected.append(decoded) }
            }
            #expect(entries.map(\.name) == expected, "seed \(seed)")
            for _ in 0..<3 {
                let mutated = Self.mutate(document, &random)
                if let result = try? S3XML.parseList(Data(mutated)) {
                    parsed += 1
                    Self.checkInvariants(store.entries(of: result, in: directory), in: directory, seed: seed)
                } else {
                    refused += 1
                }
                _ = S3XML.parseError(Data(mutated))
            }
        }
        print("ListObjectsV2 fuzz: \(parsed) mutated pages parsed, \(refused) refused")
        #expect(parsed > 100 && refused > 1000, "parsed \(parsed), refused \(refused)")
    }

    @Test func httpDatesNeverTrapAndRoundTrip() async {
        var random = SeededGenerator(seed: 2026)
        let samples = ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
                       "Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT"]
        let alphabet = Array(" ,-:0123456789GMTNovSunJanDec\t\u{0}é9".unicodeScalars)
        for round in 0..<10_000 {
            if round % 50 == 0 { await Task.yield() }
            var text = Array(samples[random.below(samples.count)].unicodeScalars)
            switch random.below(4) {
            case 0: text = Array(text.prefix(random.below(text.count + 1)))
            case 1: for _ in 0..<(1 + random.below(4)) { text[random.below(text.count)] = alphabet[random.below(alphabet.count)] }
            case 2: text.insert(contentsOf: Array(String(repeating: "9", count: random.below(40)).unicodeScalars), at: random.below(text.count + 1))
            default: text = (0..<random.below(40)).map { _ in alphabet[random.below(alphabet.count)] }
            }
            var string = ""
            string.unicodeScalars.append(contentsOf: text)
            if let seconds = HTTPDate.parse(string) { #expect(seconds.isFinite, "\(string.debugDescription)") }
            // A trailing space takes the general reader: the fixed-form one must agree with it.
            #expect(HTTPDate.parse(string) == HTTPDate.parse(string + " "), "\(string.debugDescription)")
            // Any instant HTTP can write reads back to the second.
            let instant = Double(Int64(HTTPDate.formattable.lowerBound) + Int64(random.next() % UInt64(HTTPDate.formattable.upperBound - HTTPDate.formattable.lowerBound)))
            #expect(HTTPDate.parse(HTTPDate.format(instant)) == instant, "\(instant)")
        }
    }
}

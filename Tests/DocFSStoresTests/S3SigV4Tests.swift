// SigV4Signer against AWS's published vectors (the aws-sig-v4-test-suite's get-vanilla,
// get-vanilla-query-order-key-case, post-x-www-form-urlencoded and get-utf8; the S3 developer
// guide's GetObject and ListObjects examples) and against botocore's S3 signer computing the
// same requests as S3Store sends them. botocore must be installed: its absence fails the test.

import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

@Suite("S3 SigV4 signing")
struct S3SigV4Tests {
    /// The suite's credentials, region, service and time.
    let suite = SigV4Signer(credentials: S3Credentials(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
                            region: "us-east-1", service: "service")
    let suiteDate = "20150830T123600Z"
    let suiteHeaders: [(name: String, value: String)] = [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")]
    let credentialPrefix = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "

    @Test("aws-sig-v4-test-suite: get-vanilla")
    func getVanilla() {
        let signed = suite.sign(.init(method: "GET", path: "/", headers: suiteHeaders, payloadHash: SigV4Signer.emptyPayloadHash),
                                amzDate: suiteDate)
        #expect(signed.canonicalRequest == """
            GET
            /

            host:example.amazonaws.com
            x-amz-date:20150830T123600Z

            host;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        #expect(signed.stringToSign == """
            AWS4-HMAC-SHA256
            20150830T123600Z
            20150830/us-east-1/service/aws4_request
            bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63
            """)
        #expect(signed.authorization == credentialPrefix
            + "SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
    }

    @Test("aws-sig-v4-test-suite: get-vanilla-query-order-key-case")
    func getVanillaQueryOrder() {
        let signed = suite.sign(.init(method: "GET", path: "/", query: [("Param2", "value2"), ("Param1", "value1")],
                                      headers: suiteHeaders, payloadHash: SigV4Signer.emptyPayloadHash), amzDate: suiteDate)
        #expect(signed.canonicalRequest.split(separator: "\n", omittingEmptySubsequences: false)[2] == "Param1=value1&Param2=value2")
        #expect(signed.stringToSign.hasSuffix("\n816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0"))
        #expect(signed.authorization == credentialPrefix
            + "SignedHeaders=host;x-amz-date, Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
    }

    @Test("aws-sig-v4-test-suite: post-x-www-form-urlencoded")
    func postFormURLEncoded() {
        let body = Data("Param1=value1".utf8)
        let payload = SigV4Signer.sha256Hex(body)
        #expect(payload == "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e")
        let signed = suite.sign(.init(method: "POST", path: "/",
                                      headers: [("Content-Type", "application/x-www-form-urlencoded")] + suiteHeaders,
                                      payloadHash: payload), amzDate: suiteDate)
        #expect(signed.stringToSign.hasSuffix("\n42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281"))
        #expect(signed.authorization == credentialPrefix
            + "SignedHeaders=content-type;host;x-amz-date, Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a")
    }

    @Test("aws-sig-v4-test-suite: get-utf8 encodes the path once, upper-case hex")
    func getUTF8() {
        let path = SigV4Signer.encodePath("ሴ")
        #expect(path == "/%E1%88%B4")
        let signed = suite.sign(.init(method: "GET", path: path, headers: suiteHeaders, payloadHash: SigV4Signer.emptyPayloadHash),
                                amzDate: suiteDate)
        #expect(SigV4Signer.sha256Hex(Data(signed.canonicalRequest.utf8)) == "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102")
    }

    /// The S3 developer guide's examples (examplebucket, AKIAIOSFODNN7EXAMPLE, 20130524).
    let guide = SigV4Signer(credentials: S3Credentials(accessKeyId: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
                            region: "us-east-1", service: "s3")

    @Test("S3 guide: GetObject with a Range, and ListObjects with a query")
    func s3GuideExamples() {
        let get = guide.sign(.init(method: "GET", path: "/test.txt",
                                   headers: [("Host", "examplebucket.s3.amazonaws.com"), ("Range", "bytes=0-9"),
                                             ("x-amz-content-sha256", SigV4Signer.emptyPayloadHash), ("x-amz-date", "20130524T000000Z")],
                                   payloadHash: SigV4Signer.emptyPayloadHash), amzDate: "20130524T000000Z")
        #expect(get.signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(get.signedHeaders == "host;range;x-amz-content-sha256;x-amz-date")
        let list = guide.sign(.init(method: "GET", path: "/", query: [("max-keys", "2"), ("prefix", "J")],
                                    headers: [("Host", "examplebucket.s3.amazonaws.com"),
                                              ("x-amz-content-sha256", SigV4Signer.emptyPayloadHash), ("x-amz-date", "20130524T000000Z")],
                                    payloadHash: SigV4Signer.emptyPayloadHash), amzDate: "20130524T000000Z")
        #expect(list.signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    @Test("URI encoding: unreserved kept, the rest %XX, slash only in paths")
    func uriEncoding() {
        #expect(SigV4Signer.uriEncode("AZaz09-._~", encodeSlash: true) == "AZaz09-._~")
        #expect(SigV4Signer.uriEncode("a b+c/d=e&f%g*h'!", encodeSlash: true) == "a%20b%2Bc%2Fd%3De%26f%25g%2Ah%27%21")
        #expect(SigV4Signer.encodePath("dir/with space/ü.txt") == "/dir/with%20space/%C3%BC.txt")
        #expect(SigV4Signer.canonicalQuery([("prefix", "a b/"), ("delimiter", "/"), ("list-type", "2"), ("uploads", "")])
            == "delimiter=%2F&list-type=2&prefix=a%20b%2F&uploads=")
        #expect(SigV4Signer.trimmedHeaderValue("  a   b  c ") == "a b c")
        #expect(SigV4Signer.trimmedHeaderValue("a\tb") == "a b")
        #expect(SigV4Signer.trimmedHeaderValue("\"etag-1\"") == "\"etag-1\"")
        #expect(SigV4Signer.trimmedHeaderValue("\u{A0}ü\u{A0}") == "ü")
        #expect(SigV4Signer.amzDate(Date(timeIntervalSince1970: 1_440_938_160)) == "20150830T123600Z")
    }

    @Test("one signer signs each day with that day's key, however the days follow one another")
    func signingKeyFollowsTheDay() {
        let days = ["20150830T123600Z", "20150830T235959Z", "20150831T000000Z", "20150830T123600Z", "20160229T010203Z"]
        let request = SigV4Signer.Request(method: "GET", path: "/", headers: suiteHeaders, payloadHash: SigV4Signer.emptyPayloadHash)
        let kept = SigV4Signer(credentials: suite.credentials, region: suite.region, service: suite.service)
        for day in days {
            let fresh = SigV4Signer(credentials: suite.credentials, region: suite.region, service: suite.service)
            #expect(kept.sign(request, amzDate: day).authorization == fresh.sign(request, amzDate: day).authorization, "\(day)")
        }
        // The published signature, after the signer has signed for other days.
        #expect(kept.sign(request, amzDate: suiteDate).authorization.hasSuffix(
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"))
    }

    @Test("the secret never shows in a description")
    func credentialsDescriptionHasNoSecret() {
        let credentials = S3Credentials(accessKeyId: "AKIASECRETIDXYZ", secretAccessKey: "verySecretValue", sessionToken: "tokenValue")
        var dumped = ""
        dump(credentials, to: &dumped)
        var configuration = S3Store.Configuration(bucket: "b", credentials: credentials)
        configuration.region = "eu-west-1"
        var dumpedConfiguration = ""
        dump(configuration, to: &dumpedConfiguration)
        for text in [credentials.description, credentials.debugDescription, "\(credentials)", String(reflecting: credentials), dumped,
                     "\(configuration)", String(reflecting: configuration), dumpedConfiguration] {
            #expect(!text.contains("verySecretValue"))
            #expect(!text.contains("tokenValue"))
            #expect(!text.contains("SECRETIDXYZ"))
        }
    }

    /// Requests as S3Store prepares them (path and virtual-host style, awkward keys, a
    /// continuation token, a copy source, a session token, an unsigned payload), signed by
    /// S3Store and by botocore's S3SigV4Auth at the same instant.
    @Test("S3Store's requests are signed exactly as botocore signs them")
    func matchesBotocore() async throws {
        let date = Date(timeIntervalSince1970: 1_440_938_160)  // 20150830T123600Z
        var stores: [S3Store] = []
        func store(_ pathStyle: Bool, endpoint: String?, token: String?, region: String = "eu-west-3") throws -> S3Store {
            var configuration = S3Store.Configuration(bucket: "docfs-bucket", prefix: "root dir/", region: region, endpoint: endpoint,
                                                      credentials: S3Credentials(accessKeyId: "AKIDEXAMPLE",
                                                                                 secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                                                                                 sessionToken: token))
            configuration.pathStyle = pathStyle
            let made = try S3Store(configuration: configuration, logger: testLogger)
            stores.append(made)
            return made
        }
        let pathStyle = try store(true, endpoint: "http://127.0.0.1:9000", token: nil)
        let virtual = try store(false, endpoint: nil, token: "FQoGZXIvYXdzEJr//////////wEaDM+token=")
        do {
            try await compare(pathStyle, virtual, date: date)
        } catch {
            for s in stores { await s.shutdown() }
            throw error
        }
        for s in stores { await s.shutdown() }
    }

    func compare(_ pathStyle: S3Store, _ virtual: S3Store, date: Date) async throws {
        struct Case { var store: S3Store; var call: S3Store.Call; var body: String }
        var cases: [Case] = []
        for s in [pathStyle, virtual] {
            let key = s.key(try StorePath("dir/with space/ünï (1)+%2F&=.txt"))
            cases.append(Case(store: s, call: .init(method: .GET, key: key, headers: [("Range", "bytes=0-99"), ("If-Match", "\"abc\"")]), body: ""))
            cases.append(Case(store: s, call: .init(method: .HEAD, key: key), body: ""))
            cases.append(Case(store: s, call: .init(method: .GET, key: nil, query: [("list-type", "2"), ("prefix", "root dir/a b/"), ("delimiter", "/"),
                                                                                  ("max-keys", "1000"), ("encoding-type", "url"),
                                                                                  ("continuation-token", "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=+x")]),
                              body: ""))
            cases.append(Case(store: s, call: .init(method: .PUT, key: key, headers: [("If-None-Match", "*"), ("Content-Type", "application/octet-stream")],
                                                    payloadHash: SigV4Signer.unsignedPayload), body: ""))
            cases.append(Case(store: s, call: .init(method: .PUT, key: "b/c", headers: [("x-amz-copy-source", s.copySource(key))]), body: ""))
            cases.append(Case(store: s, call: .init(method: .POST, key: key, query: [("uploads", "")]), body: ""))
            let xml = "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"e\"</ETag></Part></CompleteMultipartUpload>"
            cases.append(Case(store: s, call: .init(method: .POST, key: key, query: [("uploadId", "VXBsb2FkIElE+/=")],
                                                    headers: [("Content-Type", "application/xml")],
                                                    payloadHash: SigV4Signer.sha256Hex(Data(xml.utf8))), body: xml))
            cases.append(Case(store: s, call: .init(method: .DELETE, key: key, query: [("uploadId", "VXBsb2FkIElE+/=")]), body: ""))
        }

        var requests: [[String: Any]] = []
        var labels: [String] = []
        var ours: [String] = []
        for item in cases {
            let (url, headers) = item.store.prepare(item.call, now: date)
            ours.append(headers["Authorization"] ?? "none")
            labels.append("\(item.call.method.rawValue) \(url)")
            let unsigned = headers["x-amz-content-sha256"] == SigV4Signer.unsignedPayload
            let passed = headers.filter { !["authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"].contains($0.key.lowercased()) }
            requests.append(["method": item.call.method.rawValue, "url": url, "headers": passed, "body": item.body,
                             "unsigned": unsigned, "region": item.store.configuration.region,
                             "token": item.store.configuration.credentials?.sessionToken ?? ""])
        }
        let input = String(decoding: try JSONSerialization.data(withJSONObject: requests), as: UTF8.self)
        let script = """
            import sys, json, datetime
            import botocore.auth
            from botocore.awsrequest import AWSRequest
            from botocore.credentials import Credentials
            botocore.auth.get_current_datetime = lambda: datetime.datetime(2015, 8, 30, 12, 36, 0)
            class Config:
                def __init__(self, signed): self.s3 = {"payload_signing_enabled": signed}
            for r in json.load(sys.stdin):
                creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", r["token"] or None)
                request = AWSRequest(method=r["method"], url=r["url"], headers=r["headers"], data=r["body"].encode())
                request.context["client_config"] = Config(not r["unsigned"])
                botocore.auth.S3SigV4Auth(creds, "s3", r["region"]).add_auth(request)
                print(request.headers["Authorization"])
            """
        let theirs = try await runPython(script, input: input).split(separator: "\n").map(String.init)
        #expect(theirs.count == ours.count)
        for (index, pair) in zip(ours, theirs).enumerated() {
            let label = labels[index]
            #expect(pair.0 == pair.1, "request \(index): \(label)")
        }
    }
}

// S3 credentials, the AWS shared files, and S3Store.Configuration from an s3:// URL.

#if canImport(Glibc)
import Glibc
#endif
import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

@Suite("S3 credentials and configuration")
struct S3CredentialsTests {
    /// A fake home with `.aws/credentials` and `.aws/config`.
    func home(credentials: String?, config: String?) throws -> TemporaryDirectory {
        let dir = try TemporaryDirectory()
        if let credentials { try dir.write(".aws/credentials", credentials) }
        if let config { try dir.write(".aws/config", config) }
        return dir
    }

    let credentialsFile = """
        [default]
        aws_access_key_id = AKIDDEFAULT
        aws_secret_access_key = default/secret

        [work]
        aws_access_key_id=AKIDWORK
        aws_secret_access_key=work+secret
        aws_session_token = worktoken
        """
    let configFile = """
        [default]
        region = eu-central-1

        [profile work]
        region = ap-south-1
        endpoint_url = http://minio.local:9000
        s3 =
          addressing_style = path

        [profile onlyconfig]
        aws_access_key_id = AKIDCONFIG
        aws_secret_access_key = config-secret
        """

    @Test("environment keys win over the files; region and endpoint from the environment")
    func environmentFirst() throws {
        let dir = try home(credentials: credentialsFile, config: configFile)
        defer { dir.remove() }
        let settings = try S3CredentialResolver.resolve(environment: [
            "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "env-secret", "AWS_SESSION_TOKEN": "envtoken",
            "AWS_REGION": "us-west-2", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        ], home: dir.path)
        #expect(settings.credentials == S3Credentials(accessKeyId: "AKIDENV", secretAccessKey: "env-secret", sessionToken: "envtoken"))
        #expect(settings.region == "us-west-2")
        #expect(settings.endpointURL == "http://127.0.0.1:9000")
        #expect(settings.credentialsSource == "environment")
    }

    @Test("the default profile, and a named profile across credentials and config")
    func profiles() throws {
        let dir = try home(credentials: credentialsFile, config: configFile)
        defer { dir.remove() }
        let standard = try S3CredentialResolver.resolve(environment: [:], home: dir.path)
        #expect(standard.credentials == S3Credentials(accessKeyId: "AKIDDEFAULT", secretAccessKey: "default/secret"))
        #expect(standard.region == "eu-central-1")
        #expect(standard.endpointURL == nil)

        let work = try S3CredentialResolver.resolve(environment: ["AWS_PROFILE": "work", "AWS_DEFAULT_REGION": "sa-east-1"], home: dir.path)
        #expect(work.credentials == S3Credentials(accessKeyId: "AKIDWORK", secretAccessKey: "work+secret", sessionToken: "worktoken"))
        #expect(work.region == "sa-east-1", "the environment's region wins over the profile's")
        #expect(work.endpointURL == "http://minio.local:9000")

        let onlyConfig = try S3CredentialResolver.resolve(environment: ["AWS_PROFILE": "onlyconfig"], home: dir.path)
        #expect(onlyConfig.credentials?.accessKeyId == "AKIDCONFIG")

        #expect(throws: StoreError.self) { try S3CredentialResolver.resolve(environment: ["AWS_PROFILE": "nope"], home: dir.path) }
    }

    @Test("AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE move the files")
    func fileLocations() throws {
        let dir = try home(credentials: nil, config: nil)
        defer { dir.remove() }
        try dir.write("creds", "[default]\naws_access_key_id = AKIDMOVED\naws_secret_access_key = moved\n")
        try dir.write("conf", "[default]\nregion = us-east-2\n")
        let settings = try S3CredentialResolver.resolve(environment: [
            "AWS_SHARED_CREDENTIALS_FILE": dir.file("creds"), "AWS_CONFIG_FILE": dir.file("conf"),
        ], home: dir.path)
        #expect(settings.credentials?.accessKeyId == "AKIDMOVED")
        #expect(settings.region == "us-east-2")
        let nothing = try S3CredentialResolver.resolve(environment: [:], home: dir.path)
        #expect(nothing.credentials == nil)
    }

    @Test("s3:// URLs: bucket, prefix, options from the query and the environment")
    func configurationFromURL() throws {
        let dir = try home(credentials: credentialsFile, config: configFile)
        defer { dir.remove() }
        let plain = try S3Store.Configuration.from(url: "s3://my-bucket/some/prefix/", environment: [:], home: dir.path)
        #expect(plain.bucket == "my-bucket")
        #expect(plain.prefix == "some/prefix/")
        #expect(plain.region == "eu-central-1")
        #expect(plain.endpoint == nil)
        #expect(plain.pathStyle == nil)
        #expect(plain.partSize == 8 * 1024 * 1024)
        #expect(plain.credentials?.accessKeyId == "AKIDDEFAULT")

        let fromEnvironment = try S3Store.Configuration.from(url: "s3://b1", environment: [
            "AWS_ENDPOINT_URL": "http://127.0.0.1:5000", "AWS_REGION": "us-west-1", "DOCFS_S3_PATH_STYLE": "1",
            "DOCFS_S3_PART_SIZE": "16M", "AWS_ACCESS_KEY_ID": "AKIDX", "AWS_SECRET_ACCESS_KEY": "x",
        ], home: dir.path)
        #expect(fromEnvironment.prefix == "")
        #expect(fromEnvironment.endpoint == "http://127.0.0.1:5000")
        #expect(fromEnvironment.region == "us-west-1")
        #expect(fromEnvironment.pathStyle == true)
        #expect(fromEnvironment.partSize == 16 * 1024 * 1024)

        let fromQuery = try S3Store.Configuration.from(url: "s3://b2/p%20q?region=eu-north-1&endpoint=https%3A%2F%2Fs3.example.com&no-sign-request=1&part-size=5MiB",
                                                       environment: ["DOCFS_S3_PART_SIZE": "64M"], home: dir.path)
        #expect(fromQuery.prefix == "p q/")
        #expect(fromQuery.region == "eu-north-1")
        #expect(fromQuery.endpoint == "https://s3.example.com")
        #expect(fromQuery.noSignRequest)
        #expect(fromQuery.credentials == nil, "no keys for an unsigned store")
        #expect(fromQuery.partSize == 5 * 1024 * 1024)

        #expect(throws: StoreError.self) { try S3Store.Configuration.from(url: "s3:///prefix", environment: [:], home: dir.path) }
        #expect(throws: StoreError.self) { try S3Store.Configuration.from(url: "s3://b/../x", environment: [:], home: dir.path) }
        #expect(throws: StoreError.self) { try S3Store.Configuration.from(url: "s3://b?part-size=lots", environment: [:], home: dir.path) }
    }

    @Test("addressing: virtual host for AWS, path style for endpoints; identity without secrets")
    func addressing() async throws {
        let keys = S3Credentials(accessKeyId: "AKIDADDRESS", secretAccessKey: "address-secret")
        let aws = try S3Store(configuration: .init(bucket: "my-bucket", prefix: "p", region: "eu-west-1", credentials: keys))
        #expect(aws.prepare(.init(method: .GET, key: "p/a b")).url == "https://my-bucket.s3.eu-west-1.amazonaws.com/p/a%20b")
        #expect(aws.prepare(.init(method: .GET, key: "p/a b")).headers["Host"] == "my-bucket.s3.eu-west-1.amazonaws.com")
        #expect(aws.identity.description == "s3 s3://my-bucket/p/")
        await aws.shutdown()

        let dotted = try S3Store(configuration: .init(bucket: "my.dotted.bucket", region: "eu-west-1", credentials: keys))
        #expect(dotted.prepare(.init(method: .GET, key: "k")).url == "https://s3.eu-west-1.amazonaws.com/my.dotted.bucket/k")
        await dotted.shutdown()

        let minio = try S3Store(configuration: .init(bucket: "bucket", endpoint: "http://127.0.0.1:9000/", credentials: keys))
        let prepared = minio.prepare(.init(method: .GET, key: nil, query: [("list-type", "2"), ("prefix", "a/")]))
        #expect(prepared.url == "http://127.0.0.1:9000/bucket?list-type=2&prefix=a%2F")
        #expect(prepared.headers["Host"] == "127.0.0.1:9000")
        #expect(prepared.headers["Authorization"]?.contains("address-secret") == false)
        #expect(minio.identity.description == "s3 s3://bucket/ at http://127.0.0.1:9000")
        await minio.shutdown()

        var virtual = S3Store.Configuration(bucket: "bucket", endpoint: "https://s3.example.com", credentials: keys)
        virtual.pathStyle = false
        let hosted = try S3Store(configuration: virtual)
        #expect(hosted.prepare(.init(method: .GET, key: "k")).url == "https://bucket.s3.example.com/k")
        await hosted.shutdown()

        #expect(throws: StoreError.self) { try S3Store(configuration: .init(bucket: "bucket")) }  // no credentials, signing on
        #expect(throws: StoreError.self) { try S3Store(configuration: .init(bucket: "bucket", credentials: keys, partSize: 1024)) }
        let anonymous = try S3Store(configuration: .init(bucket: "bucket", noSignRequest: true))
        #expect(anonymous.prepare(.init(method: .GET, key: "k")).headers["Authorization"] == nil)
        await anonymous.shutdown()
    }

    @Test("StoreLocator builds an S3Store for s3:// URLs, with no secret in its errors")
    func locator() async throws {
        let dir = try home(credentials: nil, config: nil)
        defer { dir.remove() }
        let environment = ["HOME": dir.path, "AWS_ACCESS_KEY_ID": "AKIDLOCATOR", "AWS_SECRET_ACCESS_KEY": "locator-secret",
                           "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_REGION": "eu-west-2", "DOCFS_S3_PART_SIZE": "6MiB"]
        let store = try StoreLocator.store(for: "s3://bucket/a/b", credentialsFile: nil, environment: environment, logger: testLogger)
        let s3 = try #require(store as? S3Store)
        #expect(s3.configuration.bucket == "bucket")
        #expect(s3.configuration.prefix == "a/b/")
        #expect(s3.configuration.region == "eu-west-2")
        #expect(s3.configuration.endpoint == "http://127.0.0.1:9")
        #expect(s3.configuration.partSize == 6 * 1024 * 1024)
        #expect(store.identity.kind == "s3")
        #expect(!store.identity.description.contains("locator-secret"))
        await StoreLocator.shutdownIfNeeded(store)

        do throws(StoreLocatorError) {
            let unsigned = try StoreLocator.store(for: "s3://bucket", credentialsFile: nil, environment: ["HOME": dir.path], logger: testLogger)
            await StoreLocator.shutdownIfNeeded(unsigned)
            Issue.record("a store without credentials was made")
        } catch {
            #expect(error.description.contains("no AWS credentials"), "\(error)")
        }
        do throws(StoreLocatorError) {
            let half = try StoreLocator.store(for: "s3://bucket", credentialsFile: nil,
                                              environment: ["HOME": dir.path, "AWS_SECRET_ACCESS_KEY": "half-secret"], logger: testLogger)
            await StoreLocator.shutdownIfNeeded(half)
            Issue.record("a store with half the keys was made")
        } catch {
            #expect(!error.description.contains("half-secret"))
        }
        let anonymous = try StoreLocator.store(for: "s3://bucket?no-sign-request", credentialsFile: nil,
                                               environment: ["HOME": dir.path], logger: testLogger)
        #expect((anonymous as? S3Store)?.configuration.noSignRequest == true)
        await StoreLocator.shutdownIfNeeded(anonymous)
    }
}

// StoreLocator: which store an argument names, and where credentials come from.

#if canImport(Glibc)
import Glibc
#endif
import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

@Suite("StoreLocator")
struct StoreLocatorTests {
    func locate(_ argument: String, credentials: String? = nil, environment: [String: String] = [:]) throws(StoreLocatorError) -> any Store {
        try StoreLocator.store(for: argument, credentialsFile: credentials, environment: environment, logger: testLogger)
    }

    /// Runs `body` with the located store and shuts it down after.
    func withLocated(_ argument: String, credentials: String? = nil, environment: [String: String] = [:],
                     _ body: (any Store) throws -> Void) async throws {
        let store = try locate(argument, credentials: credentials, environment: environment)
        defer { _ = store }
        do { try body(store) } catch {
            await StoreLocator.shutdownIfNeeded(store)
            throw error
        }
        await StoreLocator.shutdownIfNeeded(store)
    }

    func credentialsFile(_ text: String, mode: mode_t) throws -> String {
        let file = NSTemporaryDirectory() + "/docfs-credentials-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: file, contents: Data(text.utf8))
        chmod(file, mode)
        return file
    }

    @Test func localPathsAndFileURLs() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.mkdir("with space")
        try await withLocated(dir.path) { store in
            #expect(store is LocalDirectoryStore)
            #expect(store.identity.kind == "local")
        }
        try await withLocated("file://" + dir.path + "/with%20space") { store in
            #expect((store as? LocalDirectoryStore)?.root.hasSuffix("/with space") == true)
        }
        #expect(throws: StoreLocatorError.noSuchDirectory(dir.path + "/nope")) { try locate(dir.path + "/nope") }
        try dir.write("file", "x")
        #expect(throws: StoreLocatorError.notADirectory(dir.path + "/file")) { try locate(dir.path + "/file") }
        #expect(throws: StoreLocatorError.self) { try locate("file://relative/path") }
    }

    @Test func webDAVSchemes() async throws {
        for (argument, location) in [("http://127.0.0.1:8080/docs/", "http://127.0.0.1:8080/docs"),
                                     ("https://example.com/dav", "https://example.com/dav"),
                                     ("webdav://example.com:81/a%20b/", "http://example.com:81/a%20b"),
                                     ("webdavs://example.com/", "https://example.com/")] {
            try await withLocated(argument) { store in
                #expect(store is WebDAVStore)
                #expect(store.identity == StoreIdentity(kind: "webdav", location: location))
            }
        }
    }

    @Test func s3WithoutCredentialsSaysHowToGetThem() {
        do {
            _ = try locate("s3://bucket/prefix", environment: ["HOME": "/nonexistent"])
            Issue.record("expected an error")
        } catch {
            #expect(error.description.contains("no AWS credentials found"))
            #expect(error.description.contains("--no-sign-request"))
        }
    }

    @Test func unsupportedSchemes() {
        do {
            _ = try locate("ftp://bob:hunter2@example.com/x")
            Issue.record("expected an error")
        } catch {
            #expect(error == .unsupportedURL("ftp://example.com/x"))
            #expect(error.description.hasPrefix("unsupported store URL: ftp://example.com/x"))
            #expect(!error.description.contains("hunter2"))
        }
    }

    @Test func credentialsFromTheURLStayOutOfTheIdentity() async throws {
        try await withLocated("https://bob:hunter2@example.com/dav/") { store in
            #expect(store.identity.location == "https://example.com/dav")
            #expect(!store.identity.description.contains("hunter2"))
            #expect(!store.identity.description.contains("bob"))
        }
        let url = try StoreURL("https://bob:hunter%202@example.com/dav/")
        let credentials = try StoreLocator.credentials(url: url, file: nil, environment: ["DOCFS_USER": "env", "DOCFS_PASSWORD": "envpw"])
        #expect(credentials == StoreLocator.Credentials(user: "bob", password: "hunter 2"))
    }

    /// What `docfs mount` leaves in its argv and hands the daemon: the URL without credentials,
    /// anything that is not a URL unchanged; errors of a URL with a password never show it.
    @Test func redactedArgumentsAndErrorsCarryNoPassword() {
        #expect(StoreLocator.redacted("webdavs://bob:hunter2@example.com/dav/") == "webdavs://example.com/dav/")
        #expect(StoreLocator.redacted("http://bob:p%40ss@127.0.0.1:8080/a@b") == "http://127.0.0.1:8080/a@b")
        #expect(StoreLocator.redacted("http://127.0.0.1:8080/") == "http://127.0.0.1:8080/")
        #expect(StoreLocator.redacted("/srv/user:pw@host") == "/srv/user:pw@host")
        for argument in ["http://bob:hunter2@/dav/", "http://bob:hunter2@example.com/a?b", "ftp://bob:hunter2@example.com/",
                         "file://bob:hunter2@localhost/%FF"] {
            #expect(throws: StoreLocatorError.self) { try locate(argument) }
            do { _ = try locate(argument) } catch { #expect(!"\(error)".contains("hunter2"), "\(error)") }
        }
    }

    @Test func credentialPrecedence() throws {
        let bare = try StoreURL("https://example.com/dav/")
        let file = try credentialsFile("# comment\nuser = carol\npassword=p=w d\n", mode: 0o600)
        defer { unlink(file) }
        #expect(try StoreLocator.credentials(url: bare, file: nil, environment: [:]) == nil)
        #expect(try StoreLocator.credentials(url: bare, file: nil, environment: ["DOCFS_USER": "dave", "DOCFS_PASSWORD": "x"])
                == StoreLocator.Credentials(user: "dave", password: "x"))
        #expect(try StoreLocator.credentials(url: bare, file: file, environment: ["DOCFS_USER": "dave", "DOCFS_PASSWORD": "x"])
                == StoreLocator.Credentials(user: "dave", password: "x"))
        #expect(try StoreLocator.credentials(url: bare, file: file, environment: [:])
                == StoreLocator.Credentials(user: "carol", password: "p=w d"))
        #expect(throws: StoreLocatorError.self) {
            try StoreLocator.credentials(url: bare, file: nil, environment: ["DOCFS_USER": "dave"])
        }
        let usernameFile = try credentialsFile("username=erin\npassword=\n", mode: 0o400)
        defer { unlink(usernameFile) }
        #expect(try StoreLocator.credentials(url: bare, file: usernameFile, environment: [:])
                == StoreLocator.Credentials(user: "erin", password: ""))
    }

    @Test func refusesCredentialFilesOthersCanRead() throws {
        for mode: mode_t in [0o644, 0o640, 0o604, 0o660] {
            let file = try credentialsFile("user=a\npassword=secret\n", mode: mode)
            defer { unlink(file) }
            do {
                _ = try locate("https://example.com/", credentials: file)
                Issue.record("mode \(String(mode, radix: 8)) accepted")
            } catch {
                #expect(error == .credentialsFileInsecure(file, mode: UInt32(mode)))
                #expect(error.description.contains("chmod 600"))
                #expect(!error.description.contains("secret"))
            }
        }
        let incomplete = try credentialsFile("user=a\n", mode: 0o600)
        defer { unlink(incomplete) }
        #expect(throws: StoreLocatorError.credentialsFile(incomplete, problem: "no password= line")) {
            try locate("https://example.com/", credentials: incomplete)
        }
        #expect(throws: StoreLocatorError.self) { try locate("https://example.com/", credentials: "/nonexistent/credentials") }
    }
}

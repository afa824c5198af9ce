// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "docfs",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "docfs", targets: ["docfs"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
    ],
    targets: [
        // The C bridge: libfuse3's low-level API plus a tiny shim header. Imported by DocFSFuse only.
        .systemLibrary(
            name: "CFuse",
            pkgConfig: "fuse3",
            providers: [.apt(["libfuse3-dev"])]
        ),
        // The one protocol every store speaks, and the values it trades in. Knows nothing of the core.
        .target(
            name: "DocFSStore",
            dependencies: []
        ),
        // The stores: a local directory, WebDAV (and later S3).
        .target(
            name: "DocFSStores",
            dependencies: [
                "DocFSStore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // The File Provider model: catalog, placeholders, providing and evicting. Knows nothing of FUSE.
        .target(
            name: "DocFSCore",
            dependencies: [
                "DocFSStore",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // `docfs serve`: a WebDAV server over a directory.
        .target(
            name: "DocFSThumbnails",
            dependencies: [
                "DocFSCore",
                "DocFSStore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .target(
            name: "DocFSServe",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                "DocFSStore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        // The thin layer that turns fuse_lowlevel_ops callbacks into calls on the core.
        .target(
            name: "DocFSFuse",
            dependencies: [
                "CFuse",
                "DocFSCore",
                "DocFSStore",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "docfs",
            dependencies: [
                "DocFSCore",
                "DocFSStores",
                "DocFSServe",
                "DocFSFuse",
                "DocFSThumbnails",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The parsers of what another party wrote, under libFuzzer (`make fuzz`); without
        // -DFUZZING a replayer of saved inputs.
        .executableTarget(
            name: "DocFSFuzz",
            dependencies: ["DocFSStores", "DocFSServe"]
        ),
        // Fakes for tests: an in-memory, failure-injecting store.
        .target(
            name: "DocFSTesting",
            dependencies: ["DocFSStore"]
        ),
        .testTarget(
            name: "DocFSCoreTests",
            dependencies: ["DocFSCore", "DocFSStore", "DocFSTesting", "DocFSThumbnails"]
        ),
        .testTarget(name: "DocFSServeTests", dependencies: ["DocFSServe", "DocFSTesting", .product(name: "AsyncHTTPClient", package: "async-http-client")]),
        .testTarget(
            name: "DocFSStoresTests",
            dependencies: ["DocFSStores", "DocFSStore", "DocFSServe", "DocFSTesting"]
        ),
        // The CLI's own logic (docfs status --watch: rates, layout), without a terminal.
        .testTarget(name: "DocFSCLITests", dependencies: ["docfs"]),
    ],
    swiftLanguageModes: [.v6]
)

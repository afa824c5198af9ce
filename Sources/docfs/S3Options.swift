import ArgumentParser

/// Options for `s3://` stores. Each overrides the environment variable the S3 store reads
/// (so a flag and the AWS-style variable mean the same thing); secrets are never options:
/// keys come from the AWS sources (environment, ~/.aws/credentials), not from `ps`-visible arguments.
struct S3Options: ParsableArguments {
    @Option(help: "S3: endpoint URL of an S3-compatible server (also AWS_ENDPOINT_URL or endpoint_url in ~/.aws/config).")
    var endpoint: String?

    @Option(help: "S3: region (also AWS_REGION, AWS_DEFAULT_REGION, or the profile's region; default us-east-1).")
    var region: String?

    @Flag(help: "S3: path-style addressing (http://endpoint/bucket/key); the default with --endpoint.")
    var pathStyle = false

    @Flag(help: "S3: anonymous access to a public bucket (no credentials, unsigned requests).")
    var noSignRequest = false

    @Option(help: "S3: multipart part size, e.g. 8M or 64M (files above it are uploaded in parallel parts).")
    var partSize: String?

    @Flag(help: "S3: no symbolic links or special files: small objects are never asked about one by one (without it, the first stat of each small object costs one HEAD, which a plain ls does not); symlink() fails with EPERM.")
    var noSymlinks = false

    /// The environment the store is built from, with these options applied over it.
    func applied(to environment: [String: String]) -> [String: String] {
        var environment = environment
        if let endpoint { environment["AWS_ENDPOINT_URL"] = endpoint }
        if let region { environment["AWS_REGION"] = region }
        if pathStyle { environment["DOCFS_S3_PATH_STYLE"] = "1" }
        if noSignRequest { environment["DOCFS_S3_NO_SIGN"] = "1" }
        if let partSize { environment["DOCFS_S3_PART_SIZE"] = partSize }
        if noSymlinks { environment["DOCFS_S3_SYMLINKS"] = "0" }
        return environment
    }
}

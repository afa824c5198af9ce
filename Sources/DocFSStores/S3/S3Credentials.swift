// S3Credentials: where an S3 store's keys come from, the way AWS users keep them. It owns the
// precedence — AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN in the environment, else
// the profile (AWS_PROFILE, default "default") of the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials), else the same profile in the config
// file (AWS_CONFIG_FILE, default ~/.aws/config, `[profile NAME]` sections) — and the reading of
// `region` and `endpoint_url` from the config file.
//
// A secret never reaches a description, a log line or an error: `S3Credentials` prints only the
// access key id's first four characters, and parse errors name the file and line number only.

import DocFSStore
import Foundation

/// An access key pair, and a session token for temporary credentials.
public struct S3Credentials: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var accessKeyId: String
    public var secretAccessKey: String
    public var sessionToken: String?

    public init(accessKeyId: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }

    /// `AKIA…` with the secret and the token left out.
    public var description: String {
        "S3Credentials(\(accessKeyId.prefix(4))…\(sessionToken == nil ? "" : ", with session token"))"
    }

    public var debugDescription: String { description }

    /// `dump()` and reflection see the redacted form only.
    public var customMirror: Mirror { Mirror(self, children: ["redacted": description]) }
}

/// What the AWS shared files and the environment say for one profile.
public struct AWSProfileSettings: Sendable, Equatable {
    public var credentials: S3Credentials?
    public var region: String?
    public var endpointURL: String?
    /// Where the credentials came from, for a log line (`environment`, a file path).
    public var credentialsSource: String?

    public init(credentials: S3Credentials? = nil, region: String? = nil, endpointURL: String? = nil, credentialsSource: String? = nil) {
        self.credentials = credentials
        self.region = region
        self.endpointURL = endpointURL
        self.credentialsSource = credentialsSource
    }
}

public enum S3CredentialResolver {
    /// Resolves credentials, region and endpoint the way the AWS CLI does (the subset docfs
    /// supports: environment, shared credentials file, config file; no SSO, no process, no IMDS).
    /// - Parameter home: the home directory for the default file locations.
    public static func resolve(environment: [String: String], home: String? = nil) throws(StoreError) -> AWSProfileSettings {
        func env(_ name: String) -> String? {
            guard let value = environment[name]?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
            return value
        }
        let homeDirectory = home ?? env("HOME") ?? NSHomeDirectory()
        let profile = env("AWS_PROFILE") ?? env("AWS_DEFAULT_PROFILE") ?? "default"
        let credentialsFile = env("AWS_SHARED_CREDENTIALS_FILE") ?? homeDirectory + "/.aws/credentials"
        let configFile = env("AWS_CONFIG_FILE") ?? homeDirectory + "/.aws/config"

        var settings = AWSProfileSettings()
        let config = try readINI(configFile)
        let configSection = profile == "default" ? (config["default"] ?? config["profile default"]) : config["profile \(profile)"]
        let credentialsSection = try readINI(credentialsFile)[profile]

        if let id = env("AWS_ACCESS_KEY_ID"), let secret = env("AWS_SECRET_ACCESS_KEY") {
            settings.credentials = S3Credentials(accessKeyId: id, secretAccessKey: secret, sessionToken: env("AWS_SESSION_TOKEN"))
            settings.credentialsSource = "environment"
        } else if env("AWS_ACCESS_KEY_ID") != nil || env("AWS_SECRET_ACCESS_KEY") != nil {
            throw .accessDenied("only one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is set")
        } else if let section = credentialsSection, let credentials = try credentials(in: section, file: credentialsFile) {
            settings.credentials = credentials
            settings.credentialsSource = credentialsFile
        } else if let section = configSection, let credentials = try credentials(in: section, file: configFile) {
            settings.credentials = credentials
            settings.credentialsSource = configFile
        } else if env("AWS_PROFILE") != nil, credentialsSection == nil, configSection == nil {
            // The user named a profile that exists nowhere: say so rather than go anonymous.
            throw .accessDenied("AWS profile \(profile) is in neither \(credentialsFile) nor \(configFile)")
        }
        settings.region = env("AWS_REGION") ?? env("AWS_DEFAULT_REGION") ?? configSection?["region"]
        settings.endpointURL = env("AWS_ENDPOINT_URL_S3") ?? env("AWS_ENDPOINT_URL") ?? configSection?["endpoint_url"]
        return settings
    }

    private static func credentials(in section: [String: String], file: String) throws(StoreError) -> S3Credentials? {
        let id = section["aws_access_key_id"]
        let secret = section["aws_secret_access_key"]
        switch (id, secret) {
        case let (id?, secret?):
            return S3Credentials(accessKeyId: id, secretAccessKey: secret,
                                 sessionToken: section["aws_session_token"] ?? section["aws_security_token"])
        case (nil, nil):
            return nil
        default:
            throw .accessDenied("\(file): a profile has only one of aws_access_key_id and aws_secret_access_key")
        }
    }

    /// An AWS-style INI file as `[section: [key: value]]`; keys lowercased, values trimmed.
    /// A missing file is empty. Nested (indented) settings such as `s3 =` blocks are ignored.
    static func readINI(_ path: String) throws(StoreError) -> [String: [String: String]] {
        guard FileManager.default.fileExists(atPath: path) else { return [:] }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw .accessDenied("cannot read \(path)")
        }
        return parseINI(String(decoding: data, as: UTF8.self))
    }

    static func parseINI(_ text: String) -> [String: [String: String]] {
        var sections: [String: [String: String]] = [:]
        var current: String?
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            let indented = rawLine.first == " " || rawLine.first == "\t"
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("["), line.hasSuffix("]") {
                let name = line.dropFirst().dropLast().trimmingCharacters(in: .whitespaces)
                    .split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
                current = name
                if sections[name] == nil { sections[name] = [:] }
                continue
            }
            guard !indented, let current, let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            sections[current]?[key] = value
        }
        return sections
    }
}

// S3Store+Requests: one S3 call from its description to its answer. It owns the wire form of a
// request (bucket addressing, key and query encoding), its SigV4 signature (SigV4Signer.swift
// computes it), the two ways to send it (whole bounded answer, or streamed from the response
// head) and the running of many calls at once (`async let`, a bounded batch).

import AsyncHTTPClient
import DocFSStore
import Foundation
import NIOCore
import NIOHTTP1

extension S3Store {
    /// One S3 call, before signing.
    struct Call: Sendable {
        var method: HTTPMethod
        /// nil for a bucket-level call.
        var key: String?
        var query: [(name: String, value: String)] = []
        var headers: [(name: String, value: String)] = []
        var payloadHash = SigV4Signer.emptyPayloadHash
    }

    /// The URL and the headers (signed when we sign) of `call`.
    func prepare(_ call: Call, now: Date = Date()) -> (url: String, headers: [String: String]) {
        var path = bucketPath
        if let key = call.key {
            path += SigV4Signer.encodePath(key)
        } else if path.isEmpty {
            path = "/"
        }
        var headers = call.headers
        headers.append((name: "Host", value: hostHeader))
        if let signer {
            let amzDate = SigV4Signer.amzDate(now)
            headers.append((name: "x-amz-date", value: amzDate))
            headers.append((name: "x-amz-content-sha256", value: call.payloadHash))
            if let token = signer.credentials.sessionToken { headers.append((name: "x-amz-security-token", value: token)) }
            let signature = signer.sign(SigV4Signer.Request(method: call.method.rawValue, path: path, query: call.query,
                                                            headers: headers, payloadHash: call.payloadHash), amzDate: amzDate)
            headers.append((name: "Authorization", value: signature.authorization))
        }
        // On the wire the query is exactly its canonical form (a value-less name stays bare: `?uploads`).
        let query = call.query
            .map { SigV4Signer.uriEncode($0.name, encodeSlash: true) + ($0.value.isEmpty ? "" : "=" + SigV4Signer.uriEncode($0.value, encodeSlash: true)) }
            .sorted()
            .joined(separator: "&")
        var dictionary: [String: String] = [:]
        for header in headers { dictionary[header.name] = header.value }
        return (origin + path + (query.isEmpty ? "" : "?" + query), dictionary)
    }

    /// Sends a call and reads its whole (bounded) answer.
    func send(_ call: Call, path: StorePath, body: HTTPClientRequest.Body? = nil,
              timeout: TimeAmount = S3Store.metadataTimeout) async throws(StoreError) -> HTTPTransport.Answer {
        let (url, headers) = prepare(call)
        return try await transport.metadata(call.method, url: url, path: path, headers: headers, body: body,
                                            timeout: timeout, maximumBodyBytes: Self.maximumXMLBytes)
    }

    /// Sends a call and returns at the response head; the caller streams the body.
    func start(_ call: Call, path: StorePath, timeout: TimeAmount) async throws(StoreError) -> HTTPClientResponse {
        let (url, headers) = prepare(call)
        return try await transport.start(call.method, url: url, path: path, headers: headers, body: nil, timeout: timeout)
    }

    /// Runs a typed-throwing call as a Result, for `async let`.
    static func catching<T: Sendable>(_ body: @Sendable () async throws(StoreError) -> T) async -> Result<T, StoreError> {
        do {
            return .success(try await body())
        } catch {
            return .failure(error)
        }
    }

    /// Runs `body` for each item, `configuration.concurrency` at a time; the first error wins and
    /// cancels the rest.
    func forEachConcurrently<Item: Sendable>(_ items: [Item], _ body: @escaping @Sendable (Item) async throws(StoreError) -> Void) async throws(StoreError) {
        guard !items.isEmpty else { return }
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var iterator = items.makeIterator()
                var running = 0
                while running < configuration.concurrency, let item = iterator.next() {
                    group.addTask { try await body(item) }
                    running += 1
                }
                while try await group.next() != nil {
                    if let item = iterator.next() { group.addTask { try await body(item) } }
                }
            }
        } catch {
            throw HTTPTransport.storeError(error, method: "BATCH", path: .root)
        }
    }
}

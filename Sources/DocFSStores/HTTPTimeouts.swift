// HTTPTimeouts: how long an HTTP store waits, in three ways, so that no request lives forever:
// - `connect`: establishing a connection;
// - `idle`: no byte in either direction for this long fails the request (a server gone quiet);
// - a transfer deadline: a request moving n bytes fails once it has taken longer than
//   `base + n / minimumRate`, where n is what has arrived so far. A body that trickles (a
//   byte every few seconds) never trips the idle timeout, but falls behind the rate and fails
//   after about `base`; a healthy transfer of any size, faster than `minimumRate`, never does.
//   Uploads, whose size is known, get the fixed deadline `base + size / minimumRate`.
// Set per store; `from(environment:)` reads the DOCFS_*_TIMEOUT variables (the CLI may map its
// options onto them).

import DocFSStore
import NIOCore

public struct HTTPTimeouts: Sendable, Equatable {
    /// Establishing a connection (TCP and TLS).
    public var connect: Duration
    /// No byte received or sent for this long fails the request.
    public var idle: Duration
    /// The allowance of every request that does not depend on its size: the whole deadline of a
    /// metadata call, and the start of a transfer's.
    public var base: Duration
    /// Bytes per second: the slowest transfer that is not treated as stalled.
    public var minimumRate: Int64

    public init(connect: Duration = .seconds(10), idle: Duration = .seconds(30), base: Duration = .seconds(30),
                minimumRate: Int64 = 16 * 1024) {
        self.connect = connect
        self.idle = idle
        self.base = base
        self.minimumRate = max(1, minimumRate)
    }

    public static let `default` = HTTPTimeouts()

    /// The time a transfer of `bytes` bytes may take: `base + bytes / minimumRate`.
    public func deadline(forBytes bytes: Int64) -> Duration {
        base + .seconds(Double(max(0, bytes)) / Double(minimumRate))
    }

    /// The defaults, with `DOCFS_CONNECT_TIMEOUT`, `DOCFS_IDLE_TIMEOUT`, `DOCFS_TRANSFER_TIMEOUT`
    /// (the base, seconds) and `DOCFS_MINIMUM_RATE` (bytes per second) where set.
    public static func from(environment: [String: String]) throws(StoreError) -> HTTPTimeouts {
        var timeouts = HTTPTimeouts()
        func seconds(_ name: String) throws(StoreError) -> Duration? {
            guard let text = environment[name], !text.isEmpty else { return nil }
            guard let value = Double(text), value > 0, value < 1e9 else {
                throw .invalidName("\(name)=\(text.debugDescription) is not a number of seconds")
            }
            return .seconds(value)
        }
        if let value = try seconds("DOCFS_CONNECT_TIMEOUT") { timeouts.connect = value }
        if let value = try seconds("DOCFS_IDLE_TIMEOUT") { timeouts.idle = value }
        if let value = try seconds("DOCFS_TRANSFER_TIMEOUT") { timeouts.base = value }
        if let text = environment["DOCFS_MINIMUM_RATE"], !text.isEmpty {
            guard let rate = Int64(text), rate > 0 else {
                throw .invalidName("DOCFS_MINIMUM_RATE=\(text.debugDescription) is not a number of bytes per second")
            }
            timeouts.minimumRate = rate
        }
        return timeouts
    }
}

extension Duration {
    /// As a NIO `TimeAmount` (whole nanoseconds).
    var timeAmount: TimeAmount {
        let (seconds, attoseconds) = components
        let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !nanoseconds.overflow else { return .nanoseconds(.max) }
        return .nanoseconds(nanoseconds.partialValue + attoseconds / 1_000_000_000)
    }

    /// In seconds, as a Double.
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}

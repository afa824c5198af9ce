// Retry-After in both forms, capped; and the one table of HTTP statuses: which failures are
// transient (and carry the store's wait), which are permanent.

import DocFSStore
@testable import DocFSStores
import Testing

@Suite("Retry-After and the classification of HTTP failures")
struct RetryAfterTests {
    let now = 1_800_000_000.0

    @Test func delaySecondsAreReadAndCapped() {
        #expect(RetryAfter.parse("2", now: now) == .seconds(2))
        #expect(RetryAfter.parse(" 0 ", now: now) == .zero)
        #expect(RetryAfter.parse("7200", now: now) == RetryAfter.maximum)
        #expect(RetryAfter.parse("99999999999999999999999", now: now) == RetryAfter.maximum)
    }

    @Test func httpDatesBecomeWaitsFromNow() {
        #expect(RetryAfter.parse(HTTPDate.format(now + 5), now: now) == .seconds(5))
        #expect(RetryAfter.parse(HTTPDate.format(now - 60), now: now) == .zero)
        #expect(RetryAfter.parse(HTTPDate.format(now + 86_400), now: now) == RetryAfter.maximum)
    }

    @Test func unreadableValuesAreIgnored() {
        for value in [nil, "", "-5", "1.5", "soon", "Fri, 99 Foo"] as [String?] {
            #expect(RetryAfter.parse(value, now: now) == nil, "\(value.debugDescription)")
        }
    }

    @Test func busyAnswersCarryTheirWait() {
        let busy = HTTPTransport.statusError(503, reason: "Service Unavailable", method: "GET", path: .root, retryAfter: .seconds(2))
        #expect(busy == .busy(status: 503, retryAfter: .seconds(2), message: "GET /: Service Unavailable"))
        #expect(busy.isTransient && !busy.isPermanent)
        #expect(busy.retryAfter == .seconds(2))
        let throttled = HTTPTransport.statusError(429, reason: "Too Many Requests", method: "PUT", path: .root)
        #expect(throttled.isTransient)
        let plain = HTTPTransport.statusError(500, reason: "Internal Server Error", method: "GET", path: .root)
        #expect(plain.isTransient && plain.retryAfter == nil)
    }

    @Test("refusals are permanent", arguments: [400, 403, 405, 409, 411, 413, 414, 422, 431])
    func refusalsArePermanent(status: Int) {
        let error = HTTPTransport.statusError(status, reason: "No", method: "PUT", path: .root)
        #expect(error.isPermanent, "\(status): \(error)")
        #expect(!error.isTransient, "\(status): \(error)")
    }

    @Test func slowDownIsBusyAndEntityTooLargeIsRefused() {
        let slow = S3Store.error(code: "SlowDown", status: 503, method: "GET", path: .root, logger: testLogger, retryAfter: .seconds(3))
        #expect(slow.isTransient && slow.retryAfter == .seconds(3))
        let large = S3Store.error(code: "EntityTooLarge", status: 400, method: "PUT", path: .root, logger: testLogger)
        #expect(large.isPermanent)
    }

    @Test func timeoutsComeFromTheEnvironment() throws {
        let timeouts = try HTTPTimeouts.from(environment: ["DOCFS_TRANSFER_TIMEOUT": "4", "DOCFS_IDLE_TIMEOUT": "2.5",
                                                           "DOCFS_MINIMUM_RATE": "1000"])
        #expect(timeouts.base == .seconds(4))
        #expect(timeouts.idle == .milliseconds(2500))
        #expect(timeouts.deadline(forBytes: 3000) == .seconds(7))
        #expect(throws: StoreError.self) { try HTTPTimeouts.from(environment: ["DOCFS_IDLE_TIMEOUT": "soon"]) }
    }
}

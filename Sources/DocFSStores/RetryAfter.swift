// RetryAfter: the `Retry-After` header (RFC 9110 §10.2.3) of a 429 or 503, in its two forms,
// delay-seconds (`120`) and an HTTP-date, as the wait the store asked for. Capped, so that a
// server (or a proxy) cannot park a caller for hours; a date in the past means "now".

import Foundation
import NIOHTTP1

enum RetryAfter {
    /// The longest wait honoured; a longer one is shortened to this.
    static let maximum: Duration = .seconds(120)

    /// The wait `value` asks for, capped at `maximum`; nil when there is none or it is unreadable.
    static func parse(_ value: String?, now: Double = Date().timeIntervalSince1970) -> Duration? {
        guard let text = value?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if text.allSatisfy(\.isASCII), text.allSatisfy(\.isNumber) {
            // delay-seconds: digits only; more digits than an Int holds is still "long".
            return min(Int(text).map { Duration.seconds($0) } ?? maximum, maximum)
        }
        guard let date = HTTPDate.parse(text) else { return nil }
        let seconds = date - now
        guard seconds > 0 else { return .zero }
        return seconds >= maximum.seconds ? maximum : .seconds(seconds)
    }

    /// The wait the headers of an answer ask for.
    static func parse(_ headers: HTTPHeaders) -> Duration? {
        parse(headers.first(name: "Retry-After"))
    }
}

import Foundation

/// Rate and time left of the transfers `docfs status --watch` shows, from successive samples of
/// their byte counts. One sample says nothing about speed, and the difference of two is jumpy
/// (a throttled link delivers in bursts, a sample can fall between them), so the rate is an
/// exponentially weighted average with a time constant of a few seconds: new speeds show within
/// a few samples while one empty interval does not read as a stall. A count that goes back (a
/// retry starts its upload again) starts the transfer's estimate afresh.
struct TransferRates {
    struct Estimate: Equatable {
        /// Bytes per second, once two samples are known.
        var rate: Double?
        /// Seconds until `total`, at that rate (nil while the rate is unknown or zero).
        var eta: Double?
    }

    private struct Track {
        var at: Double
        var done: Int64
        var rate: Double?
    }

    /// How fast older samples fade, in seconds.
    let timeConstant: Double
    private var tracks: [String: Track] = [:]

    init(timeConstant: Double = 3) {
        self.timeConstant = timeConstant
    }

    /// Adds a sample of transfer `key` (`done` of `total` bytes at time `at`, in seconds) and says
    /// how fast it goes.
    mutating func observe(_ key: String, done: Int64, total: Int64, at: Double) -> Estimate {
        guard var track = tracks[key], done >= track.done else {
            tracks[key] = Track(at: at, done: done, rate: nil)
            return Estimate()
        }
        let elapsed = at - track.at
        guard elapsed > 0 else { return Self.estimate(track, total: total) }
        let instant = Double(done - track.done) / elapsed
        if let previous = track.rate {
            let weight = 1 - exp(-elapsed / timeConstant)
            track.rate = previous + weight * (instant - previous)
        } else {
            track.rate = instant
        }
        track.at = at
        track.done = done
        tracks[key] = track
        return Self.estimate(track, total: total)
    }

    /// Forgets every transfer not in `keys` (finished, or gone with its mount).
    mutating func keep(only keys: Set<String>) {
        tracks = tracks.filter { keys.contains($0.key) }
    }

    private static func estimate(_ track: Track, total: Int64) -> Estimate {
        guard let rate = track.rate else { return Estimate() }
        let left = Double(max(0, total - track.done))
        return Estimate(rate: rate, eta: rate > 0.5 ? left / rate : nil)
    }
}

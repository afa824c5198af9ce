import Foundation
import Synchronization

/// The sorted names of local-directory listings under way, kept between pages.
///
/// A directory has no stable order to resume from, so a page used to re-read and re-sort the
/// whole directory and skip what earlier pages returned: O(n²) for a folder of n names, most
/// of a 100,000-entry listing's time. The first page now reads and sorts once; the names wait
/// here, under an id the page token carries, for the next page. A token whose snapshot was
/// dropped (too many listings at once, or the daemon restarted) still works: it also carries
/// the last name returned, and the page reads the directory again and starts after it.
final class ListingSnapshots: Sendable {
    struct Snapshot: Sendable {
        var names: [String]
        /// Index of the next name to return.
        var position: Int
    }

    /// Listings kept at once; the oldest is dropped beyond it (its next page reads again).
    static let capacity = 4

    private struct State {
        var next: UInt64 = 1
        var kept: [UInt64: Snapshot] = [:]
        var order: [UInt64] = []
    }

    private let state = Mutex(State())

    /// Keeps `snapshot` for the next page and returns its id.
    func keep(_ snapshot: Snapshot) -> UInt64 {
        state.withLock { state in
            let id = state.next
            state.next += 1
            state.kept[id] = snapshot
            state.order.append(id)
            while state.order.count > Self.capacity {
                state.kept[state.order.removeFirst()] = nil
            }
            return id
        }
    }

    /// The snapshot kept under `id`, removed (the page keeps it again if more pages follow).
    func take(_ id: UInt64?) -> Snapshot? {
        guard let id else { return nil }
        return state.withLock { state in
            guard let snapshot = state.kept.removeValue(forKey: id) else { return nil }
            state.order.removeAll { $0 == id }
            return snapshot
        }
    }
}

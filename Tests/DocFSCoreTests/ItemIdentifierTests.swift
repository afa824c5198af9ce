@testable import DocFSCore
import Foundation
import Testing

/// Item ids name local copies in the cache, so they must be UUIDs no two rows share.
@Suite("Item identifiers")
struct ItemIdentifierTests {
    @Test func aBatchGivesDistinctVersion4UUIDsInTheFormOfUUIDString() throws {
        var batch = ItemIdentifier.Batch(count: 3)
        let ids = (0..<10).map { _ in batch.next() } + [ItemIdentifier.make()]
        #expect(Set(ids).count == ids.count)
        for id in ids {
            let uuid = try #require(UUID(uuidString: id))
            #expect(uuid.uuidString == id)
            let characters = Array(id)
            #expect(characters[14] == "4")
            #expect("89AB".contains(characters[19]))
        }
    }
}

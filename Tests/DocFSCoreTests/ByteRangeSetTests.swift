@testable import DocFSCore
import Testing

@Suite("A local copy knows which byte ranges it holds")
struct ByteRangeSetTests {
    @Test func overlappingAndTouchingRangesMerge() {
        var set = ByteRangeSet()
        set.insert(10..<20)
        set.insert(30..<40)
        set.insert(20..<25)
        #expect(set.ranges == [10..<25, 30..<40])
        set.insert(24..<31)
        #expect(set.ranges == [10..<40])
        #expect(set.count == 30)
    }

    @Test func rangesArriveInAnyOrder() {
        let set = ByteRangeSet([50..<60, 0..<10, 20..<30, 10..<20])
        #expect(set.ranges == [0..<30, 50..<60])
    }

    @Test func containsOnlyWhatArrived() {
        let set = ByteRangeSet([0..<100, 200..<300])
        #expect(set.contains(0..<100))
        #expect(set.contains(250..<260))
        #expect(!set.contains(90..<210))
        #expect(!set.contains(300..<301))
        #expect(set.contains(5..<5), "an empty range is always held")
    }

    @Test func missingPartsOfARange() {
        let set = ByteRangeSet([10..<20, 30..<40])
        #expect(set.missing(in: 0..<50) == [0..<10, 20..<30, 40..<50])
        #expect(set.missing(in: 12..<18) == [])
        #expect(set.missing(in: 15..<35) == [20..<30])
    }
}

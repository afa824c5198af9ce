// NameSet: the compact set of names a listing keeps. It must answer exactly as a Set<FileName>
// (names compared by bytes) whatever the names and however large it grows.

import DocFSStore
import DocFSTesting
import Testing

@Suite("NameSet")
struct NameSetTests {
    @Test func namesAreComparedByTheirBytes() {
        var set = NameSet()
        #expect(set.insert("caf\u{E9}") == (true, 0))
        #expect(set.insert("cafe\u{301}") == (true, 1), "NFD is another name than NFC")
        #expect(set.insert("caf\u{E9}") == (false, 0))
        #expect(set.insert("") == (true, 2), "the empty name is a name like any other")
        #expect(set.contains(""))
        #expect(set.index(of: "cafe\u{301}") == 1)
        #expect(!set.contains("cafe"))
        #expect(set.count == 3)
    }

    @Test func answersAsASetOfFileNamesWhileItGrows() {
        var random = SeededGenerator(seed: 9)
        var set = NameSet()
        var model: [FileName: Int] = [:]
        let alphabet: [String] = ["a", "b", "é", "e\u{301}", "\u{0}", "/", "🙂", " "]
        for _ in 0..<40_000 {
            var name = ""
            for _ in 0..<random.below(6) { name += alphabet[random.below(alphabet.count)] }
            if random.chance(70) {
                let expected = model[name.fileName]
                let (inserted, index) = set.insert(name)
                #expect(inserted == (expected == nil), "\(name.debugDescription)")
                if let expected { #expect(index == expected) } else { model[name.fileName] = index }
            } else {
                #expect(set.index(of: name) == model[name.fileName], "\(name.debugDescription)")
            }
        }
        #expect(set.count == model.count)
        for (name, index) in model { #expect(set.index(of: name.string) == index) }
    }

    @Test func holdsAHundredThousandNames() {
        var set = NameSet()
        for i in 0..<100_000 { set.insert("h\(i)") }
        #expect(set.count == 100_000)
        var misplaced = 0
        for i in 0..<100_000 where set.index(of: "h\(i)") != i { misplaced += 1 }
        #expect(misplaced == 0)
        #expect(!set.contains("h100000"))
    }
}

// KnownFolders: what the S3 store takes for known without asking the bucket. A name in a folder
// made here a moment ago is free once; every other question goes to the store.

@testable import DocFSStores
import DocFSStore
import Testing

@Suite("S3 folders known for a moment")
struct KnownFoldersTests {
    @Test func aNameInAFolderMadeHereIsFreeOnlyTheFirstTime() throws {
        let known = KnownFolders()
        let folder = try StorePath("made")
        known.madeFolder(folder)
        #expect(known.exists(folder))
        #expect(known.isFresh(try StorePath("made/a.txt")))
        #expect(!known.isFresh(try StorePath("made/a.txt")), "the name was used: the next write asks")
        known.used(try StorePath("made/b.txt"))
        #expect(!known.isFresh(try StorePath("made/b.txt")), "moved or written there already")
        #expect(known.isFresh(try StorePath("made/c")))
    }

    @Test func aFolderOnlySeenOrGoneKnowsNoFreeName() throws {
        let known = KnownFolders()
        let seen = try StorePath("seen")
        known.saw(seen)
        #expect(known.exists(seen))
        #expect(!known.isFresh(try StorePath("seen/a.txt")), "another client's folder may hold anything")
        #expect(!known.isFresh(try StorePath("top.txt")), "the root was not made here")

        let made = try StorePath("made/inner")
        known.madeFolder(made)
        known.forget(try StorePath("made"))
        #expect(!known.exists(made))
        #expect(!known.isFresh(try StorePath("made/inner/a.txt")), "removed or moved away: its names are asked again")
    }
}

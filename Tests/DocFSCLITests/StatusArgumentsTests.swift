// Which mount `docfs status PATH` means: the longest mount point that holds the path, cut at
// a `/` (paths that do not exist are compared as absolute paths, without symlinks resolved).

@testable import docfs
import Testing

@Suite("docfs status PATH")
struct StatusArgumentsTests {
    let records = ["/nope/m", "/nope/m/inner", "/nope/m2"].map { point in
        MountRecord(pid: 1, mountpoint: point, store: "s", stateDirectory: "/s", cacheDirectory: "/c")
    }

    func holder(_ path: String) -> String? { StatusCommand.mount(holding: path, in: records)?.mountpoint }

    @Test("a mount point and paths below it; the innermost mount wins; a prefix is cut at a slash")
    func longestPrefix() {
        #expect(holder("/nope/m") == "/nope/m")
        #expect(holder("/nope/m/") == "/nope/m")
        #expect(holder("/nope/m/a/b.txt") == "/nope/m")
        #expect(holder("/nope/m/inner/x") == "/nope/m/inner")
        #expect(holder("/nope/m/innerx") == "/nope/m")
        #expect(holder("/nope/m2/x") == "/nope/m2")
        #expect(holder("/nope/m/a/../inner/x") == "/nope/m/inner")
    }

    @Test("a path in no mount is none of them")
    func outside() {
        #expect(holder("/nope") == nil)
        #expect(holder("/nope/m3") == nil)
        #expect(holder("/elsewhere/m") == nil)
    }
}

@testable import docfs
import Foundation
import Testing

/// `docfs unmount --force` aborts a stuck mount's connection through fusectl, and mounts
/// fusectl itself where the system did not, or says that stuck callers may stay stuck.
@Suite("The FUSE control filesystem for unmount --force")
struct FuseControlTests {
    private let others = [MountTable.Entry(source: "/dev/vda", mountpoint: "/", type: "ext4"),
                          MountTable.Entry(source: "sysfs", mountpoint: "/sys", type: "sysfs")]

    @Test func mountedAlreadyIsLeftAlone() {
        var calls = 0
        let fusectl = MountTable.Entry(source: "fusectl", mountpoint: FuseControl.directory, type: "fusectl")
        let outcome = FuseControl.ensureMounted(mounts: others + [fusectl], mountFusectl: { calls += 1; return 0 })
        #expect(outcome == .mounted)
        #expect(calls == 0)
    }

    @Test func notMountedIsMounted() {
        var calls = 0
        let outcome = FuseControl.ensureMounted(mounts: others, mountFusectl: { calls += 1; return 0 })
        #expect(outcome == .mountedNow)
        #expect(calls == 1)
    }

    @Test func notMountableSaysWhy() {
        let outcome = FuseControl.ensureMounted(mounts: others, mountFusectl: { EPERM })
        guard case .unavailable(let why) = outcome else {
            Issue.record("expected unavailable, got \(outcome)")
            return
        }
        #expect(why.contains(FuseControl.directory))
        #expect(why.contains(String(cString: strerror(EPERM))))
    }
}

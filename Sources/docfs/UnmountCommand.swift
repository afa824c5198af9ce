import ArgumentParser
import Foundation

/// `docfs unmount MOUNTPOINT`: unmount, let the daemon evict every local copy, and clean
/// up after a daemon that was killed ("Transport endpoint is not connected").
struct UnmountCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unmount",
        abstract: "Unmount a docfs mount and remove every local copy.",
        discussion: """
            Waits for the daemon to evict its local copies. Also cleans up a stale mount \
            left by a daemon that was killed.

            Example:
              docfs unmount ~/docs
            """
    )

    @Argument(help: "The mount point.")
    var mountpoint: String

    @Option(help: "Seconds to wait for the daemon to finish.")
    var timeout: Double = 120

    func run() async throws {
        let path = absolutePath(mountpoint)
        let environment = ProcessInfo.processInfo.environment
        let record = MountRegistry.load(path, environment: environment)
        guard let entry = MountTable.entry(at: path) else {
            if let record {
                cleanUp(record, environment: environment)
                print("docfs: \(path) was not mounted; cleaned up what its daemon left")
                return
            }
            fail("\(path) is not mounted")
        }
        guard entry.type == MountTable.docfsType else {
            fail("\(path) is not a docfs mount (\(entry.type))")
        }

        if umount2(path, 0) != 0 {
            let code = errno
            if code == EBUSY {
                fail("\(path) is busy: close the files open there (see 'fuser -vm \(path)') and try again")
            }
            if code == EPERM {
                try runFusermount(["-u", path])
            } else {
                // A dead daemon's mount: detach it.
                guard umount2(path, Int32(MNT_DETACH)) == 0 else {
                    fail("cannot unmount \(path): \(String(cString: strerror(errno)))")
                }
            }
        }

        if let record {
            if isAlive(record.pid) {
                printError("docfs: waiting for the daemon (pid \(record.pid)) to evict local copies…")
                let deadline = Date().addingTimeInterval(timeout)
                while isAlive(record.pid) && Date() < deadline {
                    try? await Task.sleep(for: .milliseconds(50))
                }
                if isAlive(record.pid) {
                    printError("docfs: warning: the daemon (pid \(record.pid)) is still running after \(Int(timeout)) s")
                }
            }
            cleanUp(record, environment: environment)
        }
        print("docfs: unmounted \(path)")
    }

    private func isAlive(_ pid: Int32) -> Bool {
        kill(pid, 0) == 0 || errno == EPERM
    }

    /// Removes local copies a killed daemon left behind (their content is on the store).
    private func cleanUp(_ record: MountRecord, environment: [String: String]) {
        if let names = try? FileManager.default.contentsOfDirectory(atPath: record.cacheDirectory) {
            for name in names { unlink(record.cacheDirectory + "/" + name) }
        }
        MountRegistry.remove(record.mountpoint, environment: environment)
    }

    private func runFusermount(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        if process.terminationStatus != 0 { fail("fusermount3 could not unmount \(mountpoint)") }
    }
}

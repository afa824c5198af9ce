import ArgumentParser
import DocFSCore
import Foundation

/// `docfs unmount MOUNTPOINT`: unmount, let the daemon evict every local copy, and clean
/// up after a daemon that was killed ("Transport endpoint is not connected").
struct UnmountCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unmount",
        abstract: "Unmount a docfs mount and remove every local copy.",
        discussion: """
            First waits until every change has reached the store (and says which files it is \
            waiting for). If the store cannot be reached, refuses unless --force: then the \
            unsynced files are kept under their names in a recovery folder (named in the \
            message), and the next mount of the same store uploads them, then removes it. With --force the mount ends \
            even while processes are stuck in it: its FUSE connection is aborted (their calls fail; \
            /sys/fs/fuse/connections is mounted first where the system did not) and it is unmounted lazily. Files whose upload the store refused for good (user.docfs.error says why) do not hold \
            the unmount up: they are kept in the recovery folder, and named. Also cleans up a stale mount left \
            by a daemon that was killed.

            Examples:
              docfs unmount ~/docs
              docfs unmount --force ~/docs
            """
    )

    @Flag(help: "Unmount even if changes cannot reach the store now (they are kept and uploaded by the next mount), and even if processes are stuck in the mount (its connection is aborted).")
    var force = false

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

        // Only a live daemon can upload; a killed one left a stale mount to clean, and its
        // unsynced copies wait in the cache for the next mount.
        if let record, !force, isAlive(record.pid) {
            try await waitForUploads(record)
        }

        if umount2(path, 0) != 0 {
            let code = errno
            if force, code == EBUSY || code == EPERM {
                // Callers stuck in the mount (or no right to umount2): keep what is unsynced, cut
                // the kernel's connection to the daemon so every waiting call fails at once, and
                // take the mount point away even while files there are still open.
                if let record { keepUnsynced(record) }
                abortConnection(path)
                if umount2(path, Int32(MNT_DETACH)) != 0 { try runFusermount(["-u", "-z", path]) }
            } else if code == EBUSY {
                fail("\(path) is busy: close the files open there (see 'fuser -vm \(path)') and try again")
            } else if code == EPERM {
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

    /// Waits until the journal has no unsynced change; refuses when uploads fail because the
    /// store is unreachable (after a few seconds of trying), so nothing is dropped silently.
    private func waitForUploads(_ record: MountRecord) async throws {
        let started = Date()
        var announced = Set<String>()
        var catalog: Catalog?
        while true {
            // A journal that cannot be read is not "nothing pending": asked again (SQLite may be
            // busy for a moment), and the unmount refused if it stays unreadable.
            let all: [Item]
            do {
                let opened = try catalog ?? Catalog(path: record.catalogPath)
                catalog = opened
                all = try opened.items(in: [.modified, .uploading])
            } catch {
                catalog = nil
                if Date().timeIntervalSince(started) > min(timeout, 10) {
                    fail("cannot read the journal of \(mountpoint) (\(record.catalogPath): \(error)), so cannot tell whether "
                         + "every change is on the store; not unmounting (use --force to unmount anyway: every local copy is kept)")
                }
                try? await Task.sleep(for: .milliseconds(100))
                continue
            }
            // An upload the store refused for good is not retried: nothing to wait for. It is
            // kept in the recovery folder once the daemon has gone (see `cleanUp`).
            let pending = all.filter { $0.uploadTrouble != .refused }
            if pending.isEmpty { return }
            let names = pending.map { $0.path.description }
            for name in names where !announced.contains(name) {
                printError("docfs: waiting for the upload of \(name)")
                announced.insert(name)
            }
            let unreachable = pending.filter { $0.uploadTrouble == .unreachable }
            if !unreachable.isEmpty && Date().timeIntervalSince(started) > 5 {
                fail("""
                    the store cannot be reached (\(unreachable[0].uploadError ?? "")); \(pending.count) file(s) not uploaded yet. \
                    Not unmounting. Use 'docfs unmount --force \(mountpoint)' to unmount anyway: the files are kept in a \
                    recovery folder under \(RecoveryFolder.root(stateDirectory: record.stateDirectory)) and the next mount uploads them.
                    """)
            }
            if Date().timeIntervalSince(started) > timeout {
                fail("uploads still pending after \(Int(timeout)) s; not unmounting (use --force to keep them for the next mount)")
            }
            try? await Task.sleep(for: .milliseconds(100))
        }
    }

    /// Ends the FUSE connection of the mount at `path` as `/sys/fs/fuse/connections/N/abort`
    /// does (N: the mount's device minor): every request waiting in it fails at once, the
    /// daemon's loop ends, and the processes stuck there get their error. Mounts the FUSE
    /// control filesystem first where the system did not (`FuseControl`).
    private func abortConnection(_ path: String) {
        guard let minor = MountTable.deviceMinor(at: path) else {
            printError("docfs: cannot find \(path) in /proc/self/mountinfo; unmounting it lazily")
            return
        }
        let control = "\(FuseControl.directory)/\(minor)/abort"
        switch FuseControl.ensureMounted() {
        case .mounted:
            break
        case .mountedNow:
            printError("docfs: mounted the FUSE control filesystem on \(FuseControl.directory) (it was not), "
                       + "to abort the connection")
        case .unavailable(let why):
            printError("""
                docfs: cannot abort the connection of \(path): \(why). Unmounting it lazily: processes stuck \
                in it may stay stuck until the store answers. To free them, as root: \
                mount -t fusectl none \(FuseControl.directory); echo 1 > \(control)
                """)
            return
        }
        let fd = open(control, O_WRONLY)
        guard fd >= 0 else {
            printError("docfs: cannot abort the connection (\(control): \(String(cString: strerror(errno)))); unmounting lazily")
            return
        }
        defer { close(fd) }
        if write(fd, "1", 1) != 1 {
            printError("docfs: cannot abort the connection (\(control): \(String(cString: strerror(errno))))")
        } else {
            printError("docfs: aborted the FUSE connection of \(path): calls stuck in it fail now")
        }
    }

    /// Keeps the unsynced files in a recovery folder now, while the daemon may still be
    /// stuck (`cleanUp` finds them kept already).
    private func keepUnsynced(_ record: MountRecord) {
        do {
            let pending = try Catalog(path: record.catalogPath).items(in: [.modified, .uploading])
            guard !pending.isEmpty else { return }
            _ = try RecoveryFolder.keep(pending, cacheDirectory: record.cacheDirectory, stateDirectory: record.stateDirectory)
        } catch {
            // `cleanUp` tries again once the daemon has gone, and keeps every copy if it cannot.
            printError("docfs: cannot keep the unsynced files in a recovery folder yet (\(error))")
        }
    }

    /// Whether the daemon can still do anything: a killed daemon may linger as a zombie until
    /// its parent reaps it, and `kill(pid, 0)` succeeds on zombies.
    private func isAlive(_ pid: Int32) -> Bool {
        guard kill(pid, 0) == 0 || errno == EPERM else { return false }
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")") else { return true }
        let state = stat[stat.index(after: end)...].trimmingCharacters(in: .whitespaces).first
        return state != "Z" && state != "X"
    }

    /// Removes clean local copies a killed daemon left behind; copies with unsynced changes
    /// stay for the next mount, and are kept under their names in a recovery folder the user
    /// is told of.
    private func cleanUp(_ record: MountRecord, environment: [String: String]) {
        let pending: [Item]
        let pinned: [String]
        do {
            let catalog = try Catalog(path: record.catalogPath)
            pending = try catalog.items(in: [.modified, .uploading])
            pinned = try catalog.pinnedLocalItems().map(\.id)
        } catch {
            // Which copies hold changes is unknown: none is removed.
            printError("docfs: cannot read the journal (\(record.catalogPath): \(error)); every local copy is kept in "
                       + "\(record.cacheDirectory), and the next mount of \(record.store) uploads what it finds unsynced")
            MountRegistry.remove(record.mountpoint, environment: environment)
            return
        }
        // Pinned complete copies stay for the next mount, like unsynced ones.
        let keep = Set(pending.map(\.id)).union(pinned)
        MountLayout.clear(directory: record.cacheDirectory, keeping: keep)
        if !pending.isEmpty {
            do throws(FSError) {
                let folder = try RecoveryFolder.keep(pending, cacheDirectory: record.cacheDirectory, stateDirectory: record.stateDirectory)
                printError("docfs: \(pending.count) file(s) with changes not on the store yet are kept in \(folder ?? record.cacheDirectory) "
                    + "(under their names); the next mount of \(record.store) uploads them, then removes that folder")
                for item in pending {
                    let reason = item.uploadError.map { ": \($0)" } ?? ""
                    printError("docfs: kept \(item.path)\(reason)")
                }
            } catch {
                printError("docfs: \(pending.count) file(s) with changes not on the store yet are kept in \(record.cacheDirectory) "
                    + "(the recovery folder could not be made: \(error)); the next mount of \(record.store) uploads them")
            }
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

import Foundation

/// Backgrounding without `fork()` in a threaded process: `docfs mount` re-executes itself
/// with `--daemon-child`, reads the child's stderr until the child closes it, and then knows
/// the outcome — the child closes stderr only once the mount is ready (`detach`), or exits
/// with its one-line reason.
enum Daemon {
    /// `secrets` (see `SecretHandoff`) reach the child on its standard input, the only copy it gets.
    static func start(arguments: [String], mountpoint: String, secrets: Data = Data()) throws -> Never {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        for name in SecretHandoff.secretVariables { environment[name] = nil }
        process.environment = environment
        let pipe = Pipe()
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = pipe
        do {
            try process.run()
        } catch {
            fail("cannot start the background daemon: \(error.localizedDescription)")
        }
        // A few hundred bytes at most: the pipe's buffer takes them before the child reads.
        try? input.fileHandleForWriting.write(contentsOf: secrets)
        try? input.fileHandleForWriting.close()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        let message = String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if process.isRunning && MountTable.entry(at: mountpoint)?.type == MountTable.docfsType {
            if !message.isEmpty { printError(message) }
            exit(0)
        }
        process.waitUntilExit()
        printError(message.isEmpty ? "docfs: the daemon exited (status \(process.terminationStatus)) before the mount was ready" : message)
        exit(process.terminationStatus == 0 ? 1 : process.terminationStatus)
    }

    /// In the child, once mounted: stdout and stderr go to the log file, which closes the
    /// pipe the parent is reading and tells it the mount is ready.
    static func detach(logFile: String) {
        let fd = open(logFile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        let target = fd >= 0 ? fd : open("/dev/null", O_WRONLY)
        fflush(nil)  // every C stream, before their descriptors change
        dup2(target, STDOUT_FILENO)
        dup2(target, STDERR_FILENO)
        if target > STDERR_FILENO { close(target) }
    }
}

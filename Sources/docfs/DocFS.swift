import ArgumentParser

/// `docfs`: mount a remote document store as a directory, with placeholders.
@main
struct DocFS: AsyncParsableCommand {
    static let version = "0.1.0"

    static let configuration = CommandConfiguration(
        commandName: "docfs",
        abstract: "Mount a remote document store (WebDAV, S3, a local directory) as a directory of placeholders.",
        discussion: """
            Every entry starts as a placeholder: ls, stat and find show real names, sizes and \
            dates without downloading anything. The content is fetched on the first open() and \
            the local copy is removed again when the last handle is closed.

            Examples:
              docfs serve ~/Documents --port 8080          # a WebDAV server over a directory
              docfs mount http://127.0.0.1:8080/ ~/docs    # mount it (returns once mounted)
              ls -l ~/docs; cat ~/docs/notes.txt
              docfs unmount ~/docs
            """,
        version: version,
        subcommands: [MountCommand.self, UnmountCommand.self, ServeCommand.self, PinCommand.self, UnpinCommand.self, EvictCommand.self, StatusCommand.self]
    )

    /// `docfs STORE MOUNTPOINT -o OPTIONS`, the way mount.fuse3 and the mount.docfs helper run
    /// docfs for `mount -t fuse.docfs` and /etc/fstab, is `docfs mount` with its options
    /// taken out of `-o` (see `MountOptions`); every other command line is parsed as given.
    static func main() async {
        let arguments = CommandLine.arguments
        let subcommands = Set(configuration.subcommands.compactMap { $0.configuration.commandName } + ["help"])
        let invocation: MountInvocation
        do {
            invocation = try MountOptions.invocation(Array(arguments.dropFirst()), program: arguments.first ?? "docfs",
                                                     subcommands: subcommands)
        } catch {
            fail("\(error)")
        }
        if !invocation.ignored.isEmpty && !arguments.contains("--daemon-child") {
            printError("docfs: warning: ignored mount options (-s): \(invocation.ignored.joined(separator: ", "))")
        }
        if invocation.fake {
            // mount(8) -f: everything but the mount itself.
            do {
                _ = try parseAsRoot(invocation.arguments)
            } catch {
                exit(withError: error)
            }
            return
        }
        await main(invocation.arguments)
    }
}

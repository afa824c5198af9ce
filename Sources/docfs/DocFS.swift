import ArgumentParser

/// `docfs`: mount a remote document store as a directory, with placeholders.
@main
struct DocFS: AsyncParsableCommand {
    static let version = "0.1.0"

    static let configuration = CommandConfiguration(
        commandName: "docfs",
        abstract: "Mount a remote document store (WebDAV, a local directory) as a directory of placeholders.",
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
}

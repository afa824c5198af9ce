import ArgumentParser
import Logging

/// `--log-level trace|debug|info|notice|warning|error|critical`: swift-log's own level names,
/// so the option, `-o log_level=` and DOCFS_LOG_LEVEL all take the same words.
extension Logger.Level: @retroactive ExpressibleByArgument {}

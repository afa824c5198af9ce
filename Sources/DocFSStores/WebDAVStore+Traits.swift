// WebDAVStore+Traits: what a mount found out about its WebDAV server, in words, for
// `docfs status` (and so for the person who asks why an upload took a lock, or why a change on
// the server went unseen). Each trait is learnt once, from the first answer that shows it
// (WebDAVStore+Versions.swift, +ConditionalWrites.swift, WebDAVDeadProperties.swift); watchers
// hear of the whole list again whenever one is learnt.

import Synchronization

/// Who listens for what the store learns about its server, and what they heard last.
final class TraitWatch: Sendable {
    let watchers = Mutex<[@Sendable ([String]) -> Void]>([])
    let published = Mutex<[String]>([])
}

extension WebDAVStore {
    /// What the mount knows so far of how this server names versions, takes conditions, locks
    /// and keeps properties, one line each (`name: what`).
    public var serverTraits: [String] {
        var lines: [String] = []
        if versionSources.madeFromTimeAndSize.withLock({ $0 }) {
            lines.append("versions: made from modification time and size (the server lists no ETags): a change within the same second that keeps the size goes unseen")
        }
        if versionSources.getsWithoutVersion.withLock({ $0 }) {
            lines.append("downloads: checked by a PROPFIND before and after each (the server's GET names no version)")
        }
        if let locks = conditionProbe.locks.withLock({ $0 }) {
            lines.append("locks: " + (locks ? "the server has WebDAV locks: each upload over a version, and each new file, is written under one" : "none"))
        }
        if let kept = deadProperties.decided.withLock({ $0 }) {
            lines.append("mode and times: " + (kept ? "kept on the server as properties" : "kept by this mount only (the server refuses properties)"))
        }
        return lines
    }

    /// Calls `handler` with `serverTraits` whenever the store learns one more.
    public func whenServerTraitsChange(_ handler: @escaping @Sendable ([String]) -> Void) {
        traitWatch.watchers.withLock { $0.append(handler) }
    }

    /// Tells the watchers, if what the store knows changed since they last heard.
    func traitsMayHaveChanged() {
        let traits = serverTraits
        let changed = traitWatch.published.withLock { published in
            defer { published = traits }
            return published != traits
        }
        guard changed else { return }
        for watcher in traitWatch.watchers.withLock({ $0 }) { watcher(traits) }
    }
}

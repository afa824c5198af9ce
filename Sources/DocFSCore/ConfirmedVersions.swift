// ConfirmedVersions: the store's latest word on the version of a file whose pages the kernel
// keeps, so that an open right after another does not ask again.
//
// A reader's version is the store's at its open (close-to-open, as NFS does it): an open that
// finds the kernel holding pages of a version asks the store whether that is still the one
// (a PROPFIND or HEAD, one round trip). "At its open" is taken to last `--attr-timeout`, as the
// kernel already takes a file's size and times to last that long, and as davfs2 takes its
// `file_refresh` second: `git status` opens `.git/config` three times and `HEAD` four times
// within half a second, and each of those questions was a round trip to a store far away.

import DocFSStore
import Synchronization

final class ConfirmedVersions: Sendable {
    /// How long an answer holds; zero: every open asks.
    let trust: Duration
    private let answers = Mutex<[Inode: (entry: RemoteEntry, asked: ContinuousClock.Instant)]>([:])

    init(trust: Duration) {
        self.trust = trust
    }

    /// The store's answer about `inode` if it named `version` at `path` within `trust`, counted
    /// from when it was asked.
    func recent(_ inode: Inode, version: ETag, path: StorePath) -> RemoteEntry? {
        guard trust > .zero else { return nil }
        return answers.withLock { answers in
            guard let answer = answers[inode] else { return nil }
            guard ContinuousClock.now - answer.asked < trust else {
                answers[inode] = nil
                return nil
            }
            return answer.entry.etag == version && answer.entry.path == path ? answer.entry : nil
        }
    }

    /// The store named `entry` as the version of `inode` when asked at `asked`.
    func confirmed(_ inode: Inode, _ entry: RemoteEntry, asked: ContinuousClock.Instant) {
        guard trust > .zero else { return }
        answers.withLock { answers in
            if answers.count >= 4096 {
                let now = ContinuousClock.now
                answers = answers.filter { now - $0.value.asked < trust }
                if answers.count >= 4096 { answers.removeAll() }
            }
            answers[inode] = (entry, asked)
        }
    }
}

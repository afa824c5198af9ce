"""A docfs mount whose files are in every state a file manager shows: what the desktop tests
check the extensions against and what Tests/screenshot/desktop_emblems.py photographs.

The store is served by `docfs serve` behind Tests/integration's fault proxy; the states come
from real traffic: a read kept by --evict-delay (local), `docfs pin`, a throttled GET
(downloading), a PUT whose answer is held (uploading), a PUT refused with 403 (error, with
user.docfs.error), a file changed on the store while written through the mount (conflict)."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "Sources" / "desktop"))
import docfs_desktop as core  # noqa: E402
from helpers import pseudo_random_bytes, wait_until, xattr_state  # noqa: E402

BIG = 1_500_000
MOUNT_OPTIONS = ("--evict-delay", "600", "--dir-cache-ttl", "1", "--whole-file-limit", str(4 * BIG))
STORE_FILES = {"placeholder.txt": b"p", "local.txt": b"l" * 10, "pinned.txt": b"k" * 10,
               "downloading.zip": None, "uploading.txt": b"u", "conflict.txt": b"ours-to-be\n",
               "failing/other.txt": b"o", "kept/a.txt": b"a", "kept/b.txt": b"b",
               "mixed/x.txt": b"x", "mixed/y.txt": b"y", "quiet/z.txt": b"z"}


def write_store(store: Path) -> None:
    for rel, data in STORE_FILES.items():
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (store / rel).write_bytes(pseudo_random_bytes(BIG, seed=35) if data is None else data)


@dataclass
class EveryState:
    expected: dict[str, str]                       # relative path ("" the root) -> shown state
    reader: subprocess.Popen | None = field(default=None)

    def stop_download(self) -> None:
        if self.reader is not None and self.reader.poll() is None:
            self.reader.kill()
            self.reader.wait()


def build_every_state(mnt: Path, store: Path, proxy, pin: Callable[[Path], object], hold: float,
                      download_rate: int = 50_000) -> EveryState:
    """Puts the files of `mnt` (a mount of `store` through `proxy`, with MOUNT_OPTIONS) into
    every state; `pin(path)` runs `docfs pin`. uploading.txt stays `uploading` for `hold`
    seconds, downloading.zip `downloading` for BIG / download_rate seconds."""
    for folder in ("", "failing", "kept", "mixed", "quiet"):
        os.listdir(mnt / folder)
    (mnt / "local.txt").read_bytes()
    (mnt / "mixed" / "x.txt").read_bytes()
    pin(mnt / "pinned.txt")
    pin(mnt / "kept")

    # A conflict: ours written through the mount while another client changed theirs.
    with open(mnt / "conflict.txt", "r+b") as f:
        f.read()
        f.seek(0)
        f.write(b"OURS, written through docfs\n")
        (store / "conflict.txt").write_bytes(b"THEIRS, changed on the server meanwhile\n")
        os.utime(store / "conflict.txt", (1_700_000_123, 1_700_000_123))
    wait_until(lambda: [n for n in os.listdir(mnt) if core.CONFLICT_COPY.match(n)], 30,
               "the conflict copy of conflict.txt in the mount")

    # An upload the store refuses for good: user.docfs.error says why.
    proxy.respond(403, method="PUT", path=r"failing/error\.txt", body=b"quota")
    (mnt / "failing" / "error.txt").write_bytes(b"refused")
    wait_until(lambda: core.read_attribute(mnt / "failing" / "error.txt", core.ERROR), 30,
               "user.docfs.error on failing/error.txt")

    # An upload under way: the store took it, its answer is held.
    proxy.hold_answer(hold, method="PUT", path=r"uploading\.txt")
    (mnt / "uploading.txt").write_bytes(b"a change on its way")
    wait_until(lambda: xattr_state(mnt / "uploading.txt") == "uploading", 20, "uploading.txt to be uploading")

    # A download under way, throttled.
    proxy.throttle(download_rate, method="GET", path=r"downloading\.zip")
    reader = subprocess.Popen([sys.executable, "-c", f"open({str(mnt / 'downloading.zip')!r}, 'rb').read()"])
    made = EveryState({}, reader)
    try:
        wait_until(lambda: xattr_state(mnt / "downloading.zip") == "downloading", 20, "downloading.zip to be downloading")
    except AssertionError:
        made.stop_download()
        raise

    copy = next(n for n in os.listdir(mnt) if core.CONFLICT_COPY.match(n))
    made.expected = {
        "placeholder.txt": "placeholder", "local.txt": "local", "pinned.txt": "pinned",
        "downloading.zip": "downloading", "uploading.txt": "uploading",
        "conflict.txt": "conflict", copy: "conflict", "failing/error.txt": "error",
        "failing": "error", "kept": "pinned", "kept/a.txt": "pinned", "mixed": "placeholder",
        "mixed/x.txt": "local", "quiet": "placeholder", "": "uploading",
    }
    return made

"""Helpers shared by the integration tests: polling, trees, hashing, /proc/mounts, servers' logs.

Nothing here talks to FUSE by itself; conftest.py builds the fixtures on top of it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import re
import socket
import stat
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Callable, Iterable

REPO = Path(__file__).resolve().parents[2]


def docfs_bin() -> str:
    path = os.environ.get("DOCFS_BIN") or str(REPO / ".build" / "debug" / "docfs")
    return path


# --- waiting -------------------------------------------------------------------------------
#
# The one way the integration tests wait: `wait_until` polls a condition against a deadline
# and fails saying what it waited for. A check that something does NOT happen waits on a
# barrier instead of a sleep wherever one exists: a later request in a log (a fence), the
# daemon's own state (`user.docfs.state`, `user.docfs.transfers`, `docfs status`: no upload
# pending, no download under way), or a caller seen blocked in the kernel. A sleep left in a
# test is part of its scenario (a time window a retry or a timer must stay quiet in, mtimes
# that must differ) and says so.

def wait_until(predicate: Callable[[], object], timeout: float, what: str | Callable[[], str],
               interval: float = 0.05):
    """Polls `predicate` until it returns something truthy (and returns that); fails with
    `what` (a string, or a callable giving one at the time of failure, to show the state then)
    once `timeout` seconds passed. An exception in `predicate` counts as not yet, and the last
    one is reported."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as error:  # noqa: BLE001 - reported below if we time out
            last_error = error
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            described = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {described}{detail}")
        time.sleep(interval)


def downloads_under_way(mountpoint) -> list[str]:
    """The paths a docfs mount is downloading now (whole files, and the ranges of streamed
    ones), from `user.docfs.transfers` on its root. Empty: every GET the mount sent has been
    answered, and none is being retried."""
    value = os.getxattr(mountpoint, "user.docfs.transfers").rstrip(b"\0").decode()
    return [line.split("\t", 1)[-1] for line in value.splitlines() if line.strip()]


# Syscalls whose first argument is a file descriptor, by number: read, pread64, readv, write,
# pwrite64, fsync, fdatasync.
_FD_SYSCALLS = {"x86_64": {0, 17, 19, 1, 18, 74, 75}, "aarch64": {63, 67, 65, 64, 68, 82, 83}}


def blocked_on_mount(pid: int, mountpoint) -> bool:
    """Whether process `pid` sleeps in the kernel on the mount at `mountpoint`: in a request
    docfs has not answered yet (fuse's request_wait_answer: an open(), a lookup), or in a
    read() or write() of a file of the mount that waits for its pages (which the kernel asks
    docfs for). The barrier for "a caller is stuck in the mount now"."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().split(") ")[-1].split()[0]
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read().strip()
        with open(f"/proc/{pid}/syscall") as f:
            syscall = f.read().split()
    except OSError:
        return False
    if state not in ("S", "D") or not syscall or not syscall[0].isdigit():
        return False
    if "request_wait_answer" in wchan:
        return True
    if int(syscall[0]) not in _FD_SYSCALLS.get(os.uname().machine, set()):
        return False
    try:
        target = os.readlink(f"/proc/{pid}/fd/{int(syscall[1], 16)}")
    except (OSError, ValueError, IndexError):
        return False
    root = os.path.abspath(mountpoint)
    return target == root or target.startswith(root + "/")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: all bound at once, so the kernel cannot hand one out twice
    (one at a time, SeaweedFS once got the same port for two of its listeners, and died)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def closed_port() -> int:
    """A port nobody listens on (bound and closed again; good enough on a quiet machine)."""
    return free_port()


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# --- mounts and processes ------------------------------------------------------------------

def _unescape_mount_field(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_entries(mountpoint: str | os.PathLike) -> list[dict]:
    """Entries of /proc/self/mountinfo for this mount point (a list, since mounts can stack)."""
    target = os.path.realpath(mountpoint) if os.path.exists(mountpoint) else os.path.abspath(mountpoint)
    raw = os.path.abspath(mountpoint)
    entries = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            point = _unescape_mount_field(fields[4])
            if point in (target, raw):
                fstype, source = right.split()[:2]
                entries.append({"mountpoint": point, "device": fields[2], "fstype": fstype,
                                "source": _unescape_mount_field(source), "line": line.strip()})
    return entries


def is_mounted(mountpoint) -> bool:
    return bool(mount_entries(mountpoint))


def proc_mounts_lines(mountpoint) -> list[str]:
    """Lines of /proc/mounts naming this mount point (what `mount` shows)."""
    raw = os.path.abspath(mountpoint)
    with open("/proc/mounts") as f:
        return [l.strip() for l in f if _unescape_mount_field(l.split()[1]) == raw]


def pids_for(unique: str) -> list[int]:
    """PIDs of docfs processes (the program's name starts with `docfs`) whose command line
    contains `unique` (a per-test temp path), never our own: not a test's `mv` or `cat` of a path
    on the mount, whose command line holds both too."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        program = os.path.basename(argv[0].decode(errors="replace"))
        if program.startswith("docfs") and unique in b" ".join(argv).decode(errors="replace"):
            pids.append(int(entry))
    return pids


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except OSError:
        return False


def abort_fuse_connection(mountpoint) -> None:
    """Last resort for a hung mount: abort its FUSE connection so blocked syscalls return."""
    for entry in mount_entries(mountpoint):
        minor = entry["device"].split(":")[1]
        abort = Path(f"/sys/fs/fuse/connections/{minor}/abort")
        if not abort.exists() and os.geteuid() == 0:
            subprocess.run(["mount", "-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"],
                           capture_output=True, timeout=10)
        try:
            abort.write_text("1")
        except OSError:
            subprocess.run(["umount", "-f", entry["mountpoint"]], capture_output=True, timeout=10)


# --- files ---------------------------------------------------------------------------------

def sha256_file(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def regular_files_under(root) -> list[str]:
    """Every regular file below `root` (recursively); [] if root does not exist."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            try:
                if stat.S_ISREG(os.lstat(p).st_mode):
                    found.append(p)
            except FileNotFoundError:
                pass
    return found


def xattr_state(path) -> str:
    return os.getxattr(path, "user.docfs.state").rstrip(b"\0").decode().strip()


# A change not on the store yet, while the store fails: `modified` between tries, `uploading`
# during one (the uploader tries again after a short random wait).
NOT_ON_STORE_YET = ("modified", "uploading")


def upload_error(path) -> str | None:
    """`user.docfs.error` of a file on a mount: why its last upload failed (None: it did not)."""
    try:
        return os.getxattr(path, "user.docfs.error").rstrip(b"\0").decode()
    except OSError:
        return None


def wait_upload_failed(path, timeout: float = 30) -> str:
    """Barrier for "the change is not on the store": until the upload of `path` was tried and
    failed (`user.docfs.error` says why); returns the error."""
    return wait_until(lambda: upload_error(path), timeout,
                      lambda: f"an upload of {path} to be tried and fail (user.docfs.error; state now "
                              f"{xattr_state(path)!r})")


def drop_page_cache(path) -> None:
    """Makes the kernel forget the cached pages of `path` (a file on a mount), so that the next
    read reaches the filesystem (docfs keeps the kernel's pages across a close and reopen of an
    unchanged file, and answers nothing for reads they serve)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes, mtime: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def pseudo_random_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


@dataclasses.dataclass
class Tree:
    """A store directory and what the tests expect to find in it (relative POSIX paths)."""
    root: Path
    files: dict[str, int]           # path -> size
    mtimes: dict[str, int]          # path -> mtime (whole seconds)
    dirs: set[str]
    hashes: dict[str, str] = dataclasses.field(default_factory=dict)

    def entries(self) -> set[str]:
        return set(self.files) | self.dirs


def make_big_tree(root: Path, dirs: int = 20, files_per_dir: int = 50) -> Tree:
    """dirs x files_per_dir small files, plus a nested level with a few more: >= 1,000 entries."""
    rng = random.Random(1234)
    files: dict[str, int] = {}
    mtimes: dict[str, int] = {}
    dirset: set[str] = set()
    base = 1_600_000_000
    n = 0
    for d in range(dirs):
        dname = f"dir{d:02d}"
        dirset.add(dname)
        for i in range(files_per_dir):
            rel = f"{dname}/file{i:03d}.txt"
            size = rng.randrange(0, 3000)
            mtime = base + n * 3601
            write_file(root / rel, rng.randbytes(size), mtime)
            files[rel], mtimes[rel] = size, mtime
            n += 1
        nested = f"{dname}/nested"
        dirset.add(nested)
        dirset.add(f"{nested}/deeper")
        for rel in (f"{nested}/a.md", f"{nested}/deeper/b.bin"):
            size = rng.randrange(1, 5000)
            mtime = base + n * 3601
            write_file(root / rel, rng.randbytes(size), mtime)
            files[rel], mtimes[rel] = size, mtime
            n += 1
    return Tree(root, files, mtimes, dirset)


# Names that stress URL encoding, for the byte-identical tests.
SPECIAL_NAMES = [
    "with space.txt",
    "résumé 日本.txt",
    "100% sure.txt",
    "a%20b.txt",
    "hash #1 & plus+semi;colon.txt",
    "dir with space/ünïcødé dir/inner file.txt",
]

BIG_SIZE = 64 * 1024 * 1024 + 12345


def make_content_tree(root: Path) -> Tree:
    """Files for the byte-identity tests: empty, 1 byte, >= 64 MiB, awkward names, a few MiB."""
    specs: dict[str, bytes] = {
        "empty.txt": b"",
        "one.bin": b"\x7f",
        "small.txt": b"hello, docfs\n" * 100,
        "medium.bin": pseudo_random_bytes(8 * 1024 * 1024 + 7, 7),
        "big.bin": pseudo_random_bytes(BIG_SIZE, 64),
        "sub/dir/nested.txt": b"nested\n",
    }
    for i, name in enumerate(SPECIAL_NAMES):
        specs[name] = f"content of {name!r}\n".encode() * (i + 1)
    tree = Tree(root, {}, {}, set())
    base = 1_700_000_000
    for i, (rel, data) in enumerate(specs.items()):
        write_file(root / rel, data, base + i * 60)
        tree.files[rel] = len(data)
        tree.mtimes[rel] = base + i * 60
        tree.hashes[rel] = hashlib.sha256(data).hexdigest()
        parts = rel.split("/")[:-1]
        for k in range(1, len(parts) + 1):
            tree.dirs.add("/".join(parts[:k]))
    return tree


def walk_relative(root) -> set[str]:
    """All entries below root as relative POSIX paths (what `find` would print, minus root)."""
    out = set()
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


# --- request logs ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str        # decoded, leading '/', no trailing '/' (except the root)
    status: int | None
    range: str | None
    bytes: int | None = None   # body bytes sent, where the server logs them (docfs serve)


def normalize_path(path: str, decode: bool) -> str:
    path = path.split("?", 1)[0]
    if path.startswith("http://") or path.startswith("https://"):
        path = urllib.parse.urlsplit(path).path
    if decode:
        path = urllib.parse.unquote(path)
    if not path.startswith("/"):
        path = "/" + path
    if len(path) > 1:
        path = path.rstrip("/")
    return path


def summarize(requests: Iterable[Request]) -> str:
    counts: dict[str, int] = {}
    for r in requests:
        counts[r.method] = counts.get(r.method, 0) + 1
    return ", ".join(f"{m}={c}" for m, c in sorted(counts.items())) or "no requests"

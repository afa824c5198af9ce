"""Helpers for the write-path integration tests (test_write_*.py).

Builds on conftest.py / helpers.py (the read-path suite's harness) without changing them:
- restarting a server ON THE SAME PORT (so a mount's store URL stays valid),
- store-side checks: PUT/MOVE/GET counts per path, waiting for content to reach the server,
- errno parity: run one operation on a local ext4/tmpfs dir and on the mount, compare errnos,
- syscalls Python does not wrap: renameat2 (RENAME_NOREPLACE / RENAME_EXCHANGE), utimensat
  with UTIME_NOW / UTIME_OMIT.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from conftest import DocfsServer, RcloneServer, Server, run
from helpers import docfs_bin, port_open, summarize, wait_until, xattr_state

# --- servers -------------------------------------------------------------------------------


def restart_server(server: Server, timeout: float = 30) -> Server:
    """Starts a stopped server again on the SAME port, appending to the same request log."""
    server.stop()
    assert server.port, "the server never ran: no port to reuse"
    wait_until(lambda: not port_open(server.port), 10, f"port {server.port} to be free")
    if isinstance(server, DocfsServer):
        previews = ["--preview-cache", str(server.workdir / "previews")] if server.previews else ["--no-previews"]
        cmd = [docfs_bin(), "serve", str(server.root), "--port", str(server.port), "--host", "127.0.0.1",
               "--request-log", str(server.log_path), *previews]
    elif isinstance(server, RcloneServer):
        cmd = ["rclone", "serve", "webdav", str(server.root), "--addr", f"127.0.0.1:{server.port}",
               "-v", "--log-file", str(server.log_path), "--config", str(server.workdir / "rclone.conf")]
    else:
        raise AssertionError(f"do not know how to restart {server!r}")
    # Keep the first run's stdout/stderr (DocfsServer parses the URL line from it): new files.
    server.out_path = server.workdir / f"stdout.{time.monotonic_ns()}.log"
    server.err_path = server.workdir / f"stderr.{time.monotonic_ns()}.log"
    server._spawn(cmd)

    def listening():
        if not server.alive():
            raise AssertionError(f"{server.kind} exited {server.proc.returncode} on restart\n{server.diagnostics()}")
        return port_open(server.port)

    wait_until(listening, timeout, f"{server.kind} to listen again on port {server.port}")
    return server


def requests_for(server: Server, rel: str, method: str | None = None):
    want = "/" + rel.strip("/")
    return [r for r in server.requests() if r.path == want and (method is None or r.method == method)]


def puts(server: Server, rel: str):
    return requests_for(server, rel, "PUT")


def moves(server: Server, rel: str | None = None):
    return [r for r in server.requests() if r.method == "MOVE" and (rel is None or r.path == "/" + rel.strip("/"))]


def methods_log(server: Server, last: int = 40) -> str:
    return "\n".join(f"  {r.method} {r.path} {r.status or ''}" for r in server.requests()[-last:])


def wait_server_bytes(server: Server, rel: str, data: bytes, timeout: float = 30, what: str = "") -> None:
    """Polls the server's directory until `rel` holds exactly `data`."""
    path = server.root / rel

    def same():
        return path.is_file() and path.read_bytes() == data

    try:
        wait_until(same, timeout, f"{rel!r} on the {server.kind} store to hold the expected "
                                  f"{len(data)} bytes {what}")
    except AssertionError as error:
        have = path.read_bytes()[:200] if path.is_file() else "(missing)"
        raise AssertionError(f"{error}\nserver has: {have!r}\nstore dir: {sorted(os.listdir(server.root))}\n"
                             f"requests ({summarize(server.requests())}):\n{methods_log(server)}") from None


def wait_puts(server: Server, rel: str, count: int, mount, timeout: float = 30):
    """Waits until `count` PUTs of rel are logged, then until `mount` has no upload pending (a
    PUT more would be in the log by then); returns the PUTs of rel."""
    wait_until(lambda: len(puts(server, rel)) >= count, timeout,
               lambda: f"{count} PUT(s) of /{rel} in the {server.kind} log (have:\n{methods_log(server)})")
    mount.wait_uploads_done(timeout)
    return puts(server, rel)


def wait_state(path: Path, states: set[str] | str, timeout: float = 30) -> str:
    states = {states} if isinstance(states, str) else states
    return wait_until(lambda: (s := xattr_state(path)) in states and s, timeout,
                      f"user.docfs.state of {path} to be one of {sorted(states)}")


def server_files(root: Path) -> set[str]:
    out = set()
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


# --- errno parity ---------------------------------------------------------------------------

def errno_of(op: Callable[[], object]) -> int:
    """0 if `op` succeeds, else the errno of the OSError it raised."""
    try:
        op()
        return 0
    except OSError as error:
        return error.errno


def errno_name(code: int) -> str:
    return "OK" if code == 0 else errno.errorcode.get(code, str(code))


def compare_errno(setup: Callable[[Path], object], op: Callable[[Path], object], local: Path, mounted: Path):
    """Runs setup(base) then op(base) on a local dir and on a dir of the mount; returns both errnos."""
    results = []
    for base in (local, mounted):
        base.mkdir(parents=True, exist_ok=True)
        setup(base)
        results.append(errno_of(lambda: op(base)))
    return tuple(results)


# --- syscalls ------------------------------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}.get(platform.machine(), 316)
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2


def renameat2(old: Path, new: Path, flags: int) -> None:
    _libc.syscall.restype = ctypes.c_long
    r = _libc.syscall(ctypes.c_long(SYS_RENAMEAT2), ctypes.c_int(AT_FDCWD), ctypes.c_char_p(os.fsencode(old)),
                      ctypes.c_int(AT_FDCWD), ctypes.c_char_p(os.fsencode(new)), ctypes.c_uint(flags))
    if r != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(old))


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimensat(path: Path, atime: tuple[int, int], mtime: tuple[int, int]) -> None:
    """utimensat(AT_FDCWD, path, [atime, mtime], 0); each time is (sec, nsec), nsec may be UTIME_NOW/OMIT."""
    times = (Timespec * 2)(Timespec(*atime), Timespec(*mtime))
    r = _libc.utimensat(ctypes.c_int(AT_FDCWD), ctypes.c_char_p(os.fsencode(path)), times, ctypes.c_int(0))
    if r != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(path))


# --- daemons ---------------------------------------------------------------------------------

def sigkill_daemon(m) -> list[int]:
    """SIGKILLs the docfs daemon serving mount `m` (found by its unique mount point path)."""
    pids = m.daemon_pids()
    assert pids, f"no docfs daemon found for {m.path}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    from helpers import process_alive
    wait_until(lambda: not any(process_alive(p) for p in pids), 10, f"daemon {pids} to die")
    return pids


def git(*args, cwd=None, timeout=120, check=True):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", GIT_CONFIG_NOSYSTEM="1", HOME=os.environ.get("HOME", "/root"))
    return run(["git", *map(str, args)], timeout=timeout, env=env, check=check, cwd=cwd)


# --- a fresh, writable store per test ------------------------------------------------------

SEED_FILES = {
    "hello.txt": b"hello world\n" * 50,
    "notes.md": b"# notes\nline a\nline b\n",
    "data.bin": bytes(range(256)) * 40,
    "docs/report.txt": b"report v1: alpha beta gamma\n",
    "docs/sub/deep.txt": b"deep content\n",
    "other/keep.txt": b"keep me\n",
}


def make_store(root: Path, files: dict[str, bytes] | None = None) -> Path:
    files = SEED_FILES if files is None else files
    root.mkdir(parents=True, exist_ok=True)
    base = 1_650_000_000
    for i, (rel, data) in enumerate(files.items()):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (base + i * 10, base + i * 10))
    return root


def change_on_server(server: Server, rel: str, data: bytes, mtime: int) -> str:
    """Another client changes `rel` on the server (new size and mtime, so a new ETag).

    docfs serve reads its directory on every request: the file is changed in place on disk.
    rclone serve webdav caches its directory listing (VFS --dir-cache-time, 5 min by default) and
    would keep serving the old size/mtime/ETag for a file changed behind its back, so there the
    other client changes it through rclone itself (a plain HTTP PUT, X-OC-Mtime for the mtime).
    Returns how it was changed."""
    if isinstance(server, RcloneServer):
        import urllib.parse
        import urllib.request
        url = server.url + urllib.parse.quote(rel)
        req = urllib.request.Request(url, data=data, method="PUT", headers={"X-OC-Mtime": str(mtime)})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status in (200, 201, 204), resp.status
        assert (server.root / rel).read_bytes() == data
        return "HTTP PUT through rclone by another client"
    path = server.root / rel
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))
    return "written directly in the server's directory"

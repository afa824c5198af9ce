"""Callers never hang (issue 10): a stalled store costs a blocked process at most --io-timeout,
Ctrl-C and SIGKILL end it at once (FUSE interrupts), `docfs unmount --force` ends a mount with
callers stuck in it, and an upload the store refuses for good stops being sent and does not
hold `docfs unmount` up.

Every test runs docfs against `rclone serve webdav` through the project's fault proxy (fault_proxy.py),
which stalls answers (one body byte every few seconds) or answers 413. Each one is bounded in
time: a caller that does hang is killed and its mount's connection aborted, so the test fails
instead of hanging, and the mount fixture always unmounts.
"""
from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fault_proxy import FaultProxy
from helpers import abort_fuse_connection, blocked_on_mount, docfs_bin, is_mounted, pseudo_random_bytes, wait_until

pytestmark = pytest.mark.fuse

SMALL = 300_000          # fetched whole at open (under the 1 MiB whole-file limit)
BIG = 6 * 1024 * 1024    # streamed: its head at open, the rest by ranged reads
MARGIN = 3.0             # seconds allowed beyond a deadline (debug build, 2 cores)


@pytest.fixture
def stalling(tmp_path, rclone_serve, mount):
    """(mount, proxy, files): a mount of `rclone serve webdav` through a fault proxy, with small.bin
    and big.bin on the store. Call it with the mount's extra options."""
    proxies: list[FaultProxy] = []

    def start(*options):
        root = tmp_path / "store"
        root.mkdir()
        files = {"small.bin": pseudo_random_bytes(SMALL, 1), "big.bin": pseudo_random_bytes(BIG, 2)}
        for name, data in files.items():
            (root / name).write_bytes(data)
        server = rclone_serve(root)
        proxy = FaultProxy(upstream_port=server.port).start()
        proxies.append(proxy)
        m = mount(proxy.url, *options)
        assert sorted(os.listdir(m.path)) == sorted(files)
        return m, proxy, files

    yield start
    for proxy in proxies:
        proxy.stop()


class Caller:
    """A process of ours blocked in the mount: `cat FILE`, or a reader that opens, waits for a
    line on stdin, then reads everything. Killed (and the mount's connection aborted, which is
    what frees a process stuck in D state) if it outlives the test."""

    def __init__(self, args, mountpoint: Path):
        self.mountpoint = mountpoint
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.started = time.monotonic()

    @classmethod
    def cat(cls, path: Path, mountpoint: Path) -> "Caller":
        # SIGINT at its default action, whatever this run inherited: a shell without job control
        # starts background jobs with SIGINT ignored, Python keeps that, and exec passes it on,
        # so a plain `cat` never got the SIGINT (and the kernel never sent FUSE_INTERRUPT).
        code = ("import os, signal, sys\n"
                "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
                "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])\n"
                "os.execvp('cat', ['cat', sys.argv[1]])\n")
        return cls([sys.executable, "-c", code, str(path)], mountpoint)

    @classmethod
    def reader(cls, path: Path, mountpoint: Path) -> "Caller":
        # SIGINT as for cat (its default action), not Python's KeyboardInterrupt.
        code = ("import os, signal, sys\n"
                "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
                "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])\n"
                f"fd = os.open({str(path)!r}, os.O_RDONLY)\n"
                "print('opened', flush=True)\n"
                "sys.stdin.readline()\n"
                "n = 0\n"
                "while True:\n"
                "    try:\n"
                "        b = os.read(fd, 1 << 16)\n"
                "    except OSError as e:\n"
                "        print('error', e.errno, flush=True); sys.exit(3)\n"
                "    if not b: break\n"
                "    n += len(b)\n"
                "print('read', n, flush=True)\n")
        return cls([sys.executable, "-c", code], mountpoint)

    def wait_for_line(self, expected: str, timeout: float) -> None:
        """The caller's next line of output is `expected`; it comes within `timeout` s (a caller
        that neither prints nor ends fails here, instead of blocking the test in readline())."""
        wait_until(lambda: select.select([self.proc.stdout], [], [], 0)[0], timeout,
                   f"'{expected}' from the reader")
        line = self.proc.stdout.readline().decode().strip()
        assert line == expected, f"the reader said {line!r}, not {expected!r} (exit status {self.proc.poll()})"

    def wait_blocked(self, timeout: float, what: str) -> None:
        """Until the caller sleeps in the kernel waiting for docfs's answer (in open() or
        read() on the mount): the barrier for "it is stuck there now"."""
        state = wait_until(lambda: "ended" if self.proc.poll() is not None else blocked_on_mount(self.proc.pid, self.mountpoint),
                           timeout, f"{what}: the caller blocked in a request to docfs")
        assert state != "ended", f"{what}: the caller ended (exit status {self.proc.returncode}) instead of blocking"

    def go(self) -> None:
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def wait(self, timeout: float) -> float | None:
        """Seconds from `since` (default: start) until the process ended; None if it did not
        within `timeout` (it is then left running: see `finish`)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return time.monotonic() - self.started

    def finish(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                # Stuck in D state: only an abort of the connection frees it.
                abort_fuse_connection(self.mountpoint)
                self.proc.wait(timeout=10)


def stuck_cat(m, proxy: FaultProxy) -> "Caller":
    """A `cat` of small.bin stuck in open(): its GET stalls (the caller is checked still there)."""
    stall_gets(proxy, "small.bin")
    caller = Caller.cat(m / "small.bin", m.path)
    try:
        wait_until(lambda: proxy.count("GET", r"/small\.bin$") >= 1, 10, "the stalled GET")
        caller.wait_blocked(10, "cat of small.bin")
    except BaseException:
        caller.finish()
        raise
    return caller


def timed_force_unmount(m, xdg):
    """`docfs unmount --force` of `m`: its result and how long it took."""
    started = time.monotonic()
    result = xdg.docfs("unmount", "--force", m.path, timeout=60)
    return result, time.monotonic() - started


def stall_gets(proxy: FaultProxy, name: str):
    """Every GET of `name` from now on: the head, then a body byte every 5 s."""
    return proxy.stall(every=5.0, method="GET", path=rf"/{name}$")


# --- --io-timeout -------------------------------------------------------------------------

def test_open_of_a_stalled_file_fails_within_the_io_timeout(stalling):
    m, proxy, _ = stalling("--io-timeout", "5")
    stall_gets(proxy, "small.bin")
    caller = Caller.cat(m / "small.bin", m.path)
    try:
        took = caller.wait(timeout=5 + MARGIN + 10)
        assert took is not None, "cat of a stalled file still blocked in open() 18 s later (--io-timeout 5)"
        assert caller.proc.returncode != 0
        err = caller.proc.stderr.read().decode()
        assert os.strerror(errno.ETIMEDOUT) in err, err
        assert took <= 5 + MARGIN, f"open() failed after {took:.1f} s, not within --io-timeout 5 s"
        assert took >= 4.5, f"open() failed after {took:.1f} s, before --io-timeout 5 s"
        print(f"open() of a stalled file: ETIMEDOUT after {took:.2f} s")
    finally:
        caller.finish()
    # Nobody waits for that download any more: it was cancelled, and the store is asked again
    # (not answered from a half-fetched copy) by the next open, which succeeds once the stall ends.
    proxy.clear()
    assert (m / "small.bin").read_bytes() == pseudo_random_bytes(SMALL, 1)


def test_read_of_a_stalled_range_fails_within_the_io_timeout(stalling):
    m, proxy, _ = stalling("--io-timeout", "5")
    caller = Caller.reader(m / "big.bin", m.path)
    try:
        caller.wait_for_line("opened", 20)   # the head came, unstalled
        stall_gets(proxy, "big.bin")
        caller.started = time.monotonic()
        caller.go()
        took = caller.wait(timeout=5 + MARGIN + 10)
        assert took is not None, "read() of a stalled range still blocked 18 s later (--io-timeout 5)"
        out = caller.proc.stdout.read().decode()
        assert f"error {errno.ETIMEDOUT}" in out, out
        assert took <= 5 + MARGIN, f"read() failed after {took:.1f} s, not within --io-timeout 5 s"
        print(f"read() of a stalled range: ETIMEDOUT after {took:.2f} s")
    finally:
        caller.finish()


def test_open_with_the_store_unreachable_fails_with_ehostdown_within_the_io_timeout(stalling):
    m, proxy, _ = stalling("--io-timeout", "5")
    proxy.stop()   # connections refused from now on; the listing is already in the catalog
    caller = Caller.cat(m / "small.bin", m.path)
    try:
        took = caller.wait(timeout=5 + MARGIN + 10)
        assert took is not None, "cat with the store unreachable still blocked in open() 18 s later"
        err = caller.proc.stderr.read().decode()
        assert os.strerror(errno.EHOSTDOWN) in err, err
        assert took <= 5 + MARGIN, f"open() failed after {took:.1f} s, not within --io-timeout 5 s"
        print(f"open() with the store unreachable: EHOSTDOWN after {took:.2f} s")
    finally:
        caller.finish()


# --- interrupts ---------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_signal_ends_an_open_blocked_on_a_stalled_file(stalling, sig):
    m, proxy, _ = stalling("--io-timeout", "60")
    stall_gets(proxy, "small.bin")
    caller = Caller.cat(m / "small.bin", m.path)
    try:
        wait_until(lambda: proxy.count("GET", r"/small\.bin$") >= 1, 10, "the stalled GET")
        caller.wait_blocked(10, "cat in open(), waiting for the download")
        caller.started = time.monotonic()
        caller.proc.send_signal(sig)
        took = caller.wait(timeout=10)
        assert took is not None, f"cat blocked in open() did not end 10 s after {sig.name}"
        assert took < 1.5, f"cat ended {took:.1f} s after {sig.name}"
        assert caller.proc.returncode == -sig
        print(f"open() blocked on a stalled file: ended {took:.2f} s after {sig.name}")
    finally:
        caller.finish()
    # The mount still works, and the next open of the file is not stuck behind the first one.
    proxy.clear()
    assert (m / "small.bin").read_bytes() == pseudo_random_bytes(SMALL, 1)


def test_sigint_ends_a_read_blocked_on_a_stalled_range(stalling):
    m, proxy, _ = stalling("--io-timeout", "60")
    caller = Caller.reader(m / "big.bin", m.path)
    try:
        caller.wait_for_line("opened", 20)
        stall_gets(proxy, "big.bin")
        caller.go()
        wait_until(lambda: proxy.count("GET", r"/big\.bin$") >= 2, 10, "a stalled ranged GET")
        caller.wait_blocked(10, "the reader in read(), waiting for the stalled range")
        caller.started = time.monotonic()
        caller.proc.send_signal(signal.SIGINT)
        took = caller.wait(timeout=10)
        assert took is not None, "a reader blocked in read() did not end 10 s after SIGINT"
        assert took < 1.5, f"the reader ended {took:.1f} s after SIGINT"
        print(f"read() blocked on a stalled range: ended {took:.2f} s after SIGINT")
    finally:
        caller.finish()


# --- unmount --force ----------------------------------------------------------------------

def test_unmount_force_ends_a_mount_with_a_stuck_caller(stalling, xdg):
    m, proxy, _ = stalling("--io-timeout", "60")
    caller = stuck_cat(m, proxy)
    try:
        result, took = timed_force_unmount(m, xdg)
        assert result.returncode == 0, f"unmount --force exited {result.returncode}: {result.stderr}"
        assert not is_mounted(m.path), "still mounted after `docfs unmount --force`"
        assert took < 20, f"`docfs unmount --force` took {took:.1f} s"
        ended = caller.wait(timeout=5)
        assert ended is not None, "the stuck cat did not end when the mount went away"
        assert caller.proc.returncode != 0
        print(f"unmount --force with a caller stuck in open(): {took:.2f} s")
    finally:
        caller.finish()


def test_unmount_force_with_a_stuck_caller_keeps_an_unsynced_file_and_names_it(stalling, xdg):
    m, proxy, _ = stalling("--io-timeout", "60")
    proxy.respond(503, method="PUT", body=b"down")      # the change cannot reach the store
    data = b"not on the store yet\n" * 500
    target = m / "unsynced.txt"
    target.write_bytes(data)
    wait_until(lambda: _xattr(target, "user.docfs.error"), 20, "user.docfs.error on the unsynced file")
    caller = stuck_cat(m, proxy)
    try:
        result, took = timed_force_unmount(m, xdg)
        print(f"unmount --force, stuck caller, unsynced file: {took:.2f} s\n{result.stderr}")
        assert result.returncode == 0, f"unmount --force exited {result.returncode}: {result.stderr}"
        assert not is_mounted(m.path), "still mounted after `docfs unmount --force`"
        assert took < 20, f"`docfs unmount --force` took {took:.1f} s"
        assert caller.wait(timeout=5) is not None, "the stuck cat did not end when the mount went away"
        assert "unsynced.txt" in result.stderr, f"the message does not name the kept file: {result.stderr}"
        kept = list(xdg.state_home.glob("docfs/*/recovery/*/unsynced.txt"))
        assert kept, f"no recovery copy of unsynced.txt under {xdg.state_home}; stderr: {result.stderr}"
        assert kept[0].read_bytes() == data
    finally:
        caller.finish()


def _fusectl_mounted() -> bool:
    with open("/proc/self/mounts") as f:
        return any(line.split()[1:3] == ["/sys/fs/fuse/connections", "fusectl"] for line in f)


def test_unmount_force_mounts_fusectl_where_it_is_not_mounted(tmp_path, rclone_serve, mount, xdg):
    """`docfs unmount --force` runs in a mount namespace of its own where fusectl is not mounted
    (as on a system that never mounts it); the stuck mount lives under a shared tmpfs, so its
    unmount there reaches this namespace too. The machine's own fusectl mount is never touched."""
    if not _fusectl_mounted():
        pytest.skip("fusectl is not mounted here: this test unmounts it only in a namespace of its own")
    root = tmp_path / "store"
    root.mkdir()
    (root / "small.bin").write_bytes(pseudo_random_bytes(SMALL, 1))
    server = rclone_serve(root)
    proxy = FaultProxy(upstream_port=server.port).start()
    shared = tmp_path / "shared"
    shared.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(shared)], check=True, timeout=30)
    caller = None
    try:
        subprocess.run(["mount", "--make-shared", str(shared)], check=True, timeout=30)
        m = mount(proxy.url, "--io-timeout", "60", mountpoint=shared / "mnt")
        stall_gets(proxy, "small.bin")
        caller = Caller.cat(m / "small.bin", m.path)
        wait_until(lambda: proxy.count("GET", r"/small\.bin$") >= 1, 10, "the stalled GET")
        caller.wait_blocked(10, "cat of small.bin")
        # In the new namespace fusectl is a private copy: unmounting it there leaves ours alone.
        script = 'umount /sys/fs/fuse/connections && exec "$0" unmount --force "$1"'
        result = subprocess.run(["unshare", "--mount", "--propagation", "unchanged", "sh", "-c", script,
                                 docfs_bin(), str(m.path)], env=xdg.env, capture_output=True, text=True, timeout=60)
        print(f"unmount --force without fusectl: exit {result.returncode}\n{result.stderr}")
        assert _fusectl_mounted(), "the machine's fusectl mount was touched"
        assert result.returncode == 0, f"unmount --force exited {result.returncode}: {result.stderr}"
        assert "mounted the FUSE control filesystem" in result.stderr, result.stderr
        assert "aborted the FUSE connection" in result.stderr, result.stderr
        assert caller.wait(timeout=5) is not None, "the stuck cat did not end: the connection was not aborted"
        wait_until(lambda: not is_mounted(m.path), 10, "the mount to be gone here too")
    finally:
        if caller is not None:
            caller.finish()
        if is_mounted(shared / "mnt"):
            abort_fuse_connection(shared / "mnt")
            subprocess.run(["fusermount3", "-uz", str(shared / "mnt")], timeout=30)
        subprocess.run(["umount", "-l", str(shared)], timeout=30)
        proxy.stop()


# --- permanent upload failures ------------------------------------------------------------

def test_a_refused_upload_stops_and_does_not_hold_up_unmount(stalling, xdg):
    m, proxy, _ = stalling()
    proxy.respond(413, method="PUT")
    data = b"kept locally\n" * 1000
    target = m / "refused.txt"
    with open(target, "wb") as f:
        f.write(data)
    # close() returned 0 (the with block raised nothing); the upload fails after it.
    error = wait_until(lambda: _xattr(target, "user.docfs.error"), 20, "user.docfs.error on the refused file")
    assert "refused" in error and "413" in error, error
    puts = proxy.count("PUT", r"/refused\.txt$")
    assert puts >= 1
    # No barrier shows "never again": a window in which the old retry backoff (0.5, 1, 2, 4 s)
    # would have sent it 3 more times.
    time.sleep(6)
    assert proxy.count("PUT", r"/refused\.txt$") == puts, (
        f"a refused upload was sent again: {proxy.count('PUT', r'/refused.txt$')} PUTs, {puts} when refused")
    assert target.read_bytes() == data   # the change is still there, readable

    started = time.monotonic()
    result = m.unmount(timeout=60)
    took = time.monotonic() - started
    assert result.returncode == 0, f"docfs unmount exited {result.returncode}: {result.stderr}"
    assert took < 20, f"docfs unmount took {took:.1f} s"
    print(f"refused upload: {puts} PUT(s), unmount in {took:.2f} s")
    assert not is_mounted(m.path)
    assert "refused.txt" in result.stderr, result.stderr
    kept = list(xdg.state_home.glob("docfs/*/recovery/*/refused.txt"))
    assert kept, f"no recovery copy of refused.txt under {xdg.state_home}; stderr: {result.stderr}"
    assert kept[0].read_bytes() == data


def _xattr(path: Path, name: str) -> str | None:
    try:
        return os.getxattr(path, name).decode()
    except OSError:
        return None

"""`docfs status --watch` (issue 11, item 2): under a pseudo-terminal it redraws a progress bar
whose percent grows while a throttled download runs, follows a narrower window, and ends with a
message when the mount goes away; Ctrl-C ends it with the cursor shown again; on a pipe it prints
plain timestamped lines without escape codes. And an upload's progress (user.docfs.progress,
`status --json`, the watch) grows while a large file goes up to WebDAV through a throttled uplink,
and while a large file is copied into a local directory store."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from fault_proxy import FaultProxy
from helpers import docfs_bin, pseudo_random_bytes, wait_until

pytestmark = pytest.mark.fuse

ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


def set_size(fd: int, rows: int, columns: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


class Watch:
    """`docfs status --watch ...` on a pseudo-terminal of `columns` x `rows`, as a user runs it
    (the pty is its controlling terminal, so Ctrl-C on it is a SIGINT)."""

    def __init__(self, args: list[str], env: dict, columns: int = 100, rows: int = 30):
        pid, fd = pty.fork()
        if pid == 0:  # the child: a session of its own on the pty
            try:
                set_size(0, rows, columns)
                os.execve(docfs_bin(), [docfs_bin(), "status", "--watch", *args], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.output = b""
        self.status: int | None = None

    def pump(self, seconds: float) -> None:
        """Reads what the watch draws for `seconds` (or until it exits)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, min(0.1, end - time.monotonic())))
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the child closed the pty
                    chunk = b""
                if not chunk:
                    self.status = self.status if self.status is not None else os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
                    return
                self.output += chunk
            elif self.status is None:
                self.poll()

    def pump_until(self, predicate, timeout: float, what: str) -> None:
        """Reads what the watch draws until `predicate()` holds (within `timeout` s)."""
        wait_until(lambda: self.pump(0.1) or predicate(), timeout,
                   lambda: f"{what} (the watch drew: {self.text()[-500:]!r})", interval=0)

    def poll(self) -> int | None:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            self.pump(0.1)
        if self.status is not None:
            self.drain()
        return self.status

    def drain(self) -> None:
        """What the exited child left in the pty."""
        while select.select([self.fd], [], [], 0.2)[0]:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.output += chunk

    def text(self) -> str:
        return self.output.decode(errors="replace")

    def frames(self) -> list[list[str]]:
        """Each redraw (from cursor home on) as lines without escape codes."""
        return [[ESCAPE.sub("", line) for line in frame.replace("\r", "").split("\n")]
                for frame in self.text().split("\x1b[H")[1:]]

    def close(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


def percents(frames: list[list[str]], name: str) -> list[tuple[int, int]]:
    """(percent, widest line of the frame) of each frame that draws a bar for `name`."""
    seen = []
    for lines in frames:
        for line in lines:
            match = re.search(re.escape(name) + r"\s*\[[^\]]*\]\s+(\d+)%", line)
            if match:
                seen.append((int(match.group(1)), max(len(x) for x in lines)))
    return seen


def throttled_download(tmp_path, docfs_serve, mount, size: int, rate: int):
    root = tmp_path / "store"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "big.bin").write_bytes(pseudo_random_bytes(size, seed=21))
    server = docfs_serve(root)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    proxy.throttle(rate, method="GET", path=r"big\.bin")
    m = mount(proxy.url, "--whole-file-limit", str(10 * size))
    return m, proxy


def start_reader(path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"open({str(path)!r}, 'rb').read()"])


def test_watch_in_a_terminal_draws_a_growing_bar_and_ends_when_unmounted(tmp_path, docfs_serve, mount, xdg):
    size = 1_500_000
    m, proxy = throttled_download(tmp_path, docfs_serve, mount, size, rate=300_000)  # about 5 s
    watch = Watch(["--interval", "0.25", str(m.path)], xdg.env, columns=100, rows=30)
    try:
        watch.pump(1.0)
        reader = start_reader(m / "docs" / "big.bin")
        watch.pump(2.5)
        set_size(watch.fd, 30, 44)  # the window gets narrow halfway (SIGWINCH; the watch asks at each frame)
        wide_frames = len(watch.frames())
        deadline = time.monotonic() + 30
        while reader.poll() is None and time.monotonic() < deadline:
            watch.pump(0.2)
        assert reader.wait(timeout=5) == 0
        watch.pump(1.0)
        assert watch.poll() is None, f"the watch ended early: {watch.text()[-2000:]!r}"
        assert m.unmount().returncode == 0
        assert watch.wait(15) == 0, f"the watch did not end after the unmount: {watch.text()[-2000:]!r}"
    finally:
        watch.close()
        proxy.stop()
    frames = watch.frames()
    wide, narrow = percents(frames[:wide_frames], "big.bin"), percents(frames[wide_frames + 1:], "big.bin")
    print("a wide frame:", *frames[wide_frames // 2 + 1], "a narrow frame:", *frames[-2], sep="\n")
    print(f"{len(frames)} frames; percents wide {[p for p, _ in wide]}, narrow {[p for p, _ in narrow]}")
    values = [p for p, _ in wide + narrow]
    assert len(set(values)) >= 4, f"the bar did not grow visibly: {values}"
    assert values == sorted(values), f"the percent went backwards: {values}"
    assert any(0 < p < 100 for p in values), values
    assert all(width <= 100 for _, width in wide), wide
    assert narrow and all(width <= 44 for _, width in narrow), f"lines wider than the narrow window: {narrow}"
    text = watch.text()
    # Rate and time left, once two samples are known; the summary of the mount.
    assert re.search(r"big\.bin.*\d+%\s+[\d.]+ [KM]iB/s\s+ETA \d+s", ESCAPE.sub("", text)), "no rate and ETA"
    assert any("files " in line and "downloading=1" in line for frame in frames for line in frame)
    # The cursor was hidden while drawing, shown again at the end, and the end says why.
    assert text.startswith("\x1b[?25l"), text[:40]
    tail = text[text.rindex("\x1b[?25h"):]
    assert f"{m.path} is no longer mounted" in tail, tail


def test_ctrl_c_ends_the_watch_and_shows_the_cursor(tmp_path, docfs_serve, mount, xdg):
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.txt").write_bytes(b"a")
    m = mount(docfs_serve(root).url)
    watch = Watch([str(m.path)], xdg.env, columns=80, rows=24)
    try:
        watch.pump_until(lambda: "no transfers" in watch.text(), 15, "a frame saying 'no transfers'")
        os.write(watch.fd, b"\x03")  # Ctrl-C, as typed
        started = time.monotonic()
        assert watch.wait(5) == 0, watch.text()[-500:]
        took = time.monotonic() - started
    finally:
        watch.close()
    print(f"ended {took:.2f} s after Ctrl-C")
    # On a terminal that cannot move its cursor: plain lines.
    dumb = Watch([str(m.path)], dict(xdg.env, TERM="dumb"))
    try:
        dumb.pump_until(lambda: "\n" in dumb.text(), 15, "a first line")
        os.kill(dumb.pid, signal.SIGTERM)
        assert dumb.wait(5) == 0
    finally:
        dumb.close()
    assert "\x1b" not in dumb.text() and STAMP.match(dumb.text()), repr(dumb.text()[:200])
    # --json: one report per line; SIGTERM ends it as Ctrl-C does.
    reports = subprocess.Popen([docfs_bin(), "status", "--watch", "--json", "--interval", "0.2", str(m.path)],
                               env=xdg.env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        lines = [reports.stdout.readline() for _ in range(2)]
        reports.terminate()
        assert reports.wait(timeout=5) == 0
    finally:
        if reports.poll() is None:
            reports.kill()
            reports.wait()
    for line in lines:
        (mounted,) = json.loads(line)["mounts"]
        assert mounted["mountpoint"] == str(m.path) and mounted["transfers"] == [], line
    # Argument errors, before anything is watched.
    for args, message in [(["--interval", "2"], "--interval goes with --watch"),
                          (["--watch", "--interval", "0"], "--interval must be between")]:
        result = xdg.docfs("status", *args)
        assert result.returncode != 0 and message in result.stderr, (args, result.stderr)
    assert took < 2
    assert watch.text().rstrip().endswith("\x1b[?25h") or "\x1b[?25h" in watch.text()[-20:], repr(watch.text()[-80:])
    assert m.is_mounted()


def test_upload_progress_grows_and_a_piped_watch_prints_plain_lines(tmp_path, docfs_serve, mount, xdg):
    # The meter counts bytes handed to the network: the kernel's socket buffers on loopback take
    # the first ~6 MiB at once, so the file is large enough for the rest to go at the throttle's pace.
    size = 24 * 1024 * 1024
    root = tmp_path / "store"
    (root / "docs").mkdir(parents=True)
    server = docfs_serve(root)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    # About 8 s on the wire, whether it goes up at close or while it is written (a streamed
    # upload's body goes to a temporary name first).
    proxy.throttle_upload(3_000_000, method="PUT", path=r"up\.bin|\.docfs-upload-")
    m = mount(proxy.url)
    watch = subprocess.Popen([docfs_bin(), "status", "--watch", "--interval", "0.3", str(m.path)],
                             env=xdg.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        data = pseudo_random_bytes(size, seed=22)
        target = m / "docs" / "up.bin"
        with open(target, "wb") as f:
            f.write(data)
        seen: list[tuple[int, int]] = []
        states: list[str] = []  # what each sample found, for a failure's message
        status = None
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            state = os.getxattr(target, "user.docfs.state").decode().strip("\0 ")
            try:
                value = os.getxattr(target, "user.docfs.progress").decode()
            except OSError as error:
                value = None
                states.append(f"{state} ({error.strerror})")
            else:
                states.append(f"{state} {value}")
            if value:
                seen.append(tuple(map(int, value.split("/"))))
                if status is None and len(seen) >= 3:
                    status = json.loads(xdg.docfs("status", "--json", m.path).stdout)
            elif seen and state != "uploading":
                break
            time.sleep(0.2)   # the sampling period (the loop ends once the upload did, or at its deadline)
        wait_until(lambda: (root / "docs" / "up.bin").exists() and (root / "docs" / "up.bin").stat().st_size == size,
                   30, "the upload to reach the store")
        assert (root / "docs" / "up.bin").read_bytes() == data
        assert m.unmount().returncode == 0
        out, err = watch.communicate(timeout=15)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        proxy.stop()
    dones = [d for d, _ in seen]
    print(f"upload progress samples: {len(seen)}, first {seen[:3]}, last {seen[-3:]}")
    assert len(set(dones)) >= 4, f"upload progress did not grow visibly: {seen}; samples: {states}"
    assert dones == sorted(dones) and all(t == size for _, t in seen), seen
    assert any(0 < d < size for d in dones), seen
    (mounted,) = status["mounts"]
    (transfer,) = mounted["transfers"]
    assert transfer["path"] == "/docs/up.bin" and transfer["state"] == "uploading" and transfer["total"] == size, transfer
    # The piped watch: plain timestamped lines, no escape codes, the upload's bytes growing.
    text = out.decode()
    print(text[-1500:])
    assert "\x1b" not in text, repr(text[:200])
    lines = text.splitlines()
    assert lines and all(STAMP.match(line) for line in lines), lines[:5]
    ups = [int(x) for x in re.findall(r" up /docs/up\.bin (\d+)/" + str(size), text)]
    assert len(set(ups)) >= 3 and ups == sorted(ups), ups
    assert any("pending uploads" in line for line in lines)
    assert f"{m.path} is no longer mounted" in err.decode(errors="replace") + text, (text[-300:], err)


def test_upload_to_a_local_store_shows_its_progress(tmp_path, mount):
    """The local directory store counts what it copies too (it showed 0/TOTAL until the end):
    a large file's upload is sampled as fast as getxattr goes while it is `uploading`."""
    size = 96 * 1024 * 1024
    root = tmp_path / "store"
    root.mkdir()
    m = mount(root)
    target = m / "big.bin"
    data = pseudo_random_bytes(size, seed=23)
    with open(target, "wb") as f:
        f.write(data)
    samples: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    uploading = 0
    while time.monotonic() < deadline:
        state = os.getxattr(target, "user.docfs.state").decode().strip("\0 ")
        if state != "uploading":
            if uploading or (root / "big.bin").exists() and (root / "big.bin").stat().st_size == size:
                break
            continue
        uploading += 1
        try:
            samples.append(tuple(map(int, os.getxattr(target, "user.docfs.progress").decode().split("/"))))
        except OSError:
            pass
    print(f"{uploading} samples while uploading, {len(samples)} with progress: {sorted(set(samples))[:5]} ... {sorted(set(samples))[-3:]}")
    assert (root / "big.bin").read_bytes() == data
    assert samples, "no progress was readable while the file was uploading"
    assert all(t == size and 0 <= d <= size for d, t in samples), samples
    dones = [d for d, _ in samples]
    assert any(d > 0 for d in dones), f"the local store's upload stayed at 0: {sorted(set(samples))}"
    assert dones == sorted(dones), "the count went back"
    assert len({d for d in dones if 0 < d < size}) >= 3, f"no growing count: {sorted(set(dones))}"

"""State events for file managers (issue 35): the mount root's `user.docfs.events` names a Unix
socket that tells, one line per change, `PATH<TAB>STATE`, when an item's `user.docfs.state`
changes: a download starting and ending, an upload, a pin, an eviction, within a second."""
from __future__ import annotations

import os
import socket
import stat
import time
import urllib.parse

import pytest

from helpers import wait_until, xattr_state

pytestmark = pytest.mark.fuse


class Events:
    """A client of the events socket: the lines it got, with when each arrived."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.settimeout(0.1)
        self.buffer = b""
        self.lines: list[tuple[float, str, str]] = []

    def poll(self) -> None:
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return
        assert data, "the daemon closed the events socket"
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            path, _, state = line.partition(b"\t")
            self.lines.append((time.monotonic(), urllib.parse.unquote(path.decode()), state.decode()))

    def wait_for(self, path: str, state: str, since: float, timeout: float = 5.0) -> float:
        """Seconds from `since` until `path` was told to be `state`."""
        def told():
            self.poll()
            return next((when for when, p, s in self.lines if p == path and s == state and when >= since), None)
        return wait_until(told, timeout, f"an event saying {path} is {state}; got {self.lines[-8:]}", interval=0) - since

    def close(self) -> None:
        self.sock.close()


def test_state_changes_reach_a_listener_within_a_second(tmp_path, docfs_serve, mount, xdg):
    root = tmp_path / "store"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_bytes(b"alpha\n")
    (root / "docs" / "name with spaces & é.txt").write_bytes(b"beta\n")
    server = docfs_serve(root)
    m = mount(server.url)
    socket_path = os.getxattr(m.path, "user.docfs.events").decode()
    info = os.stat(socket_path)
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600, oct(info.st_mode)
    assert sorted(os.listdir(m / "docs")) == ["a.txt", "name with spaces & é.txt"]
    assert xattr_state(m / "docs") == "placeholder=2"
    events = Events(socket_path)
    try:
        latencies = {}
        # A read: downloaded, then evicted on its close.
        start = time.monotonic()
        assert (m / "docs" / "a.txt").read_bytes() == b"alpha\n"
        latencies["evicted after a read"] = events.wait_for("/docs/a.txt", "placeholder", start)
        # A pin: downloaded and kept.
        start = time.monotonic()
        result = xdg.docfs("pin", m / "docs" / "name with spaces & é.txt")
        assert result.returncode == 0, result.stderr
        latencies["pinned"] = events.wait_for("/docs/name with spaces & é.txt", "pinned", start)
        # A new file: modified while it is written, a placeholder once the store has it.
        start = time.monotonic()
        with open(m / "docs" / "new.txt", "wb") as f:
            f.write(b"gamma\n")
            f.flush()
            latencies["created"] = events.wait_for("/docs/new.txt", "modified", start)
            start = time.monotonic()
        latencies["uploaded"] = events.wait_for("/docs/new.txt", "placeholder", start)
        assert (root / "docs" / "new.txt").read_bytes() == b"gamma\n"
        # An eviction asked for.
        start = time.monotonic()
        result = xdg.docfs("evict", m / "docs" / "name with spaces & é.txt")
        assert result.returncode == 0, result.stderr
        latencies["evicted"] = events.wait_for("/docs/name with spaces & é.txt", "placeholder", start)
        print("seconds from the change to its event:", {k: round(v, 3) for k, v in latencies.items()})
        assert max(latencies.values()) < 1.0, latencies
    finally:
        events.close()
    assert m.unmount().returncode == 0
    assert not os.path.exists(socket_path), "the socket outlived the mount"

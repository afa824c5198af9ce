"""A writer that never writes fetches nothing (issue 9: a big file must not cost every byte).

`touch FILE` opens FILE for writing (O_WRONLY|O_CREAT, no O_TRUNC) and only sets its times:
it downloaded the whole file, 256 MiB for a 256 MiB file. A writer's handle now fetches the
content at its first read, write or truncate, so `touch` costs the store a time change only,
and `>>` (a write through such a handle) still appends to the whole content."""
from __future__ import annotations

import os
import subprocess

import pytest

from helpers import wait_until

pytestmark = pytest.mark.fuse

BIG = 64 << 20


def test_touch_of_a_big_placeholder_downloads_nothing(docfs_serve, mount, tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    big = root / "big.bin"
    with open(big, "wb") as f:
        f.truncate(BIG)
    (root / "log.txt").write_bytes(b"line 1\n")
    server = docfs_serve(root)
    m = mount(server.url)
    assert sorted(os.listdir(m.path)) == ["big.bin", "log.txt"]

    subprocess.run(["touch", "-d", "2021-02-03 04:05:06 UTC", str(m / "big.bin")], check=True, timeout=60)
    assert not server.gets("big.bin"), f"touch downloaded the file: {server.gets('big.bin')}"
    assert os.stat(m / "big.bin").st_mtime == 1612325106
    assert os.stat(m / "big.bin").st_size == BIG
    # docfs serve keeps a time it is given as a property of the file (PROPPATCH).
    wait_until(lambda: any(r.method == "PROPPATCH" and r.path == "/big.bin" for r in server.requests()), 20,
               "the time to reach the store")

    # A write through a writer's handle fetches the content first: an append keeps what was there.
    with open(m / "log.txt", "a") as f:
        f.write("line 2\n")
    wait_until(lambda: (root / "log.txt").read_bytes() == b"line 1\nline 2\n", 30, "the appended line to reach the store")
    assert len(server.gets("log.txt")) == 1

    assert not server.gets("big.bin")
    assert m.unmount().returncode == 0
    assert not m.xdg.cache_files()

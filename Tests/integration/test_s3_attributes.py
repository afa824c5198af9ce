"""POSIX attributes on S3 as s3fs keeps them: x-amz-meta-mode (decimal st_mode) and
x-amz-meta-mtime. A new file carries them in its own upload (no second request); a file already
on the bucket gets them by a copy onto itself; another machine (a fresh catalog) sees the mode
once the file has been opened (a listing does not carry object metadata)."""
from __future__ import annotations

import os
import stat

from helpers import wait_until
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures

import pytest

pytestmark = pytest.mark.fuse


def metadata(s3, key: str) -> dict:
    head = s3.head(key)
    return head["Metadata"] if head else {}


def test_s3_new_file_uploads_its_mode_and_mtime_with_the_content(s3, s3_mount):
    m = s3_mount()
    fd = os.open(m / "new.txt", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"hello")
    os.fchmod(fd, 0o600)
    os.close(fd)
    wait_until(lambda: "mode" in metadata(s3, "new.txt"), 30, "the upload with metadata")
    meta = metadata(s3, "new.txt")
    assert int(meta["mode"]) == stat.S_IFREG | 0o600, meta
    assert abs(float(meta["mtime"]) - os.stat(m / "new.txt").st_mtime) < 1, meta
    puts = s3.of_key("new.txt", "PUT")
    assert len(puts) == 1, f"mode and mtime travel with the content, in one PUT: {puts}"


def test_s3_chmod_and_touch_reach_the_bucket_and_another_machine(s3, s3_mount, xdg):
    s3.put_many({"old.txt": b"x" * 10})
    m = s3_mount()
    os.chmod(m / "old.txt", 0o604)
    os.utime(m / "old.txt", (1_600_000_000, 1_600_000_000))
    meta = metadata(s3, "old.txt")
    assert int(meta["mode"]) == stat.S_IFREG | 0o604, meta
    assert float(meta["mtime"]) == 1_600_000_000, meta
    assert s3.get("old.txt") == b"x" * 10, "attributes never change the content"
    assert m.unmount().returncode == 0

    # Another machine: a fresh catalog. The listing has no metadata; an open brings it.
    xdg.another_machine("other-machine")
    m2 = s3_mount()
    with open(m2 / "old.txt", "rb") as f:
        assert f.read() == b"x" * 10
    wait_until(lambda: stat.S_IMODE(os.stat(m2 / "old.txt").st_mode) == 0o604, 5, "the mode from the object's metadata")

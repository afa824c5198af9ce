"""POSIX attributes on S3 as s3fs keeps them: x-amz-meta-mode (decimal st_mode) and
x-amz-meta-mtime. A new file carries them in its own upload (no second request); a file already
on the bucket gets them by a copy onto itself; another machine (a fresh catalog) sees mode and time
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


def test_s3_a_time_set_on_one_machine_shows_on_another_once_the_file_is_read(s3, s3_mount, xdg):
    """A listing shows when each object was stored (`LastModified`); the time a client set
    (`x-amz-meta-mtime`) comes with the object's GET, and stays once read."""
    data = os.urandom(64 * 1024)  # above 4095 bytes: nothing asks a HEAD to tell it from a link
    s3.put_many({"touched.bin": data, "plain.bin": data})
    m = s3_mount()
    os.utime(m / "touched.bin", (1_600_000_000, 1_600_000_000))
    assert float(metadata(s3, "touched.bin")["mtime"]) == 1_600_000_000
    assert m.unmount().returncode == 0

    xdg.another_machine("other-machine")
    m2 = s3_mount()
    assert sorted(os.listdir(m2.path)) == ["plain.bin", "touched.bin"]
    listed = {name: os.stat(m2 / name).st_mtime_ns for name in ("plain.bin", "touched.bin")}
    assert listed["touched.bin"] != 1_600_000_000 * 1_000_000_000, "a listing carries no metadata"
    for name in ("plain.bin", "touched.bin"):
        with open(m2 / name, "rb") as f:
            assert f.read() == data
    wait_until(lambda: os.stat(m2 / "touched.bin").st_mtime_ns == 1_600_000_000 * 1_000_000_000, 5,
               "the time touched.bin carries, from its GET")
    # An object that carries no time of its own keeps the listing's, to the millisecond (a GET's
    # Last-Modified has whole seconds only).
    assert os.stat(m2 / "plain.bin").st_mtime_ns == listed["plain.bin"]
    # Evicted and listed again, the time stays.
    os.listdir(m2.path)
    assert os.stat(m2 / "touched.bin").st_mtime_ns == 1_600_000_000 * 1_000_000_000

"""S3 crash recovery and outages, against moto and SeaweedFS (the relay makes the server
unreachable: connections refused): a change written while the bucket is unreachable survives a
SIGKILL of the daemon and reaches the bucket after `docfs unmount` cleaned the stale mount and a
remount; without a crash, writes complete while the bucket is unreachable and go up once it is back."""
from __future__ import annotations

import os
import time

import pytest

from helpers import NOT_ON_STORE_YET, wait_until, wait_upload_failed, xattr_state
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures
from write_support import sigkill_daemon

pytestmark = pytest.mark.fuse


def test_s3_crash_with_unsynced_change_uploads_on_next_mount(s3, s3_mount):
    s3.put_many({"hello.txt": b"hello\n", "docs/a.txt": b"a\n"})
    m = s3_mount()
    assert sorted(os.listdir(m.path)) == ["docs", "hello.txt"]
    assert os.listdir(m / "docs") == ["a.txt"]      # known directories: creating in them needs no store
    data = os.urandom(1_234_567)
    s3.relay.block()
    try:
        started = time.monotonic()
        with open(m / "docs/crash.bin", "wb") as f:
            f.write(data)
        with open(m / "hello.txt", "wb") as f:        # O_TRUNC: no download needed
            f.write(b"changed before the crash\n")
        # hello.txt is small enough to be a link, and no lookup confirmed its kind yet: that
        # confirmation gives up on a store that refuses connections (it took 27 s).
        took = time.monotonic() - started
        assert took < 10, f"writing two files with the bucket unreachable took {took:.1f} s"
        wait_upload_failed(m / "docs/crash.bin")     # barrier: each upload was tried, and failed
        wait_upload_failed(m / "hello.txt")
        assert xattr_state(m / "docs/crash.bin") in NOT_ON_STORE_YET
        assert xattr_state(m / "hello.txt") in NOT_ON_STORE_YET
        pids = sigkill_daemon(m)
        wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 60,
                   f"the killed daemon {pids} to be reaped")
        result = m.unmount()
        assert result.returncode == 0, f"docfs unmount of a stale mount: {result.returncode} {result.stderr}"
        assert not m.is_mounted()
        cached = m.xdg.cache_files()
        assert any(open(p, "rb").read() == data for p in cached), f"the unsynced copy is gone: {cached}"
        assert s3.get("docs/crash.bin") is None
    finally:
        s3.relay.unblock()
    m2 = s3_mount()
    s3.wait_object("docs/crash.bin", data, timeout=60, what="(uploaded by the next mount)")
    s3.wait_object("hello.txt", b"changed before the crash\n", timeout=60)
    assert (m2 / "docs/crash.bin").read_bytes() == data
    result = m2.unmount()
    assert result.returncode == 0, result.stderr
    assert not m2.xdg.cache_files(), f"local copies left after a clean unmount: {m2.xdg.cache_files()}"


def test_s3_outage_writes_complete_then_upload(s3, s3_mount):
    s3.put_many({"keep.txt": b"keep\n"})
    m = s3_mount()
    os.listdir(m.path)
    s3.relay.block()
    try:
        started = time.monotonic()
        (m / "offline.txt").write_bytes(b"written while the bucket was unreachable\n")
        assert time.monotonic() - started < 10, "a write waited for the unreachable store"
        wait_upload_failed(m / "offline.txt")        # barrier: its upload was tried, and failed
        assert xattr_state(m / "offline.txt") in NOT_ON_STORE_YET
        assert s3.get("offline.txt") is None
    finally:
        s3.relay.unblock()
    s3.wait_object("offline.txt", b"written while the bucket was unreachable\n", timeout=60)
    wait_until(lambda: xattr_state(m / "offline.txt") in ("local", "placeholder"), 30, "offline.txt to settle")

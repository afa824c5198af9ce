"""Nothing is ever lost: conflicts keep both versions, a SIGKILLed daemon's unsynced change is
uploaded by the next mount, writes complete with the server down and go up when it returns, and
`docfs unmount` waits for uploads / refuses without --force / keeps the files with --force."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from helpers import NOT_ON_STORE_YET, wait_until, wait_upload_failed, xattr_state
from write_support import (SEED_FILES, change_on_server, make_store, methods_log, puts, restart_server, sigkill_daemon,
                           wait_server_bytes, wait_state)

pytestmark = pytest.mark.fuse

CONFLICT = re.compile(r"^report \(conflict \d{4}-\d{2}-\d{2} \d{6}\)\.txt$")


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "store")


def getxattr(path, name) -> str | None:
    try:
        return os.getxattr(path, name).rstrip(b"\0").decode()
    except OSError:
        return None


@pytest.mark.parametrize("how", ["read-write", "O_TRUNC"])
def test_conflict_keeps_both_versions(store_server, store, mount, how):
    server = store_server(store)
    m = mount(server.url, "--dir-cache-ttl", "1")
    target = m / "docs/report.txt"
    ours = b"OUR version, written through the mount\n" * 7
    theirs = b"THEIR version, changed directly on the server\n" * 3
    assert os.listdir(m / "docs")          # catalog knows the store version (ETag)

    f = open(target, "r+b" if how == "read-write" else "wb")
    try:
        if how == "read-write":
            assert f.read() == SEED_FILES["docs/report.txt"]
            f.seek(0)
            f.truncate()
        f.write(ours)
        f.flush()
        # Meanwhile somebody changes the file on the server: new size, new mtime -> new ETag.
        print("server-side change:", change_on_server(server, "docs/report.txt", theirs, 1_700_000_123))
    finally:
        f.close()

    def conflict_copies():
        return [n for n in os.listdir(store / "docs") if CONFLICT.match(n)]

    try:
        wait_until(lambda: conflict_copies(), 30, "a conflict copy in the store's docs/")
    except AssertionError as error:
        raise AssertionError(f"{error}\nstore docs/: {os.listdir(store / 'docs')}\n"
                             f"report.txt on the store: {(store / 'docs/report.txt').read_bytes()[:80]!r}\n"
                             f"{methods_log(server)}\n{m.log_tail(3000)}") from None
    m.wait_uploads_done()   # barrier: a second copy or a late overwrite would be on the store by then
    copies = conflict_copies()
    assert len(copies) == 1, copies
    assert (store / "docs/report.txt").read_bytes() == theirs, "the server's version was overwritten"
    assert (store / "docs" / copies[0]).read_bytes() == ours, "our version is not in the conflict copy"
    print(f"conflict copy: {copies[0]!r}")

    # The mount shows both once the listing is refreshed (--dir-cache-ttl 1).
    wait_until(lambda: set(os.listdir(m / "docs")) >= {"report.txt", copies[0]}, 15,
               f"the mount's docs/ to list report.txt and {copies[0]!r} (has {os.listdir(m / 'docs')})")
    assert getxattr(target, "user.docfs.conflict") == copies[0], \
        f"user.docfs.conflict is {getxattr(target, 'user.docfs.conflict')!r}"
    wait_until(lambda: target.read_bytes() == theirs, 15, "the mount to show the server's version under the name")
    assert (m / "docs" / copies[0]).read_bytes() == ours


def test_crash_sigkill_with_unsynced_change_uploads_on_next_mount(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    os.listdir(m.path)
    server.stop()                                   # the upload cannot happen
    data = os.urandom(1_234_567)
    with open(m / "crash.bin", "wb") as f:
        f.write(data)
    with open(m / "hello.txt", "wb") as f:          # O_TRUNC: no download needed
        f.write(b"changed before the crash\n")
    wait_upload_failed(m / "crash.bin")              # barrier: each upload was tried, and failed
    wait_upload_failed(m / "hello.txt")
    assert xattr_state(m / "crash.bin") in NOT_ON_STORE_YET, xattr_state(m / "crash.bin")
    assert xattr_state(m / "hello.txt") in NOT_ON_STORE_YET, xattr_state(m / "hello.txt")
    print(f"user.docfs.error while the server is down: {getxattr(m / 'crash.bin', 'user.docfs.error')!r}")

    pids = sigkill_daemon(m)
    # Where nobody reaps orphans at once (a container's PID 1), the killed daemon stays a zombie
    # for a while; wait until it is gone (test_stale_unmount_while_daemon_is_zombie covers that case).
    reaped = wait_reaped(pids, 60)
    print(f"killed daemon {pids} reaped after {reaped:.1f} s")
    result = m.unmount()                            # cleans the stale mount
    assert result.returncode == 0, f"docfs unmount of a stale mount: {result.returncode} {result.stderr}"
    assert not m.is_mounted()
    cached = m.xdg.cache_files()
    assert any(open(p, "rb").read() == data for p in cached), f"the unsynced copy is gone from the cache: {cached}"
    assert not (store / "crash.bin").exists()

    restart_server(server)                          # same port, same URL
    m2 = mount(server.url)
    started = time.monotonic()
    wait_server_bytes(server, "crash.bin", data, timeout=60, what="(uploaded by the next mount)")
    wait_server_bytes(server, "hello.txt", b"changed before the crash\n", timeout=60)
    print(f"pending uploads reached the store {time.monotonic() - started:.1f} s after the remount")
    assert (m2 / "crash.bin").read_bytes() == data
    wait_state(m2 / "crash.bin", {"local", "placeholder"})
    result = m2.unmount()
    assert result.returncode == 0, result.stderr
    assert not m2.xdg.cache_files(), f"local copies left after a clean unmount: {m2.xdg.cache_files()}"


def wait_reaped(pids, timeout) -> float:
    started = time.monotonic()
    wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), timeout,
               f"the killed daemon {pids} to be reaped by its parent")
    return time.monotonic() - started


def test_stale_unmount_while_daemon_is_zombie(store_server, store, mount):
    """`docfs unmount` right after the daemon was SIGKILLed, while its PID is still a zombie
    (un-reaped orphan, as under a container init): it must see the daemon is dead and clean up,
    not wait for uploads a dead daemon can never make."""
    server = store_server(store)
    m = mount(server.url)
    os.listdir(m.path)
    server.stop()
    with open(m / "z.bin", "wb") as f:
        f.write(b"zombie test\n")
    wait_upload_failed(m / "z.bin")                  # the upload is pending: tried, and failed
    pids = sigkill_daemon(m)
    zombie = [p for p in pids if os.path.exists(f"/proc/{p}")]
    started = time.monotonic()
    result = m.unmount(timeout=150)
    took = time.monotonic() - started
    print(f"daemon still a zombie at unmount: {bool(zombie)}; docfs unmount: exit {result.returncode} "
          f"after {took:.1f} s\n{result.stderr}")
    if not zombie:
        pytest.skip("the killed daemon was reaped at once here: the zombie case cannot be shown")
    assert result.returncode == 0, (f"docfs unmount of a stale mount whose daemon is a zombie: exit "
                                    f"{result.returncode} after {took:.1f} s: {result.stderr}")
    assert not m.is_mounted()
    restart_server(server)
    mount(server.url)
    wait_server_bytes(server, "z.bin", b"zombie test\n", timeout=60)


def test_server_down_writes_complete_then_upload_when_back(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    os.listdir(m / "docs")
    server.stop()
    data = os.urandom(300_000)
    t0 = time.monotonic()
    with open(m / "docs/offline.bin", "wb") as f:
        f.write(data)
    with open(m / "notes.md", "wb") as f:
        f.write(b"offline edit\n")
    elapsed = time.monotonic() - t0
    assert elapsed < 10, f"writes + close with the server down took {elapsed:.1f} s"
    wait_upload_failed(m / "docs/offline.bin")       # barrier: its upload was tried, and failed
    assert xattr_state(m / "docs/offline.bin") in NOT_ON_STORE_YET

    restart_server(server)
    started = time.monotonic()
    wait_server_bytes(server, "docs/offline.bin", data, timeout=60, what="(after the server came back)")
    wait_server_bytes(server, "notes.md", b"offline edit\n", timeout=60)
    print(f"pending uploads went through {time.monotonic() - started:.1f} s after the server came back")
    wait_state(m / "docs/offline.bin", {"local", "placeholder"})

    # `docfs unmount` waits for uploads still pending.
    big = os.urandom(8 * 1024 * 1024)
    with open(m / "last.bin", "wb") as f:
        f.write(big)
    result = m.unmount(timeout=120)
    assert result.returncode == 0, result.stderr
    print(f"docfs unmount stderr: {result.stderr.strip()!r}")
    assert (store / "last.bin").is_file() and (store / "last.bin").read_bytes() == big, \
        "docfs unmount returned before the pending upload reached the store"


def test_unmount_refuses_when_store_unreachable_then_force_keeps_files(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    os.listdir(m.path)
    server.stop()
    data = os.urandom(50_000)
    with open(m / "unsynced.bin", "wb") as f:
        f.write(data)
    wait_upload_failed(m / "unsynced.bin")           # the upload is pending: tried, and failed

    started = time.monotonic()
    result = m.unmount(timeout=60)
    took = time.monotonic() - started
    print(f"docfs unmount with the store down: exit {result.returncode} after {took:.1f} s\n{result.stderr}")
    assert result.returncode == 1, f"expected exit 1, got {result.returncode}: {result.stdout} {result.stderr}"
    assert took < 15, f"docfs unmount took {took:.1f} s to refuse"
    assert "--force" in result.stderr + result.stdout
    assert m.is_mounted(), "docfs unmount refused but unmounted anyway"
    assert (m / "unsynced.bin").read_bytes() == data

    result = m.xdg.docfs("unmount", "--force", m.path, timeout=60)
    assert result.returncode == 0, f"docfs unmount --force: {result.returncode} {result.stderr}"
    print(f"docfs unmount --force: {result.stdout.strip()!r} {result.stderr.strip()!r}")
    assert not m.is_mounted()
    kept = [p for p in m.xdg.cache_files() if open(p, "rb").read() == data]
    assert kept, f"--force dropped the unsynced file: cache holds {m.xdg.cache_files()}"
    assert not (store / "unsynced.bin").exists()
    # The message names a recovery folder that holds the file under its own name.
    named = re.search(r"kept in (/.*?) \(under their names\)", result.stderr)
    assert named, f"no recovery folder named: {result.stderr!r}"
    recovery = Path(named.group(1))
    assert (recovery / "unsynced.bin").read_bytes() == data

    restart_server(server)
    m2 = mount(server.url)
    wait_server_bytes(server, "unsynced.bin", data, timeout=60, what="(uploaded by the next mount)")
    assert (m2 / "unsynced.bin").read_bytes() == data
    wait_until(lambda: not recovery.exists(), 15, "the next mount to remove the recovery folder once the file is on the store")
    result = m2.unmount()
    assert result.returncode == 0, result.stderr

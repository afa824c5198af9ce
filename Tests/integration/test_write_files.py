"""Write path, file content and attributes: one PUT per closed file and no GET for new files or
O_TRUNC, O_EXCL, O_APPEND, truncate/ftruncate, utimensat (explicit, UTIME_NOW, UTIME_OMIT) and
chmod/chown kept across an unmount + remount. Checked on the store side (server dir + log)."""
from __future__ import annotations

import errno
import os
import time

import pytest

from helpers import wait_until, xattr_state
from write_support import (SEED_FILES, UTIME_NOW, UTIME_OMIT, make_store, methods_log, puts, requests_for,
                           utimensat, wait_puts, wait_server_bytes, wait_state)

pytestmark = pytest.mark.fuse


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "store")


def close_ns(got: int, want: int, tolerance: int = 1000) -> bool:
    """Equal within 1 µs (docfs keeps times as Double seconds: see test_utimensat_keeps_nanoseconds)."""
    return abs(got - want) <= tolerance


def remount(m, mount, server):
    result = m.unmount()
    assert result.returncode == 0, f"docfs unmount: {result.returncode} {result.stderr}"
    assert not m.is_mounted()
    return mount(server.url)


def test_create_write_close_one_put_no_get(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    data = os.urandom(100_000)
    fd = os.open(m / "new.bin", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    try:
        for i in range(0, len(data), 4096):          # many write() calls, one upload
            os.write(fd, data[i:i + 4096])
    finally:
        os.close(fd)
    wait_server_bytes(server, "new.bin", data)
    got = wait_puts(server, "new.bin", 1, m)
    assert len(got) == 1, f"expected exactly one PUT of /new.bin, got {len(got)}:\n{methods_log(server)}"
    assert not requests_for(server, "new.bin", "GET"), f"a new file was downloaded:\n{methods_log(server)}"
    wait_state(m / "new.bin", {"local", "placeholder"})
    assert os.stat(m / "new.bin").st_size == len(data)
    with open(m / "new.bin", "rb") as f:
        assert f.read() == data


def test_o_excl_on_existing_file(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    with pytest.raises(OSError) as info:
        os.open(m / "hello.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    assert info.value.errno == errno.EEXIST
    m.wait_uploads_done()   # barrier: an upload it caused would have been sent by then
    assert (store / "hello.txt").read_bytes() == SEED_FILES["hello.txt"]
    assert not puts(server, "hello.txt")


def test_o_trunc_does_not_download(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    with open(m / "hello.txt", "wb") as f:           # O_WRONLY|O_CREAT|O_TRUNC
        f.write(b"replaced\n")
    wait_server_bytes(server, "hello.txt", b"replaced\n")
    got = wait_puts(server, "hello.txt", 1, m)
    assert len(got) == 1, methods_log(server)
    assert not requests_for(server, "hello.txt", "GET"), f"O_TRUNC downloaded the old content:\n{methods_log(server)}"


def test_o_append(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    with open(m / "notes.md", "ab") as f:
        f.write(b"appended 1\n")
    expected = SEED_FILES["notes.md"] + b"appended 1\n"
    wait_server_bytes(server, "notes.md", expected)
    fd = os.open(m / "notes.md", os.O_WRONLY | os.O_APPEND)
    try:
        os.lseek(fd, 0, os.SEEK_SET)                 # O_APPEND ignores the offset
        os.write(fd, b"appended 2\n")
    finally:
        os.close(fd)
    expected += b"appended 2\n"
    wait_server_bytes(server, "notes.md", expected)
    assert (m / "notes.md").read_bytes() == expected


@pytest.mark.parametrize("how", ["truncate", "ftruncate"])
@pytest.mark.parametrize("size", [0, 1000])
def test_truncate(store_server, store, mount, how, size):
    server = store_server(store)
    m = mount(server.url)
    original = SEED_FILES["data.bin"]
    assert len(original) > size
    if how == "truncate":
        os.truncate(m / "data.bin", size)
    else:
        with open(m / "data.bin", "r+b") as f:
            os.ftruncate(f.fileno(), size)
            assert os.fstat(f.fileno()).st_size == size
    assert os.stat(m / "data.bin").st_size == size
    wait_server_bytes(server, "data.bin", original[:size])
    assert len(wait_puts(server, "data.bin", 1, m)) == 1, methods_log(server)
    if size == 0 and how == "truncate":
        # truncate(path, 0) needs no content; an open(O_RDWR) + ftruncate downloads on open (it may read).
        assert not requests_for(server, "data.bin", "GET"), f"truncate to 0 downloaded:\n{methods_log(server)}"
    # Grow again: the hole reads as zeros.
    os.truncate(m / "data.bin", size + 100)
    wait_server_bytes(server, "data.bin", original[:size] + b"\0" * 100)


def test_utimensat_explicit_now_omit_survive_remount(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    a_ns, m_ns = 1_500_000_000_123_456_789, 1_400_000_000_987_654_321

    # explicit times (os.utime with ns)
    os.utime(m / "hello.txt", ns=(a_ns, m_ns))
    st = os.stat(m / "hello.txt")
    assert close_ns(st.st_atime_ns, a_ns) and close_ns(st.st_mtime_ns, m_ns), (st.st_atime_ns, st.st_mtime_ns)

    # UTIME_OMIT for atime, explicit mtime
    utimensat(m / "notes.md", (0, UTIME_OMIT), (1_300_000_000, 5))
    st = os.stat(m / "notes.md")
    assert close_ns(st.st_mtime_ns, 1_300_000_000_000_000_005)
    before_atime = st.st_atime_ns

    # UTIME_NOW for mtime, UTIME_OMIT for atime
    t0 = time.time_ns()
    utimensat(m / "notes.md", (0, UTIME_OMIT), (0, UTIME_NOW))
    st = os.stat(m / "notes.md")
    assert st.st_atime_ns == before_atime, "UTIME_OMIT changed atime"
    assert abs(st.st_mtime_ns - t0) < 5_000_000_000, f"UTIME_NOW: mtime {st.st_mtime_ns} vs now {t0}"
    now_mtime = st.st_mtime_ns

    # os.utime(path) with no times = both UTIME_NOW
    os.utime(m / "data.bin")
    st = os.stat(m / "data.bin")
    assert abs(st.st_mtime_ns - time.time_ns()) < 5_000_000_000
    assert abs(st.st_atime_ns - time.time_ns()) < 5_000_000_000
    data_times = (st.st_atime_ns, st.st_mtime_ns)

    m.wait_uploads_done()   # the uploads are done (times go to the store within the syscall)
    m2 = remount(m, mount, server)
    st = os.stat(m2 / "hello.txt")
    assert close_ns(st.st_atime_ns, a_ns) and close_ns(st.st_mtime_ns, m_ns), \
        f"explicit times lost on remount: {(st.st_atime_ns, st.st_mtime_ns)} != {(a_ns, m_ns)}"
    st = os.stat(m2 / "notes.md")
    assert st.st_mtime_ns == now_mtime and st.st_atime_ns == before_atime
    st = os.stat(m2 / "data.bin")
    assert (st.st_atime_ns, st.st_mtime_ns) == data_times
    # Setting times uploads no content.
    assert not any(r.method == "PUT" for r in server.requests()), methods_log(server)


def test_utimensat_keeps_nanoseconds(store_server, store, mount):
    """ext4 keeps utimensat times to the nanosecond (cp -p, rsync -t, make, tar compare them)."""
    server = store_server(store)
    m = mount(server.url)
    a_ns, m_ns = 1_500_000_000_123_456_789, 1_400_000_000_987_654_321
    os.utime(m / "hello.txt", ns=(a_ns, m_ns))
    st = os.stat(m / "hello.txt")
    assert (st.st_atime_ns, st.st_mtime_ns) == (a_ns, m_ns), \
        f"utimensat lost precision: got {(st.st_atime_ns, st.st_mtime_ns)}, set {(a_ns, m_ns)}"


def test_utime_of_new_file_after_write_survives(store_server, store, mount):
    """cp -p / tar set mtime right after writing: the upload must not clobber the mtime."""
    server = store_server(store)
    m = mount(server.url)
    with open(m / "copied.txt", "wb") as f:
        f.write(b"copied\n")
    os.utime(m / "copied.txt", ns=(1_234_567_890_000_000_000, 1_234_567_890_000_000_000))
    wait_server_bytes(server, "copied.txt", b"copied\n")
    m.wait_uploads_done()   # barrier: the upload is recorded, nothing more will replace the mtime
    assert os.stat(m / "copied.txt").st_mtime_ns == 1_234_567_890_000_000_000
    m2 = remount(m, mount, server)
    assert os.stat(m2 / "copied.txt").st_mtime_ns == 1_234_567_890_000_000_000


def test_chmod_chown_survive_remount(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    os.chmod(m / "hello.txt", 0o600)
    os.chmod(m / "docs", 0o750)
    assert os.stat(m / "hello.txt").st_mode & 0o7777 == 0o600
    ctime_before = os.stat(m / "notes.md").st_ctime_ns
    time.sleep(0.05)   # the scenario: the chmod comes measurably later
    os.chmod(m / "notes.md", 0o640)
    assert os.stat(m / "notes.md").st_ctime_ns >= ctime_before, "chmod must not move ctime backwards"
    chown_ok = True
    try:
        os.chown(m / "notes.md", 1234, 5678)
    except PermissionError:
        chown_ok = False
    if os.geteuid() == 0:
        assert chown_ok, "chown as root failed"
        st = os.stat(m / "notes.md")
        assert (st.st_uid, st.st_gid) == (1234, 5678)
    m2 = remount(m, mount, server)
    assert os.stat(m2 / "hello.txt").st_mode & 0o7777 == 0o600
    assert os.stat(m2 / "docs").st_mode & 0o7777 == 0o750
    assert os.stat(m2 / "notes.md").st_mode & 0o7777 == 0o640
    if chown_ok:
        st = os.stat(m2 / "notes.md")
        assert (st.st_uid, st.st_gid) == (1234, 5678), f"owner lost on remount: {st.st_uid}:{st.st_gid}"
    assert not any(r.method == "PUT" for r in server.requests()), methods_log(server)


def test_fsync_uploads_synchronously(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    with open(m / "synced.txt", "wb") as f:
        f.write(b"first\n")
        f.flush()
        os.fsync(f.fileno())
        assert (store / "synced.txt").read_bytes() == b"first\n", "fsync returned before the upload"
        assert xattr_state(m / "synced.txt") != "modified"
        f.write(b"second\n")
    wait_server_bytes(server, "synced.txt", b"first\nsecond\n")
    got = wait_puts(server, "synced.txt", 2, m)
    assert len(got) == 2, f"fsync + close: expected 2 PUTs, got {len(got)}:\n{methods_log(server)}"


@pytest.mark.parametrize("setattr_call", ["fchmod", "futimens", "fchown"])
def test_setattr_on_open_written_file_keeps_size(store_server, store, mount, setattr_call):
    """cp -p / mv / rsync / tar: create, write, then fchmod/futimens/fchown on the open fd, close,
    read back at once. The setattr reply must carry the size written so far, or the kernel
    caches a stale size and the file reads as empty until the attributes expire."""
    server = store_server(store)
    m = mount(server.url)
    data = os.urandom(200_000)
    fd = os.open(m / "attrs.bin", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        if setattr_call == "fchmod":
            os.fchmod(fd, 0o644)
        elif setattr_call == "futimens":
            os.utime(fd, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
        else:
            os.fchown(fd, os.getuid(), os.getgid())
        size_in_fstat = os.fstat(fd).st_size
    finally:
        os.close(fd)
    size_after = os.stat(m / "attrs.bin").st_size
    got = (m / "attrs.bin").read_bytes()
    assert (size_in_fstat, size_after, len(got)) == (len(data), len(data), len(data)), \
        f"after {setattr_call}: fstat size {size_in_fstat}, stat size {size_after}, read {len(got)} bytes; wrote {len(data)}"
    assert got == data
    wait_server_bytes(server, "attrs.bin", data)


def test_stat_while_writing_shows_written_size(store_server, store, mount):
    """fstat/stat of a file that is open and being written show the size written so far
    (as on ext4): tools (sqlite, git, tail -f, ls -l) rely on it."""
    server = store_server(store)
    m = mount(server.url)
    fd = os.open(m / "growing.log", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"x" * 5000)
        sizes = [os.fstat(fd).st_size, os.stat(m / "growing.log").st_size]
        os.write(fd, b"y" * 5000)
        sizes += [os.fstat(fd).st_size, os.stat(m / "growing.log").st_size]
    finally:
        os.close(fd)
    assert sizes == [5000, 5000, 10000, 10000], f"sizes seen while writing: {sizes}"
    # An existing file opened for writing too.
    with open(m / "notes.md", "ab") as f:
        f.write(b"z" * 100)
        f.flush()
        assert os.fstat(f.fileno()).st_size == len(SEED_FILES["notes.md"]) + 100

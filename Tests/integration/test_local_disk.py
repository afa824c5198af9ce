"""The local disk fails docfs: it fills up, or someone removes docfs's cache while it is mounted.

docfs keeps two things on the local disk: the catalog and journal (SQLite, in the state
directory) and the local copies (the cache directory). Each can fill up. An operation that
needs the space then fails with ENOSPC, which tells the user what to do (free some space),
never with a bare EIO; what was saved before stays saved; and once there is space again,
everything works as before without a remount. The disks are small tmpfs mounts of their own,
so filling one fills nothing else.

A user freeing space may also remove the cache directory itself (`rm -rf ~/.cache/*`), or a
cleaner of old files may: docfs makes it again, and a change waiting for its upload still
reaches the store."""
from __future__ import annotations

import errno
import os
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from helpers import wait_until, xattr_state

pytestmark = pytest.mark.fuse


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(name, mib) -> a directory on a tmpfs of that size, unmounted at teardown."""
    made: list[Path] = []

    def make(name: str, mib: int) -> Path:
        path = tmp_path / name
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}M,mode=0700", "tmpfs", str(path)], check=True)
        made.append(path)
        return path

    yield make
    for path in reversed(made):
        # Lazily: the docfs mount that used it is gone by now, or going (its fixture ends first).
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """Fills `disk` up to its last byte with one file, and returns that file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while os.write(fd, b"\0" * size) == size:
                    pass
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
    finally:
        os.close(fd)
    return filler


def errno_of(call) -> int | None:
    try:
        call()
    except OSError as error:
        return error.errno
    return None


def test_a_full_state_disk_says_enospc_and_nothing_saved_is_lost(docfs_serve, mount, xdg, small_disk, tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.txt").write_bytes(b"placeholder\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_bytes(b"in a folder never listed\n")
    server = docfs_serve(root)
    xdg.state_home = small_disk("state", 8)
    xdg.env["XDG_STATE_HOME"] = str(xdg.state_home)
    m = mount(server.url)
    assert sorted(os.listdir(m.path)) == ["a.txt", "sub"]

    # A file saved before the disk fills, and kept open.
    log = os.open(m / "log.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(log, b"saved before\n")
    os.fsync(log)

    filler = fill(xdg.state_home)
    assert errno_of(lambda: (m / "new.txt").write_bytes(b"x")) == errno.ENOSPC
    assert errno_of(lambda: (m / "a.txt").read_bytes()) == errno.ENOSPC
    assert errno_of(lambda: os.write(log, b"written while full\n")) == errno.ENOSPC
    # (MKCOL comes before the catalog's row: the folder is made on the store even so.)
    assert errno_of(lambda: os.mkdir(m / "made")) == errno.ENOSPC
    # What the catalog already holds still shows.
    assert {"a.txt", "log.txt", "sub"} <= set(os.listdir(m.path))
    assert os.stat(m / "a.txt").st_size == len(b"placeholder\n")

    # Space again: everything works, with no remount.
    filler.unlink()
    os.write(log, b"written after\n")
    os.close(log)
    (m / "new.txt").write_bytes(b"new\n")
    assert (m / "a.txt").read_bytes() == b"placeholder\n"
    assert (m / "sub" / "b.txt").read_bytes() == b"in a folder never listed\n"
    wait_until(lambda: (root / "log.txt").read_bytes() == b"saved before\nwritten after\n", 30, "log.txt to reach the store")
    wait_until(lambda: (root / "new.txt").read_bytes() == b"new\n", 30, "new.txt to reach the store")
    assert m.unmount().returncode == 0
    assert not xdg.cache_files()


def test_a_full_cache_disk_says_enospc_and_leaves_no_partial_copy(docfs_serve, mount, xdg, small_disk, tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    big = os.urandom(6 << 20)
    (root / "big.bin").write_bytes(big)
    (root / "small.txt").write_bytes(b"small\n")
    server = docfs_serve(root)
    cache = small_disk("cache", 4)
    m = mount(server.url, "--cache-dir", cache)

    def local_copies():
        return [p for p in cache.rglob("*") if p.is_file()]

    # Reading a file larger than the cache disk: ENOSPC, and its partial copy goes.
    assert errno_of(lambda: (m / "big.bin").read_bytes()) == errno.ENOSPC
    wait_until(lambda: not local_copies(), 10, "the partial copy to go")

    # Writing more than it holds: ENOSPC for the write, as on any disk. What was written is
    # kept and uploaded.
    data = os.urandom(6 << 20)
    with pytest.raises(OSError) as raised:
        with open(m / "written.bin", "wb") as f:
            f.write(data)
    assert raised.value.errno == errno.ENOSPC

    def partly_stored():
        stored = root / "written.bin"
        return stored.exists() and 0 < stored.stat().st_size < len(data) and data.startswith(stored.read_bytes())
    wait_until(partly_stored, 30, "what was written to reach the store")
    wait_until(lambda: not local_copies(), 30, "the uploaded copy to be evicted")

    # And the mount goes on as before.
    assert (m / "small.txt").read_bytes() == b"small\n"
    (m / "fits.bin").write_bytes(data[: 1 << 20])
    wait_until(lambda: (root / "fits.bin").exists() and (root / "fits.bin").read_bytes() == data[: 1 << 20], 30,
               "fits.bin to reach the store")
    assert server.gets("big.bin"), "the big file was asked for"
    assert m.unmount().returncode == 0
    assert not local_copies(), "unmount leaves no local copy"


def test_an_upload_the_catalog_could_not_record_completes_once_there_is_space(docfs_serve, mount, xdg, small_disk, tmp_path):
    """The store took an upload, and the full disk kept the catalog from recording it. That
    attempt failed, and a later one must still start: once there is space, the file is clean,
    evicted, and not taken for someone else's change (no conflict copy)."""
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.txt").write_bytes(b"old\n")
    server = docfs_serve(root)
    xdg.state_home = small_disk("state", 8)
    xdg.env["XDG_STATE_HOME"] = str(xdg.state_home)
    m = mount(server.url)
    assert os.listdir(m.path) == ["a.txt"]

    os.kill(server.proc.pid, signal.SIGSTOP)  # the upload waits for the server
    try:
        (m / "a.txt").write_bytes(b"new\n")
        wait_until(lambda: xattr_state(m / "a.txt") == "uploading", 20, "the upload to start")
        filler = fill(xdg.state_home)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    wait_until(lambda: (root / "a.txt").read_bytes() == b"new\n", 30, "the store to take the upload")
    # Barrier: its answer came, and the catalog could not record it (the daemon says so).
    m.wait_log_line("upload failed", "disk is full", "path=/a.txt")
    filler.unlink()

    wait_until(lambda: xattr_state(m / "a.txt") == "placeholder", 40, "a.txt to be clean again")
    assert not xdg.cache_files()
    assert sorted(os.listdir(root)) == ["a.txt"], "no conflict copy"
    assert (m / "a.txt").read_bytes() == b"new\n"
    assert m.unmount().returncode == 0


def test_a_cache_directory_removed_while_mounted_is_made_again(docfs_serve, mount, xdg, tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.txt").write_bytes(b"placeholder\n")
    (root / "b.txt").write_bytes(b"waits\n")
    server = docfs_serve(root)
    m = mount(server.url)
    assert sorted(os.listdir(m.path)) == ["a.txt", "b.txt"]
    assert (m / "a.txt").read_bytes() == b"placeholder\n"

    # A change waiting for its upload (the server does not answer) when the cache goes.
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        (m / "b.txt").write_bytes(b"changed\n")
        shutil.rmtree(xdg.cache_root)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)

    assert (m / "a.txt").read_bytes() == b"placeholder\n"
    (m / "new.txt").write_bytes(b"new\n")
    wait_until(lambda: (root / "new.txt").exists() and (root / "new.txt").read_bytes() == b"new\n", 30, "new.txt to reach the store")
    wait_until(lambda: (root / "b.txt").read_bytes() == b"changed\n", 40, "the waiting change to reach the store")
    assert (m / "b.txt").read_bytes() == b"changed\n"
    assert stat.S_IMODE(os.stat(xdg.cache_root).st_mode) == 0o700
    assert m.unmount().returncode == 0
    assert not xdg.cache_files()


def test_an_eviction_the_catalog_could_not_record_is_recorded_once_there_is_space(docfs_serve, mount, xdg, small_disk, tmp_path):
    """The last close of a file evicts its copy; with the state disk full the catalog could not
    say so, and the file showed `local` (no copy on disk) until it was next opened."""
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.txt").write_bytes(b"read once\n")
    server = docfs_serve(root)
    xdg.state_home = small_disk("state", 8)
    xdg.env["XDG_STATE_HOME"] = str(xdg.state_home)
    m = mount(server.url)
    with open(m / "a.txt", "rb") as f:
        assert f.read() == b"read once\n"
        assert xattr_state(m / "a.txt") == "local"
        filler = fill(xdg.state_home)
    wait_until(lambda: not xdg.cache_files(), 10, "the copy to go at the last close")
    m.wait_log_line("cannot record eviction")   # barrier: the catalog could not say so
    filler.unlink()
    wait_until(lambda: xattr_state(m / "a.txt") == "placeholder", 15, "a.txt to show as a placeholder again")
    assert m.unmount().returncode == 0

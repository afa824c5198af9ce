"""Issue 30: a writer's change belongs to the version it opened.

A program that opens a file for writing without reading it first (`>>`, `dd conv=notrunc`,
`truncate` through a handle) computed its writes from the version the kernel showed it at the
open. Another client replaces the file between that open and the write; the store must then
hold both versions, theirs under the name and ours as exactly one `NAME (conflict …)`, and no
file may hold bytes of both. On landed main before this test, the store ended with ours written
into theirs (`serlocal\\n` for an append) and no conflict copy.

Stores: a local directory, the WebDAV servers `docfs serve`, `rclone serve webdav`, Apache
`mod_dav`, nginx `dav-ext`, lighttpd `mod_webdav` and sabre/dav, and moto (S3), through real mounts. Each writer also waits past a listing and a lookup of the file (which move the
catalog to their version) before it writes.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import pseudo_random_bytes, wait_until
from s3_support import s3, s3_mount  # noqa: F401 - fixtures
from test_nothing_lost import s3_server, start_remote  # noqa: F401 - moto only
from write_support import make_store

pytestmark = pytest.mark.fuse


class LocalRemote:
    """A local directory as the store; "another client" writes into it directly."""

    kind = "local"

    def __init__(self, root: Path, mount):
        self.root = root
        self._mount = mount

    def mount(self, *options):
        return self._mount(str(self.root), *options)

    def replace(self, rel: str, data: bytes, mtime: int) -> str:
        path = self.root / rel
        temporary = path.with_name(path.name + ".other-client")
        temporary.write_bytes(data)
        os.utime(temporary, (mtime, mtime))
        os.replace(temporary, path)
        return "replaced in the directory"

    def get(self, rel: str) -> bytes | None:
        p = self.root / rel
        return p.read_bytes() if p.is_file() else None

    def names(self) -> list[str]:
        return sorted(n for n in os.listdir(self.root) if (self.root / n).is_file())

    def log(self) -> str:
        return "local directory"


@pytest.fixture(params=["local", "docfs-serve", "rclone", "apache", "nginx", "lighttpd", "sabre", "moto"])
def remote(request, tmp_path):
    """remote(files) -> a store holding `files` (top-level names), with mount() for it."""
    def start(files: dict[str, bytes]):
        if request.param == "local":
            return LocalRemote(make_store(tmp_path / "store", files), request.getfixturevalue("mount"))
        return start_remote(request.param, request, tmp_path, files)

    return start


def conflict_copies(remote, stem: str) -> list[str]:
    return [n for n in remote.names() if n.startswith(f"{stem} (conflict ")]


def their_change_is_seen(m, remote, name: str, theirs: bytes) -> None:
    """Another client replaces `name`, and listings and lookups here run before the writer
    writes (with a TTL of 0 each `ls` lists again, and the catalog moves to their version while
    the writer's handle stays on the version it opened; `stat` shows the open copy's size)."""
    before = etag(m / name)
    remote.replace(name, theirs, mtime=1_700_000_500)

    def moved() -> bool:
        assert name in os.listdir(m.path)
        os.stat(m / name)
        return etag(m / name) != before
    # Barrier: the catalog has their version (every store here shows a version in user.docfs.etag).
    wait_until(moved, 20, lambda: f"a listing to bring their version of {name} (user.docfs.etag still {before!r})",
               interval=0.2)
    assert name in os.listdir(m.path)    # and one more listing and lookup on top
    os.stat(m / name)


def etag(path: Path) -> str:
    return os.getxattr(path, "user.docfs.etag").decode()


def settled(remote, name: str, theirs: bytes, ours: bytes) -> None:
    stem = name.rsplit(".", 1)[0]

    def both_kept() -> bool:
        copies = conflict_copies(remote, stem)
        return remote.get(name) == theirs and len(copies) == 1 and remote.get(copies[0]) == ours

    wait_until(both_kept, 60, f"theirs under {name} and ours as one conflict copy "
                              f"(store: {remote.names()}, {name} holds {remote.get(name)!r:.80})\n{remote.log()}")


def mounted(remote, files):
    store = remote(files)
    return store, store.mount("--dir-cache-ttl", "0", "--attr-timeout", "0", "--entry-timeout", "0")


def test_an_append_after_their_change_keeps_both(remote):
    store, m = mounted(remote, {"log.txt": b"v1\n"})
    assert (m / "log.txt").read_bytes() == b"v1\n"
    fd = os.open(m / "log.txt", os.O_WRONLY | os.O_APPEND)
    try:
        their_change_is_seen(m, store, "log.txt", b"server\n")
        assert os.write(fd, b"local\n") == 6
    finally:
        os.close(fd)
    settled(store, "log.txt", b"server\n", b"v1\nlocal\n")
    assert m.unmount().returncode == 0


def test_a_blind_pwrite_after_their_change_keeps_both(remote):
    store, m = mounted(remote, {"c.txt": b"v1-content!"})
    fd = os.open(m / "c.txt", os.O_RDWR)
    try:
        their_change_is_seen(m, store, "c.txt", b"THEIRS-longer-version")
        assert os.pwrite(fd, b"XY", 0) == 2
    finally:
        os.close(fd)
    settled(store, "c.txt", b"THEIRS-longer-version", b"XY-content!")
    assert m.unmount().returncode == 0


def test_a_blind_ftruncate_after_their_change_keeps_both(remote):
    store, m = mounted(remote, {"t.txt": b"0123456789"})
    fd = os.open(m / "t.txt", os.O_RDWR)
    try:
        their_change_is_seen(m, store, "t.txt", b"THEIRS-0123456789")
        os.ftruncate(fd, 5)
    finally:
        os.close(fd)
    settled(store, "t.txt", b"THEIRS-0123456789", b"01234")
    assert m.unmount().returncode == 0


def test_an_append_lands_after_the_last_byte_of_the_version_opened(remote):
    """The kernel still has the old size when the file is opened for appending (their change
    came after the last lookup): the append lands after their last byte, not in it."""
    store, m = mounted(remote, {"log.txt": b"v1\n"})
    assert os.stat(m / "log.txt").st_size == 3
    store.replace("log.txt", b"server\n", mtime=1_700_000_500)
    with open(m / "log.txt", "ab") as f:
        f.write(b"local\n")
    wait_until(lambda: store.get("log.txt") == b"server\nlocal\n", 60,
               f"the append after their version (store has {store.get('log.txt')!r})\n{store.log()}")
    assert not conflict_copies(store, "log")
    assert (m / "log.txt").read_bytes() == b"server\nlocal\n"
    assert m.unmount().returncode == 0


STREAMED = 3 << 20


def test_a_blind_write_into_a_streamed_file_never_lands_on_their_version(remote):
    """A large file's content is not fetched at a writer's open (`dd conv=notrunc` over a disk
    image): the bytes it did not write are fetched from the version opened, which is gone, so
    the conflict copy holds ours and zeros, never a byte of theirs."""
    ours = pseudo_random_bytes(STREAMED, seed=30)
    theirs = pseudo_random_bytes(STREAMED + 1000, seed=31)
    store, m = mounted(remote, {"disk.img": ours})
    fd = os.open(m / "disk.img", os.O_WRONLY | os.O_APPEND)
    closed = None
    try:
        their_change_is_seen(m, store, "disk.img", theirs)
        os.write(fd, b"TAIL")
    finally:
        try:
            os.close(fd)
        except OSError as error:
            closed = error  # ESTALE: the rest of the version opened could not be fetched
    assert closed is None or closed.errno == 116, closed

    def kept() -> bytes | None:
        copies = conflict_copies(store, "disk")
        return store.get(copies[0]) if len(copies) == 1 else None

    # Some servers (sabre/dav, lighttpd) write a PUT's body in place as it arrives: wait for all of it.
    wait_until(lambda: kept() is not None and len(kept()) == STREAMED + 4, 60,
               f"one whole conflict copy (store: {store.names()})\n{store.log()}")
    assert store.get("disk.img") == theirs, "their version stays under the name"
    mine = kept()
    assert len(mine) == STREAMED + 4 and mine.endswith(b"TAIL")
    assert all(mine[i] in (ours[i], 0) for i in range(0, STREAMED, 4099)), "a byte of theirs in ours"
    assert m.unmount().returncode == 0
    assert not m.xdg.cache_files()


@pytest.mark.parametrize("change", ["chmod", "touch"])
def test_an_attribute_change_after_their_change_replaces_nothing(remote, change):
    """A chmod or touch that reaches the store (a metadata copy on S3, a PROPPATCH on WebDAV,
    chmod on a local directory) while a file is open here goes onto their version when
    another client changed it first: the open copy keeps the version it opened, and its
    upload is kept next to theirs."""
    store, m = mounted(remote, {"m.txt": b"mine-base"})
    fd = os.open(m / "m.txt", os.O_RDWR)
    try:
        store.replace("m.txt", b"THEIRS", mtime=1_700_000_500)
        if change == "chmod":
            os.chmod(m / "m.txt", 0o600)
        else:
            os.utime(m / "m.txt", (1_600_000_000, 1_600_000_000))
        assert os.pwrite(fd, b"MINE", 0) == 4
    finally:
        os.close(fd)
    settled(store, "m.txt", b"THEIRS", b"MINE-base")
    assert m.unmount().returncode == 0

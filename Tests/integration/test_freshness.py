"""Freshness: directory listings are revalidated after --dir-cache-ttl, a file changed on the
store is fetched anew on open (never the old bytes, never cut at the old size), and a remount
with the server already gone still shows the cached tree."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from helpers import wait_until, xattr_state

pytestmark = pytest.mark.fuse


@pytest.fixture
def own_tree(tmp_path):
    """A small tree this test may change (the session trees are read-only)."""
    root = tmp_path / "store"
    (root / "folder").mkdir(parents=True)
    (root / "doc.txt").write_bytes(b"version 1\n")
    (root / "folder" / "a.txt").write_bytes(b"a\n")
    return root


def store_for(kind, root, docfs_serve):
    """docfs serve, or the local directory itself. (rclone serve is left out here: its own VFS
    directory cache would hide changes for minutes, which says nothing about docfs.)"""
    return docfs_serve(root).url if kind == "docfs-serve" else str(root)


@pytest.mark.parametrize("kind", ["docfs-serve", "local"])
def test_listing_revalidated_after_ttl(kind, own_tree, docfs_serve, mount):
    m = mount(store_for(kind, own_tree, docfs_serve), "--dir-cache-ttl", "1")
    assert sorted(os.listdir(m / "folder")) == ["a.txt"]
    (own_tree / "folder" / "new.txt").write_bytes(b"new\n")
    (own_tree / "folder" / "a.txt").unlink()
    wait_until(lambda: sorted(os.listdir(m / "folder")) == ["new.txt"], 20,
               "a change on the store to show in the listing after --dir-cache-ttl 1")
    assert (m / "folder" / "new.txt").read_bytes() == b"new\n"


@pytest.mark.parametrize("kind", ["docfs-serve", "local"])
def test_changed_file_is_fetched_anew(kind, own_tree, docfs_serve, mount):
    m = mount(store_for(kind, own_tree, docfs_serve))
    assert (m / "doc.txt").read_bytes() == b"version 1\n"
    assert os.stat(m / "doc.txt").st_size == len(b"version 1\n")
    wait_until(lambda: xattr_state(m / "doc.txt") == "placeholder", 15, "doc.txt to be evicted")

    new = b"version 2, longer than the first one\n" * 100
    (own_tree / "doc.txt").write_bytes(new)
    os.utime(own_tree / "doc.txt", (1_800_000_000, 1_800_000_000))
    with open(m / "doc.txt", "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).digest() == hashlib.sha256(new).digest(), (
        f"after a change on the store, open()+read gave {len(data)} bytes "
        f"({data[:20]!r}...), the store has {len(new)} ({new[:20]!r}...)")
    wait_until(lambda: os.stat(m / "doc.txt").st_size == len(new), 5, "st_size to follow the new content")


@pytest.mark.parametrize("kind", ["docfs-serve", "rclone"])
def test_remount_with_server_already_down(kind, content_tree, docfs_serve, rclone_serve, mount, tmp_path):
    """The catalog is enough to mount and browse; the mount says the store is unreachable."""
    root = tmp_path / "copy"
    shutil.copytree(content_tree.root / "sub", root / "sub")
    (root / "top.txt").write_bytes(b"top\n")
    server = (docfs_serve if kind == "docfs-serve" else rclone_serve)(root)
    first = mount(server.url)
    expected = {rel: sorted(os.listdir(first / rel)) for rel in ("", "sub", "sub/dir")}
    assert first.unmount().returncode == 0
    server.stop()

    second = mount(server.url)
    for rel, names in expected.items():
        assert sorted(os.listdir(second / rel)) == names, f"cached listing of {rel or '.'} with the server down"
    assert os.stat(second / "top.txt").st_size == 4
    with pytest.raises(OSError) as info:
        (second / "top.txt").read_bytes()
    print(f"open() with the server down: {info.value!r}")

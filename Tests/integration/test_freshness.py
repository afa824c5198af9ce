"""Freshness: directory listings are revalidated after --dir-cache-ttl, a file changed on the
store is fetched anew on open (never the old bytes, never cut at the old size), and a remount
with the server already gone shows the cached tree within seconds, and works once the server is back."""
from __future__ import annotations

import hashlib
import os
import shutil
import time

import pytest

from fault_proxy import FaultProxy
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

    # With placeholders from before, the mount tries the store for a few seconds (a blip), not
    # the 20 s a mount without them gives a restarting server, and shows what it has.
    started = time.monotonic()
    second = mount(server.url, "--io-timeout", "5")
    took = time.monotonic() - started
    assert took < 10, f"the mount took {took:.1f} s to show its cached placeholders with the server down"
    for rel, names in expected.items():
        assert sorted(os.listdir(second / rel)) == names, f"cached listing of {rel or '.'} with the server down"
    assert os.stat(second / "top.txt").st_size == 4
    with pytest.raises(OSError) as info:
        (second / "top.txt").read_bytes()
    print(f"open() with the server down: {info.value!r}")


def test_a_mount_made_while_the_store_was_down_works_once_it_is_back(docfs_serve, mount, tmp_path):
    """Mounted from the catalog while every connection to the store was refused, the mount is
    not stuck that way: once the store answers again, opens fetch and changes go up."""
    root = tmp_path / "store"
    root.mkdir()
    (root / "doc.txt").write_bytes(b"from the store\n")
    server = docfs_serve(root)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    try:
        first = mount(proxy.url)
        assert os.listdir(first.path) == ["doc.txt"]
        assert first.unmount().returncode == 0

        refused = proxy.reset()
        second = mount(proxy.url, "--io-timeout", "3")
        assert refused.hits > 0
        assert os.listdir(second.path) == ["doc.txt"]
        with pytest.raises(OSError):
            (second / "doc.txt").read_bytes()

        proxy.clear()
        assert (second / "doc.txt").read_bytes() == b"from the store\n"
        (second / "new.txt").write_bytes(b"made once the store was back\n")
        wait_until(lambda: (root / "new.txt").exists() and (root / "new.txt").read_bytes() == b"made once the store was back\n",
                   30, "new.txt to reach the store")
        assert second.unmount().returncode == 0
    finally:
        proxy.clear()
        proxy.stop()

"""Hard links (issue 33): on the local store, `ln` gives a file a second name, every name shows
the link count the store has (after a remount too), an edit through one name reaches the other,
and removing a name counts one less; a folder gets no second name (EPERM), as on ext4. WebDAV and
S3 have no hard links: `link` fails with EPERM there, as with s3fs and rclone."""
from __future__ import annotations

import errno
import os

import pytest

from helpers import wait_until
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures
from write_support import make_store

pytestmark = pytest.mark.fuse


def links(path) -> int:
    return os.stat(path).st_nlink


def test_a_second_name_on_the_local_store(tmp_path, mount):
    store = make_store(tmp_path / "store", {"a.txt": b"one\n", "d/x.txt": b"x\n"})
    m = mount(store)
    os.link(m / "a.txt", m / "d" / "b.txt")
    assert (links(m / "a.txt"), links(m / "d" / "b.txt")) == (2, 2)
    assert os.stat(store / "a.txt").st_ino == os.stat(store / "d" / "b.txt").st_ino
    assert (m / "d" / "b.txt").read_bytes() == b"one\n"

    # An edit through one name is the other's too, on the store and through the mount.
    with open(m / "d" / "b.txt", "ab") as f:
        f.write(b"two\n")
    wait_until(lambda: (store / "a.txt").read_bytes() == b"one\ntwo\n", 30, "the edit to reach the file's other name")
    assert os.stat(store / "a.txt").st_nlink == 2
    assert (m / "a.txt").read_bytes() == b"one\ntwo\n"

    # A folder gets no second name; nor does a name that exists.
    with pytest.raises(OSError) as refused:
        os.link(m / "d", m / "d2")
    assert refused.value.errno == errno.EPERM
    with pytest.raises(FileExistsError):
        os.link(m / "a.txt", m / "d" / "x.txt")

    # The count survives a remount, and a removed name counts one less.
    assert m.unmount().returncode == 0
    m = mount(store)
    assert (links(m / "a.txt"), links(m / "d" / "b.txt")) == (2, 2)
    os.unlink(m / "d" / "b.txt")
    wait_until(lambda: links(m / "a.txt") == 1, 10, "the remaining name to count one link")
    assert os.stat(store / "a.txt").st_nlink == 1
    assert (m / "a.txt").read_bytes() == b"one\ntwo\n"
    assert m.unmount().returncode == 0


def refuses_a_second_name(m):
    with pytest.raises(OSError) as refused:
        os.link(m / "a.txt", m / "b.txt")
    assert refused.value.errno == errno.EPERM
    assert not os.path.exists(m / "b.txt")
    assert links(m / "a.txt") == 1
    assert m.unmount().returncode == 0


def test_webdav_refuses_hard_links(tmp_path, mount, docfs_serve):
    server = docfs_serve(make_store(tmp_path / "dav", {"a.txt": b"a\n"}))
    refuses_a_second_name(mount(server.url))


def test_s3_refuses_hard_links(s3, s3_mount):
    s3.put("a.txt", b"a\n")
    refuses_a_second_name(s3_mount())

"""docfs's extended attributes are asked by name and never listed, as kernel file systems do
with virtual attributes (CephFS's `ceph.*`, kAFS's `afs.*`). Copying tools restore what
`listxattr` lists: while docfs listed `user.docfs.state`, `.id`, `.etag` and `.pinned`, `cp -a`
out of the mount stamped them on the local copy (another item's identity and version),
`cp --preserve=xattr` within the mount failed on each of them (exit 1, "Operation not
permitted"), and `cp -a` of a pinned file pinned the copy."""
from __future__ import annotations

import errno
import os
import subprocess

import pytest

from helpers import xattr_state

pytestmark = pytest.mark.fuse


def user_attributes(path) -> dict[str, bytes]:
    return {name: os.getxattr(path, name) for name in os.listxattr(path) if name.startswith("user.")}


def test_attributes_are_answered_by_name_and_copies_take_none_of_them(tmp_path, mount):
    store = tmp_path / "store"
    (store / "docs").mkdir(parents=True)
    (store / "docs" / "a.txt").write_text("alpha\n")
    (store / "docs" / "b.txt").write_text("beta\n")
    m = mount(store)
    a, b = m / "docs" / "a.txt", m / "docs" / "b.txt"
    os.setxattr(a, "user.docfs.pinned", b"1")
    assert xattr_state(a) == "pinned"
    assert os.getxattr(a, "user.docfs.id") and os.getxattr(a, "user.docfs.etag")
    assert os.getxattr(m.path, "user.docfs.events")
    for path in (a, b, m / "docs", m.path):
        assert os.listxattr(path) == [], f"{path} lists {os.listxattr(path)}"

    outside = tmp_path / "outside"
    outside.mkdir()
    for args in (["cp", "-a"], ["cp", "--preserve=xattr"], ["mv"]):
        target = outside / f"{args[0]}-{len(args)}.txt"
        copied = subprocess.run([*args, str(b if args == ["mv"] else a), str(target)], capture_output=True, text=True)
        assert copied.returncode == 0, f"{args}: {copied.stderr}"
        assert user_attributes(target) == {}, f"{' '.join(args)} out of the mount left {user_attributes(target)}"

    within = subprocess.run(["cp", "--preserve=xattr", str(a), str(m / "docs" / "c.txt")], capture_output=True, text=True)
    assert within.returncode == 0, f"cp --preserve=xattr within the mount: {within.stderr}"
    archived = subprocess.run(["cp", "-a", str(a), str(m / "docs" / "d.txt")], capture_output=True, text=True)
    assert archived.returncode == 0 and archived.stderr == "", archived.stderr
    with pytest.raises(OSError) as unpinned:
        os.getxattr(m / "docs" / "d.txt", "user.docfs.pinned")
    assert unpinned.value.errno == errno.ENODATA, "cp -a of a pinned file pinned the copy"
    assert (m / "docs" / "c.txt").read_text() == (m / "docs" / "d.txt").read_text() == "alpha\n"

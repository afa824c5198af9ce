"""Metadata at scale: once a folder is listed, `stat` of its names (and of names it does not
have) is answered from the catalog, without a request to the store, and a timeout the user
sets is checked before anything is mounted."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time

import pytest

from helpers import write_file

pytestmark = pytest.mark.fuse


def test_stat_of_every_name_in_a_listed_folder_asks_the_store_nothing(docfs_serve, mount, tmp_path):
    root = tmp_path / "store"
    names = [f"file{i:04}.txt" for i in range(2000)]
    for name in names:
        write_file(root / "many" / name, name.encode())
    server = docfs_serve(root)
    m = mount(server.url)
    assert len(os.listdir(m / "many")) == len(names)
    before = len(server.requests())
    started = time.monotonic()
    for name in names:
        assert os.stat(m / "many" / name).st_size == len(name)
    for i in range(200):
        assert not (m / "many" / f"missing{i}.txt").exists()
    elapsed = time.monotonic() - started
    after = server.requests()[before:]
    assert not after, f"stat of listed names asked the store: {after[:5]}"
    print(f"stat of {len(names)} names and 200 missing ones: {elapsed:.2f} s")


def test_ls_l_asks_for_labels_and_acls_once_per_mount_not_per_file(docfs_serve, mount, tmp_path):
    """docfs has only its own attributes: an SELinux label or an ACL is "not supported"
    (EOPNOTSUPP), not "absent" (ENODATA). ls caches "not supported" per device, so `ls -l` of a
    folder asks for them once instead of twice per file (each ask a round trip through FUSE:
    most of the time of a listing already in the catalog)."""
    root = tmp_path / "store"
    for i in range(300):
        write_file(root / "many" / f"f{i:03}", b"x")
    m = mount(docfs_serve(root).url)
    one = m / "many" / "f000"
    for name in ("security.selinux", "system.posix_acl_access", "system.posix_acl_default", "trusted.x", "user.other"):
        with pytest.raises(OSError) as raised:
            os.getxattr(one, name, follow_symlinks=False)
        assert raised.value.errno == errno.EOPNOTSUPP, (name, raised.value)
    with pytest.raises(OSError) as raised:
        os.getxattr(one, "user.docfs.error")
    assert raised.value.errno == errno.ENODATA
    assert os.getxattr(one, "user.docfs.state") == b"placeholder"
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (Tests/support/setup.sh installs it)")
    traced = subprocess.run(["strace", "-f", "-e", "trace=getxattr,lgetxattr,fgetxattr", "-o", str(tmp_path / "trace"),
                             "ls", "-l", str(m / "many")], capture_output=True, text=True, timeout=60)
    assert traced.returncode == 0, traced.stderr
    assert len(traced.stdout.splitlines()) == 301  # "total" and one line per file
    asks = [line for line in (tmp_path / "trace").read_text().splitlines() if "getxattr(" in line]
    assert len(asks) <= 4, f"ls -l of 300 files asked for {len(asks)} attributes: {asks[:6]}"


def test_a_negative_timeout_is_refused(xdg, tmp_path):
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    for option in ("--entry-timeout", "--attr-timeout"):
        result = xdg.docfs("mount", str(tmp_path), str(mountpoint), option, "-1")
        assert result.returncode != 0
        assert option in result.stderr, result.stderr

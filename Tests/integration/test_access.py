"""Local access (issue 10, item 5): `--uid`, `--gid`, `--umask` set the owner, group and mode
bits every entry shows, and the kernel enforces them (docfs mounts with default_permissions);
with `allow_other` (`--allow-other` or `-o allow_other`) and no `--umask`, entries show
0600/0700, so another local user reaches nothing unless the mount is asked to let them.

"Another local user" is `nobody`, through `setpriv --reuid=nobody --regid=nogroup --clear-groups`.
"""
from __future__ import annotations

import os
import pwd
import grp
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import run
from write_support import make_store, wait_server_bytes

pytestmark = pytest.mark.fuse

NOBODY = pwd.getpwnam("nobody").pw_uid
NOGROUP = grp.getgrnam("nogroup").gr_gid

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to `nobody` needs root")


@pytest.fixture
def store(tmp_path) -> Path:
    return make_store(tmp_path / "store", {"a.txt": b"private words\n", "dir/b.txt": b"more private words\n"})


@pytest.fixture
def public_dir():
    """A mount point `nobody` can reach (pytest's temp dirs are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="docfs-access-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def as_nobody(*command: str) -> subprocess.CompletedProcess:
    return run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command], timeout=30)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def mounted(mount, store, public_dir, *options):
    mountpoint = public_dir / "mnt"
    mountpoint.mkdir(exist_ok=True)
    return mount(store, *options, mountpoint=mountpoint)


def test_without_options_modes_and_owner_are_as_before(mount, store, public_dir):
    m = mounted(mount, store, public_dir)
    assert mode_of(m / "a.txt") == 0o644
    assert mode_of(m / "dir") == 0o755
    assert os.stat(m / "a.txt").st_uid == os.getuid()


@needs_root
def test_without_allow_other_nobody_is_kept_out_by_fuse(mount, store, public_dir):
    m = mounted(mount, store, public_dir)
    result = as_nobody("cat", str(m / "a.txt"))
    assert result.returncode != 0 and "Permission denied" in result.stderr, result


@needs_root
@pytest.mark.parametrize("how", [("--allow-other",), ("-o", "allow_other")])
def test_allow_other_defaults_to_owner_only(mount, store, public_dir, how):
    m = mounted(mount, store, public_dir, *how)
    assert mode_of(m / "a.txt") == 0o600
    assert mode_of(m / "dir") == 0o700
    assert mode_of(m.path) == 0o700
    # The mounting user still reads and writes.
    assert (m / "dir" / "b.txt").read_bytes() == b"more private words\n"
    listing = as_nobody("ls", str(m.path))
    assert listing.returncode != 0 and "Permission denied" in listing.stderr, listing
    read = as_nobody("cat", str(m / "a.txt"))
    assert read.returncode != 0 and "Permission denied" in read.stderr, read
    assert "private" not in read.stdout


@needs_root
def test_allow_other_with_umask_022_lets_others_read_but_not_write(mount, store, public_dir):
    m = mounted(mount, store, public_dir, "--allow-other", "--umask", "022")
    assert mode_of(m / "a.txt") == 0o644 and mode_of(m / "dir") == 0o755
    read = as_nobody("cat", str(m / "dir" / "b.txt"))
    assert read.returncode == 0 and read.stdout == "more private words\n", read
    write = as_nobody("sh", "-c", f"echo changed > '{m / 'a.txt'}'")
    assert write.returncode != 0 and "Permission denied" in write.stderr, write
    create = as_nobody("touch", str(m / "dir" / "new.txt"))
    assert create.returncode != 0 and "Permission denied" in create.stderr, create
    assert (store / "a.txt").read_bytes() == b"private words\n"
    assert not (store / "dir" / "new.txt").exists()


@needs_root
def test_uid_and_gid_give_the_mount_to_another_user(mount, store, public_dir):
    m = mounted(mount, store, public_dir, "--allow-other", "--uid", "nobody", "--gid", str(NOGROUP))
    info = os.stat(m / "a.txt")
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (NOBODY, NOGROUP, 0o600)
    assert (os.stat(m.path).st_uid, mode_of(m.path)) == (NOBODY, 0o700)
    read = as_nobody("cat", str(m / "a.txt"))
    assert read.returncode == 0 and read.stdout == "private words\n", read
    write = as_nobody("sh", "-c", f"printf 'nobody was here\\n' > '{m / 'dir' / 'new.txt'}'")
    assert write.returncode == 0, write
    # What nobody created shows as --uid too, and reaches the store.
    assert os.stat(m / "dir" / "new.txt").st_uid == NOBODY
    assert m.unmount().returncode == 0
    assert (store / "dir" / "new.txt").read_bytes() == b"nobody was here\n"


def test_umask_uid_gid_without_allow_other(mount, store, public_dir):
    m = mounted(mount, store, public_dir, "--uid", "1234", "--gid", "5678", "--umask", "027")
    for path, mode in [(m / "a.txt", 0o640), (m / "dir", 0o750), (m / "dir" / "b.txt", 0o640)]:
        info = os.stat(path)
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (1234, 5678, mode), path
    # A mode set through the mount is masked as well: the umask is a ceiling.
    (m / "c.txt").write_bytes(b"c")
    os.chmod(m / "c.txt", 0o666)
    assert mode_of(m / "c.txt") == 0o640


@pytest.mark.parametrize("args, message", [
    (["--umask", "9"], "--umask must be octal"),
    (["--umask", "0o22"], "--umask must be octal"),
    (["--uid", "no-such-user-here"], "no such user"),
    (["--gid", "no-such-group-here"], "no such group"),
])
def test_bad_access_options_are_refused(xdg, store, tmp_path, args, message):
    mountpoint = tmp_path / "mnt-bad"
    mountpoint.mkdir()
    result = xdg.docfs("mount", store, mountpoint, *args)
    assert result.returncode != 0 and message in result.stderr, result

"""Local access (issue 10, item 5; issue 33): `--uid`, `--gid`, `--umask` set the owner, group
and mode bits every entry shows, and the kernel enforces them (docfs mounts with
default_permissions). With `allow_other` (`--allow-other` or `-o allow_other`) and no `--umask`,
entries whose mode the store does not keep (WebDAV files docfs did not create) show 0600/0700,
so another local user reaches them only if the mount is asked to let them; a mode set with
`chmod` or at create, or kept by the store, shows as it is, and the kernel decides as on ext4
(`chmod 0777 shared/` lets others in; sticky and setgid folders work).

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
def test_allow_other_keeps_others_out_where_the_store_keeps_no_mode(mount, store, public_dir, docfs_serve, how):
    server = docfs_serve(store)  # WebDAV without dead properties: no mode kept
    mountpoint = public_dir / "mnt"
    mountpoint.mkdir()
    m = mount(server.url, *how, mountpoint=mountpoint)
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
    os.chmod(store / "a.txt", 0o666)  # a mode the store keeps is masked by an explicit --umask
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
    os.chmod(store / "a.txt", 0o600)
    os.chmod(store / "dir", 0o700)
    os.chmod(store, 0o700)
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


def as_user(uid: int, gid: int, groups: list[int], *command: str) -> subprocess.CompletedProcess:
    """Runs `command` as uid/gid with exactly the supplementary `groups`."""
    group_args = [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    return run(["setpriv", f"--reuid={uid}", f"--regid={gid}", *group_args, *command], timeout=30)


@needs_root
def test_modes_set_on_purpose_mean_what_they_say_with_allow_other(mount, store, public_dir):
    """Issue 33: on a shared mount, `chmod 0777 shared/` lets others in, a group-readable file
    is read by the group's members only, and sticky and setgid folders behave as on ext4."""
    os.chmod(store, 0o755)
    m = mounted(mount, store, public_dir, "--allow-other")
    status = m.xdg.docfs("status", m.path).stdout
    assert "modes: 600/700 where the store keeps no mode" in status, status
    # A mode the store keeps shows as it is.
    assert mode_of(m / "a.txt") == 0o644 and mode_of(m / "dir") == 0o755

    os.mkdir(m / "shared")
    os.chmod(m / "shared", 0o777)
    assert mode_of(m / "shared") == 0o777
    made = as_nobody("sh", "-c", f"echo hi > '{m / 'shared' / 'n.txt'}' && mv '{m / 'shared' / 'n.txt'}' '{m / 'shared' / 'm.txt'}'")
    assert made.returncode == 0, made
    assert os.stat(m / "shared" / "m.txt").st_uid == NOBODY
    gone = as_nobody("rm", str(m / "shared" / "m.txt"))
    assert gone.returncode == 0, gone

    # A file for one group: its members read it, others do not.
    group = 65532
    (m / "dir" / "team.txt").write_bytes(b"for the team\n")
    os.chown(m / "dir" / "team.txt", -1, group)
    os.chmod(m / "dir" / "team.txt", 0o640)
    member = as_user(65533, 65533, [group], "cat", str(m / "dir" / "team.txt"))
    assert member.returncode == 0 and member.stdout == "for the team\n", member
    stranger = as_user(65533, 65533, [], "cat", str(m / "dir" / "team.txt"))
    assert stranger.returncode != 0 and "Permission denied" in stranger.stderr, stranger

    # Sticky: in a 1777 folder, others' files cannot be removed or renamed; one's own can.
    os.mkdir(m / "tmp")
    os.chmod(m / "tmp", 0o1777)
    (m / "tmp" / "roots.txt").write_bytes(b"root's\n")
    refused = as_nobody("rm", "-f", str(m / "tmp" / "roots.txt"))
    assert refused.returncode != 0 and (m / "tmp" / "roots.txt").exists(), refused
    renamed = as_nobody("mv", str(m / "tmp" / "roots.txt"), str(m / "tmp" / "mine.txt"))
    assert renamed.returncode != 0, renamed
    own = as_nobody("sh", "-c", f"echo x > '{m / 'tmp' / 'own.txt'}' && rm '{m / 'tmp' / 'own.txt'}'")
    assert own.returncode == 0, own

    # Setgid: what is made in a 2777 folder takes the folder's group; folders stay setgid.
    os.mkdir(m / "project")
    os.chown(m / "project", -1, group)
    os.chmod(m / "project", 0o2777)
    made = as_nobody("sh", "-c", f"echo x > '{m / 'project' / 'f.txt'}' && mkdir '{m / 'project' / 'sub'}'")
    assert made.returncode == 0, made
    assert os.stat(m / "project" / "f.txt").st_gid == group
    assert os.stat(m / "project" / "sub").st_gid == group
    assert os.stat(m / "project" / "sub").st_mode & stat.S_ISGID
    assert m.unmount().returncode == 0

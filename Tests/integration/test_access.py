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
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import _ACTIVE_MOUNTS, run
from helpers import docfs_bin, is_mounted, pids_for, wait_until
from write_support import make_store, wait_server_bytes

pytestmark = pytest.mark.fuse

NOBODY = pwd.getpwnam("nobody").pw_uid
NOGROUP = grp.getgrnam("nogroup").gr_gid

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to `nobody` needs root")


@pytest.fixture
def store(tmp_path) -> Path:
    return make_store(tmp_path / "store", {"a.txt": b"private words\n", "dir/b.txt": b"more private words\n"})


@pytest.fixture
def public_dir(reachable_dir):
    """A mount point `nobody` can reach."""
    return reachable_dir


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


#: The ordinary user who runs the daemon below (fusermount3 wants a name for the user: an
#: account every Debian system has), and a teammate in its group (a uid with no account).
OWNER = pwd.getpwnam("games")
TEAMMATE_UID = 61002


@pytest.fixture
def ordinary_users_may_mount():
    """As on a Debian desktop: `/dev/fuse` open to all (0666, where this machine has 0600) and
    `user_allow_other` in /etc/fuse.conf (fusermount3 lets an ordinary user mount with
    allow_other only then); both as they were afterwards."""
    conf = Path("/etc/fuse.conf")
    before = conf.read_bytes() if conf.exists() else None
    device_mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    lines = (before or b"").decode().splitlines()
    if not any(line.strip() == "user_allow_other" for line in lines):
        conf.write_text("\n".join(lines + ["user_allow_other"]) + "\n")
    os.chmod("/dev/fuse", device_mode | 0o666)
    yield
    os.chmod("/dev/fuse", device_mode)
    if before is None:
        conf.unlink(missing_ok=True)
    else:
        conf.write_bytes(before)


@needs_root
def test_a_daemon_of_an_ordinary_user_shares_what_modes_allow(tmp_path, public_dir, ordinary_users_may_mount):
    """Issue 33: docfs run by an ordinary user (not root) with `--allow-other`: another user
    reads what the modes allow and nothing more, a member of the file's group what the group
    may, and what the daemon's user makes through the mount is its own."""
    store = make_store(public_dir / "store", {"public.txt": b"for all\n", "team.txt": b"for the team\n",
                                              "private.txt": b"for the owner\n", "closed/inside.txt": b"inside\n"})
    for name, mode in (("public.txt", 0o644), ("team.txt", 0o640), ("private.txt", 0o600), ("closed", 0o700)):
        os.chmod(store / name, mode)
    home = public_dir / "home"
    mountpoint = public_dir / "mnt"
    for path in (home, mountpoint):
        path.mkdir()
    subprocess.run(["chown", "-R", f"{OWNER.pw_uid}:{OWNER.pw_gid}", str(store), str(home), str(mountpoint)], check=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
           "XDG_CACHE_HOME": str(home / "cache"), "XDG_RUNTIME_DIR": str(home / "run")}
    as_owner = ["setpriv", f"--reuid={OWNER.pw_uid}", f"--regid={OWNER.pw_gid}", "--clear-groups", "env", "-i",
                *[f"{k}={v}" for k, v in env.items()]]
    _ACTIVE_MOUNTS.add(str(mountpoint))
    try:
        mounted = run([*as_owner, docfs_bin(), "mount", str(store), str(mountpoint), "--allow-other",
                       "--log-file", str(home / "docfs.log")], timeout=60)
        assert mounted.returncode == 0, mounted
        daemons = pids_for(str(mountpoint))
        assert daemons and all(os.stat(f"/proc/{pid}").st_uid == OWNER.pw_uid for pid in daemons), daemons

        def reads(uid: int, groups: list[int], name: str) -> bool:
            return as_user(uid, uid, groups, "cat", str(mountpoint / name)).returncode == 0

        # A stranger: the world-readable file only.
        assert reads(NOBODY, [], "public.txt")
        assert not reads(NOBODY, [], "team.txt")
        assert not reads(NOBODY, [], "private.txt")
        assert not reads(NOBODY, [], "closed/inside.txt")
        # A member of the files' group: the group-readable file too, not the owner's own.
        assert reads(TEAMMATE_UID, [OWNER.pw_gid], "team.txt")
        assert not reads(TEAMMATE_UID, [OWNER.pw_gid], "private.txt")
        # Root is another user too, and default_permissions lets it in as on any file system.
        assert (mountpoint / "private.txt").read_bytes() == b"for the owner\n"
        # Nobody else may write; the owner's new file is the owner's, on the store as well.
        refused = as_user(NOBODY, NOBODY, [], "sh", "-c", f"echo x >> '{mountpoint / 'public.txt'}'")
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused
        made = run([*as_owner, "sh", "-c", f"echo mine > '{mountpoint / 'mine.txt'}'"], timeout=30)
        assert made.returncode == 0, made
        assert os.stat(mountpoint / "mine.txt").st_uid == OWNER.pw_uid
        wait_until(lambda: (store / "mine.txt").is_file() and (store / "mine.txt").read_bytes() == b"mine\n", 30,
                   "mine.txt on the store")
        assert os.stat(store / "mine.txt").st_uid == OWNER.pw_uid

        unmounted = run([*as_owner, docfs_bin(), "unmount", str(mountpoint)], timeout=120)
        assert unmounted.returncode == 0, unmounted
    finally:
        if is_mounted(mountpoint):
            run(["fusermount3", "-uz", str(mountpoint)], timeout=30)
        for pid in pids_for(str(mountpoint)):
            os.kill(pid, 9)
        _ACTIVE_MOUNTS.discard(str(mountpoint))

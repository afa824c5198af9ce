"""docfs's own POSIX conformance test (issue 12): for each store (the local store, WebDAV over
`docfs serve`, S3 on moto) the operations of conformance_probe.py run on a docfs mount and on a
local directory, as root, as `nobody`, and as a member and a stranger of a team's group (setpriv,
with and without supplementary groups), on a mount shared with `allow_other` and no `--umask`,
and every outcome must be the local one (setgid folders, group-readable files, chown to one's
own groups besides the cases below):
each file type's create/stat/chmod/chown/rename/unlink, O_CREAT|O_EXCL on each type,
utimensat with UTIME_NOW/UTIME_OMIT and its permission rules, ctime on chmod/chown/rename,
open permission checks per access mode, sticky-directory renames and unlinks by non-owners.

Where docfs differs by design, EXPECTED says so and why; anything else that differs fails the
test. The figure (operations compared, how many match) is printed and kept in
conformance-figures.json beside the test's temporary files."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIGURES
from s3_support import MotoServer, get_server, new_bucket, s3_env  # noqa: F401

pytestmark = pytest.mark.fuse

NOBODY = 65534
PROBE = Path(__file__).with_name("conformance_probe.py")
SPECIAL = ("fifo", "socket", "chr", "blk")

# Differences by design: (store or "*", a predicate on the key) -> why.
EXPECTED: list[tuple[str, callable, str]] = [
    ("local", lambda key: key.endswith(": hard link") and "file" not in words(key),
     "the local store links regular files only: a symlink, FIFO, socket or device gets EPERM (POSIX allows it)"),
    ("docfs-serve", lambda key: key.endswith(": hard link"),
     "WebDAV has no hard links: link() answers EPERM (POSIX allows it), as rclone does"),
    ("s3-moto", lambda key: key.endswith(": hard link"),
     "S3 has no hard links: link() answers EPERM (POSIX allows it), as s3fs does"),
    ("*", lambda key: key.endswith(": open the device"),
     "docfs mounts nodev, the FUSE default: a device node opens with EACCES (mount with -o dev to open devices)"),
    ("docfs-serve", lambda key: "symlink" in words(key),
     "WebDAV has no symbolic links: symlink() answers EPERM there (see the README)"),
]


def words(key: str) -> set[str]:
    return set(re.split(r"[ :']+", key))


def expected_reason(store: str, key: str) -> str | None:
    for where, matches, why in EXPECTED:
        if where in ("*", store) and matches(key):
            return why
    return None


#: Users the probe runs as besides root: (uid, gid, supplementary groups).
USERS = {"nobody": (NOBODY, NOBODY, []), "member": (65533, 65533, [65532]), "stranger": (65531, 65531, [])}


def run_probe(base: Path, phase: str, as_nobody: bool = False, user: str | None = None) -> dict[str, str]:
    command = [sys.executable, str(PROBE), str(base), phase]
    if as_nobody or user:
        uid, gid, groups = USERS[user or "nobody"]
        group_args = [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
        command = ["setpriv", f"--reuid={uid}", f"--regid={gid}", *group_args] + command
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"probe {phase} on {base} failed: {result.stderr}"
    return json.loads(result.stdout)


def compare(store: str, local: dict[str, str], mounted: dict[str, str]) -> tuple[int, int, list[str], list[str]]:
    matched, expected, unexpected = 0, [], []
    for key, want in local.items():
        got = mounted.get(key, "(missing)")
        if got == want:
            matched += 1
            continue
        line = f"{key}: local {want!r}, docfs {got!r}"
        why = expected_reason(store, key)
        (expected if why else unexpected).append(line + (f"  [{why}]" if why else ""))
    return len(local), matched, expected, unexpected


@pytest.fixture
def shared_dir(reachable_dir):
    """A directory `nobody` can reach."""
    return reachable_dir


@pytest.fixture
def store_url(request, tmp_path, docfs_serve, xdg):
    """The store named by the test's parameter, as `docfs mount` takes it."""
    kind = request.param
    if kind == "local":
        store = tmp_path / "store"
        store.mkdir()
        yield kind, [str(store)]
    elif kind == "docfs-serve":
        store = tmp_path / "store"
        store.mkdir()
        yield kind, [docfs_serve(store).url]
    else:
        xdg.env = s3_env(xdg.env)
        bucket = new_bucket(get_server("moto"), tmp_path, "conformance")
        yield kind, list(bucket.mount_args(""))
        bucket.destroy()


@pytest.mark.parametrize("store_url", ["local", "docfs-serve", "s3-moto"], indirect=True)
def test_conformance(store_url, mount, shared_dir, request):
    store, args = store_url
    mountpoint = shared_dir / "mnt"
    mountpoint.mkdir()
    # Shared with allow_other and no --umask: the modes set here mean what they say (issue 33).
    m = mount(*args, "-o", "allow_other", mountpoint=mountpoint)
    local = shared_dir / "local"
    local.mkdir()
    local.chmod(0o755)
    # The top of a WebDAV store keeps no mode (0700 on a shared mount): opened up as on disk.
    m.path.chmod(0o755)
    results = {}
    for where, base in (("local", local), ("docfs", m.path)):
        (base / "as-root").mkdir()
        (base / "as-nobody").mkdir()
        (base / "groups").mkdir()
        outcome = {f"root: {k}": v for k, v in run_probe(base / "as-root", "root").items()}
        outcome |= {f"root: {k}": v for k, v in run_probe(base / "as-nobody", "setup-nobody").items()}
        outcome |= {f"nobody: {k}": v for k, v in run_probe(base / "as-nobody", "nobody", True).items()}
        outcome |= {f"root: {k}": v for k, v in run_probe(base / "groups", "setup-groups").items()}
        for user in ("member", "stranger"):
            outcome |= {f"{user}: {k}": v for k, v in run_probe(base / "groups", user, user=user).items()}
        results[where] = outcome
    total, matched, expected, unexpected = compare(store, results["local"], results["docfs"])
    figure = (f"conformance on {store}: {matched} of {total} operations match the local directory; "
              f"{len(expected)} differ by design, {len(unexpected)} otherwise")
    print("\n" + figure)
    request.config.stash.setdefault(FIGURES, []).append(figure)
    assert not unexpected, (f"{len(unexpected)} of {total} operations differ from the local directory "
                            f"on {store}:\n" + "\n".join(unexpected))

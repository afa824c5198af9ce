"""Permissions on a shared mount: with -o allow_other docfs mounts with default_permissions, so
the kernel enforces modes and owners from docfs's catalog and a non-owner gets exactly the errno
a local disk gives (sticky directories included). Each check runs as `nobody` on the mount and
on a local directory, and the results must be identical."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.fuse

NOBODY = 65534

# Runs as nobody: each check prints "ok" or the errno name.
PROBE = r"""
import errno, json, os, sys
base = sys.argv[1]
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
results = {
    "read a 0600 file of root's": attempt(lambda: open(base + "/private").read()),
    "create in root's 0755 directory": attempt(lambda: open(base + "/closed/x", "w").close()),
    "chmod root's file": attempt(lambda: os.chmod(base + "/private", 0o644)),
    "utime root's file": attempt(lambda: os.utime(base + "/private", (1, 1))),
    "chown to self": attempt(lambda: os.chown(base + "/sticky/roots", 65534, 65534)),
    "create in a sticky directory": attempt(lambda: open(base + "/sticky/nobodys", "w").close()),
    "unlink another's file in a sticky directory": attempt(lambda: os.unlink(base + "/sticky/roots")),
    "rename another's file in a sticky directory": attempt(lambda: os.rename(base + "/sticky/roots", base + "/sticky/moved")),
    "unlink own file in a sticky directory": attempt(lambda: os.unlink(base + "/sticky/nobodys")),
    "write a 0666 file of root's": attempt(lambda: open(base + "/sticky/roots", "a").write("x")),
}
print(json.dumps(results))
"""


def prepare(base: Path):
    (base / "private").write_text("secret")
    (base / "private").chmod(0o600)
    (base / "closed").mkdir()
    (base / "closed").chmod(0o755)
    (base / "sticky").mkdir()
    (base / "sticky").chmod(0o1777)
    (base / "sticky" / "roots").write_text("mine")
    (base / "sticky" / "roots").chmod(0o666)


def probe_as_nobody(base: Path) -> dict[str, str]:
    result = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                             "/usr/bin/python3", "-c", PROBE, str(base)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"probe failed: {result.stderr}"
    return json.loads(result.stdout)


@pytest.fixture
def shared_dir(reachable_dir):
    """A directory `nobody` can reach."""
    return reachable_dir


@pytest.mark.parametrize("kind", ["docfs-serve", "local-store"])
def test_non_owner_gets_the_same_errno_as_on_a_local_disk(kind, docfs_serve, mount, shared_dir, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    url = docfs_serve(store).url if kind == "docfs-serve" else store
    mountpoint = shared_dir / "mnt"
    mountpoint.mkdir()
    # --umask 000: the modes the test sets are shown as set (allow_other alone defaults to 077).
    m = mount(url, "-o", "allow_other", "--umask", "000", mountpoint=mountpoint)
    local = shared_dir / "local"
    local.mkdir()
    local.chmod(0o755)
    for base in (local, m.path):
        prepare(base)
    expected = probe_as_nobody(local)
    got = probe_as_nobody(m.path)
    assert got == expected, "\n".join(f"{k}: local {expected[k]}, docfs {got.get(k)}" for k in expected)
    assert expected["read a 0600 file of root's"] == "EACCES"
    assert expected["unlink another's file in a sticky directory"] == "EPERM"

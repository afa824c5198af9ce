"""A big folder costs the mount daemon little memory (issue 9: 100,000 entries in 64 MiB).

A cold `ls -l` of a 20,000-entry folder (local-directory store: no server in the way, so the
test stays fast on a debug build) must not grow the daemon's peak resident size (VmHWM) by more
than BOUND_MIB over what it had once mounted. What a listing holds between pages is the set of
names seen, the catalog's row cache is bounded, an open folder's snapshot is a compact name
buffer (DirectorySnapshot), readdirplus reads a reply's worth of attributes in one query, and
glibc is held to two arenas (MallocTuning). Measured on a debug build: +8.7 MiB now; +16.3 MiB
with a String and a stat per entry in the snapshot; +33 MiB with one catalog read per entry
handed out by readdirplus."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

pytestmark = pytest.mark.fuse

ENTRIES = 20_000
BOUND_MIB = 13


def status_mib(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for pid {pid}")


def test_ls_l_of_20000_entries_stays_within_the_memory_bound(tmp_path, mount):
    store = tmp_path / "store"
    folder = store / "big"
    folder.mkdir(parents=True)
    for i in range(ENTRIES):
        (folder / f"entry-{i:06}.txt").touch()
    m = mount(store)
    pids = m.daemon_pids()
    assert len(pids) == 1, pids
    pid = pids[0]
    before = status_mib(pid, "VmHWM")

    started = time.monotonic()
    ls = subprocess.run(["ls", "-l", str(m / "big")], capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert ls.returncode == 0, ls.stderr
    assert len(ls.stdout.splitlines()) == ENTRIES + 1
    again = subprocess.run(["ls", "-l", str(m / "big")], capture_output=True, text=True, timeout=120)
    assert again.stdout == ls.stdout

    peak = status_mib(pid, "VmHWM")
    grown = peak - before
    print(f"{ENTRIES} entries: cold ls -l {took:.1f} s, VmHWM {before:.0f} -> {peak:.0f} MiB (+{grown:.1f}), "
          f"RssAnon now {status_mib(pid, 'RssAnon'):.0f} MiB")
    assert grown <= BOUND_MIB, f"ls -l of {ENTRIES} entries grew the daemon's peak RSS by {grown:.1f} MiB " \
                               f"(bound {BOUND_MIB}): {before:.0f} -> {peak:.0f} MiB"

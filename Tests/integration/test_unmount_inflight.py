"""Unmount while requests wait on a dead store: the daemon settles them and exits cleanly.

A `stat` whose lookup waits on a store that accepts connections and never answers (`docfs serve`
stopped with SIGSTOP) is in flight in a Swift task when the mount's FUSE connection is aborted
(what `umount -f` and /sys/fs/fuse/connections/N/abort do; the watchdog of these tests does the
same). The daemon's loop ends at once, with the task still holding its `fuse_req_t`. The daemon
must settle it (wait, cancel, or drop it without a reply) before `fuse_session_destroy`: a reply
into the destroyed session is a use after free. glibc's malloc perturbation fills freed memory, so
such a reply crashes the daemon instead of corrupting the heap silently.

Checked from outside: the daemon exits, its log ends with "stopped" and shows no crash, and
nothing is left mounted.
"""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from helpers import abort_fuse_connection, blocked_on_mount, is_mounted, process_alive, proc_mounts_lines, wait_until

pytestmark = pytest.mark.fuse

CRASH_MARKS = ("Program crashed", "Fatal error", "Segmentation", "Aborted", "double free", "corrupted",
               "malloc()", "free():", "Bad pointer dereference")


def test_abort_with_lookups_waiting_on_a_dead_store(tmp_path, docfs_serve, mount, xdg):
    root = tmp_path / "store"
    for d in ("a", "b", "c"):
        (root / d).mkdir(parents=True)
        (root / d / "f.txt").write_bytes(b"content\n")
    server = docfs_serve(root)
    # Freed memory is filled with 0xA5: a use of the destroyed session faults at once.
    xdg.env["GLIBC_TUNABLES"] = "glibc.malloc.perturb=165"
    m = mount(server.url)
    assert sorted(os.listdir(m.path)) == ["a", "b", "c"]   # the root is listed, a/ b/ c/ are not
    pids = m.daemon_pids()
    assert pids, "no docfs daemon found for the mount"

    waiting: list[subprocess.Popen] = []
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        # Each lookup in a/, b/, c/ must list that directory: a PROPFIND that never gets an answer.
        for d in ("a", "b", "c"):
            waiting.append(subprocess.Popen(["stat", str(m.path / d / "f.txt")], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL))
        # Barrier: each stat is blocked in the mount, waiting for docfs's answer.
        wait_until(lambda: all(p.poll() is not None or blocked_on_mount(p.pid, m.path) for p in waiting), 20,
                   lambda: f"the stats to block in the mount: {[(p.pid, p.poll()) for p in waiting]}")
        assert all(p.poll() is None for p in waiting), "a stat returned although the store does not answer"

        abort_fuse_connection(m.path)
        for p in waiting:
            p.wait(timeout=30)   # the abort answers them (ECONNABORTED)
        wait_until(lambda: not any(process_alive(p) for p in pids), 30,
                   f"the docfs daemon {pids} to exit after the connection was aborted")
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        for p in waiting:
            if p.poll() is None:
                p.kill()

    log = m.log_tail(20000)
    crashes = [mark for mark in CRASH_MARKS if mark in log]
    assert not crashes, f"the daemon crashed at unmount ({crashes}):\n{log[-4000:]}"
    last = [line for line in log.splitlines() if line.strip()][-1:]
    assert last and "stopped" in last[0], f"the daemon did not reach 'stopped' (killed by a signal?):\n{log[-4000:]}"
    wait_until(lambda: not is_mounted(m.path), 10, f"{m.path} to be unmounted by the daemon")
    assert not proc_mounts_lines(m.path)

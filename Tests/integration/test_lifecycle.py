"""Mount lifecycle: unmount leaves nothing behind, a store is mounted once at a time, a remount
lists the cached tree even with the server gone (and fails opens quickly), foreground mounts
stop cleanly on SIGINT/SIGTERM, a stale mount of a killed daemon is cleaned, and a --read-only
mount refuses writes with EROFS."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run
from helpers import (docfs_bin, is_mounted, pids_for, proc_mounts_lines, process_alive, sha256_file,
                     wait_until)

pytestmark = pytest.mark.fuse


def test_unmount_leaves_nothing(store_server, content_tree, mount):
    server = store_server(content_tree)
    m = mount(server.url)
    os.listdir(m.path)
    for rel in ("small.txt", "medium.bin", "résumé 日本.txt"):
        assert sha256_file(m / rel) == content_tree.hashes[rel]
    pids = m.daemon_pids()
    result = m.unmount()
    assert result.returncode == 0, f"docfs unmount exited {result.returncode}: {result.stderr}"
    assert not proc_mounts_lines(m.path), f"still in /proc/mounts: {proc_mounts_lines(m.path)}"
    assert not m.xdg.cache_files(), f"local copies left after unmount: {m.xdg.cache_files()}"
    wait_until(lambda: not any(process_alive(p) for p in pids), 15, f"the docfs daemon {pids} to exit")
    state = m.xdg.state_home / "docfs"
    assert state.is_dir() and any(state.rglob("*")), f"no catalog kept under {state}"


def open_in_subprocess(path, timeout):
    """Opens and reads `path` in a child process (a hang there can be killed); path via env."""
    code = ("import os, sys\n"
            "try:\n"
            "    with open(os.environ['TARGET'], 'rb') as f: f.read()\n"
            "except OSError as e:\n"
            "    print(e.errno, os.strerror(e.errno)); sys.exit(3)\n"
            "print('read ok')\n")
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, TARGET=str(path)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=30)
        raise AssertionError(f"open() of {path} hung for more than {timeout} s with the server down")
    return proc.returncode, out.strip(), err.strip(), time.monotonic() - started


NETWORK_ERRNOS = {errno.EIO, errno.EHOSTDOWN, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN,
                  errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT,
                  errno.ENOTCONN, errno.EAGAIN, errno.ENOLINK, errno.ECOMM}


def test_remount_lists_cached_tree_with_server_down(store_server, content_tree, mount):
    server = store_server(content_tree)
    first = mount(server.url)
    listing = {rel: sorted(os.listdir(first / rel)) for rel in ("", "sub", "sub/dir", "dir with space")}
    sizes = {rel: os.stat(first / rel).st_size for rel in ("medium.bin", "sub/dir/nested.txt")}
    assert first.unmount().returncode == 0
    assert not first.is_mounted()

    second = mount(server.url)            # same XDG dirs: same catalog
    server.stop()
    assert not server.alive()

    for rel, names in listing.items():
        result = run(["ls", "-la", str(second / rel)], timeout=30)
        assert result.returncode == 0, f"ls of cached {rel or '.'} with the server down failed: {result.stderr}"
        assert sorted(os.listdir(second / rel)) == names, f"cached listing of {rel or '.'} changed"
    for rel, size in sizes.items():
        assert os.stat(second / rel).st_size == size

    code, out, err, elapsed = open_in_subprocess(second / "medium.bin", timeout=60)
    print(f"open() with the server down: exit {code}, {out or err!r} after {elapsed:.1f} s")
    assert code == 3, f"open() of a placeholder with the server down did not fail: exit {code}, {out} {err}"
    # Bounded by --io-timeout (30 s by default), which the download's retries also stop within;
    # which of the two ends it first is a matter of milliseconds (30.05 s failed a full run).
    assert elapsed < 35, f"open() took {elapsed:.1f} s to fail (must be bounded by --io-timeout, 30 s)"
    failed_errno = int(out.split()[0])
    assert failed_errno in NETWORK_ERRNOS, \
        f"open() failed with errno {failed_errno} ({out}); expected EIO or a network errno"
    assert not second.xdg.cache_files(), f"a failed fetch left files in the cache: {second.xdg.cache_files()}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_foreground_mount_stops_on_signal(docfs_serve, content_tree, xdg, tmp_path, sig):
    server = docfs_serve(content_tree)
    mp = tmp_path / "mnt"
    mp.mkdir()
    proc = subprocess.Popen([docfs_bin(), "mount", server.url, str(mp), "--foreground"], env=xdg.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: is_mounted(mp) or proc.poll() is not None, 60, f"{mp} to be mounted")
        assert proc.poll() is None, f"docfs mount --foreground exited {proc.returncode}: {proc.stdout.read()}"
        with open(mp / "small.txt", "rb") as f:
            assert f.read() == (content_tree.root / "small.txt").read_bytes()
        proc.send_signal(sig)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"docfs mount --foreground did not exit within 30 s of {sig.name}")
        assert proc.returncode == 0 or proc.returncode == 128 + sig, \
            f"exit {proc.returncode} after {sig.name}: {out.decode(errors='replace')}"
        assert not is_mounted(mp), f"{mp} still mounted after {sig.name}"
        assert not xdg.cache_files()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if is_mounted(mp):
            run(["fusermount3", "-uz", str(mp)], timeout=30)


def test_unmount_cleans_stale_mount(docfs_serve, content_tree, mount):
    server = docfs_serve(content_tree)
    m = mount(server.url)
    os.listdir(m.path)
    pids = m.daemon_pids()
    assert pids, f"cannot find the docfs daemon for {m.path} among the processes"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(process_alive(p) for p in pids), 15, "the daemon to die")
    with pytest.raises(OSError) as info:
        os.listdir(m.path)
    # ENOTCONN ("Transport endpoint is not connected"); some kernels say ECONNABORTED.
    assert info.value.errno in (errno.ENOTCONN, errno.ECONNABORTED), f"a dead daemon's mount gave {info.value!r}"
    result = m.unmount()
    assert result.returncode == 0, f"docfs unmount of a stale mount exited {result.returncode}: {result.stderr}"
    assert not proc_mounts_lines(m.path), f"stale mount still listed: {proc_mounts_lines(m.path)}"
    # And the same store mounts again afterwards.
    again = mount(server.url, mountpoint=m.path)
    assert "small.txt" in os.listdir(again.path)


def test_read_only_mount_refuses_writes_with_erofs(docfs_serve, content_tree, mount):
    server = docfs_serve(content_tree)
    m = mount(server.url, "--read-only")
    attempts = {
        "create": lambda: open(m / "new.txt", "wb"),
        "write existing": lambda: open(m / "small.txt", "r+b"),
        "mkdir": lambda: os.mkdir(m / "newdir"),
        "unlink": lambda: os.unlink(m / "small.txt"),
        "rename": lambda: os.rename(m / "small.txt", m / "renamed.txt"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(OSError) as info:
            attempt()
        assert info.value.errno == errno.EROFS, f"{what}: expected EROFS, got {info.value!r}"
    assert sorted(os.listdir(content_tree.root)) == sorted(os.listdir(m.path))
    assert not server.gets(), f"refused writes fetched content: {server.gets()}"


def test_a_second_mount_of_the_same_store_is_refused_and_leaves_the_first_alone(docfs_serve, mount, xdg, tmp_path):
    """Two mounts of one store would share one catalog, journal and cache directory: the second
    one's crash recovery took over the first's live state, uploaded a write the first had not
    closed yet (a torn file under the real name), and turned the first's own upload into a
    conflict copy. The second mount is refused, naming the first; the first's file reaches the
    store once, whole, at its close; a mount with a state of its own (--state-dir) is taken at
    the same time; once the first is unmounted the store mounts again."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "a.txt").write_text("a\n")
    server = docfs_serve(store)
    before = set(os.listdir(store))
    m = mount(server.url)
    second = tmp_path / "second"
    second.mkdir()
    try:
        with open(m / "w.txt", "w") as f:
            f.write("first half\n")
            f.flush()
            result = xdg.docfs("mount", server.url, second, "--log-file", tmp_path / "second.log")
            assert result.returncode == 1, f"a second mount of the same store exited {result.returncode}: {result.stderr}"
            assert "mounted already" in result.stderr and str(m.path) in result.stderr and "--state-dir" in result.stderr, result.stderr
            assert not is_mounted(second)
            # Barrier: no daemon of the refused mount runs (what it did, it has done). The first
            # mount uploads the file at its close, which is the test's next step.
            wait_until(lambda: not pids_for(str(second)), 10, "no docfs daemon for the refused mount")
            assert not (store / "w.txt").exists(), "a write never closed reached the store"
            f.write("second half\n")
    finally:
        if is_mounted(second):
            xdg.docfs("unmount", second)
    wait_until(lambda: (store / "w.txt").exists() and (store / "w.txt").read_text() == "first half\nsecond half\n",
               30, "w.txt, whole, on the store")
    m.wait_uploads_done()   # barrier: a conflict copy or a second file would be on the store by then
    assert set(os.listdir(store)) - before == {"w.txt"}, f"more than the one file: {os.listdir(store)}"
    own = mount(server.url, "--state-dir", tmp_path / "own-state", mountpoint=tmp_path / "own")
    assert sorted(os.listdir(own.path)) == ["a.txt", "w.txt"]
    assert list((tmp_path / "own-state").glob("*/catalog.sqlite")), "the catalog is not in --state-dir"
    assert own.unmount().returncode == 0
    assert m.unmount().returncode == 0
    again = mount(server.url, mountpoint=second)
    assert sorted(os.listdir(again.path)) == ["a.txt", "w.txt"]


def test_unmount_of_a_killed_daemon_whose_journal_cannot_be_read_keeps_every_local_copy(docfs_serve, content_tree, mount):
    """`docfs unmount` of a dead daemon removes the clean copies it left, and keeps those the
    journal says hold changes. A journal it could not read counted as "no change anywhere": the
    copy of a file never uploaded was deleted with the clean ones. Now every copy stays."""
    server = docfs_serve(content_tree)
    m = mount(server.url)
    os.listdir(m.path)                           # listed: a new name needs no store to be made
    server.stop()                                # the change cannot reach the store
    (m / "unsaved.txt").write_bytes(b"the only copy of these bytes\n")
    pids = m.daemon_pids()
    assert pids, f"cannot find the docfs daemon for {m.path} among the processes"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(process_alive(p) for p in pids), 15, "the daemon to die")
    copies = [f for f in m.xdg.cache_files() if Path(f).read_bytes() == b"the only copy of these bytes\n"]
    assert copies, f"the change's local copy: {m.xdg.cache_files()}"
    catalogs = list(m.xdg.state_home.glob("docfs/*/catalog.sqlite"))
    assert len(catalogs) == 1, catalogs
    for name in ("catalog.sqlite-wal", "catalog.sqlite-shm"):
        (catalogs[0].parent / name).unlink(missing_ok=True)
    catalogs[0].write_bytes(b"not a database " * 100)
    result = m.unmount()
    assert not proc_mounts_lines(m.path), f"stale mount still listed: {proc_mounts_lines(m.path)}"
    assert all(Path(f).exists() for f in copies), f"the unsynced copy was removed: {result.stderr}"
    assert "cannot read the journal" in result.stderr, result.stderr


def test_a_cache_directory_that_is_the_state_directory_is_refused_and_the_catalog_kept(mount, xdg, tmp_path):
    """A mount empties its cache directory of all but the copies it keeps. When the cache and
    state directories were one (`XDG_CACHE_HOME` equal to `XDG_STATE_HOME`, or one directory
    for `--cache-dir` and `--state-dir`), that emptying unlinked the catalog under the running
    daemon: every later open failed with "SQLite error 14: unable to open database file", and
    the journal of unsynced changes was gone. Such a mount is refused, naming both, before it
    touches anything; the catalog of the store's earlier mount is left as it was."""
    store = tmp_path / "store"
    store.mkdir()
    m = mount(store)
    (m / "kept.txt").write_text("kept\n")
    assert m.unmount().returncode == 0
    catalogs = list((xdg.state_home / "docfs").glob("*/catalog.sqlite"))
    assert len(catalogs) == 1, catalogs
    before = catalogs[0].stat()
    mountpoint = tmp_path / "refused"
    mountpoint.mkdir()
    same_env = dict(xdg.env, XDG_CACHE_HOME=str(xdg.state_home))
    for how, args, env in (("--cache-dir", ["--cache-dir", xdg.state_home / "docfs"], xdg.env),
                           ("--cache-dir and --state-dir", ["--cache-dir", tmp_path / "one", "--state-dir", tmp_path / "one"], xdg.env),
                           ("XDG_CACHE_HOME", [], same_env)):
        try:
            result = run([docfs_bin(), "mount", str(store), str(mountpoint), *map(str, args)], timeout=60, env=env)
        finally:
            if is_mounted(mountpoint):
                run([docfs_bin(), "unmount", str(mountpoint)], timeout=60, env=env)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 1 and len(lines) == 1, f"{how}: exit {result.returncode}: {result.stderr}"
        assert "is the state directory" in lines[0], f"{how}: {lines[0]}"
        assert not is_mounted(mountpoint), how
        wait_until(lambda: not pids_for(str(mountpoint)), 10, f"no daemon of the refused mount ({how})")
        after = catalogs[0].stat()
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns), \
            f"{how}: the catalog changed"
    again = mount(store)
    assert (again / "kept.txt").read_text() == "kept\n"

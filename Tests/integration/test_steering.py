"""Seeing and steering what is local (issue 11): `user.docfs.progress` of a transfer, a folder's
aggregate `user.docfs.state`, `--evict-delay`, `--cache-max`, and pin / unpin / evict
(`docfs pin`, `setfattr -n user.docfs.pinned`), counted against the server's request log and
the cache directory."""
from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fault_proxy import FaultProxy
from helpers import NOT_ON_STORE_YET, drop_page_cache, pseudo_random_bytes, wait_until, xattr_state

pytestmark = pytest.mark.fuse


def xattr(path, name) -> str | None:
    try:
        return os.getxattr(path, name).decode()
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise


def cache_bytes(xdg) -> int:
    """Disk space the local copies take (what `du` of the cache directory counts)."""
    total = 0
    for f in xdg.cache_files():
        try:
            total += os.stat(f).st_blocks * 512
        except FileNotFoundError:
            pass
    return total


def read_all(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- progress ------------------------------------------------------------------------------

def test_progress_grows_while_a_throttled_download_runs(tmp_path, docfs_serve, mount, xdg):
    size = 1_500_000
    root = tmp_path / "store"
    (root / "docs").mkdir(parents=True)
    data = pseudo_random_bytes(size, seed=11)
    (root / "docs" / "big.bin").write_bytes(data)
    (root / "docs" / "small.txt").write_bytes(b"x" * 10)
    server = docfs_serve(root)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    try:
        # ~300 KB/s: about 5 s for the file. Fetched whole at open (under the whole-file limit).
        proxy.throttle(300_000, method="GET", path=r"big\.bin")
        m = mount(proxy.url, "--whole-file-limit", str(10 * size))
        big = m / "docs" / "big.bin"
        assert xattr(big, "user.docfs.progress") is None
        assert xattr_state(m / "docs") == "placeholder=2"
        # The reader keeps the file open 1.5 s after its read (the scenario: the samples span the download's end).
        reader = subprocess.Popen([sys.executable, "-c", f"open({str(big)!r}, 'rb').read(); import time; time.sleep(1.5)"])
        seen: list[tuple[int, int]] = []
        folder_states: set[str] = set()
        status = None
        deadline = time.monotonic() + 60
        while reader.poll() is None and time.monotonic() < deadline:
            value = xattr(big, "user.docfs.progress")
            if value is not None:
                done, total = map(int, value.split("/"))
                seen.append((done, total))
                folder_states.add(xattr_state(m / "docs"))
                if status is None and len(seen) >= 3:
                    result = xdg.docfs("status", "--json", m.path)
                    assert result.returncode == 0, result.stderr
                    status = json.loads(result.stdout)
            time.sleep(0.2)   # the sampling period (the loop ends with the reader, or at its deadline)
        assert reader.wait(timeout=30) == 0
        print(f"progress samples: {len(seen)}, first {seen[:3]}, last {seen[-3:]}; folder: {folder_states}")
        dones = [d for d, _ in seen]
        assert len(set(dones)) >= 4, f"progress did not grow visibly: {seen}"
        assert dones == sorted(dones), f"progress went backwards: {seen}"
        assert all(t == size for _, t in seen) and all(0 <= d <= size for d in dones), seen
        assert dones[0] < size // 2, f"the first sample came late: {seen[:3]}"
        assert "placeholder=1 downloading=1" in folder_states, folder_states
        # docfs status --json saw the running transfer, the counts and the cache size.
        print(f"status during the download: {status}")
        (mounted,) = status["mounts"]
        assert mounted["mountpoint"] == str(m.path) and mounted["running"]
        assert mounted["states"] == {"placeholder": 1, "downloading": 1}, mounted["states"]
        (transfer,) = mounted["transfers"]
        assert transfer["path"] == "/docs/big.bin" and transfer["state"] == "downloading"
        assert 0 < transfer["done"] < size and transfer["total"] == size, transfer
        assert mounted["cacheFiles"] == 1 and mounted["cacheBytes"] > 0
        # The reader's close is released after it exited: its copy then goes.
        wait_until(lambda: xattr_state(big) == "placeholder", 10, "big.bin to be a placeholder again after the reader's close")
        plain = xdg.docfs("status")
        assert plain.returncode == 0 and str(m.path) in plain.stdout and "files: placeholder=2" in plain.stdout, plain.stdout
        # Done and released: no progress, a placeholder again.
        assert xattr(big, "user.docfs.progress") is None
        assert "user.docfs.progress" not in os.listxattr(big)
        assert xattr_state(big) == "placeholder"
        assert xattr_state(m / "docs") == "placeholder=2"
    finally:
        proxy.clear()
        proxy.stop()


def test_a_streamed_download_shows_as_downloading_and_in_status(tmp_path, docfs_serve, mount, xdg):
    """Issue 32: a file above the whole-file limit comes down in ranges as it is read, and its
    copy is `local` in the catalog from its first bytes on. While it streams, `user.docfs.state`
    says `downloading` and `docfs status` lists the transfer, as for a download made at open."""
    size = 3_000_000
    root = tmp_path / "store"
    root.mkdir()
    (root / "big.bin").write_bytes(pseudo_random_bytes(size, seed=12))
    server = docfs_serve(root)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    try:
        proxy.throttle(400_000, method="GET", path=r"big\.bin")
        m = mount(proxy.url)
        big = m / "big.bin"
        reader = subprocess.Popen([sys.executable, "-c", f"open({str(big)!r}, 'rb').read()"])
        states, listed = set(), None
        deadline = time.monotonic() + 60
        while reader.poll() is None and time.monotonic() < deadline:
            if xattr(big, "user.docfs.progress") is not None:
                state = xattr_state(big)
                if xattr(big, "user.docfs.progress") is not None:  # still streaming after the look
                    states.add(state)
                if listed is None:
                    result = xdg.docfs("status", "--json", m.path)
                    assert result.returncode == 0, result.stderr
                    listed = json.loads(result.stdout)["mounts"][0]["transfers"]
            time.sleep(0.1)   # the sampling period (the loop ends with the reader, or at its deadline)
        assert reader.wait(timeout=60) == 0
        assert states == {"downloading"}, f"user.docfs.state while streaming: {states}"
        assert listed and listed[0]["path"] == "/big.bin" and listed[0]["state"] == "downloading", listed
        assert 0 <= listed[0]["done"] <= size and listed[0]["total"] == size, listed
        wait_until(lambda: xattr_state(big) in ("placeholder", "local"), 30, "the download to end")
    finally:
        proxy.clear()
        proxy.stop()


def test_folder_state_counts_children(tmp_path, docfs_serve, mount):
    root = tmp_path / "store"
    (root / "d" / "sub").mkdir(parents=True)
    for i in range(3):
        (root / "d" / f"f{i}.txt").write_bytes(b"abc" * (i + 1))
    server = docfs_serve(root)
    m = mount(server.url)
    os.listdir(m / "d")
    assert xattr_state(m / "d") == "placeholder=3"
    with open(m / "d" / "f0.txt", "rb") as f0, open(m / "d" / "f1.txt", "r+b") as f1:
        f0.read()
        f1.write(b"changed")
        f1.flush()
        os.fsync(f1.fileno())
        state = xattr_state(m / "d")
        assert state in ("placeholder=1 local=2", "placeholder=1 local=1 uploading=1"), state
        f1.write(b"again")
        f1.flush()
        # Written since the last commit: the copy holds a change the store does not have.
        assert xattr_state(m / "d" / "f1.txt") in ("local", "modified")


# --- eviction policy -----------------------------------------------------------------------

@pytest.mark.parametrize("delay", [None, "5"])
def test_reopen_within_evict_delay_downloads_once(tmp_path, docfs_serve, mount, xdg, delay):
    root = tmp_path / "store"
    root.mkdir()
    data = pseudo_random_bytes(200_000, seed=12)
    (root / "report.pdf").write_bytes(data)
    server = docfs_serve(root)
    m = mount(server.url, *(["--evict-delay", delay] if delay else []))
    assert read_all(m / "report.pdf") == data
    if delay is None:
        wait_until(lambda: xattr_state(m / "report.pdf") == "placeholder", 10, "the copy to go at the release of the close")
    else:
        # A kept copy stays `local` at its release: no state shows that the release came. A
        # reopen before it would join the open copy, and download nothing either way.
        time.sleep(0.5)
    # Pages the kernel still holds would answer the reopen without any download (test_reopen.py):
    # without them, it is the kept copy that spares one.
    drop_page_cache(m / "report.pdf")
    assert read_all(m / "report.pdf") == data
    gets = server.wait_for_gets("report.pdf", 1, m)
    print(f"--evict-delay {delay}: {len(gets)} GET(s) for close then reopen")
    if delay is None:
        assert len(gets) == 2, f"default policy (evict on last close): expected 2 GETs, got {len(gets)}"
        wait_until(lambda: xdg.cache_files() == [], 10, "the copy to go on its release")
        return
    assert len(gets) == 1, f"reopen within --evict-delay {delay} downloaded again: {len(gets)} GETs"
    assert xattr_state(m / "report.pdf") == "local"
    assert len(xdg.cache_files()) == 1
    # After the delay the copy goes.
    wait_until(lambda: xdg.cache_files() == [], 15, "the kept copy to be evicted after the delay")
    assert xattr_state(m / "report.pdf") == "placeholder"


def test_kept_copy_of_a_changed_file_is_not_reused(tmp_path, docfs_serve, mount):
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.txt").write_bytes(b"version one")
    server = docfs_serve(root)
    m = mount(server.url, "--evict-delay", "30", "--dir-cache-ttl", "0")
    assert read_all(m / "a.txt") == b"version one"
    before = xattr(m / "a.txt", "user.docfs.etag")
    time.sleep(1.1)   # the scenario: the other client saves a second later
    (root / "a.txt").write_bytes(b"version two!")
    # A listing learns the new version (each `ls` lists again: --dir-cache-ttl 0, in the background).
    wait_until(lambda: os.listdir(m.path) and xattr(m / "a.txt", "user.docfs.etag") != before, 15,
               lambda: f"a listing to bring a.txt's new version (user.docfs.etag still {before!r})")
    assert read_all(m / "a.txt") == b"version two!"
    assert len(server.wait_for_gets("a.txt", 2, m)) == 2


def test_cache_max_bounds_the_cache_while_three_times_as_much_is_read(tmp_path, docfs_serve, mount, xdg):
    bound = 1 << 20
    count, size = 12, 256 * 1024      # 3 MiB read through a 1 MiB cache
    root = tmp_path / "store"
    root.mkdir()
    files = {f"f{i:02}.bin": pseudo_random_bytes(size, seed=100 + i) for i in range(count)}
    for name, data in files.items():
        (root / name).write_bytes(data)
    server = docfs_serve(root)
    m = mount(server.url, "--cache-max", "1M")
    peak = 0
    for name, data in files.items():
        assert read_all(m / name) == data
        used = cache_bytes(xdg)
        peak = max(peak, used)
        assert used <= bound, f"after reading {name} the cache holds {used} bytes, over the 1 MiB bound"
    print(f"--cache-max 1M: read {count * size} bytes, cache peak {peak} bytes, now {cache_bytes(xdg)}")
    assert peak >= bound // 2, f"released copies were not kept at all (peak {peak})"
    # The most recently used file is still local: reading it again costs no GET.
    before = len(server.gets(f"f{count - 1:02}.bin"))
    assert read_all(m / f"f{count - 1:02}.bin") == files[f"f{count - 1:02}.bin"]
    m.wait_downloads_done()   # barrier: a download it caused would be in the log by then
    assert len(server.gets(f"f{count - 1:02}.bin")) == before
    # ... and the least recently used one is not.
    assert xattr_state(m / "f00.bin") == "placeholder"
    result = m.unmount()
    assert result.returncode == 0, result.stderr
    assert xdg.cache_files() == [], "unmount left unpinned copies in the cache"


# --- pin, unpin, evict ---------------------------------------------------------------------

def test_pinned_survives_release_and_remount_and_evict_frees_it(tmp_path, docfs_serve, mount, xdg):
    root = tmp_path / "store"
    (root / "keep").mkdir(parents=True)
    pinned = {f"keep/p{i}.bin": pseudo_random_bytes(100_000, seed=200 + i) for i in range(3)}
    for rel, data in pinned.items():
        (root / rel).write_bytes(data)
    (root / "other.bin").write_bytes(b"o" * 50_000)
    server = docfs_serve(root)
    mp = tmp_path / "mnt"
    m = mount(server.url, mountpoint=mp)

    result = xdg.docfs("pin", m / "keep")
    assert result.returncode == 0, result.stderr
    for rel in pinned:
        assert xattr_state(m / rel) == "pinned", rel
        assert xattr(m / rel, "user.docfs.pinned") == "1"
        assert len(server.gets(rel)) == 1, f"{rel} was not downloaded by pin"
    assert xattr_state(m / "keep") == "pinned pinned=3"
    assert len(xdg.cache_files()) == 3
    # Released after a read: still there, no new download.
    for rel, data in pinned.items():
        assert read_all(m / rel) == data
    assert len(xdg.cache_files()) == 3 and all(len(server.gets(rel)) == 1 for rel in pinned)
    # Not pinned: evicted on close as always.
    read_all(m / "other.bin")
    wait_until(lambda: len(xdg.cache_files()) == 3, 10, "other.bin's copy to go on its release")

    # A file created in a pinned folder is pinned.
    (m / "keep" / "new.txt").write_bytes(b"new file")
    wait_until(lambda: (root / "keep" / "new.txt").exists(), 15, "the new file's upload")
    wait_until(lambda: xattr_state(m / "keep" / "new.txt") == "pinned", 15, "the new file to be pinned and clean")

    result = m.unmount()
    assert result.returncode == 0, result.stderr
    assert len(xdg.cache_files()) == 4, f"pinned copies did not survive unmount: {xdg.cache_files()}"

    m = mount(server.url, mountpoint=mp)
    # `du` sees the kept copies before anything opens them (issue 32: st_blocks was 0).
    for rel in pinned:
        assert os.stat(m / rel).st_blocks * 512 >= 100_000, f"{rel}: st_blocks {os.stat(m / rel).st_blocks} after remount"
    for rel, data in pinned.items():
        assert xattr_state(m / rel) == "pinned", rel
        assert read_all(m / rel) == data
    m.wait_downloads_done()   # barrier: a download after the remount would be in the log by then
    assert all(len(server.gets(rel)) == 1 for rel in pinned), "a pinned file was downloaded again after remount"

    before = cache_bytes(xdg)
    result = xdg.docfs("evict", m / "keep" / "p0.bin")
    assert result.returncode == 0, result.stderr
    assert xattr_state(m / "keep" / "p0.bin") == "placeholder"
    assert xattr(m / "keep" / "p0.bin", "user.docfs.pinned") is None
    after = cache_bytes(xdg)
    print(f"evict of a pinned 100,000-byte file: cache {before} -> {after} bytes")
    assert after <= before - 90_000, f"evict did not free the space: {before} -> {after}"
    # Unpin returns the rest to the default policy: the copies go.
    result = xdg.docfs("unpin", m / "keep")
    assert result.returncode == 0, result.stderr
    assert xdg.cache_files() == []
    assert xattr_state(m / "keep" / "p1.bin") == "placeholder"


def test_pin_through_setfattr_and_evict_refuses_open_and_modified(tmp_path, docfs_serve, mount, xdg):
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.txt").write_bytes(b"a" * 1000)
    (root / "b.txt").write_bytes(b"b" * 1000)
    server = docfs_serve(root)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    try:
        m = mount(proxy.url)
        subprocess.run(["setfattr", "-n", "user.docfs.pinned", "-v", "1", str(m / "a.txt")], check=True)
        assert xattr_state(m / "a.txt") == "pinned"
        # Open: refused, named.
        with open(m / "a.txt", "rb"):
            result = xdg.docfs("evict", m / "a.txt")
            assert result.returncode == 1
            assert f"not evicted: {m / 'a.txt'}: it is open" in result.stderr, result.stderr
        assert xattr_state(m / "a.txt") == "pinned"
        # Modified (the store refuses uploads for now): refused, named.
        proxy.respond(503, method="PUT")
        with open(m / "b.txt", "ab") as f:
            f.write(b"more")
        wait_until(lambda: xattr_state(m / "b.txt") == "modified", 15, "b.txt to be modified")
        result = xdg.docfs("evict", m.path)
        print(f"docfs evict with a modified file: exit {result.returncode}, {result.stderr.strip()}")
        assert result.returncode == 1
        assert f"not evicted: {m / 'b.txt'}: it has changes not on the store yet" in result.stderr, result.stderr
        # Still unsynced, its copy kept. The uploader retries the PUT after a jittered wait
        # (possibly of a few milliseconds), so the item may be "uploading" again right now.
        assert xattr_state(m / "b.txt") in NOT_ON_STORE_YET
        assert xattr_state(m / "a.txt") == "placeholder"
        proxy.clear()
        wait_until(lambda: (root / "b.txt").read_bytes() == b"b" * 1000 + b"more", 40, "the upload once PUT works")
        # The upload ends after the PUT (docfs then asks for the new version): only then may the
        # proxy go, or unmount finds the upload unfinished and the store unreachable.
        wait_until(lambda: xattr_state(m / "b.txt") not in NOT_ON_STORE_YET, 30, "the upload to be recorded")
    finally:
        proxy.clear()
        proxy.stop()


# --- docfs status: the eviction policy, several mounts and paths, the registry -------------

def test_status_shows_the_eviction_policy_and_pinned_bytes(tmp_path, docfs_serve, mount, xdg):
    root = tmp_path / "store"
    root.mkdir()
    (root / "pinned.bin").write_bytes(pseudo_random_bytes(100_000, seed=31))
    (root / "kept.bin").write_bytes(pseudo_random_bytes(60_000, seed=32))
    server = docfs_serve(root)
    (tmp_path / "other").mkdir()
    plain_mount = mount(tmp_path / "other")  # another store: its own catalog and cache
    m = mount(server.url, "--evict-delay", "5", "--cache-max", "1M", mountpoint=tmp_path / "kept")
    assert xdg.docfs("pin", m / "pinned.bin").returncode == 0
    read_all(m / "kept.bin")  # released, kept for --evict-delay

    result = xdg.docfs("status", "--json", m.path)
    assert result.returncode == 0, result.stderr
    (status,) = json.loads(result.stdout)["mounts"]
    print(f"status of a mount with --evict-delay 5 --cache-max 1M: {status}")
    assert status["retention"] == {"evictDelay": 5, "cacheMax": 1 << 20}, status
    assert status["pinnedCacheBytes"] >= 100_000 and status["unpinnedCacheBytes"] >= 60_000, status
    assert status["pinnedCacheBytes"] + status["unpinnedCacheBytes"] == status["cacheBytes"]
    assert status["pinnedCacheBytes"] < 100_000 + 8192 and status["unpinnedCacheBytes"] < 60_000 + 8192, status

    result = xdg.docfs("status", "--json", plain_mount.path)
    (status,) = json.loads(result.stdout)["mounts"]
    assert status["retention"] == {"evictDelay": 0, "cacheMax": None}, status
    assert status["pinnedCacheBytes"] == 0

    text = xdg.docfs("status").stdout
    print(text)
    assert "policy: evict 5s after last close, cache max 1.0 MiB" in text, text
    assert "policy: evict on last close\n" in text, text
    assert f"(pinned {status['pinnedCacheBytes']}, unpinned" in text, text


def test_registry_record_is_0600_and_its_directories_0700_even_if_they_were_looser(tmp_path, mount, xdg):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "a.txt").write_bytes(b"a")
    mounts_dir = xdg.state_home / "docfs" / "mounts"
    mounts_dir.mkdir(parents=True)
    os.chmod(xdg.state_home / "docfs", 0o777)
    os.chmod(mounts_dir, 0o755)
    (xdg.cache_home / "docfs").mkdir()
    os.chmod(xdg.cache_home / "docfs", 0o755)
    old_umask = os.umask(0)  # the daemon inherits it: nothing may rely on the umask
    try:
        m = mount(tmp_path / "store")
    finally:
        os.umask(old_umask)
    (record,) = list(mounts_dir.iterdir())
    modes = {str(p.relative_to(xdg.base)): oct(os.stat(p).st_mode & 0o777)
             for p in [xdg.state_home / "docfs", mounts_dir, record, xdg.cache_home / "docfs", *(xdg.cache_home / "docfs").iterdir(),
                       *[d for d in (xdg.state_home / "docfs").iterdir() if d.is_dir()]]}
    print(f"modes: {modes}")
    assert oct(os.stat(record).st_mode & 0o777) == "0o600", modes
    assert json.loads(record.read_text())["mountpoint"] == str(m.path)
    for path, mode in modes.items():
        if path != str(record.relative_to(xdg.base)):
            assert mode == "0o700", f"{path} is {mode}: {modes}"


def test_status_takes_several_mount_points_and_paths_inside_mounts(tmp_path, docfs_serve, mount, xdg):
    for name in ("one", "two"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "f.txt").write_bytes(name.encode())
    # Mount points that share a prefix: `m` must not claim `m2/...`. (m2 first: the fixture's
    # teardown finds daemons by their command line, and `m` is in m2's.)
    m2 = mount(tmp_path / "two", mountpoint=tmp_path / "m2")
    m1 = mount(tmp_path / "one", mountpoint=tmp_path / "m")
    (tmp_path / "link").symlink_to(m2 / "sub")

    def mounts_of(*args):
        result = xdg.docfs("status", "--json", *args)
        assert result.returncode == 0, result.stderr
        return [entry["mountpoint"] for entry in json.loads(result.stdout)["mounts"]]

    assert mounts_of(m2 / "sub" / "f.txt") == [str(m2.path)]
    assert mounts_of(m2.path, m1 / "sub") == [str(m2.path), str(m1.path)]
    assert mounts_of(tmp_path / "link" / "f.txt", m2.path) == [str(m2.path)]  # through a symlink, once
    assert mounts_of(str(m1.path) + "/sub/../sub/") == [str(m1.path)]
    assert sorted(mounts_of()) == sorted([str(m1.path), str(m2.path)])

    # A path in no docfs mount: a clear error, exit 1; the others are still shown.
    outside = tmp_path / "one" / "sub"
    result = xdg.docfs("status", outside)
    print(f"status of {outside}: exit {result.returncode}, {result.stderr.strip()}")
    assert result.returncode == 1 and result.stdout == ""
    assert f"docfs: {outside} is not on a docfs mount of this user" in result.stderr
    result = xdg.docfs("status", m1 / "sub" / "f.txt", outside)
    assert result.returncode == 1 and str(m1.path) in result.stdout and str(m2.path) not in result.stdout, result
    assert f"{outside} is not on a docfs mount" in result.stderr
    result = xdg.docfs("status", "--json", tmp_path / "nowhere" / "x")
    assert result.returncode == 1 and "is not on a docfs mount" in result.stderr


def test_status_json_reports_pending_uploads_and_their_errors(tmp_path, docfs_serve, mount, xdg):
    root = tmp_path / "store"
    root.mkdir()
    (root / "a.txt").write_bytes(b"a" * 100)
    server = docfs_serve(root)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    try:
        m = mount(proxy.url)
        proxy.respond(503, method="PUT")
        with open(m / "a.txt", "ab") as f:
            f.write(b"more")
        (m / "b.txt").write_bytes(b"new")

        def status():
            result = xdg.docfs("status", "--json", m.path)
            assert result.returncode == 0, result.stderr
            (mounted,) = json.loads(result.stdout)["mounts"]
            return mounted

        mounted = wait_until(lambda: (s := status())["errors"] and len(s["errors"]) == 2 and s, 30,
                             "status to report both failing uploads")
        print(f"status with two uploads refused (503): {mounted}")
        assert mounted["pendingUploads"] == 2, mounted
        assert sorted(e["path"] for e in mounted["errors"]) == ["/a.txt", "/b.txt"], mounted["errors"]
        assert all("503" in e["error"] for e in mounted["errors"]), mounted["errors"]
        assert mounted["states"].get("error") == 2, mounted["states"]
        text = xdg.docfs("status", m.path).stdout
        assert "pending uploads: 2" in text and "  error: /a.txt: " in text, text

        proxy.clear()
        mounted = wait_until(lambda: (s := status())["pendingUploads"] == 0 and s, 60, "the uploads once PUT works")
        assert mounted["errors"] == [], mounted
        assert (root / "a.txt").read_bytes() == b"a" * 100 + b"more" and (root / "b.txt").read_bytes() == b"new"
    finally:
        proxy.clear()
        proxy.stop()


# --- docfs pin shows its downloads ---------------------------------------------------------

def run_on_a_pty(argv: list[str], env: dict, timeout: float, columns: int = 120) -> tuple[int, str]:
    """Runs `argv` with a pseudo-terminal as its standard output; its exit status and output."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    pid, fd = pty.fork()
    if pid == 0:
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            output += chunk
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def test_pin_shows_each_download_on_a_terminal_and_a_line_per_file_on_a_pipe(tmp_path, docfs_serve, mount, xdg):
    size = 1_500_000
    root = tmp_path / "store"
    (root / "keep" / "sub").mkdir(parents=True)
    data = pseudo_random_bytes(size, seed=41)
    (root / "keep" / "big.bin").write_bytes(data)
    (root / "keep" / "sub" / "small.txt").write_bytes(b"small")
    (root / "other").mkdir()
    (root / "other" / "big2.bin").write_bytes(data)
    (root / "other" / "c.txt").write_bytes(b"c" * 10)
    server = docfs_serve(root)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    try:
        proxy.throttle(400_000, method="GET", path=r"big2?\.bin")  # about 4 s a file
        m = mount(proxy.url, "--whole-file-limit", str(10 * size))
        from helpers import docfs_bin
        status, output = run_on_a_pty([docfs_bin(), "pin", str(m / "keep")], xdg.env, timeout=60)
        print(f"docfs pin on a terminal: exit {status}, output {output!r}")
        assert status == 0, output
        counts = [int(done) for done in re.findall(r"pinning \(\d/2\) \S*big\.bin  (\d+)/1500000 bytes", output)]
        assert len(set(counts)) >= 3, f"the download's progress did not show growing: {counts}"
        assert counts == sorted(counts) and 0 <= counts[0] < size // 2, counts
        assert f"pinned {m / 'keep' / 'big.bin'} (1.4 MiB)" in output
        assert f"pinned {m / 'keep' / 'sub' / 'small.txt'} (5 B)" in output
        assert f"pinned {m / 'keep'} (2 file(s))" in output
        assert xattr_state(m / "keep" / "big.bin") == "pinned" and xattr_state(m / "keep") == "pinned pinned=1"

        # On a pipe: a plain line per file as it is pinned, no escape codes, no progress.
        result = xdg.docfs("pin", m / "other", m / "keep" / "sub" / "small.txt")
        print(f"docfs pin on a pipe: {result.stdout!r}")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [f"pinned {m / 'other' / 'big2.bin'} (1.4 MiB)",
                                              f"pinned {m / 'other' / 'c.txt'} (10 B)",
                                              f"pinned {m / 'other'} (2 file(s))",
                                              f"pinned {m / 'keep' / 'sub' / 'small.txt'} (5 B)"], result.stdout
        assert xattr_state(m / "other") == "pinned pinned=2"
        assert len(server.gets("other/big2.bin")) == 1 and len(server.gets("keep/big.bin")) == 1
    finally:
        proxy.clear()
        proxy.stop()


# --- a pinned folder keeps what the store adds or changes ------------------------------------

def test_a_listing_of_a_pinned_folder_downloads_new_files_and_keeps_changed_ones_until_opened(tmp_path, docfs_serve, mount, xdg):
    root = tmp_path / "store"
    (root / "keep").mkdir(parents=True)
    (root / "keep" / "a.txt").write_bytes(b"version 1")
    (root / "other.txt").write_bytes(b"not pinned")
    server = docfs_serve(root)
    m = mount(server.url, "--dir-cache-ttl", "1")
    assert xdg.docfs("pin", m / "keep").returncode == 0
    assert xattr_state(m / "keep" / "a.txt") == "pinned" and len(server.gets("keep/a.txt")) == 1
    os.listdir(m.path)

    # Another client adds a file and a folder and changes one, in the pinned folder.
    pseudo = pseudo_random_bytes(300_000, seed=51)
    (root / "keep" / "new.bin").write_bytes(pseudo)
    (root / "keep" / "sub").mkdir()
    (root / "keep" / "sub" / "deep.txt").write_bytes(b"deep")
    (root / "keep" / "a.txt").write_bytes(b"version 2, longer")
    (root / "loose.txt").write_bytes(b"added outside the pinned folder")
    time.sleep(1.5)   # the scenario: the listings grow older than --dir-cache-ttl 1
    os.listdir(m / "keep")  # a stale listing: answered at once, refreshed in the background
    os.listdir(m.path)

    wait_until(lambda: len(server.gets("keep/new.bin")) == 1 and len(server.gets("keep/sub/deep.txt")) == 1, 20,
               "the listing's refresh to download the new file and the new folder's file")
    wait_until(lambda: all(xattr_state(m / "keep" / rel) == "pinned" for rel in ("new.bin", "sub/deep.txt")), 10,
               "the two to be pinned local copies")
    m.wait_downloads_done()   # barrier: the refresh's downloads have ended
    print(f"after the refresh: cache {sorted(os.path.basename(f) for f in xdg.cache_files())}, requests "
          f"{[(r.method, r.path) for r in server.requests() if r.method == 'GET']}")
    # The changed file keeps its copy of the old version (never dropped before the new one is
    # there); its next open fetches the new version.
    assert len(server.gets("keep/a.txt")) == 1
    assert len(xdg.cache_files()) == 3
    assert server.gets("loose.txt") == [] and server.gets("other.txt") == [], "a file outside the pinned folder was fetched"
    assert read_all(m / "keep" / "new.bin") == pseudo
    assert read_all(m / "keep" / "a.txt") == b"version 2, longer"
    assert read_all(m / "keep" / "sub" / "deep.txt") == b"deep"
    m.wait_downloads_done()   # barrier: a download more would be in the log by then
    assert len(server.gets("keep/new.bin")) == 1 and len(server.gets("keep/a.txt")) == 2 and len(server.gets("keep/sub/deep.txt")) == 1


@pytest.mark.parametrize("change", ["deleted", "folder"])
def test_a_pinned_file_gone_from_the_store_goes_at_the_next_listing(tmp_path, docfs_serve, mount, xdg, change):
    """Another client deletes a pinned file, or puts a folder in its place: the next listing of
    the pinned folder drops the copy and shows what the store has, instead of the old file
    until the mount ends."""
    root = tmp_path / "store"
    (root / "keep").mkdir(parents=True)
    (root / "keep" / "f.txt").write_bytes(b"pinned content")
    (root / "keep" / "stays.txt").write_bytes(b"stays")
    server = docfs_serve(root)
    m = mount(server.url, "--dir-cache-ttl", "1")
    assert xdg.docfs("pin", m / "keep").returncode == 0
    assert len(xdg.cache_files()) == 2

    (root / "keep" / "f.txt").unlink()
    if change == "folder":
        (root / "keep" / "f.txt").mkdir()
        (root / "keep" / "f.txt" / "inside.txt").write_bytes(b"inside")
    time.sleep(1.5)   # the scenario: the listing grows older than --dir-cache-ttl 1
    os.listdir(m / "keep")  # a stale listing: answered at once, refreshed in the background

    expected = ["f.txt", "stays.txt"] if change == "folder" else ["stays.txt"]
    # The kernel trusts a name it was given for --entry-timeout (1 s): so does any remote change.
    shown = (lambda: (m / "keep" / "f.txt").is_dir()) if change == "folder" else (lambda: not (m / "keep" / "f.txt").exists())
    wait_until(lambda: sorted(os.listdir(m / "keep")) == expected and shown(), 20, f"the listing to show {expected}")
    if change == "folder":
        assert read_all(m / "keep" / "f.txt" / "inside.txt") == b"inside"
    else:
        assert len(xdg.cache_files()) == 1, "the deleted file's copy is still in the cache"

    assert read_all(m / "keep" / "stays.txt") == b"stays"

"""Placeholders: browsing a tree of >= 1,000 entries (ls -lR, stat, find, du) shows real sizes
and mtimes and fetches no content — proven from the server's request log."""
from __future__ import annotations

import os
import stat
import time

import pytest

from conftest import run
from helpers import summarize, wait_until, walk_relative, xattr_state

pytestmark = pytest.mark.fuse


def test_browsing_fetches_no_content(store_server, big_tree, mount):
    assert len(big_tree.entries()) >= 1000
    server = store_server(big_tree)
    m = mount(server.url)

    started = time.monotonic()
    ls = run(["ls", "-lR", str(m.path)], timeout=180)
    assert ls.returncode == 0, f"ls -lR failed: {ls.stderr}"
    for rel in ("dir00/file000.txt", "dir19/nested/deeper/b.bin"):
        assert os.path.basename(rel) in ls.stdout

    for rel, size in big_tree.files.items():
        st = os.stat(m / rel)
        assert stat.S_ISREG(st.st_mode), f"{rel} is not a regular file: {oct(st.st_mode)}"
        assert st.st_size == size, f"{rel}: size {st.st_size} in the mount, {size} in the store"
        assert int(st.st_mtime) == big_tree.mtimes[rel], \
            f"{rel}: mtime {st.st_mtime} in the mount, {big_tree.mtimes[rel]} in the store"
        assert st.st_blocks == 0, f"{rel} is a placeholder but has st_blocks={st.st_blocks}"
    for rel in big_tree.dirs:
        assert stat.S_ISDIR(os.stat(m / rel).st_mode), f"{rel} is not a directory"

    find = run(["find", str(m.path)], timeout=180)
    assert find.returncode == 0, f"find failed: {find.stderr}"
    found = {os.path.relpath(line, m.path) for line in find.stdout.splitlines()} - {"."}
    assert found == big_tree.entries(), \
        f"find: missing {sorted(big_tree.entries() - found)[:10]}, extra {sorted(found - big_tree.entries())[:10]}"
    assert walk_relative(m.path) == big_tree.entries()

    du = run(["du", "-s", "--apparent-size", "--block-size=1", str(m.path)], timeout=180)
    assert du.returncode == 0, du.stderr
    dir_sizes = sum(os.stat(m / d).st_size for d in big_tree.dirs) + os.stat(m.path).st_size
    expected = sum(big_tree.files.values()) + dir_sizes
    assert int(du.stdout.split()[0]) == expected, \
        f"du --apparent-size says {du.stdout.split()[0]}, files + directories in the store: {expected}"

    states = {xattr_state(m / rel) for rel in list(big_tree.files)[:50]}
    assert states == {"placeholder"}, f"user.docfs.state of unopened files: {states}"
    elapsed = time.monotonic() - started
    print(f"browsed {len(big_tree.entries())} entries in {elapsed:.1f} s; requests: {summarize(server.requests())}")

    # Barrier: no download or upload under way (every request the commands caused is in the
    # log already: both servers log a request before its answer ends).
    m.wait_idle()
    requests = server.requests()
    gets = [r for r in requests if r.method == "GET"]
    assert not gets, f"browsing fetched content: {len(gets)} GETs, e.g. {gets[:5]}"
    others = {r.method for r in requests} - {"PROPFIND", "OPTIONS"}
    assert not others, (f"browsing should be answered by PROPFIND listings alone, saw {summarize(requests)}")
    assert not m.xdg.cache_files(), f"browsing left files in the cache: {m.xdg.cache_files()[:5]}"


def test_the_top_folder_is_listed_while_the_mount_comes_up(store_server, big_tree, mount):
    """A new mount lists its top folder while it comes up (the PROPFIND the first lookup of any
    name would send anyway), so the first command run on it is answered without a round trip."""
    server = store_server(big_tree)
    m = mount(server.url)
    # Two PROPFINDs of /: the mount's check that the store answers (Depth 0), and the listing.
    wait_until(lambda: sum(r.method == "PROPFIND" and r.path == "/" for r in server.requests()) >= 2, 10,
               f"a listing of / in the {server.kind} log before anything used the mount")
    wait_until(lambda: xattr_state(m.path) != "unlisted", 10, "the listing of / to reach the catalog")
    before = len(server.requests())
    top = sorted(n for n in os.listdir(big_tree.root) if not n.startswith("."))
    assert sorted(os.listdir(m.path)) == top
    for name in top:
        os.stat(m / name)
    # No barrier shows a background listing not started yet (list-ahead, a refresh): a moment
    # for one to show. What the commands asked themselves is in the log already.
    time.sleep(0.5)
    after = server.requests()[before:]
    assert not after, f"the first ls and stats after the mount asked the server again: {summarize(after)}"


def test_a_walk_lists_the_folders_ahead_and_each_only_once(store_server, big_tree, mount):
    """`--list-ahead`: `ls -l` of a folder and opening one of its folders list nothing more;
    opening a second lists the folders after it in the background, before anything touches
    them; a `find` of the tree then lists no folder twice."""
    server = store_server(big_tree)
    m = mount(server.url)
    top = sorted(d for d in big_tree.dirs if "/" not in d)  # dir00 .. dir19

    def listed():
        return [r.path.strip("/") for r in server.requests() if r.method == "PROPFIND"]

    run(["ls", "-l", str(m.path)])
    os.listdir(m / top[0])
    # No barrier shows a listing ahead not started yet: a moment for one to show.
    time.sleep(0.5)
    assert not set(top[1:]) & set(listed()), f"ls -l and one folder opened listed others: {sorted(set(listed()))}"
    os.listdir(m / top[1])
    wait_until(lambda: set(top[2:]) <= set(listed()), 10, "the folders after the second one opened, listed ahead")
    find = run(["find", str(m.path)], timeout=180)
    assert find.returncode == 0, find.stderr
    assert len(find.stdout.splitlines()) == len(big_tree.entries()) + 1
    # No barrier shows a listing ahead still to come (one more of a folder find listed): a
    # moment for one to show.
    time.sleep(0.5)
    counts = {path: listed().count(path) for path in set(listed())}
    # The top folder: the mount's check that the store answers (Depth 0), and its listing.
    twice = {path: n for path, n in counts.items() if n > (2 if path == "" else 1)}
    assert not twice, f"folders listed more than once: {twice}"
    assert set(big_tree.dirs) <= set(counts), f"never listed: {sorted(set(big_tree.dirs) - set(counts))}"
    print(f"{server.kind}: find after listing ahead: {len(listed())} PROPFINDs for {len(big_tree.dirs) + 1} folders")


def test_disk_usage_counts_only_local_copies(docfs_serve, big_tree, mount):
    """`du` (allocated blocks) of a tree of placeholders is just its directories, if anything."""
    server = docfs_serve(big_tree)
    m = mount(server.url)
    file_blocks = sum(os.stat(m / rel).st_blocks for rel in big_tree.files)
    assert file_blocks == 0, f"placeholders report {file_blocks} blocks"
    du = run(["du", "-s", "--block-size=1", str(m / "dir00")], timeout=60)
    apparent = run(["du", "-s", "--apparent-size", "--block-size=1", str(m / "dir00")], timeout=60)
    assert int(du.stdout.split()[0]) < int(apparent.stdout.split()[0]), \
        f"du {du.stdout.split()[0]} is not below du --apparent-size {apparent.stdout.split()[0]}"

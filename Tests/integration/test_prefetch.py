"""Reading ahead (issue 34): a reader that goes through a folder in name order gets the next
small files fetched alongside the one it reads, within a window; nothing for a process under
`--no-fetch-for`, never a large file whole, nothing once the reader stops, and nothing kept of
a file fetched ahead that no one opened. Counted in the server's request log."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from helpers import wait_until
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.fuse

WINDOW = 4  # --prefetch given to every mount here


def small_files(root, folder: str, count: int, size: int = 2000) -> list[str]:
    (root / folder).mkdir(parents=True, exist_ok=True)
    names = [f"f{i:03d}.txt" for i in range(count)]
    for i, name in enumerate(names):
        (root / folder / name).write_bytes(bytes([65 + i % 26]) * size)
    return names


def got(server, folder: str) -> set[str]:
    return {r.path.rsplit("/", 1)[1] for r in server.gets() if r.path.startswith(f"/{folder}/")}


def test_a_reader_in_name_order_gets_the_next_files_fetched_ahead(tmp_path, docfs_serve, mount, xdg):
    root = tmp_path / "store"
    names = small_files(root, "docs", 12)
    server = docfs_serve(root)
    m = mount(server.url, "--prefetch", str(WINDOW))
    assert sorted(os.listdir(m / "docs")) == names
    # Two in order: a walk. The next WINDOW come down without being asked for.
    for name in names[:2]:
        assert (m / "docs" / name).read_bytes()[:1] == bytes([65 + names.index(name)])
    ahead = set(names[2:2 + WINDOW])
    wait_until(lambda: got(server, "docs") >= ahead, 10, lambda: f"{sorted(ahead)} fetched ahead; got {sorted(got(server, 'docs'))}")
    m.wait_downloads_done(10)
    assert got(server, "docs") == set(names[:2 + WINDOW]), "fetched beyond the window"
    # The reader goes on: what was fetched ahead is read from its copy, and the window moves on.
    before = len(server.gets())
    for name in names[2:]:
        assert (m / "docs" / name).read_bytes() == bytes([65 + names.index(name)]) * 2000
    m.wait_downloads_done(10)
    gets = [r.path.rsplit("/", 1)[1] for r in server.gets()]
    assert sorted(gets) == names, f"each file fetched once: {gets}"
    assert len(server.gets()) - before == len(names) - 2 - WINDOW
    # Nothing fetched ahead stays once read and closed.
    wait_until(lambda: not xdg.cache_files(), 10, "an empty cache")


def test_files_fetched_ahead_and_never_read_are_let_go(tmp_path, docfs_serve, mount, xdg):
    """The reader stops after 3 of 30: at most the window more is fetched, and after the hold
    (5 s) the copies go."""
    root = tmp_path / "store"
    names = small_files(root, "docs", 30)
    server = docfs_serve(root)
    m = mount(server.url, "--prefetch", str(WINDOW))
    os.listdir(m / "docs")
    for name in names[:3]:
        (m / "docs" / name).read_bytes()
    m.wait_downloads_done(10)
    fetched = got(server, "docs")
    assert fetched <= set(names[:3 + WINDOW]) and len(fetched) >= 3, sorted(fetched)
    wait_until(lambda: not xdg.cache_files(), 15, lambda: f"the copies fetched ahead to go (cache: {xdg.cache_files()})")
    assert got(server, "docs") == fetched, "fetched more after the reader stopped"


def test_out_of_order_reads_fetch_nothing_ahead(tmp_path, docfs_serve, mount):
    root = tmp_path / "store"
    names = small_files(root, "docs", 10)
    server = docfs_serve(root)
    m = mount(server.url, "--prefetch", str(WINDOW))
    os.listdir(m / "docs")
    order = [names[8], names[5], names[2], names[0]]  # backwards: no read is further on than the one before
    for name in order:
        (m / "docs" / name).read_bytes()
    m.wait_downloads_done(10)
    assert got(server, "docs") == set(order)


def test_no_fetch_ahead_for_a_process_under_no_fetch_for(tmp_path, docfs_serve, mount):
    root = tmp_path / "store"
    names = small_files(root, "docs", 10)
    server = docfs_serve(root)
    m = mount(server.url, "--prefetch", str(WINDOW), "--no-fetch-for", "python3")
    os.listdir(m / "docs")
    script = "import sys, os\nfor p in sys.argv[1:]:\n    try: open(p, 'rb').read()\n    except OSError: pass\n"
    subprocess.run([sys.executable, "-c", script, *[str(m / "docs" / n) for n in names]], check=True)
    # Then a fence: a read by another process (cat) in an order that is no walk.
    subprocess.run(["cat", str(m / "docs" / names[9])], check=True, stdout=subprocess.DEVNULL)
    m.wait_downloads_done(10)
    assert got(server, "docs") == {names[9]}


def test_a_large_file_is_never_fetched_whole_ahead(tmp_path, docfs_serve, mount):
    root = tmp_path / "store"
    (root / "docs").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "d.txt"):
        (root / "docs" / name).write_bytes(b"x" * 1000)
    (root / "docs" / "c.bin").write_bytes(os.urandom(3 << 20))
    server = docfs_serve(root)
    m = mount(server.url, "--prefetch", str(WINDOW), "--whole-file-limit", str(1 << 20))
    os.listdir(m / "docs")
    (m / "docs" / "a.txt").read_bytes()
    (m / "docs" / "b.txt").read_bytes()
    wait_until(lambda: "d.txt" in got(server, "docs"), 10, "d.txt fetched ahead")
    m.wait_downloads_done(10)
    assert not [r for r in server.gets("docs/c.bin")], "the large file was fetched ahead"


def test_a_reader_walking_s3_folders_by_name_gets_the_next_files_fetched_ahead(s3, s3_mount):
    """On S3 a name is looked up by itself, so a folder read by paths (`cat d1/f000 d1/f001 …`,
    a build, `xargs cat`) was never listed, and nothing knew the reader's next files: each cost
    a lookup and a GET in turn. A reader walking into such a folder has it listed (one request),
    and its next files come down alongside. (Files above 4 KiB: a smaller object may be an
    s3fs link, and its kind is asked with a HEAD of its own.)"""
    SIZE = 5000
    folders = ["d1", "d2"]
    names = [f"f{i:03d}.txt" for i in range(6)]
    s3.put_many({f"{d}/{n}": bytes([65 + i]) * SIZE for d in folders for i, n in enumerate(names)})
    m = s3_mount("--prefetch", str(WINDOW))
    assert sorted(os.listdir(m.path)) == folders  # the folders are known, not their files

    def fetched(folder):
        return {r.path.rsplit("/", 1)[1] for r in s3.requests() if r.method == "GET" and f"/{folder}/f" in r.path}

    # The walk begins in d1 (two in order), and goes on into d2 at its first file.
    for name in names[:2]:
        assert (m / "d1" / name).read_bytes() == bytes([65 + names.index(name)]) * SIZE
    wait_until(lambda: fetched("d1") >= set(names[2:2 + WINDOW]), 10,
               lambda: f"d1's next files fetched ahead; got {sorted(fetched('d1'))}")
    for name in names[2:]:
        assert (m / "d1" / name).read_bytes() == bytes([65 + names.index(name)]) * SIZE
    # The folder after d1, where the walk goes next, was listed once the walk entered d1, so
    # d2's files need no lookup of their own.
    s3.wait_requests(lambda reqs: [r for r in reqs if r.method == "GET" and "prefix=d2" in str(r)], 10, "d2 listed ahead")
    assert (m / "d2" / names[0]).read_bytes() == b"A" * SIZE
    wait_until(lambda: fetched("d2") >= set(names[1:1 + WINDOW]), 10,
               lambda: f"d2's next files fetched ahead; got {sorted(fetched('d2'))}")
    m.wait_downloads_done(10)
    s3.wait_logged()
    for folder in folders:
        gets = [r.path for r in s3.requests() if r.method == "GET" and f"/{folder}/f" in r.path]
        assert len(gets) == len(set(gets)), f"a file of {folder} fetched twice: {gets}"
    assert fetched("d2") <= set(names[:1 + WINDOW]), f"fetched beyond the window: {sorted(fetched('d2'))}"
    heads = [str(r) for r in s3.requests() if r.method == "HEAD" and "/d2/" in r.path]
    assert not heads, f"d2 was listed ahead, yet its files were looked up one by one: {heads}"

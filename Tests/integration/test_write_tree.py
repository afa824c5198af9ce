"""`cp -r` of a source tree with more than 2,000 files into the mount: after `docfs unmount`
(which waits for the uploads) the store holds an identical tree (`diff -r`)."""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from conftest import run
from write_support import make_store, methods_log

pytestmark = pytest.mark.fuse


def make_source_tree(root: Path, dirs: int = 40, files_per_dir: int = 50) -> int:
    """dirs x files_per_dir files of varied sizes (0..20 KB, a few of 200 KB), plus nested levels."""
    rng = random.Random(2024)
    n = 0
    for d in range(dirs):
        base = root / f"pkg{d:02d}"
        for i in range(files_per_dir):
            sub = base if i % 10 else base / "nested" / f"level{i // 10}"
            sub.mkdir(parents=True, exist_ok=True)
            size = rng.choice([0, 1, 17, 300, 1500, 4096, 9000, 20_000]) if i % 97 else 200_000
            ext = rng.choice([".c", ".h", ".py", ".txt", ".md", ".json", ""])
            (sub / f"f{i:03d}{ext}").write_bytes(rng.randbytes(size))
            n += 1
    (root / ".hidden").mkdir()
    (root / ".hidden/.dotfile").write_text("dot\n")
    (root / "name with spaces & ünïcode.txt").write_text("awkward name\n")
    return n + 2


def test_cp_r_tree_of_2000_files(store_server, tmp_path, mount):
    src = tmp_path / "src-tree"
    count = make_source_tree(src)
    assert count >= 2000
    store = make_store(tmp_path / "store", {})
    server = store_server(store)
    m = mount(server.url)

    t0 = time.monotonic()
    result = run(["cp", "-r", str(src), str(m / "tree")], timeout=240)
    t_copy = time.monotonic() - t0
    assert result.returncode == 0, f"cp -r exited {result.returncode}: {result.stderr[-2000:]}"
    t1 = time.monotonic()
    result = m.unmount(timeout=240)
    t_unmount = time.monotonic() - t1
    print(f"\n{count} files: cp -r took {t_copy:.1f} s, docfs unmount (waiting for uploads) {t_unmount:.1f} s, "
          f"requests: {len(server.requests())}")
    assert result.returncode == 0, f"docfs unmount: {result.returncode} {result.stderr[-2000:]}"
    diff = run(["diff", "-r", str(src), str(store / "tree")], timeout=120)
    assert diff.returncode == 0 and not diff.stdout, f"trees differ:\n{diff.stdout[-3000:]}{diff.stderr[-1000:]}"
    n_puts = sum(1 for r in server.requests() if r.method == "PUT")
    assert n_puts == count, f"{n_puts} PUTs for {count} files (expected one each)\n{methods_log(server, 20)}"
    assert not any(r.method == "GET" for r in server.requests()), "copying new files downloaded something"

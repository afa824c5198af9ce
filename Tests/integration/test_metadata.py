"""Metadata at scale: once a folder is listed, `stat` of its names (and of names it does not
have) is answered from the catalog, without a request to the store, and a timeout the user
sets is checked before anything is mounted."""
from __future__ import annotations

import os
import time

import pytest

from helpers import write_file

pytestmark = pytest.mark.fuse


def test_stat_of_every_name_in_a_listed_folder_asks_the_store_nothing(docfs_serve, mount, tmp_path):
    root = tmp_path / "store"
    names = [f"file{i:04}.txt" for i in range(2000)]
    for name in names:
        write_file(root / "many" / name, name.encode())
    server = docfs_serve(root)
    m = mount(server.url)
    assert len(os.listdir(m / "many")) == len(names)
    before = len(server.requests())
    started = time.monotonic()
    for name in names:
        assert os.stat(m / "many" / name).st_size == len(name)
    for i in range(200):
        assert not (m / "many" / f"missing{i}.txt").exists()
    elapsed = time.monotonic() - started
    after = server.requests()[before:]
    assert not after, f"stat of listed names asked the store: {after[:5]}"
    print(f"stat of {len(names)} names and 200 missing ones: {elapsed:.2f} s")


def test_a_negative_timeout_is_refused(xdg, tmp_path):
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    for option in ("--entry-timeout", "--attr-timeout"):
        result = xdg.docfs("mount", str(tmp_path), str(mountpoint), option, "-1")
        assert result.returncode != 0
        assert option in result.stderr, result.stderr

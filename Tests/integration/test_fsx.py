"""Every byte and every size right while a file is open (issue 13), on every store: the local
directory (`file://`), WebDAV (`docfs serve`, `rclone serve webdav`, Apache `mod_dav`, nginx `dav-ext`) and S3 (moto).

- `test_size_after_fsync_then_extend`: the issue's scenario. After an fsync, a write that
  extends the file must show in the writer's fstat and in another process's stat at once.
- `test_fsx`: the random exerciser (fsx.py) over a few seeds per store, each seed on its own
  file of one mount. `make test` runs DEFAULT_SEEDS and REGRESSION_SEEDS with
  DEFAULT_OPERATIONS each; `make fsx SEEDS=N` runs N more seeds (FSX_FIRST_SEED picks the
  first, else a random one, printed), `FSX_SEED=S` replays one seed, `FSX_MOUNT_ARGS` adds mount options, `FSX_OPS` sets the
  number of operations per seed.
"""
from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from conftest import WEBDAV_FIXTURES
from fsx import Fsx, Peer
from helpers import wait_until, xattr_state

pytestmark = pytest.mark.fuse

STORES = ["local", "docfs-serve", "rclone", "apache", "nginx", "s3-moto"]

# Seeds `make test` always runs (about 3 minutes in all for the four stores).
DEFAULT_SEEDS = [1, 2, 3]
DEFAULT_OPERATIONS = 700
# Seeds that found a bug, kept so it stays fixed. Each names what it found (2026-11-23); the
# upload bugs were fixed by uploading a snapshot of one commit (LocalCopy.startUpload).
REGRESSION_SEEDS: dict[int, str] = {
    1: "S3 (moto): msync's upload stalled 30 s (op 21) -- not docfs: CPython's mmap.flush() "
       "holds the GIL, so the in-process S3Relay could not forward the upload (fsx.msync fixes it); "
       "rclone: after an upload failed with 'shrank while it was uploaded', the copy was evicted "
       "while the store held 0 bytes (op 119)",
    3: "docfs serve: an upload queued by close races an ftruncate of the reopened file, fails with "
       "'shrank while it was uploaded', and the next fsync (msync) returns EIO (op 584); "
       "local: after close, reopen O_TRUNC at once and fsync, the store kept the old bytes (op 683)",
    11: "local: a listing asked before an upload finished wrote the older ETag back; the next "
        "O_TRUNC copy started from it and every later upload became a false conflict (op 423)",
}


def chosen_seeds() -> list[int]:
    if os.environ.get("FSX_SEED"):
        return [int(os.environ["FSX_SEED"])]
    if os.environ.get("FSX_SEEDS"):
        first = int(os.environ.get("FSX_FIRST_SEED") or random.SystemRandom().randrange(10_000, 1_000_000))
        sys.stderr.write(f"\nfsx: seeds {first} .. {first + int(os.environ['FSX_SEEDS']) - 1}\n")
        return list(range(first, first + int(os.environ["FSX_SEEDS"])))
    return sorted(set(DEFAULT_SEEDS) | set(REGRESSION_SEEDS))


def chosen_operations() -> int:
    return int(os.environ.get("FSX_OPS") or DEFAULT_OPERATIONS)


@dataclasses.dataclass
class FsxStore:
    """A store holding some files, ready to mount: the mount arguments and direct access to
    its bytes (the served directory, or boto3), bypassing docfs."""
    label: str
    args: list[str]
    read: Callable[[str], bytes | None]


@pytest.fixture(params=STORES)
def fsx_store(request, tmp_path, xdg):
    """fsx_store(files) -> FsxStore: puts `files` (name -> bytes) on a fresh store of this kind."""
    kind = request.param
    buckets = []

    def make(files: dict[str, bytes]) -> FsxStore:
        if kind == "s3-moto":
            from s3_support import get_server, new_bucket, s3_env
            xdg.env = s3_env(xdg.env)
            bucket = new_bucket(get_server("moto"), tmp_path, "fsx")
            buckets.append(bucket)
            bucket.put_many(files)
            # fsx maps the file: a page fault holds the GIL while docfs fetches, so the relay
            # (a thread of this process) must not stand between docfs and moto.
            return FsxStore(f"S3 (moto, bucket {bucket.name})", bucket.direct_mount_args(), bucket.get)
        root = tmp_path / "store"
        root.mkdir()
        for name, data in files.items():
            (root / name).write_bytes(data)

        def read(name: str) -> bytes | None:
            path = root / name
            return path.read_bytes() if path.is_file() else None

        if kind == "local":
            return FsxStore(f"the local store file://{root}", [f"file://{root}"], read)
        server = request.getfixturevalue(WEBDAV_FIXTURES[kind])(root)
        return FsxStore(f"WebDAV ({server.kind}, {server.url})", [server.url], read)

    yield make
    for bucket in buckets:
        bucket.destroy()


def wait_evicted(path: Path, timeout: float = 60) -> None:
    wait_until(lambda: xattr_state(path) == "placeholder", timeout,
               f"{path.name} to be uploaded and evicted (user.docfs.state is {xattr_state(path)!r})")


def stat_size_elsewhere(path: Path) -> int:
    """The size another process sees (coreutils stat, not this process)."""
    out = subprocess.run(["stat", "-c", "%s", str(path)], capture_output=True, text=True, timeout=30, check=True)
    return int(out.stdout)


def test_size_after_fsync_then_extend(fsx_store, mount):
    store = fsx_store({})
    m = mount(*store.args)
    path = m / "h.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, b"a" * 10, 0)
        os.fsync(fd)
        os.pwrite(fd, b"b" * 5, 1000)
        for when in ("at once", "1.5 s later"):
            assert os.fstat(fd).st_size == 1005, f"the writer's fstat {when}, on {store.label}"
            assert stat_size_elsewhere(path) == 1005, f"another process's stat {when}, on {store.label}"
            time.sleep(1.5)   # the scenario: past --attr-timeout (1 s), the kernel asks docfs again
        os.fsync(fd)
        os.pwrite(fd, b"c" * 3, 2000)
        os.ftruncate(fd, 1500)
        assert os.fstat(fd).st_size == 1500, f"the writer's fstat after fsync, write, ftruncate, on {store.label}"
        assert stat_size_elsewhere(path) == 1500, f"another process's stat after fsync, write, ftruncate, on {store.label}"
    finally:
        os.close(fd)
    expected = b"a" * 10 + bytes(990) + b"b" * 5 + bytes(495)
    wait_evicted(path)
    assert store.read("h.bin") == expected, f"the store's bytes on {store.label}"
    assert stat_size_elsewhere(path) == 1500


def test_fsx(fsx_store, mount):
    seeds = chosen_seeds()
    operations = chosen_operations()
    names = {seed: f"fsx-{seed}.bin" for seed in seeds}
    store = fsx_store({names[seed]: data for seed in seeds if (data := Fsx.initial_content(seed)) is not None})
    # FSX_MOUNT_ARGS: more mount options (e.g. `--upload-while-writing 4K`, so that new files stream).
    m = mount(*store.args, *os.environ.get("FSX_MOUNT_ARGS", "").split())
    peer = Peer()
    started = time.monotonic()
    cycles = 0
    try:
        for seed in seeds:
            run = Fsx(seed, m / names[seed], lambda name=names[seed]: store.read(name), label=store.label,
                      operations=operations, peer=peer)
            run.run()
            cycles += run.cycles
    finally:
        peer.close()
    sys.stderr.write(f"\nfsx on {store.label}: seeds {seeds}, {operations} operations each, "
                     f"{cycles} upload/evict/fetch cycles, {time.monotonic() - started:.1f} s\n")


def test_fsx_streamed(fsx_store, mount):
    """The exerciser with every file streamed (`--whole-file-limit 0`): the other process's
    read-only opens get sparse copies filled by ranged reads, which the writer's opens then
    complete, while the file is written, truncated, uploaded and evicted. The writer's own
    opens are sparse too: its writes land at once, and its closes fetch what they did not
    cover. Seed 2 unless `FSX_SEED`/`FSX_SEEDS` choose."""
    seeds = chosen_seeds() if os.environ.get("FSX_SEED") or os.environ.get("FSX_SEEDS") else [2]
    names = {seed: f"fsx-streamed-{seed}.bin" for seed in seeds}
    store = fsx_store({names[seed]: data for seed in seeds if (data := Fsx.initial_content(seed)) is not None})
    m = mount(*store.args, "--whole-file-limit", "0")
    peer = Peer()
    try:
        for seed in seeds:
            run = Fsx(seed, m / names[seed], lambda name=names[seed]: store.read(name), label=store.label + " (streamed)",
                      operations=chosen_operations(), peer=peer)
            run.run()
    finally:
        peer.close()

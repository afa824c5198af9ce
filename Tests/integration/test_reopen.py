"""A close-then-reopen of a file nobody changed costs no download while the kernel still holds
its pages (file managers open an image two or three times to make a thumbnail; GIO sniffs a
file, then asks about it again). docfs keeps the kernel's page cache on open when the version
is the one it cached (`keep_cache`); such an open only asks the store whether that is still its
version (a PROPFIND, no content), and only reads the page cache misses reach the store, pinned
to that version. A version changed on the store is read fresh; one that changes after such an
open fails a read that reaches the store with ESTALE, as for a streamed file. The request log
of `docfs serve` is the witness."""
from __future__ import annotations

import errno
import hashlib
import os

import pytest

from helpers import drop_page_cache, pseudo_random_bytes, wait_until, write_file, xattr_state

pytestmark = pytest.mark.fuse

MiB = 1 << 20
FILES = {"small.jpg": 300_000, "large.bin": 6 * MiB}   # fetched whole at open; streamed by ranges


def sent(server, rel) -> int:
    return sum(r.bytes or 0 for r in server.gets(rel))


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def wait_placeholder(m, rel):
    wait_until(lambda: xattr_state(m / rel) == "placeholder", 15, f"{rel} to be evicted after its close")


@pytest.fixture
def served(tmp_path, docfs_serve, mount):
    root = tmp_path / "store"
    root.mkdir()
    data = {rel: pseudo_random_bytes(size, 7 + i) for i, (rel, size) in enumerate(FILES.items())}
    for rel, content in data.items():
        write_file(root / rel, content, mtime=1_700_000_000)
    server = docfs_serve(root)
    return root, data, server, mount(server.url)


@pytest.mark.parametrize("rel", list(FILES))
def test_reopening_an_unchanged_file_downloads_nothing(served, rel):
    _, data, server, m = served
    assert read(m / rel) == data[rel]
    first = sent(server, rel)
    assert first >= len(data[rel])
    wait_placeholder(m, rel)
    for _ in range(3):   # what PCManFM does per image
        assert read(m / rel) == data[rel]
        wait_placeholder(m, rel)
    assert sent(server, rel) == first, (
        f"three reopens of the unchanged {rel} downloaded {sent(server, rel) - first} more bytes "
        f"({len(server.gets(rel))} GETs in all)")
    print(f"{rel}: {len(data[rel])} bytes, first read {first} bytes sent, three reopens 0")

    # Pages the kernel no longer holds are fetched again, right.
    drop_page_cache(m / rel)
    assert hashlib.sha256(read(m / rel)).digest() == hashlib.sha256(data[rel]).digest()
    assert sent(server, rel) >= first + len(data[rel])


def test_a_file_changed_on_the_store_is_read_fresh_on_reopen(served):
    root, data, server, m = served
    rel = "small.jpg"
    assert read(m / rel) == data[rel]
    wait_placeholder(m, rel)
    # Same size, so that only the version tells the change.
    new = pseudo_random_bytes(len(data[rel]), 99)
    write_file(root / rel, new, mtime=1_800_000_000)
    assert hashlib.sha256(read(m / rel)).digest() == hashlib.sha256(new).digest(), \
        "a reopen after a change on the store gave the old content from the page cache"
    assert len(server.gets(rel)) == 2


def test_a_change_after_a_cached_open_fails_reads_that_reach_the_store_with_estale(served):
    root, data, server, m = served
    rel = "large.bin"
    assert read(m / rel) == data[rel]
    wait_placeholder(m, rel)
    drop_page_cache(m / rel)
    wait_placeholder(m, rel)
    fd = os.open(m / rel, os.O_RDONLY)   # the store still has the version the kernel knew
    try:
        write_file(root / rel, pseudo_random_bytes(len(data[rel]), 98), mtime=1_800_000_000)
        with pytest.raises(OSError) as caught:
            os.pread(fd, 4096, 3 * MiB)
        assert caught.value.errno == errno.ESTALE, f"expected ESTALE, got {caught.value!r}"
    finally:
        os.close(fd)


def test_reopening_at_once_after_a_close_downloads_nothing(tmp_path, docfs_serve, mount):
    """`cat f f f`: each reopen comes while the release of the close before it may still be on
    its way to docfs (the kernel does not wait for it), and may evict the copy under the open."""
    root = tmp_path / "store"
    root.mkdir()
    data = {f"IMG_{i:04}.jpg": pseudo_random_bytes(40_000 + 20_000 * i, 50 + i) for i in range(20)}
    for rel, content in data.items():
        write_file(root / rel, content)
    server = docfs_serve(root)
    m = mount(server.url)
    for rel, content in data.items():
        for _ in range(3):
            assert read(m / rel) == content
    wait_until(lambda: all(xattr_state(m / rel) == "placeholder" for rel in data), 15, "every copy to be evicted")
    total = sum(sent(server, rel) for rel in data)
    assert total == sum(len(c) for c in data.values()), (
        f"20 files read three times each, back to back, cost {total:,} bytes, "
        f"{sum(len(server.gets(rel)) for rel in data)} GETs; once is {sum(len(c) for c in data.values()):,}")

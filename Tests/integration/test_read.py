"""Provide on open, evict on release: one GET per first open, one shared GET for concurrent
openers, byte-identical content, and no local copy left once the last handle is closed.
Files above the whole-file limit (1 MiB by default) are streamed in ranges instead (see
test_streaming.py); the tests that count one GET per open raise the limit with
`--whole-file-limit` so that they keep checking the whole-file path on a large file."""
from __future__ import annotations

import hashlib
import os
import threading

import pytest

from helpers import SPECIAL_NAMES, drop_page_cache, sha256_file, wait_until, xattr_state

pytestmark = pytest.mark.fuse

# Every file of these tests is fetched whole on open.
WHOLE_FILES = ("--whole-file-limit", str(1 << 30))
# Files up to this size are fetched whole by default.
DEFAULT_WHOLE_FILE_LIMIT = 1 << 20


def read_all(path) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
            n += len(block)
    return h.hexdigest(), n


def wait_evicted(m, rel, timeout=15):
    """After close, release reaches docfs asynchronously: poll for the placeholder state."""
    wait_until(lambda: not m.xdg.cache_files(), timeout,
               f"the local copy of {rel} to leave the cache dir (still there: {m.xdg.cache_files()})")
    wait_until(lambda: xattr_state(m / rel) == "placeholder", timeout,
               f"user.docfs.state of {rel} to be 'placeholder' again (is {xattr_state(m / rel)!r})")


def test_open_read_one_get_then_evict(store_server, content_tree, mount):
    server = store_server(content_tree)
    m = mount(server.url, *WHOLE_FILES)
    rel = "medium.bin"
    assert xattr_state(m / rel) == "placeholder"

    with open(m / rel, "rb") as f:
        data = f.read()
        assert xattr_state(m / rel) == "local", "an open file with its content read must be 'local'"
        copies = m.xdg.cache_files()
        assert copies, "an open file has no local copy in the cache dir"
        for copy in copies:
            mode = os.stat(copy).st_mode & 0o777
            assert mode == 0o600, f"local copy {copy} has mode {oct(mode)}, expected 0600"
            key_dir = m.xdg.cache_root / os.path.relpath(copy, m.xdg.cache_root).split("/")[0]
            assert os.stat(key_dir).st_mode & 0o777 == 0o700, f"{key_dir} is not mode 0700"
        # The kernel may cache attributes for a moment (attr timeout): poll, within reason.
        wait_until(lambda: os.stat(m / rel).st_blocks > 0, 5,
                   f"st_blocks of the open, local {rel} to count its blocks")
    assert hashlib.sha256(data).hexdigest() == content_tree.hashes[rel]
    gets = server.wait_for_gets(rel, 1, m)
    assert len(gets) == 1, f"first open+read: expected exactly one GET of /{rel}, got {len(gets)}: {gets}"
    assert len(server.gets()) == 1, f"GETs of other paths: {server.gets()}"

    wait_evicted(m, rel)
    wait_until(lambda: os.stat(m / rel).st_blocks == 0, 5, f"st_blocks of the evicted {rel} to be 0 again")

    # A reopen whose reads the kernel's page cache answers downloads nothing (test_reopen.py):
    # without those pages, the read after eviction downloads again.
    drop_page_cache(m / rel)
    digest, _ = read_all(m / rel)
    assert digest == content_tree.hashes[rel]
    gets = server.wait_for_gets(rel, 2, m)
    assert len(gets) == 2, f"reading again after eviction: expected a second GET, got {len(gets)}: {gets}"
    wait_evicted(m, rel)


@pytest.mark.parametrize("readers", [2, 4])
def test_concurrent_readers_share_one_get(store_server, content_tree, mount, readers):
    server = store_server(content_tree)
    m = mount(server.url, *WHOLE_FILES)
    rel = "medium.bin"
    opened = threading.Barrier(readers, timeout=120)
    all_open = threading.Barrier(readers, timeout=120)
    results: list = [None] * readers

    def reader(i):
        try:
            opened.wait()                      # all call open() at the same moment
            with open(m / rel, "rb") as f:
                all_open.wait()                # every handle is open before anyone reads or closes
                results[i] = hashlib.sha256(f.read()).hexdigest()
        except Exception as error:  # noqa: BLE001
            results[i] = error
            opened.abort()
            all_open.abort()

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
        assert not t.is_alive(), "a reader hung"
    assert all(r == content_tree.hashes[rel] for r in results), f"readers saw: {results}"
    gets = server.wait_for_gets(rel, 1, m)
    assert len(gets) == 1, f"{readers} concurrent readers caused {len(gets)} GETs: {gets}"
    wait_evicted(m, rel)


@pytest.mark.parametrize("rel", ["empty.txt", "one.bin", "big.bin", "sub/dir/nested.txt", *SPECIAL_NAMES])
def test_byte_identical(store_server, content_tree, mount, rel):
    server = store_server(content_tree)
    m = mount(server.url)
    st = os.stat(m / rel)
    assert st.st_size == content_tree.files[rel], f"{rel!r}: size {st.st_size}, store has {content_tree.files[rel]}"
    assert int(st.st_mtime) == content_tree.mtimes[rel]
    digest, n = read_all(m / rel)
    assert n == content_tree.files[rel], f"{rel!r}: read {n} bytes, store has {content_tree.files[rel]}"
    assert digest == content_tree.hashes[rel], f"{rel!r}: content differs from the store"
    if content_tree.files[rel] > DEFAULT_WHOLE_FILE_LIMIT:
        gets = server.wait_for_gets(rel, 1, m)
        assert all(g.range for g in gets) if server.kind == "docfs-serve" else gets, f"{rel!r}: streamed in ranges: {gets}"
    elif content_tree.files[rel] > 0:
        gets = server.wait_for_gets(rel, 1, m)
        assert len(gets) == 1, f"{rel!r}: expected one GET, got {gets} (all: {server.requests()[-10:]})"
    else:
        # An empty file needs no download; at most one GET is fine.
        assert len(server.gets(rel)) <= 1
    wait_evicted(m, rel)


def test_listing_matches_store(store_server, content_tree, mount):
    server = store_server(content_tree)
    m = mount(server.url)
    from helpers import walk_relative
    assert walk_relative(m.path) == content_tree.entries()
    assert not server.gets(), f"listing fetched content: {server.gets()}"


def test_local_directory_store(content_tree, mount):
    m = mount(str(content_tree.root))
    from helpers import walk_relative
    assert walk_relative(m.path) == content_tree.entries()
    for rel, size in content_tree.files.items():
        st = os.stat(m / rel)
        assert st.st_size == size and int(st.st_mtime) == content_tree.mtimes[rel], rel
        assert st.st_blocks == 0, f"{rel} is a placeholder but has st_blocks={st.st_blocks}"
        assert xattr_state(m / rel) == "placeholder"
    for rel in ("one.bin", "medium.bin", "résumé 日本.txt", "100% sure.txt"):
        assert sha256_file(m / rel) == content_tree.hashes[rel], rel
    wait_evicted(m, "medium.bin")
    result = m.unmount()
    assert result.returncode == 0, f"docfs unmount: {result.stderr}"
    assert not m.is_mounted()
    assert not m.xdg.cache_files()


def test_file_url_store(content_tree, mount):
    m = mount(content_tree.root.as_uri())
    assert sha256_file(m / "small.txt") == content_tree.hashes["small.txt"]

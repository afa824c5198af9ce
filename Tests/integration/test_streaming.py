"""Streaming reads of large files: open() fetches only the head, a read waits only for its own
bytes (ranged GETs), a sequential reader gets every byte once, a sniffer of many files pays for
their heads and not their bodies, and a version changed on the store under an open file fails
the read with ESTALE instead of mixing versions. The request log of `docfs serve` (bytes sent
per GET, and the Range asked for) is the witness."""
from __future__ import annotations

import errno
import hashlib
import os
import subprocess

import pytest

from helpers import pseudo_random_bytes, wait_until, write_file

pytestmark = pytest.mark.fuse

MiB = 1 << 20


def sent(server, rel) -> int:
    return sum(r.bytes or 0 for r in server.gets(rel))


def store_with(tmp_path, files: dict[str, int]):
    root = tmp_path / "store"
    root.mkdir()
    hashes = {}
    for i, (rel, size) in enumerate(files.items()):
        data = pseudo_random_bytes(size, 100 + i)
        write_file(root / rel, data)
        hashes[rel] = hashlib.sha256(data).hexdigest()
    return root, hashes


def mounted_file(serve, mount, tmp_path, rel: str, size: int):
    """A store holding one file of `size` pseudo-random bytes, served by `serve` and mounted:
    (the store's directory, the file's bytes, the server, the mount)."""
    root, _ = store_with(tmp_path, {rel: size})
    server = serve(root)
    return root, (root / rel).read_bytes(), server, mount(server.url)


def test_head_of_a_large_file_costs_a_range_not_the_file(docfs_serve, mount, tmp_path):
    root, _ = store_with(tmp_path, {"movie.bin": 96 * MiB})
    server = docfs_serve(root)
    m = mount(server.url)
    out = subprocess.run(["head", "-c", "1", str(m / "movie.bin")], capture_output=True, timeout=60)
    assert out.returncode == 0 and len(out.stdout) == 1
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after close")
    gets = server.gets("movie.bin")
    assert gets and all(g.range for g in gets), f"every GET of a large file asks for a range: {gets}"
    assert sent(server, "movie.bin") <= 4 * MiB, f"head -c 1 cost {sent(server, 'movie.bin')} bytes: {gets}"


def test_a_random_read_fetches_its_range(docfs_serve, mount, tmp_path):
    root, _ = store_with(tmp_path, {"disk.img": 64 * MiB})
    data = (root / "disk.img").read_bytes()
    server = docfs_serve(root)
    m = mount(server.url)
    fd = os.open(m / "disk.img", os.O_RDONLY)
    try:
        offset = 40 * MiB + 12345
        assert os.pread(fd, 4096, offset) == data[offset:offset + 4096]
        before_close = sent(server, "disk.img")
    finally:
        os.close(fd)
    assert before_close <= 4 * MiB, f"one 4 KiB read at 40 MiB cost {before_close} bytes"


@pytest.mark.parametrize("store", ["docfs-serve", "rclone"])
def test_a_sequential_read_is_byte_identical_and_fetches_each_byte_once(docfs_serve, rclone_serve, mount, tmp_path, store):
    size = 48 * MiB + 4321
    root, hashes = store_with(tmp_path, {"big.bin": size})
    server = (docfs_serve if store == "docfs-serve" else rclone_serve)(root)
    m = mount(server.url)
    h = hashlib.sha256()
    with open(m / "big.bin", "rb") as f:
        while block := f.read(MiB):
            h.update(block)
    assert h.hexdigest() == hashes["big.bin"]
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after close")
    gets = server.gets("big.bin")
    assert 1 < len(gets) < 64, f"a sequential read streams in a few large ranges: {len(gets)} GETs"
    if store == "docfs-serve":
        total = sent(server, "big.bin")
        assert size <= total <= size + 2 * MiB, f"{total} bytes sent for a {size}-byte file"


def test_sniffing_every_file_of_a_folder_costs_their_heads(docfs_serve, mount, tmp_path):
    files = {f"clip{i:02}.bin": 12 * MiB + i for i in range(12)}
    root, _ = store_with(tmp_path, files)
    server = docfs_serve(root)
    m = mount(server.url)
    for rel in files:
        with open(m / rel, "rb") as f:
            assert len(f.read(64 * 1024)) == 64 * 1024
    wait_until(lambda: not m.xdg.cache_files(), 15, "every local copy to be evicted after close")
    total = sum(sent(server, rel) for rel in files)
    assert total <= len(files) * 2 * MiB, f"reading 64 KiB of {len(files)} files of 12 MiB cost {total} bytes"


def test_a_version_changed_on_the_store_while_open_fails_with_estale(docfs_serve, mount, tmp_path):
    root, _ = store_with(tmp_path, {"log.bin": 32 * MiB})
    server = docfs_serve(root)
    m = mount(server.url)
    fd = os.open(m / "log.bin", os.O_RDONLY)
    try:
        first = os.pread(fd, 16, 0)
        assert len(first) == 16
        replacement = pseudo_random_bytes(32 * MiB, 999)
        write_file(root / "log.bin", replacement)
        with pytest.raises(OSError) as caught:
            os.pread(fd, 4096, 20 * MiB)
        assert caught.value.errno == errno.ESTALE, f"expected ESTALE, got {caught.value!r}"
    finally:
        os.close(fd)
    # The next open sees the new version, whole and right.
    with open(m / "log.bin", "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == hashlib.sha256(replacement).hexdigest()


def test_a_writer_of_a_streamed_file_uploads_the_whole_file(docfs_serve, mount, tmp_path):
    size = 20 * MiB + 3
    root, _ = store_with(tmp_path, {"doc.bin": size})
    original = (root / "doc.bin").read_bytes()
    server = docfs_serve(root)
    m = mount(server.url)
    reader = os.open(m / "doc.bin", os.O_RDONLY)
    try:
        assert os.pread(reader, 8, 10 * MiB) == original[10 * MiB:10 * MiB + 8]
        writer = os.open(m / "doc.bin", os.O_RDWR)
        try:
            os.pwrite(writer, b"EDITED", 5 * MiB)
        finally:
            os.close(writer)
        assert os.pread(reader, 6, 5 * MiB) == b"EDITED"
    finally:
        os.close(reader)
    expected = original[:5 * MiB] + b"EDITED" + original[5 * MiB + 6:]
    wait_until(lambda: (root / "doc.bin").read_bytes() == expected, 30, "the store to hold the whole edited file")
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after the upload")


def test_a_writer_that_only_reads_a_header_fetches_its_range(docfs_serve, mount, tmp_path):
    """A program that opens a large file read-write and reads its header (a tagger, a
    database that ends up only reading) pays for the header, as a reader does, and uploads
    nothing."""
    root, data, server, m = mounted_file(docfs_serve, mount, tmp_path, "movie.bin", 96 * MiB)
    fd = os.open(m / "movie.bin", os.O_RDWR)
    try:
        assert os.pread(fd, 4096, 0) == data[:4096]
        assert os.pread(fd, 4096, 50 * MiB) == data[50 * MiB:50 * MiB + 4096]
    finally:
        os.close(fd)
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after close")
    assert sent(server, "movie.bin") <= 8 * MiB, f"two 4 KiB reads by a writer cost {sent(server, 'movie.bin')} bytes"
    assert not [r for r in server.requests() if r.method == "PUT"], "a writer that wrote nothing uploaded"
    assert (root / "movie.bin").read_bytes() == data


@pytest.mark.parametrize("store", ["docfs-serve", "rclone"])
def test_a_writer_that_reads_then_edits_uploads_the_whole_edited_file(docfs_serve, rclone_serve, mount, tmp_path, store):
    """Its reads stream, its write lands at once, and its close fetches the rest first: the
    store gets every byte of the file with the edit, never holes."""
    size = 40 * MiB + 7
    serve = docfs_serve if store == "docfs-serve" else rclone_serve
    root, original, server, m = mounted_file(serve, mount, tmp_path, "doc.bin", size)
    fd = os.open(m / "doc.bin", os.O_RDWR)
    try:
        assert os.pread(fd, 16, 0) == original[:16]
        os.pwrite(fd, b"EDITED", 30 * MiB)
        assert os.pread(fd, 10, 30 * MiB - 2) == original[30 * MiB - 2:30 * MiB] + b"EDITED" + original[30 * MiB + 6:30 * MiB + 8]
        assert os.pread(fd, 16, size - 16) == original[-16:]
    finally:
        os.close(fd)
    expected = original[:30 * MiB] + b"EDITED" + original[30 * MiB + 6:]
    wait_until(lambda: (root / "doc.bin").read_bytes() == expected, 60, "the store to hold the whole edited file")
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after the upload")
    if store == "docfs-serve":
        total = sent(server, "doc.bin")
        assert total <= size + 2 * MiB, f"{total} bytes fetched for a {size}-byte file: each byte once"


def ranges_asked(server, rel) -> list[tuple[int, int]]:
    """The byte ranges the GETs of `rel` asked for, as half-open (start, end) pairs."""
    asked = []
    for get in server.gets(rel):
        assert get.range and get.range.startswith("bytes="), f"a GET of the whole file: {get}"
        first, last = get.range[len("bytes="):].split("-")
        asked.append((int(first), int(last) + 1))
    return asked


def test_a_write_into_a_streamed_file_fetches_only_what_it_does_not_cover(docfs_serve, mount, tmp_path):
    """A write lands in the sparse copy without a fetch; the close fetches the bytes the writes
    did not cover (from the version the copy started from), and the store gets the whole
    edited file. The bytes written over are never downloaded."""
    size = 64 * MiB
    root, original, server, m = mounted_file(docfs_serve, mount, tmp_path, "disk.img", size)
    new = pseudo_random_bytes(16 * MiB, 77)
    fd = os.open(m / "disk.img", os.O_RDWR)
    try:
        os.pwrite(fd, new, 8 * MiB)
        assert sent(server, "disk.img") <= 1 * MiB, f"a write fetched {sent(server, 'disk.img')} bytes before it returned"
        assert os.pread(fd, 16, 8 * MiB - 8) == original[8 * MiB - 8:8 * MiB] + new[:8]
    finally:
        os.close(fd)
    expected = original[:8 * MiB] + new + original[24 * MiB:]
    wait_until(lambda: (root / "disk.img").read_bytes() == expected, 60, "the store to hold the whole edited file")
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after the upload")
    overlapping = [(a, b) for a, b in ranges_asked(server, "disk.img") if a < 24 * MiB and b > 8 * MiB + 4096]
    assert not overlapping, f"bytes the write covered were fetched: {overlapping}"
    assert sent(server, "disk.img") <= size - 16 * MiB + 2 * MiB, f"{sent(server, 'disk.img')} bytes fetched"


def test_overwriting_a_streamed_file_in_place_fetches_nothing_of_it(docfs_serve, mount, tmp_path):
    """`dd conv=notrunc` over the whole of a large file (a disk image rewritten in place): no
    byte of the old content is needed, so none is downloaded beyond the head the open reads."""
    size = 32 * MiB
    root, _, server, m = mounted_file(docfs_serve, mount, tmp_path, "disk.img", size)
    new = pseudo_random_bytes(size, 78)
    (tmp_path / "new.img").write_bytes(new)
    out = subprocess.run(["dd", f"if={tmp_path / 'new.img'}", f"of={m / 'disk.img'}", "bs=1M", "conv=notrunc"],
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    wait_until(lambda: (root / "disk.img").read_bytes() == new, 60, "the store to hold the new content")
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after the upload")
    assert sent(server, "disk.img") <= 1 * MiB, f"overwriting it whole fetched {sent(server, 'disk.img')} bytes of it"


def test_a_writer_that_reads_then_truncates_to_zero_fetches_no_more(docfs_serve, mount, tmp_path):
    """ftruncate(0) after reads through a read-write handle: the file holds what is written
    next, and the rest of the old content is never fetched."""
    root, data, server, m = mounted_file(docfs_serve, mount, tmp_path, "log.bin", 64 * MiB)
    fd = os.open(m / "log.bin", os.O_RDWR)
    try:
        assert os.pread(fd, 4096, 0) == data[:4096]
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"fresh start", 0)
        assert os.pread(fd, 100, 0) == b"fresh start"
    finally:
        os.close(fd)
    wait_until(lambda: (root / "log.bin").read_bytes() == b"fresh start", 30, "the store to hold the new content")
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after the upload")
    assert sent(server, "log.bin") <= 4 * MiB, f"{sent(server, 'log.bin')} bytes fetched of a file truncated to 0"


def test_concurrent_readers_of_a_streamed_file_share_its_bytes(docfs_serve, mount, tmp_path):
    import threading
    size = 24 * MiB + 5
    root, hashes = store_with(tmp_path, {"shared.bin": size})
    server = docfs_serve(root)
    m = mount(server.url)
    readers = 4
    start = threading.Barrier(readers, timeout=60)
    results: list = [None] * readers

    def reader(i):
        try:
            with open(m / "shared.bin", "rb") as f:
                start.wait()
                results[i] = hashlib.sha256(f.read()).hexdigest()
        except Exception as error:  # noqa: BLE001
            results[i] = error
            start.abort()

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a reader hung"
    assert results == [hashes["shared.bin"]] * readers, f"readers saw: {results}"
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after the last close")
    total = sent(server, "shared.bin")
    assert total <= size + 2 * MiB, f"{readers} readers cost {total} bytes for a {size}-byte file"


@pytest.mark.parametrize("change", ["rename", "unlink", "touch"])
def test_an_open_streamed_file_survives_a_rename_an_unlink_and_a_touch(mount, tmp_path, change):
    """On the local store, whose version includes the mtime: a touch gives the same content a
    new version, which the open file's ranges must follow; a rename or unlink changes the name
    its ranges are read by. POSIX keeps an open file readable through all three."""
    size = 24 * MiB
    root, _ = store_with(tmp_path, {"film.bin": size})
    data = (root / "film.bin").read_bytes()
    m = mount(root.as_uri())
    fd = os.open(m / "film.bin", os.O_RDONLY)
    try:
        assert os.pread(fd, 16, 0) == data[:16]
        if change == "rename":
            os.rename(m / "film.bin", m / "moved.bin")
        elif change == "unlink":
            os.unlink(m / "film.bin")
        else:
            os.utime(m / "film.bin", (1_600_000_000, 1_600_000_000))
        offset = 20 * MiB + 77
        assert os.pread(fd, 4096, offset) == data[offset:offset + 4096]
    finally:
        os.close(fd)
    wait_until(lambda: not m.xdg.cache_files(), 15, "the local copy to be evicted after close")

"""S3 read path, against moto and SeaweedFS: placeholders without GetObject (>= 1,000 keys in
nested prefixes), one GetObject per open and eviction on release, concurrent readers sharing
one GET, a paged listing of 3,001 keys under one prefix, and directories from common prefixes
with and without zero-byte `dir/` markers. Checked on the store side with the server's request
log (moto's access log; the relay's for SeaweedFS) and with boto3."""
from __future__ import annotations

import hashlib
import os
import stat
import threading
import time

import pytest

from conftest import run
from helpers import drop_page_cache, wait_until, walk_relative, xattr_state
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.fuse


def nested_tree(dirs: int = 20, files_per_dir: int = 50) -> tuple[dict[str, bytes], set[str]]:
    """dirs x files_per_dir keys plus two deeper levels per dir: >= 1,000 keys, no markers."""
    import random
    rng = random.Random(4321)
    objects: dict[str, bytes] = {}
    dirset: set[str] = set()
    for d in range(dirs):
        dname = f"dir{d:02d}"
        dirset |= {dname, f"{dname}/nested", f"{dname}/nested/deeper"}
        for i in range(files_per_dir):
            objects[f"{dname}/file{i:03d}.txt"] = rng.randbytes(rng.randrange(0, 3000))
        objects[f"{dname}/nested/a.md"] = rng.randbytes(rng.randrange(1, 5000))
        objects[f"{dname}/nested/deeper/b.bin"] = rng.randbytes(rng.randrange(1, 5000))
    return objects, dirset


def test_s3_browsing_fetches_no_content(s3, s3_mount):
    objects, dirs = nested_tree()
    assert len(objects) >= 1000
    started = time.monotonic()
    s3.put_many(objects)
    listed = s3.objects()
    assert set(listed) == set(objects)
    print(f"created {len(objects)} keys in {time.monotonic() - started:.1f} s")
    m = s3_mount()

    started = time.monotonic()
    ls = run(["ls", "-lR", str(m.path)], timeout=180)
    assert ls.returncode == 0, f"ls -lR failed: {ls.stderr}"
    assert "file049.txt" in ls.stdout and "b.bin" in ls.stdout
    for key, data in objects.items():
        st = os.stat(m / key)
        assert stat.S_ISREG(st.st_mode), f"{key} is not a regular file: {oct(st.st_mode)}"
        assert st.st_size == len(data), f"{key}: size {st.st_size} in the mount, {len(data)} on S3"
        want = listed[key]["LastModified"].timestamp()
        assert abs(st.st_mtime - want) < 1.0, f"{key}: mtime {st.st_mtime} in the mount, LastModified {want} on S3"
        assert st.st_blocks == 0, f"{key} is a placeholder but has st_blocks={st.st_blocks}"
    for d in dirs:
        assert stat.S_ISDIR(os.stat(m / d).st_mode), f"{d} is not a directory"
    find = run(["find", str(m.path)], timeout=180)
    assert find.returncode == 0, find.stderr
    found = {os.path.relpath(line, m.path) for line in find.stdout.splitlines()} - {"."}
    expected = set(objects) | dirs
    assert found == expected, f"find: missing {sorted(expected - found)[:10]}, extra {sorted(found - expected)[:10]}"
    assert walk_relative(m.path) == expected
    states = {xattr_state(m / key) for key in list(objects)[:50]}
    assert states == {"placeholder"}, f"user.docfs.state of unopened files: {states}"
    print(f"browsed {len(expected)} entries in {time.monotonic() - started:.1f} s")

    # Barrier: no download or upload under way, and every request docfs sent is in the log.
    m.wait_idle()
    s3.wait_logged()
    requests = s3.requests()
    gets = s3.content_gets()
    assert not gets, f"browsing fetched content: {len(gets)} GetObject, e.g. {[str(r) for r in gets[:5]]}"
    others = [r for r in requests if not (r in s3.lists() or r.method == "HEAD")]
    assert not others, f"browsing should need ListObjectsV2 (and HEAD) only, saw {[str(r) for r in others[:10]]}"
    assert s3.lists(), "no ListObjectsV2 request in the log: is the log the right one?"
    print(f"{len(s3.lists())} ListObjectsV2, {sum(r.method == 'HEAD' for r in requests)} HEAD")
    assert not m.xdg.cache_files(), f"browsing left files in the cache: {m.xdg.cache_files()[:5]}"


def wait_evicted(m, rel, timeout=15):
    wait_until(lambda: xattr_state(m / rel) == "placeholder", timeout,
               f"user.docfs.state of {rel} to be 'placeholder' again (is {xattr_state(m / rel)!r})")
    wait_until(lambda: not m.xdg.cache_files(), timeout,
               f"the local copy of {rel} to leave the cache (has {m.xdg.cache_files()})")


def test_s3_open_read_one_get_then_evict(s3, s3_mount):
    data = os.urandom(3 * 1024 * 1024 + 17)
    s3.put("docs/paper.pdf", data)
    s3.put("docs/other.txt", b"other\n")
    # Fetched whole on open (a file this size is streamed by default: test_s3_streamed_read).
    m = s3_mount("--whole-file-limit", str(1 << 30))
    rel = "docs/paper.pdf"
    assert xattr_state(m / rel) == "placeholder"
    assert not s3.content_gets()

    with open(m / rel, "rb") as f:
        got = f.read()
        assert xattr_state(m / rel) == "local"
        assert m.xdg.cache_files(), "an open file has no local copy in $XDG_CACHE_HOME/docfs/*/"
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest()
    s3.wait_requests(lambda reqs: s3.content_gets(rel), 10, "a GetObject of the key")
    m.wait_downloads_done()   # barrier: a GET more would be in the log by then
    s3.wait_logged()
    gets = s3.content_gets(rel)
    assert len(gets) == 1, f"first open+read: expected exactly one GET /{s3.name}/{rel}, got {[str(g) for g in gets]}"
    assert not gets[0].query, f"the GET has a query: {gets[0]}"
    assert len(s3.content_gets()) == 1, f"GETs of other keys: {[str(g) for g in s3.content_gets()]}"
    wait_evicted(m, rel)
    assert os.stat(m / rel).st_blocks == 0

    # again, without the kernel's cached pages: a second GET (the copy was evicted), same content
    drop_page_cache(m / rel)
    assert hashlib.sha256((m / rel).read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    s3.wait_requests(lambda reqs: len(s3.content_gets(rel)) >= 2, 10, "a second GetObject after eviction")
    wait_evicted(m, rel)


def test_s3_concurrent_readers_share_one_get(s3, s3_mount):
    data = os.urandom(6 * 1024 * 1024 + 5)
    s3.put("shared.bin", data)
    m = s3_mount("--whole-file-limit", str(1 << 30))
    readers = 4
    opened = threading.Barrier(readers, timeout=120)
    all_open = threading.Barrier(readers, timeout=120)
    results: list = [None] * readers

    def reader(i):
        try:
            opened.wait()
            with open(m / "shared.bin", "rb") as f:
                all_open.wait()
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
    assert results == [hashlib.sha256(data).hexdigest()] * readers, f"readers saw: {results}"
    m.wait_downloads_done()   # barrier: a GET more would be in the log by then
    s3.wait_logged()
    gets = s3.content_gets("shared.bin")
    assert len(gets) == 1, f"{readers} concurrent readers caused {len(gets)} GETs: {[str(g) for g in gets]}"
    wait_evicted(m, "shared.bin")


def test_s3_streamed_read(s3, s3_mount):
    """A large object is streamed: `head -c 1` costs one ranged GET of its head, a full read
    is byte-identical in a few large ranges, and nothing stays in the cache."""
    data = os.urandom(40 * 1024 * 1024 + 11)
    s3.put("video.bin", data)
    m = s3_mount()
    with open(m / "video.bin", "rb") as f:
        assert f.read(1) == data[:1]
        m.wait_downloads_done()   # barrier: the ranges it fetched (a read-ahead too) have come
        s3.wait_logged()
        assert len(s3.content_gets("video.bin")) <= 3, [str(g) for g in s3.content_gets("video.bin")]
    wait_evicted(m, "video.bin")
    before = len(s3.content_gets("video.bin"))
    assert hashlib.sha256((m / "video.bin").read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    streamed = len(s3.content_gets("video.bin")) - before
    assert 1 < streamed < 32, f"a sequential read of 40 MiB took {streamed} GETs"
    wait_evicted(m, "video.bin")


def test_s3_listing_3001_keys_in_one_prefix_is_paged(s3, s3_mount):
    # Four pages of at most 1,000, the last with one key. (10,000 keys cost 30-47 s of
    # creating them, and paged no differently.)
    n = 3_001
    started = time.monotonic()
    s3.put_many({f"many/k{i:05d}.txt": b"%d\n" % i for i in range(n)}, workers=24)
    print(f"created {n} keys in {time.monotonic() - started:.1f} s")
    assert len(s3.keys("many/")) == n
    m = s3_mount()

    started = time.monotonic()
    out = run(["sh", "-c", f"ls '{m / 'many'}' | wc -l"], timeout=300, check=True)
    print(f"ls | wc -l of {n} entries took {time.monotonic() - started:.1f} s")
    assert int(out.stdout.strip()) == n, f"ls many | wc -l printed {out.stdout.strip()}, expected {n}"
    names = set(os.listdir(m / "many"))
    assert names == {f"k{i:05d}.txt" for i in range(n)}
    assert os.stat(m / "many" / "k03000.txt").st_size == len(b"3000\n")

    pages = [r for r in s3.lists() if r.q().get("prefix") == "many/"]
    continued = [r for r in pages if "continuation-token" in r.q()]
    assert len(continued) >= n // 1000 - 1, (f"expected a paged listing (>= {n // 1000 - 1} ListObjectsV2 with "
                                            f"continuation-token), saw {len(pages)} pages: {[str(p)[:120] for p in pages[:12]]}")
    assert all(int(r.q().get("max-keys", "1000")) <= 1000 for r in pages)
    assert not s3.content_gets(), [str(r) for r in s3.content_gets()[:5]]


def test_s3_directories_with_and_without_markers(s3, s3_mount):
    s3.put_many({
        "marked/": b"",                          # marker + a child
        "marked/a.txt": b"a\n",
        "unmarked/b.txt": b"b\n",                # common prefix only
        "unmarked/deep/er/c.txt": b"c\n",        # nested, no markers at all
        "empty/": b"",                           # marker only: an empty directory
        "mixed/inner/": b"",                     # marker of a nested dir, parent without marker
        "mixed/inner/d.txt": b"d\n",
        "top.txt": b"top\n",
    })
    m = s3_mount()
    assert sorted(os.listdir(m.path)) == ["empty", "marked", "mixed", "top.txt", "unmarked"]
    for d in ("marked", "unmarked", "unmarked/deep", "unmarked/deep/er", "empty", "mixed", "mixed/inner"):
        assert stat.S_ISDIR(os.stat(m / d).st_mode), f"{d} is not a directory"
    assert os.listdir(m / "empty") == []
    assert os.listdir(m / "marked") == ["a.txt"], "the marker itself must not show up as an entry"
    assert sorted(os.listdir(m / "unmarked")) == ["b.txt", "deep"]
    assert os.listdir(m / "mixed") == ["inner"]
    assert os.listdir(m / "mixed/inner") == ["d.txt"]
    assert (m / "unmarked/deep/er/c.txt").read_bytes() == b"c\n"
    assert (m / "mixed/inner/d.txt").read_bytes() == b"d\n"
    assert stat.S_ISREG(os.stat(m / "top.txt").st_mode)
    assert walk_relative(m.path) == {"empty", "marked", "marked/a.txt", "mixed", "mixed/inner", "mixed/inner/d.txt",
                                     "top.txt", "unmarked", "unmarked/b.txt", "unmarked/deep", "unmarked/deep/er",
                                     "unmarked/deep/er/c.txt"}


def test_s3_prefix_mount(s3, s3_mount):
    """s3://bucket/prefix mounts the keys below the prefix only."""
    s3.put_many({"team/a/report.txt": b"report\n", "team/b.txt": b"b\n", "other/secret.txt": b"no\n"})
    m = s3_mount(prefix="team")
    assert sorted(os.listdir(m.path)) == ["a", "b.txt"]
    assert (m / "a/report.txt").read_bytes() == b"report\n"
    (m / "new.txt").write_bytes(b"new\n")
    s3.wait_object("team/new.txt", b"new\n", timeout=30)
    assert "new.txt" not in s3.keys("other/") and s3.get("new.txt") is None


def test_s3_a_new_mount_does_not_list_the_bucket_before_it_is_asked(s3, s3_mount):
    """S3 looks names up one at a time, so a mount does not list the bucket's top while it comes
    up (a bucket's top may hold millions of keys): the first listing is the first `ls`'s."""
    s3.put_many({f"k{i:03d}.txt": b"%d\n" % i for i in range(20)})
    m = s3_mount()

    def whole_listings():  # the mount's check that the bucket answers is a 1-key listing
        return [r for r in s3.lists() if r.q().get("max-keys", "1000") != "1"]

    # No barrier shows a listing the mount would start in the background: a moment for one.
    time.sleep(1)
    s3.wait_logged()
    assert not whole_listings(), f"the mount listed the bucket unasked: {[str(r)[:120] for r in whole_listings()]}"
    assert (m / "k007.txt").read_bytes() == b"7\n"
    assert not whole_listings(), "a lookup of one name listed the bucket"
    assert len(os.listdir(m.path)) == 20 and whole_listings()


def test_s3_names_of_a_small_folder_looked_up_by_path_cost_one_listing(s3, s3_mount):
    """`cat` or `cp` of files by path, in folders never listed: the first name is asked about
    (HEAD), the second too and it lists its folder in the background when one page holds it
    all; the names after that are answered from that listing, with no request. (Objects
    above 4 KiB: a smaller one may be a link, which only a HEAD can tell.)"""
    names = [f"f{i}.bin" for i in range(6)]
    s3.put_many({f"docs/{name}": name.encode() * 1000 for name in names})
    m = s3_mount()
    assert (m / "docs" / names[0]).read_bytes() == names[0].encode() * 1000
    start = len(s3.requests())
    assert os.stat(m / "docs" / names[1]).st_size == 6000
    wait_until(lambda: any(r.q().get("prefix") == "docs/" and r.q().get("max-keys", "1000") != "1"
                           for r in s3.lists()[-5:]), 10, "the folder's listing")
    # Barrier: a readdir joins the listing under way (it asks for nothing of its own) and
    # returns once the folder is listed. (The folder's state counts the names already looked
    # up, so it says nothing of the listing.)
    assert sorted(os.listdir(m / "docs")) == sorted(names)
    s3.wait_logged()
    listed = len(s3.requests())
    pages = [r for r in s3.requests()[start:] if r in s3.lists() and r.q().get("prefix") == "docs/" and r.q().get("max-keys", "1000") != "1"]
    assert len(pages) == 1, f"the readdir listed the folder again: {[str(r)[:120] for r in pages]}"
    for name in names[2:]:
        assert os.stat(m / "docs" / name).st_size == 6000
    with pytest.raises(FileNotFoundError):
        os.stat(m / "docs" / "absent.bin")
    asked = s3.requests()[listed:]
    assert not asked, f"names in a listed folder were asked about: {[str(r)[:120] for r in asked]}"
    heads = [r for r in s3.requests()[start:listed] if r.method == "HEAD"]
    assert len(heads) == 1, [str(r) for r in heads]
    # Their content is read as usual.
    assert [(m / "docs" / name).read_bytes() for name in names] == [name.encode() * 1000 for name in names]


def test_s3_stat_of_every_name_of_a_big_folder_costs_its_listing_not_a_head_each(s3, s3_mount):
    """A program that `stat`s every name of a folder of 2,500 keys it never listed (a build, an
    rsync with a file list): the lookups by name pay for the folder's listing page by page
    (the second name asks for the first page, every 8 more for the next), so once its 3 pages
    are in, the other names are answered with no request: dozens of HEADs, not 2,500.
    (Objects above 4 KiB: a smaller one may be a link, which only a HEAD can tell.)"""
    n = 2_500
    s3.put_many({f"many/k{i:05d}.txt": b"%05d" % i * 1000 for i in range(n)}, workers=24)
    m = s3_mount()
    start = len(s3.requests())
    for i in range(n):
        assert os.stat(m / "many" / f"k{i:05d}.txt").st_size == 5000
    s3.wait_logged()
    asked = s3.requests()[start:]
    heads = [r for r in asked if r.method == "HEAD"]
    pages = [r for r in asked if r in s3.lists() and r.q().get("prefix") == "many/" and r.q().get("max-keys", "1000") != "1"]
    assert len(pages) == 3, [str(r)[:120] for r in pages]
    # 24 names pay for the 3 pages; those asked while a page is on its way add a few more.
    print(f"{len(heads)} HEADs and {len(pages)} pages for {n} names")
    assert len(heads) <= 250, f"{len(heads)} HEADs for {n} names"
    assert xattr_state(m / "many") != "unlisted"


def test_s3_lookup_in_a_folder_never_listed_asks_about_one_name(s3, s3_mount):
    """`stat` of one name in a big folder never listed costs a HEAD (plus a 1-key listing of
    `name/` when there is no such object), not the folder's whole listing (mountpoint-s3 does
    the same). `ls` of the folder afterwards still lists it whole."""
    n = 3_000
    s3.put_many({f"big/k{i:05d}.txt": b"%d\n" % i for i in range(n)}, workers=24)
    s3.put_many({"big/sub/inner.txt": b"inner\n"})
    m = s3_mount()
    start = len(s3.requests())

    st = os.stat(m / "big" / "k01234.txt")
    assert stat.S_ISREG(st.st_mode) and st.st_size == len(b"1234\n")
    assert stat.S_ISDIR(os.stat(m / "big" / "sub").st_mode)
    with pytest.raises(FileNotFoundError):
        os.stat(m / "big" / "absent.txt")
    assert (m / "big" / "k00007.txt").read_bytes() == b"7\n"

    # No barrier shows a listing going on in the background (the one page, and no more): a
    # moment for a second page to be asked.
    time.sleep(0.5)
    s3.wait_logged()
    asked = s3.requests()[start:]
    # The second name looked up tries one page of the folder (a small folder would be listed
    # by it, see the next test), sees it is not all, and goes no further.
    pages = [r for r in asked if r in s3.lists() and r.q().get("prefix") == "big/" and r.q().get("max-keys", "1000") != "1"]
    assert len(pages) <= 1 and not any("continuation-token" in r.q() for r in pages), \
        f"a lookup listed the whole folder: {[str(r)[:120] for r in pages[:5]]}"
    heads = [r for r in asked if r.method == "HEAD"]
    assert 3 <= len(heads) <= 8, f"expected a HEAD per name looked up, saw {[str(r) for r in heads]}"

    names = os.listdir(m / "big")
    assert len(names) == n + 1 and "k01234.txt" in names and "sub" in names
    assert os.stat(m / "big" / "k02999.txt").st_size == len(b"2999\n")

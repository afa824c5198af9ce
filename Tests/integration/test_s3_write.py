"""S3 write path, against moto and SeaweedFS: every write operation through the mount, checked on
the bucket with boto3 and in the server's request log — create+write+close is one PutObject and
no GetObject, O_TRUNC downloads nothing, append, truncate, mkdir writes a `dir/` marker, rmdir
removes it, ENOTEMPTY, unlink, rename of a file (CopyObject + DeleteObject), rename of a
directory (recursive), chmod/utimensat across a remount, and conflicts keep both versions."""
from __future__ import annotations

import errno
import os
import re
import stat

import pytest

from helpers import wait_until, xattr_state
from s3_support import s3, s3_mount, s3_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.fuse

SEED = {
    "hello.txt": b"hello world\n" * 50,
    "notes.md": b"# notes\nline a\nline b\n",
    "data.bin": bytes(range(256)) * 40,
    "docs/report.txt": b"report v1: alpha beta gamma\n",
    "docs/sub/deep.txt": b"deep content\n",
    "other/keep.txt": b"keep me\n",
}


def seeded(s3):
    s3.put_many(SEED)
    return s3


def puts_of(s3, key):
    """PutObject (and CopyObject) requests of `key`, no multipart parts."""
    return [r for r in s3.of_key(key, "PUT") if "partNumber" not in r.q()]


def wait_settled(s3, m, rel, timeout=30):
    """Until `rel` is uploaded and the mount has no upload pending; then every request docfs
    sent is in the log (the relay logs one once it relayed the answer docfs acted on)."""
    wait_until(lambda: xattr_state(m / rel) in ("local", "placeholder"), timeout,
               lambda: f"{rel} to be uploaded (user.docfs.state is {xattr_state(m / rel)!r})")
    m.wait_uploads_done(timeout)
    s3.wait_logged()


def test_s3_create_write_close_one_put_no_get(s3, s3_mount):
    seeded(s3)
    m = s3_mount()
    data = os.urandom(100_000)
    fd = os.open(m / "docs/new.bin", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    try:
        for i in range(0, len(data), 4096):
            os.write(fd, data[i:i + 4096])
    finally:
        os.close(fd)
    s3.wait_object("docs/new.bin", data, timeout=30)
    wait_settled(s3, m, "docs/new.bin")   # barrier: a second upload would be in the log by then
    assert len(puts_of(s3, "docs/new.bin")) == 1, f"expected one PutObject:\n{s3.log_text()}"
    assert not s3.content_gets(), f"a new file was downloaded:\n{s3.log_text()}"
    assert not [r for r in s3.requests() if r.method == "POST"], f"a 100 KB file must not be multipart:\n{s3.log_text()}"
    assert (m / "docs/new.bin").read_bytes() == data


def test_s3_o_trunc_does_not_download(s3, s3_mount):
    seeded(s3)
    m = s3_mount()
    with open(m / "hello.txt", "wb") as f:
        f.write(b"replaced\n")
    s3.wait_object("hello.txt", b"replaced\n", timeout=30)
    wait_settled(s3, m, "hello.txt")
    assert len(puts_of(s3, "hello.txt")) == 1, s3.log_text()
    assert not s3.content_gets("hello.txt"), f"O_TRUNC downloaded the old content:\n{s3.log_text()}"


def test_s3_append(s3, s3_mount):
    seeded(s3)
    m = s3_mount()
    with open(m / "notes.md", "ab") as f:
        f.write(b"appended 1\n")
    expected = SEED["notes.md"] + b"appended 1\n"
    s3.wait_object("notes.md", expected, timeout=30)
    fd = os.open(m / "notes.md", os.O_WRONLY | os.O_APPEND)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, b"appended 2\n")
    finally:
        os.close(fd)
    expected += b"appended 2\n"
    s3.wait_object("notes.md", expected, timeout=30)
    assert (m / "notes.md").read_bytes() == expected


@pytest.mark.parametrize("size", [0, 1000])
def test_s3_truncate(s3, s3_mount, size):
    seeded(s3)
    m = s3_mount()
    original = SEED["data.bin"]
    os.truncate(m / "data.bin", size)
    assert os.stat(m / "data.bin").st_size == size
    s3.wait_object("data.bin", original[:size], timeout=30)
    if size == 0:
        assert not s3.content_gets("data.bin"), f"truncate to 0 downloaded:\n{s3.log_text()}"
    os.truncate(m / "data.bin", size + 100)
    s3.wait_object("data.bin", original[:size] + b"\0" * 100, timeout=30)


def test_s3_mkdir_rmdir_enotempty_unlink(s3, s3_mount):
    seeded(s3)
    m = s3_mount()
    os.mkdir(m / "newdir")
    wait_until(lambda: "newdir/" in s3.keys(), 30, f"the marker newdir/ on the bucket (keys: {sorted(s3.keys())})")
    assert s3.head("newdir/")["ContentLength"] == 0
    assert stat.S_ISDIR(os.stat(m / "newdir").st_mode)
    os.mkdir(m / "newdir/inner")
    wait_until(lambda: "newdir/inner/" in s3.keys(), 30, "the marker newdir/inner/")

    with pytest.raises(OSError) as info:
        os.rmdir(m / "newdir")
    assert info.value.errno == errno.ENOTEMPTY, f"rmdir of a non-empty directory: {info.value}"
    with pytest.raises(OSError) as info:
        os.rmdir(m / "docs")                      # children only on the bucket
    assert info.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as info:
        os.mkdir(m / "docs")
    assert info.value.errno == errno.EEXIST

    os.rmdir(m / "newdir/inner")
    os.rmdir(m / "newdir")
    wait_until(lambda: not s3.keys("newdir/"), 30, f"the markers below newdir/ to be gone ({sorted(s3.keys('newdir/'))})")
    assert not (m / "newdir").exists()

    os.unlink(m / "docs/sub/deep.txt")
    wait_until(lambda: "docs/sub/deep.txt" not in s3.keys(), 30, "docs/sub/deep.txt to be deleted")
    assert s3.of_key("docs/sub/deep.txt", "DELETE"), s3.log_text()
    assert not (m / "docs/sub/deep.txt").exists()
    assert not s3.content_gets(), f"namespace operations downloaded content:\n{s3.log_text()}"


def test_s3_rename_file_is_copy_then_delete(s3, s3_mount):
    seeded(s3)
    m = s3_mount()
    os.rename(m / "docs/report.txt", m / "other/moved.txt")
    wait_until(lambda: "docs/report.txt" not in s3.keys(), 30, "the source key to be deleted")
    assert s3.get("other/moved.txt") == SEED["docs/report.txt"]
    assert not (m / "docs/report.txt").exists()
    assert (m / "other/moved.txt").read_bytes() == SEED["docs/report.txt"]
    reqs = s3.requests()
    copy = [i for i, r in enumerate(reqs) if r.method == "PUT" and r.path == s3.key_path("other/moved.txt")]
    delete = [i for i, r in enumerate(reqs) if r.method == "DELETE" and r.path == s3.key_path("docs/report.txt")]
    assert copy and delete and copy[0] < delete[0], f"expected a PUT (CopyObject) of the target, then a DELETE of the source:\n{s3.log_text()}"
    assert len(s3.content_gets()) == 1, f"the rename itself must not download (1 GET is the read above):\n{s3.log_text()}"


def test_s3_rename_directory_recursive(s3, s3_mount):
    seeded(s3)
    s3.put_many({"docs/sub/": b"", "docs/sub/more/x.bin": os.urandom(5000)})
    before = {k: s3.get(k) for k in s3.keys("docs/")}
    m = s3_mount()
    os.rename(m / "docs", m / "other/archive")
    want = {"other/archive/" + k[len("docs/"):]: v for k, v in before.items()}
    wait_until(lambda: not s3.keys("docs/"), 60, f"every key below docs/ to be gone ({sorted(s3.keys('docs/'))})")
    have = {k: s3.get(k) for k in s3.keys("other/archive/")}
    assert have == want, f"moved keys differ: missing {sorted(set(want) - set(have))}, extra {sorted(set(have) - set(want))}"
    # The marker was on the store before anything below it was sent: SeaweedFS, which makes
    # the folder itself for a key put below it, dropped a marker put at the same moment.
    marker = f"/{s3.name}/other/archive/sub/"
    events = s3.relay.events()
    marker_done = events.index(("answered", "PUT", marker))
    below = [i for i, (what, method, path) in enumerate(events)
             if what == "sent" and method == "PUT" and path.startswith(marker) and path != marker]
    assert len(below) == 2 and min(below) > marker_done, \
        f"a key below the marker was sent before the marker was on the store: {[e for e in events if e[1] == 'PUT']}"
    assert sorted(os.listdir(m / "other/archive")) == ["report.txt", "sub"]
    assert (m / "other/archive/sub/more/x.bin").read_bytes() == before["docs/sub/more/x.bin"]
    assert not (m / "docs").exists()
    assert "other/keep.txt" in s3.keys()


def test_s3_chmod_utimensat_survive_remount(s3, s3_mount):
    seeded(s3)
    m = s3_mount()
    os.chmod(m / "hello.txt", 0o600)
    os.chmod(m / "docs", 0o750)
    ns = 1_400_000_000_987_654_000
    os.utime(m / "notes.md", ns=(ns, ns))
    assert stat.S_IMODE(os.stat(m / "hello.txt").st_mode) == 0o600
    assert abs(os.stat(m / "notes.md").st_mtime_ns - ns) < 1000
    result = m.unmount()
    assert result.returncode == 0, result.stderr
    m2 = s3_mount()
    st = os.stat(m2 / "hello.txt")
    assert stat.S_IMODE(st.st_mode) == 0o600, f"chmod lost on remount: {oct(st.st_mode)}"
    assert stat.S_IMODE(os.stat(m2 / "docs").st_mode) == 0o750, oct(os.stat(m2 / "docs").st_mode)
    got = os.stat(m2 / "notes.md").st_mtime_ns
    assert abs(got - ns) < 1000, f"utimensat lost on remount: mtime {got} != {ns}"
    # the content is untouched by attribute changes
    assert s3.get("hello.txt") == SEED["hello.txt"] and s3.get("notes.md") == SEED["notes.md"]


CONFLICT = re.compile(r"^report \(conflict \d{4}-\d{2}-\d{2} \d{6}\)\.txt$")


@pytest.mark.parametrize("how", ["read-write", "O_TRUNC"])
def test_s3_conflict_keeps_both_versions(s3, s3_mount, how):
    seeded(s3)
    m = s3_mount("--dir-cache-ttl", "1")
    target = m / "docs/report.txt"
    ours = b"OUR version, written through the mount\n" * 7
    theirs = b"THEIR version, put with boto3 meanwhile\n" * 3
    assert os.listdir(m / "docs")
    f = open(target, "r+b" if how == "read-write" else "wb")
    try:
        if how == "read-write":
            assert f.read() == SEED["docs/report.txt"]
            f.seek(0)
            f.truncate()
        f.write(ours)
        f.flush()
        s3.put("docs/report.txt", theirs)
    finally:
        f.close()

    def copies():
        return [k[len("docs/"):] for k in s3.keys("docs/") if CONFLICT.match(k[len("docs/"):])]

    s3.wait_requests(lambda _: copies(), 30, f"a conflict copy on the bucket (docs/: {sorted(s3.keys('docs/'))})")
    m.wait_uploads_done()   # barrier: a second copy or a late overwrite would be on the bucket by then
    assert len(copies()) == 1, copies()
    assert s3.get("docs/report.txt") == theirs, "boto3's version was overwritten"
    assert s3.get("docs/" + copies()[0]) == ours, "our version is not in the conflict copy"
    wait_until(lambda: set(os.listdir(m / "docs")) >= {"report.txt", copies()[0]}, 15,
               f"the mount's docs/ to list both (has {os.listdir(m / 'docs')})")
    wait_until(lambda: target.read_bytes() == theirs, 15, "the mount to show boto3's version under the name")
    assert (m / "docs" / copies()[0]).read_bytes() == ours


def test_s3_rename_empty_directory(s3, s3_mount):
    """mkdir writes a marker; renaming that empty directory moves the marker."""
    seeded(s3)
    m = s3_mount()
    os.mkdir(m / "fresh")
    wait_until(lambda: "fresh/" in s3.keys(), 30, "the marker fresh/")
    os.rename(m / "fresh", m / "renamed")
    wait_until(lambda: "fresh/" not in s3.keys(), 30, f"the marker fresh/ to be gone ({sorted(s3.keys())})")
    assert "renamed/" in s3.keys(), sorted(s3.keys())
    assert os.listdir(m / "renamed") == []


def test_s3_a_burst_of_files_into_one_folder_asks_once_whether_it_exists(s3, s3_mount):
    """S3 has no folders: every new key asked whether its parent exists (a LIST), which doubled
    the requests of `cp -r` and `tar x`. A folder seen or made is now known for a moment."""
    seeded(s3)
    m = s3_mount()
    os.mkdir(m / "burst")
    for i in range(30):
        (m / "burst" / f"f{i:02}.txt").write_bytes(b"x%d\n" % i)
    wait_until(lambda: len(s3.keys("burst/")) == 31, 60, lambda: f"30 files and a marker under burst/: {sorted(s3.keys('burst/'))}")
    m.wait_uploads_done(30)
    s3.wait_logged()
    asked = [r for r in s3.lists() if r.q().get("prefix") == "burst/" and r.q().get("max-keys") == "1"]
    assert len(asked) <= 3, f"the folder's existence asked {len(asked)} times for 30 files:\n{s3.log_text(120)}"
    # A folder removed behind docfs's back loses nothing written into it meanwhile: S3 makes
    # it again by the new key.
    for key in s3.keys("burst/"):
        s3.client.delete_object(Bucket=s3.name, Key=key)
    (m / "burst" / "late.txt").write_bytes(b"late\n")
    s3.wait_object("burst/late.txt", b"late\n", timeout=30)
    assert m.unmount().returncode == 0


def test_s3_a_folder_time_or_mode_asks_nothing_of_the_bucket(s3, s3_mount):
    """A folder on S3 is a prefix (or an empty marker) with no metadata to change: `tar x`
    restoring each folder's time and mode waited for stat, HEAD and stat again, for nothing."""
    seeded(s3)
    m = s3_mount()
    os.mkdir(m / "folder")
    m.wait_uploads_done(30)
    s3.wait_logged()
    before = len(s3.requests())
    os.utime(m / "folder", (1_600_000_000, 1_600_000_000))
    os.chmod(m / "folder", 0o750)
    assert os.stat(m / "folder").st_mtime == 1_600_000_000
    assert stat.S_IMODE(os.stat(m / "folder").st_mode) == 0o750
    s3.wait_logged()
    assert s3.requests()[before:] == [], f"requests for a folder's attributes:\n{s3.log_text()}"
    assert m.unmount().returncode == 0


def test_s3_a_file_in_a_folder_just_made_here_asks_nothing_first_and_still_keeps_theirs(s3, s3_mount):
    """`tar x`, `cp -r`, `git clone`: every folder is made here, and each new key in it asked
    first whether a file or a folder stood at its name (a HEAD and a LIST per file, a round trip
    each folder in tar's own path). A name never used in a folder made here a moment ago is
    free: the key goes up at once, with `If-None-Match: *`. Another client's file put at that
    name meanwhile is still kept, and ours goes next to it."""
    seeded(s3)
    m = s3_mount()
    os.makedirs(m / "made" / "inner")
    for i in range(5):
        (m / "made" / "inner" / f"f{i}.txt").write_bytes(b"ours %d\n" % i)
    s3.put("made/theirs.txt", b"THEIRS\n")          # another client, within the moment
    (m / "made" / "theirs.txt").write_bytes(b"OURS\n")  # docfs has not seen it: a new file here
    wait_until(lambda: len(s3.keys("made/inner/")) == 6, 60, lambda: f"5 files and a marker: {sorted(s3.keys('made/'))}")

    def copies():
        return [k for k in s3.keys("made/") if k.startswith("made/theirs (conflict ")]

    s3.wait_requests(lambda _: copies(), 30, f"our file kept next to theirs ({sorted(s3.keys('made/'))})")
    m.wait_uploads_done(30)
    s3.wait_logged()
    assert s3.get("made/theirs.txt") == b"THEIRS\n", "their file was overwritten"
    assert [s3.get(k) for k in copies()] == [b"OURS\n"]
    for i in range(5):
        key = f"made/inner/f{i}.txt"
        assert s3.get(key) == b"ours %d\n" % i
        asked = [str(r) for r in s3.requests() if r.method == "HEAD" and r.path.endswith("/" + key)]
        asked += [str(r) for r in s3.lists() if r.q().get("prefix") == key + "/"]
        assert not asked, f"a new file in a folder made here was asked about first: {asked}"
    assert not [str(r) for r in s3.requests() if r.method == "HEAD" and r.path.endswith("/made/inner")], \
        "a folder made in a folder made here was asked about first"
    assert m.unmount().returncode == 0

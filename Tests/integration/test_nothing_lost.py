"""Issue 8, "What it must show", through real mounts: nothing a user wrote is lost.

Scenario 1 (`--dir-cache-ttl 0`): a file is open read-write with a clean local copy (one byte
read); another client changes it on the store (replaces it with the same size, replaces it with
another size, deletes it, renames it); a listing of the directory lets the background refresh
run; then four bytes are written at offset 0 and the file is closed. Once the upload settled,
the store holds both versions: the other client's under its name (or the new name), ours (the
four bytes on top of the OLD content) as exactly one `f (conflict …).txt`, or under the name
when the other client deleted/renamed it. After `docfs unmount` the cache holds nothing.

Scenario 12: an existing 5 MB file is opened with O_TRUNC (and some bytes written, or none), or
overwritten in place, slowly, by a larger file (6 MB of 24 MB written); the daemon is killed
with SIGKILL before close; `docfs unmount` cleans the stale mount; a new mount must leave the
store's version intact, show its true size (5 MB) at once, and put the unsaved bytes on the
store as `big (unsaved YYYY-MM-DD HHMMSS).bin`.

Scenario 12b (model seed 500407): a file is open with a clean copy when another client deletes it
or replaces it by a folder; a listing sees that; the daemon is killed. The next mount must show
what the store has at once (no file, or the folder), not an empty file no one wrote.

Stores: `docfs serve` and `rclone serve webdav` (WebDAV) and moto (S3). rclone caches its
directory listing, so there the other client goes through rclone's HTTP interface (PUT, DELETE,
MOVE) instead of the directory underneath; docfs serve's directory and moto's bucket (boto3)
are changed directly.
"""
from __future__ import annotations

import hashlib
import os
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import WEBDAV_FIXTURES, RcloneServer
from helpers import pseudo_random_bytes, wait_until, xattr_state
from s3_support import get_server, s3, s3_mount  # noqa: F401 - fixtures
from write_support import change_on_server, make_store, methods_log, sigkill_daemon

pytestmark = pytest.mark.fuse


# --- S3 on moto only (s3_support's own s3_server also runs SeaweedFS) ------------------------

@pytest.fixture(scope="session")
def s3_server():
    return get_server("moto")


# --- one interface over the three stores ----------------------------------------------------

class WebDAVRemote:
    """A WebDAV server over a directory; "another client" changes files behind docfs's back."""

    def __init__(self, server, mount):
        self.server = server
        self.kind = server.kind
        self.root: Path = server.root
        self._mount = mount

    def mount(self, *options):
        return self._mount(self.server.url, *options)

    def _http(self, method: str, rel: str, headers: dict | None = None, data: bytes | None = None):
        req = urllib.request.Request(self.server.url + urllib.parse.quote(rel), data=data, method=method,
                                     headers=headers or {})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status in (200, 201, 204), f"{method} {rel}: {resp.status}"

    def replace(self, rel: str, data: bytes, mtime: int) -> str:
        return change_on_server(self.server, rel, data, mtime)

    def delete(self, rel: str) -> None:
        if isinstance(self.server, RcloneServer):
            self._http("DELETE", rel)
            assert not (self.root / rel).exists()
        else:
            (self.root / rel).unlink()

    def rename(self, rel: str, new: str) -> None:
        if isinstance(self.server, RcloneServer):
            self._http("MOVE", rel, {"Destination": self.server.url + urllib.parse.quote(new), "Overwrite": "F"})
            assert (self.root / new).is_file() and not (self.root / rel).exists()
        else:
            os.rename(self.root / rel, self.root / new)

    def replace_by_folder(self, rel: str, inner: bytes) -> None:
        """`rel` becomes a folder holding `inner.txt`."""
        if isinstance(self.server, RcloneServer):
            self._http("DELETE", rel)
            self._http("MKCOL", rel)
            self._http("PUT", rel + "/inner.txt", data=inner)
        else:
            (self.root / rel).unlink()
            (self.root / rel).mkdir()
            (self.root / rel / "inner.txt").write_bytes(inner)

    def get(self, rel: str) -> bytes | None:
        p = self.root / rel
        return p.read_bytes() if p.is_file() else None

    def names(self) -> list[str]:
        """Files at the top of the store."""
        return sorted(n for n in os.listdir(self.root) if (self.root / n).is_file())

    def listings(self) -> int:
        """PROPFINDs of the top directory the server answered so far."""
        return len([r for r in self.server.requests() if r.method == "PROPFIND" and r.path == "/"])

    def log(self) -> str:
        return f"{self.kind} requests:\n{methods_log(self.server, 60)}"


class S3Remote:
    """A moto bucket; "another client" is boto3, straight to moto (not through the relay)."""

    kind = "moto"

    def __init__(self, bucket, s3_mount):
        self.bucket = bucket
        self._mount = s3_mount

    def mount(self, *options):
        return self._mount(*options)

    def replace(self, rel: str, data: bytes, mtime: int) -> str:
        self.bucket.put(rel, data)
        return "PutObject with boto3"

    def delete(self, rel: str) -> None:
        self.bucket.client.delete_object(Bucket=self.bucket.name, Key=rel)

    def rename(self, rel: str, new: str) -> None:
        self.bucket.client.copy_object(Bucket=self.bucket.name, Key=new,
                                       CopySource={"Bucket": self.bucket.name, "Key": rel})
        self.delete(rel)

    def replace_by_folder(self, rel: str, inner: bytes) -> None:
        self.delete(rel)
        self.bucket.put(rel + "/inner.txt", inner)

    def get(self, rel: str) -> bytes | None:
        return self.bucket.get(rel)

    def names(self) -> list[str]:
        return sorted(k for k in self.bucket.keys() if "/" not in k)

    def listings(self) -> int:
        """ListObjectsV2 requests of the bucket (docfs's, not boto3's) so far."""
        return len(self.bucket.lists())

    def log(self) -> str:
        return self.bucket.log_text(60)


def start_remote(kind: str, request, tmp_path, files: dict[str, bytes]):
    """A store of `kind` ("moto", or a WebDAV server: "docfs-serve", "rclone", "apache", "nginx",
    "lighttpd", "sabre") holding `files` (top-level names)."""
    if kind == "moto":
        bucket = request.getfixturevalue("s3")
        bucket.put_many(files)
        return S3Remote(bucket, request.getfixturevalue("s3_mount"))
    server_factory = request.getfixturevalue(WEBDAV_FIXTURES[kind])
    server = server_factory(make_store(tmp_path / "store", files))
    return WebDAVRemote(server, request.getfixturevalue("mount"))


@pytest.fixture(params=["docfs-serve", "rclone", "apache", "nginx", "lighttpd", "sabre", "moto"])
def remote(request, tmp_path):
    """remote(files) -> a store holding `files` (top-level names), with mount() for it."""
    return lambda files: start_remote(request.param, request, tmp_path, files)


def getxattr(path, name) -> str | None:
    try:
        return os.getxattr(path, name).rstrip(b"\0").decode()
    except OSError:
        return None


def sha(data: bytes | None) -> str:
    return "missing" if data is None else f"{len(data)} bytes sha256 {hashlib.sha256(data).hexdigest()[:12]}"


def assert_cache_empty_after_unmount(m) -> None:
    result = m.unmount(timeout=120)
    assert result.returncode == 0, f"docfs unmount: exit {result.returncode}: {result.stderr}\n{m.log_tail()}"
    assert not m.is_mounted()
    left = m.xdg.cache_files()
    assert not left, f"local copies left in the cache after `docfs unmount`: {left}"


# --- scenario 1: a change on the store under an open, clean copy ----------------------------

OLD = b"old line of f.txt, the version both sides started from\n" * 40
EDIT = b"EDIT"
OURS = EDIT + OLD[len(EDIT):]                     # the local edit on top of the OLD content
THEIRS_SAME_SIZE = (b"their line, same size, written by another client!!!!!!\n" * 40)[:len(OLD)]
THEIRS_OTHER_SIZE = b"their version, another size\n" * 333
CONFLICT = re.compile(r"^f \(conflict \d{4}-\d{2}-\d{2} \d{6}( \d+)?\)\.txt$")
assert len(THEIRS_SAME_SIZE) == len(OLD) and THEIRS_SAME_SIZE != OLD and len(THEIRS_OTHER_SIZE) != len(OLD)


def wait_listing_applied(store, m) -> None:
    """Barrier: the listings of the top folder seen so far have been applied to the catalog,
    because a later one started (a folder is listed by one task at a time, which applies the
    answer before it ends; with --dir-cache-ttl 0 each `ls` asks for the next one)."""
    seen = store.listings()
    wait_until(lambda: os.listdir(m.path) is not None and store.listings() > seen, 15,
               lambda: f"a listing after the {seen} seen (have {store.listings()})", interval=0.2)


def open_clean_copy(remote, flags: int):
    """A store holding f.txt (OLD) and other.txt, mounted listing every time (`--dir-cache-ttl
    0`), with f.txt open (`flags`) and one byte read: its copy is local and clean."""
    store = remote({"f.txt": OLD, "other.txt": b"bystander\n"})
    m = store.mount("--dir-cache-ttl", "0")
    target = m / "f.txt"
    assert sorted(os.listdir(m.path)) == ["f.txt", "other.txt"]
    fd = os.open(target, flags)
    try:
        assert os.pread(fd, 1, 0) == OLD[:1]
    except BaseException:
        os.close(fd)
        raise
    return store, m, target, fd


@pytest.mark.parametrize("change", ["replace", "size", "delete", "rename"])
def test_remote_change_under_open_clean_copy_keeps_both(remote, change):
    store, m, target, fd = open_clean_copy(remote, os.O_RDWR)
    try:
        before = getxattr(target, "user.docfs.etag")
        print(f"{store.kind}: user.docfs.etag before the change: {before!r}")

        # Another client changes f.txt on the store.
        if change == "replace":
            how = store.replace("f.txt", THEIRS_SAME_SIZE, 1_700_000_777)
        elif change == "size":
            how = store.replace("f.txt", THEIRS_OTHER_SIZE, 1_700_000_777)
        elif change == "delete":
            store.delete("f.txt")
            how = "deleted"
        else:
            store.rename("f.txt", "g.txt")
            how = "renamed to g.txt"
        print(f"remote change ({change}): {how}")
        listed = store.listings()

        # A listing lets the background refresh run; wait until the store was listed again and
        # the mount shows what that found (a deletion shows nothing: the open file stays).
        def refreshed():
            names = os.listdir(m.path)
            if store.listings() <= listed:
                return False
            if change in ("replace", "size"):
                return getxattr(target, "user.docfs.etag") not in (None, before)
            if change == "rename":
                return "g.txt" in names
            return True

        wait_until(refreshed, 15, f"a listing of the store and the mount to see the change ({change})", interval=0.2)
        wait_listing_applied(store, m)                   # the refresh has applied what it listed
        print(f"after the refresh: listing {sorted(os.listdir(m.path))}, "
              f"user.docfs.etag {getxattr(target, 'user.docfs.etag')!r}, state {getxattr(target, 'user.docfs.state')!r}")

        assert os.pwrite(fd, EDIT, 0) == len(EDIT)
    finally:
        os.close(fd)

    if change in ("replace", "size"):
        theirs = THEIRS_SAME_SIZE if change == "replace" else THEIRS_OTHER_SIZE

        def conflict_copies():
            return [n for n in store.names() if CONFLICT.match(n)]

        try:
            wait_until(conflict_copies, 30, "a conflict copy f (conflict …).txt on the store")
        except AssertionError as error:
            raise AssertionError(f"{error}\nstore: {store.names()}\nf.txt on the store: {sha(store.get('f.txt'))} "
                                 f"(theirs {sha(theirs)}, ours {sha(OURS)})\n{store.log()}\n{m.log_tail(3000)}") from None
        m.wait_uploads_done()                            # barrier: a second copy or a late overwrite would show now
        copies = conflict_copies()
        assert len(copies) == 1, f"expected exactly one conflict copy, store has {store.names()}"
        got = store.get("f.txt")
        assert got == theirs, f"the other client's version of f.txt was overwritten: store has {sha(got)}, theirs {sha(theirs)}"
        kept = store.get(copies[0])
        assert kept == OURS, (f"the conflict copy {copies[0]!r} does not hold the local edit on top of the old content: "
                              f"{sha(kept)} {kept[:60]!r}, want {sha(OURS)}")
        assert sorted(store.names()) == sorted(["f.txt", "other.txt", copies[0]]), store.names()
        print(f"store: f.txt = theirs, {copies[0]!r} = ours")
    elif change == "delete":
        try:
            wait_until(lambda: store.get("f.txt") == OURS, 30, "our edited f.txt on the store (it was deleted there)")
        except AssertionError as error:
            raise AssertionError(f"{error}\nstore: {store.names()}\nf.txt on the store: {sha(store.get('f.txt'))}\n"
                                 f"{store.log()}\n{m.log_tail(3000)}") from None
        m.wait_uploads_done()                            # barrier: a late upload or a copy would show now
        assert store.get("f.txt") == OURS
        assert store.names() == ["f.txt", "other.txt"], store.names()
    else:
        def ours_somewhere():
            return [n for n in store.names() if n != "g.txt" and store.get(n) == OURS]

        try:
            wait_until(ours_somewhere, 30, "our edited version somewhere on the store (f.txt was renamed to g.txt there)")
        except AssertionError as error:
            raise AssertionError(f"{error}\nstore: {store.names()}\n{store.log()}\n{m.log_tail(3000)}") from None
        m.wait_uploads_done()                            # barrier: a late upload or a copy would show now
        assert store.get("g.txt") == OLD, f"the other client's renamed g.txt changed: {sha(store.get('g.txt'))}"
        where = ours_somewhere()
        assert len(where) == 1, f"our version is on the store {len(where)} times: {where} (store: {store.names()})"
        print(f"store: g.txt = the renamed old version, {where[0]!r} = ours; all: {store.names()}")
        assert where[0] == "f.txt" or CONFLICT.match(where[0]), where

    wait_until(lambda: xattr_state(target) in ("local", "placeholder"), 30,
               f"f.txt to settle (user.docfs.state {getxattr(target, 'user.docfs.state')!r})")
    # The mount (listing every time: --dir-cache-ttl 0) shows what the store has.
    wait_until(lambda: sorted(os.listdir(m.path)) == store.names(), 15,
               f"the mount to list what the store has ({store.names()}; mount: {sorted(os.listdir(m.path))})")
    wait_until(lambda: target.read_bytes() == store.get("f.txt"), 15,
               f"the mount's f.txt to show the store's ({sha(store.get('f.txt'))}; mount: {sha(target.read_bytes())})")
    assert_cache_empty_after_unmount(m)


# --- scenario 12: kill -9 before close, then remount ---------------------------------------

BIG = pseudo_random_bytes(5 * 1024 * 1024, 12)
UNSAVED = re.compile(r"^big \(unsaved \d{4}-\d{2}-\d{2} \d{6}( \d+)?\)\.bin$")
CHUNK = 256 * 1024


@pytest.mark.parametrize("how", ["O_TRUNC", "O_TRUNC-nothing-written", "slow-overwrite-larger", "in-place-middle"])
@pytest.mark.parametrize("remote", ["docfs-serve", "rclone", "apache", "nginx", "lighttpd", "sabre", "moto"], indirect=True)
def test_kill_before_close_keeps_store_version_and_unsaved_bytes(remote, how):
    store = remote({"big.bin": BIG, "small.txt": b"small\n"})
    m = store.mount()
    target = m / "big.bin"
    assert os.stat(target).st_size == len(BIG)

    offset = 0
    if how == "O_TRUNC":
        unsaved = pseudo_random_bytes(300_000, 13)
        fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
    elif how == "O_TRUNC-nothing-written":
        unsaved = b""
        fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
    elif how == "slow-overwrite-larger":
        # In place, no O_TRUNC: 6 MB of a 24 MB file written, slowly, when the daemon dies.
        unsaved = pseudo_random_bytes(24 * 1024 * 1024, 14)[:6 * 1024 * 1024]
        fd = os.open(target, os.O_WRONLY)
    else:
        # 1 MiB in the middle of the 5 MiB file, which is streamed: the write lands without a
        # fetch, and the next mount fetches the rest from the version it was written into
        # (the copy's held-bytes log), so the unsaved copy is that version with the write.
        offset = 2 * 1024 * 1024
        unsaved = BIG[:offset] + pseudo_random_bytes(1024 * 1024, 15) + BIG[offset + 1024 * 1024:]
        fd = os.open(target, os.O_WRONLY)
    written = unsaved[offset:offset + 1024 * 1024] if how == "in-place-middle" else unsaved
    try:
        for i in range(0, len(written), CHUNK):
            assert os.pwrite(fd, written[i:i + CHUNK], offset + i) == len(written[i:i + CHUNK])
            if how == "slow-overwrite-larger":
                time.sleep(0.02)   # the scenario: a slow writer
        print(f"{store.kind}: {len(unsaved)} bytes written, not closed; state {getxattr(target, 'user.docfs.state')!r}")
        pids = sigkill_daemon(m)
    finally:
        try:
            os.close(fd)        # the daemon is dead: nothing reaches it (ENOTCONN or the like)
        except OSError as error:
            print(f"close after the kill: {error}")
    wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 60,
               f"the killed daemon {pids} to be reaped")
    result = m.unmount()
    assert result.returncode == 0, f"docfs unmount of the stale mount: exit {result.returncode}: {result.stderr}"
    assert not m.is_mounted()
    assert store.get("big.bin") == BIG, "the store's version changed before the remount"

    m2 = store.mount()
    size = os.stat(m2 / "big.bin").st_size          # right after the remount
    assert size == len(BIG), (f"stat of big.bin right after the remount: {size} bytes, the store has {len(BIG)}\n"
                              f"{m2.log_tail(3000)}")

    def unsaved_copies():
        return [n for n in store.names() if UNSAVED.match(n)]

    if unsaved:
        try:
            wait_until(lambda: any(store.get(n) == unsaved for n in unsaved_copies()), 60,
                       "the unsaved bytes on the store as big (unsaved …).bin")
        except AssertionError as error:
            raise AssertionError(f"{error}\nstore: {store.names()}; "
                                 f"{ {n: sha(store.get(n)) for n in unsaved_copies()} } (want {sha(unsaved)})\n"
                                 f"{store.log()}\n{m2.log_tail(3000)}") from None
    m2.wait_uploads_done()                            # barrier: an upload over big.bin would have been sent by now
    got = store.get("big.bin")
    assert got == BIG, f"the store's big.bin was replaced after the remount: {sha(got)}, want {sha(BIG)}\n{store.log()}"
    copies = unsaved_copies()
    if unsaved:
        assert len(copies) == 1, f"expected one unsaved copy, store has {store.names()}"
        print(f"unsaved bytes kept as {copies[0]!r} ({len(unsaved)} bytes)")
        assert sorted(os.listdir(m2.path)) == sorted(["big.bin", "small.txt", copies[0]])
        assert os.stat(m2 / copies[0]).st_size == len(unsaved)
    else:
        # Nothing was written: there are no unsaved bytes to keep (an empty copy is tolerated).
        assert all(store.get(n) == b"" for n in copies), {n: sha(store.get(n)) for n in copies}
        print(f"nothing written; store: {store.names()}")
    with open(m2 / "big.bin", "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == hashlib.sha256(BIG).hexdigest(), \
            "the mount shows other content than the store's big.bin"
    assert_cache_empty_after_unmount(m2)


# --- scenario 12b: kill -9 while a clean copy of a file the store no longer has is open -------

INNER = b"the folder's own file\n"


@pytest.mark.parametrize("change", ["delete", "folder"])
def test_kill_with_a_clean_copy_of_a_vanished_file_open_shows_the_store_after_remount(remote, change):
    store, m, target, fd = open_clean_copy(remote, os.O_RDONLY)
    try:
        if change == "delete":
            store.delete("f.txt")
        else:
            store.replace_by_folder("f.txt", INNER)
        listed = store.listings()
        # A listing sees the change; the open file keeps its row (and its copy) while open.
        wait_until(lambda: os.listdir(m.path) is not None and store.listings() > listed, 15,
                   "a listing of the store after the change", interval=0.2)
        wait_listing_applied(store, m)                   # the refresh has applied what it listed
        pids = sigkill_daemon(m)
    finally:
        try:
            os.close(fd)
        except OSError as error:
            print(f"close after the kill: {error}")
    wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 60, f"the killed daemon {pids} to be reaped")
    result = m.unmount()
    assert result.returncode == 0, f"docfs unmount of the stale mount: exit {result.returncode}: {result.stderr}"

    m2 = store.mount()
    target = m2 / "f.txt"
    # Right after the remount, before any background refresh could correct it.
    if change == "delete":
        assert not os.path.lexists(target), (f"f.txt, deleted on the store, is back after the remount: "
                                             f"{os.lstat(target)}\n{m2.log_tail(3000)}")
    else:
        assert os.path.isdir(target), (f"f.txt is a folder on the store; after the remount the mount shows "
                                       f"{os.lstat(target) if os.path.lexists(target) else 'nothing'}\n{m2.log_tail(3000)}")
        assert (target / "inner.txt").read_bytes() == INNER
    expected = ["f.txt", "other.txt"] if change == "folder" else ["other.txt"]
    assert sorted(os.listdir(m2.path)) == expected
    m2.wait_uploads_done()                               # barrier: a stray upload (an empty f.txt) would have been sent by now
    assert store.get("f.txt") is None, f"something was uploaded as f.txt: {sha(store.get('f.txt'))}\n{store.log()}"
    assert store.get("other.txt") == b"bystander\n"
    if change == "folder":
        assert store.get("f.txt/inner.txt") == INNER
    assert_cache_empty_after_unmount(m2)

"""Issue 31: every WebDAV server people run, each with its quirks.

The same session of a new user runs through a real mount on seven servers: the three docfs was
first tested on (`docfs serve`, `rclone serve webdav`, WsgiDAV) and the four people point a
WebDAV client at (Apache `mod_dav`, nginx with `dav-ext`, lighttpd `mod_webdav`, sabre/dav
under `php -S`), each started by the test on a free port of 127.0.0.1 from its Debian package.

What each server does its own way, and what docfs must make of it:
- Apache's ETags are weak for a second after a change (`W/"…"`), and `If-Match` never matches a
  weak tag: an edit right after a save was a false conflict;
- nginx lists no ETag, ignores `If-Match` on PUT and refuses to move `/d1` (400) where it moves
  `/d1/`; lighttpd redirects that move (308), lists an ETag its GET does not send, and
  ignores `If-Match` on GET; sabre/dav's file tree gives no ETag at all.

On each: browsing downloads nothing; reads (whole and ranged) and a 6 MB stream are the
server's bytes; files created, appended to, truncated and overwritten right after their
creation end as written with no conflict copy; a change made on the server while a file is
open here ends as exactly one conflict copy; folders and files are renamed, trees deleted,
`mkdir -p` made, names with spaces, `&`, `%`, `#`, `?` and Unicode (NFC and NFD, as stored)
kept; the server's own bookkeeping (`.DAV`) and docfs's probes never show; `docfs unmount`
leaves no local copy.
"""
from __future__ import annotations

import os
import unicodedata

import pytest

from conftest import WEBDAV_FIXTURES
from fault_proxy import FaultProxy
from helpers import pseudo_random_bytes, wait_until
from write_support import change_on_server, make_store, sigkill_daemon

pytestmark = pytest.mark.fuse

SERVERS = ["docfs-serve", "rclone", "wsgidav", "apache", "nginx", "lighttpd", "sabre"]
BIG = pseudo_random_bytes(6 << 20, seed=31)
ODD_NAMES = ["sp ace & 50% #1 ?.txt", "café.txt", unicodedata.normalize("NFD", "noël.txt")]


@pytest.fixture(params=SERVERS)
def dav(request, tmp_path):
    """dav(files) -> a running server of this kind over a directory holding `files`."""
    def start(files: dict[str, bytes]):
        return request.getfixturevalue(WEBDAV_FIXTURES[request.param])(make_store(tmp_path / "store", files))
    return start


def stored(server, rel: str) -> bytes | None:
    path = server.root / rel
    return path.read_bytes() if path.is_file() else None


def conflict_copies(server, rel: str = ".") -> list[str]:
    folder = server.root / rel
    return sorted(n for n in os.listdir(folder) if " (conflict " in n)


def settle(server, m, expected: dict[str, bytes]) -> None:
    """Waits until the server holds `expected` (rel -> bytes), and every upload is done."""
    def holds() -> bool:
        return all(stored(server, rel) == data for rel, data in expected.items())
    wait_until(holds, 60, lambda: f"the {server.kind} server to hold {sorted(expected)}: "
                                  f"{ {rel: stored(server, rel)[:40] if stored(server, rel) else None for rel in expected} }\n"
                                  f"{m.log_tail(3000)}")
    m.wait_uploads_done()


def mounted(server, mount, *options):
    return mount(server.url, "--dir-cache-ttl", "1", *options)


def test_browse_and_read_download_only_what_is_read(dav, mount):
    server = dav({"a.txt": b"hello\n", "big.bin": BIG, "d1/x.txt": b"x\n"})
    m = mounted(server, mount)
    assert sorted(os.listdir(m.path)) == ["a.txt", "big.bin", "d1"]
    assert os.stat(m / "big.bin").st_size == len(BIG)
    assert os.listdir(m / "d1") == ["x.txt"]
    assert not server.gets(), f"browsing downloaded: {server.gets()}"
    assert (m / "a.txt").read_bytes() == b"hello\n"
    with open(m / "big.bin", "rb") as f:
        f.seek(5 << 20)
        assert f.read(4096) == BIG[5 << 20:(5 << 20) + 4096], f"a ranged read of big.bin on {server.kind}"
    assert (m / "big.bin").read_bytes() == BIG, f"the whole stream of big.bin on {server.kind}"
    assert (m / "d1" / "x.txt").read_bytes() == b"x\n"
    hidden = [n for n in os.listdir(m.path) if n.startswith(".")]
    assert not hidden, f"{server.kind}: bookkeeping shown in the mount: {hidden}"
    result = m.unmount()
    assert result.returncode == 0, result.stderr
    assert not m.xdg.cache_files()


def test_edits_right_after_a_save_are_no_conflict(dav, mount):
    """Each edit opens the version the last save made, often within the second it was made
    (Apache's tags are weak then; nginx's and sabre's versions are told by time and size)."""
    server = dav({"keep.txt": b"keep\n"})
    m = mounted(server, mount)
    expected: dict[str, bytes] = {}
    for i in range(4):
        name = f"n{i}.txt"
        (m / name).write_bytes(b"new\n")
        with open(m / name, "ab") as f:
            f.write(b"more\n")
        os.truncate(m / name, 6)
        with open(m / name, "r+b") as f:
            f.seek(2)
            f.write(b"XY")
        with open(m / name, "ab") as f:
            f.write(b"end\n")
        expected[name] = b"neXYmoend\n"
        settle(server, m, {name: expected[name]})
        with open(m / name, "ab") as f:
            f.write(b"again\n")
        expected[name] += b"again\n"
    (m / "big.bin").write_bytes(BIG)
    assert (m / "big.bin").read_bytes() == BIG, f"a 6 MB file read back right after its save on {server.kind}"
    expected["big.bin"] = BIG
    settle(server, m, expected)
    assert (m / "big.bin").read_bytes() == BIG, f"a 6 MB file read back right after its upload on {server.kind}"
    assert not conflict_copies(server), f"false conflicts on {server.kind}: {conflict_copies(server)}"
    assert sorted(os.listdir(m.path)) == sorted(["keep.txt", *expected])
    assert m.unmount().returncode == 0
    assert not m.xdg.cache_files()


def test_a_new_file_whose_upload_a_kill_cut_short_goes_up_under_its_name(dav, mount, tmp_path):
    """A server with locks makes an empty file when docfs locks a new name before its PUT
    (rclone, Apache, WsgiDAV, sabre/dav). A daemon killed between the two left that empty file,
    and the next mount took it for another client's: the new file went up as a conflict copy
    beside an empty one. The proxy holds the PUT; the daemon is killed meanwhile; the next mount
    fills the name with the file, and leaves no conflict copy."""
    server = dav({"keep.txt": b"keep\n"})
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    try:
        held = proxy.latency(3600, method="PUT", path=r"^/new\.txt$", count=1)
        m = mount(proxy.url, "--dir-cache-ttl", "1")
        (m / "new.txt").write_bytes(b"written just before the kill\n")
        wait_until(lambda: held.hits == 1, 30, lambda: f"the PUT of new.txt (held by the proxy): {proxy.requests()}")
        sigkill_daemon(m)
        assert m.unmount().returncode == 0

        m2 = mount(proxy.url, "--dir-cache-ttl", "1")
        settle(server, m2, {"new.txt": b"written just before the kill\n"})
        assert not conflict_copies(server), f"a conflict copy on {server.kind}: {os.listdir(server.root)}\n{m2.log_tail(3000)}"
        assert sorted(os.listdir(m2.path)) == ["keep.txt", "new.txt"]
        assert m2.unmount().returncode == 0
        records = list((m2.xdg.state_home / "docfs").glob("*/webdav-locks/*"))
        assert not records, f"records of filled files are left: {records}"
    finally:
        proxy.stop()


def test_a_change_on_the_server_while_open_here_is_one_conflict(dav, mount):
    server = dav({"a.txt": b"version one\n", "b.txt": b"bystander\n"})
    m = mounted(server, mount)
    fd = os.open(m / "a.txt", os.O_RDWR)
    try:
        assert os.pread(fd, 7, 0) == b"version"
        how = change_on_server(server, "a.txt", b"their version, longer\n", mtime=1_700_000_000)
        assert os.pwrite(fd, b"VERSION", 0) == 7
    finally:
        os.close(fd)
    wait_until(lambda: len(conflict_copies(server)) == 1, 60,
               lambda: f"one conflict copy on {server.kind} (changed {how}): {os.listdir(server.root)}\n{m.log_tail(3000)}")
    m.wait_uploads_done()   # barrier: a second copy or a late overwrite would be on the server by then
    copies = conflict_copies(server)
    assert len(copies) == 1, copies
    assert stored(server, copies[0]) == b"VERSION one\n"
    assert stored(server, "a.txt") == b"their version, longer\n"
    assert (m / "a.txt").read_bytes() == b"their version, longer\n"
    assert m.unmount().returncode == 0


def test_names_folders_and_trees(dav, mount):
    server = dav({"d1/x.txt": b"x\n", "d1/sub/y.txt": b"y\n", "f.txt": b"f\n"})
    nfc_on_server = unicodedata.normalize("NFC", "résumé.txt")
    (server.root / nfc_on_server).write_bytes(b"cv\n")
    m = mounted(server, mount)
    assert nfc_on_server in os.listdir(m.path), f"{server.kind}: {os.listdir(m.path)}"
    assert (m / nfc_on_server).read_bytes() == b"cv\n"

    os.makedirs(m / "p" / "q" / "r")
    for name in ODD_NAMES:
        (m / "p" / "q" / "r" / name).write_bytes(name.encode())
    assert sorted(os.listdir(m / "p" / "q" / "r")) == sorted(ODD_NAMES)
    settle(server, m, {f"p/q/r/{name}": name.encode() for name in ODD_NAMES})
    on_server = [n for n in os.listdir(server.root / "p" / "q" / "r") if n != ".DAV"]  # Apache's properties
    assert sorted(on_server) == sorted(ODD_NAMES), "names stored as written (NFC, NFD)"

    os.rename(m / "d1", m / "d2")
    assert sorted(os.listdir(m / "d2")) == ["sub", "x.txt"]
    assert (m / "d2" / "sub" / "y.txt").read_bytes() == b"y\n"
    wait_until(lambda: (server.root / "d2" / "sub" / "y.txt").is_file() and not (server.root / "d1").exists(), 30,
               f"d1 moved to d2 on {server.kind}: {os.listdir(server.root)}")
    os.rename(m / "f.txt", m / "d2" / "g.txt")
    settle(server, m, {"d2/g.txt": b"f\n"})
    assert not (server.root / "f.txt").exists()

    for dirpath, dirnames, filenames in os.walk(m / "p", topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            os.rmdir(os.path.join(dirpath, name))
    os.rmdir(m / "p")
    wait_until(lambda: not (server.root / "p").exists(), 30, f"p deleted on {server.kind}")
    assert sorted(os.listdir(m.path)) == sorted(["d2", nfc_on_server])
    hidden = [n for n in os.listdir(m.path) + os.listdir(m / "d2") if n.startswith(".")]
    assert not hidden, f"{server.kind}: bookkeeping shown in the mount: {hidden}"
    assert not conflict_copies(server)
    assert m.unmount().returncode == 0
    assert not m.xdg.cache_files()



def test_folders_made_in_a_folder_just_made_here_ask_nothing_before_their_mkcol(dav, mount):
    """`mkdir -p`, `tar x`, `cp -r`: every folder below the first is made in a folder docfs
    made a moment ago, where no name was used yet, so none can be there unless another client
    put it there within that moment. Its MKCOL goes at once, with no PROPFIND first (one round
    trip a folder, in the writer's own path). A folder another client made at such a name
    meanwhile keeps its file: the mkdir says EEXIST, or, on a server that answers MKCOL of an
    existing collection with 201 (rclone's), the two are one folder."""
    server = dav({"keep.txt": b"k\n"})
    m = mounted(server, mount)
    os.makedirs(m / "top" / "a" / "b" / "c")
    (m / "top" / "a" / "f.txt").write_bytes(b"ours\n")
    (server.root / "top" / "theirs").mkdir()  # another client, within the moment
    (server.root / "top" / "theirs" / "t.txt").write_bytes(b"theirs\n")
    try:
        os.mkdir(m / "top" / "theirs")
        said = "made"
    except FileExistsError:
        said = "EEXIST"
    settle(server, m, {"top/a/f.txt": b"ours\n", "top/theirs/t.txt": b"theirs\n"})
    assert (server.root / "top" / "a" / "b" / "c").is_dir(), f"{server.kind}: {list(os.walk(server.root / 'top'))}"
    def shown() -> list[str] | None:
        try:
            return sorted(os.listdir(m / "top" / "theirs"))
        except FileNotFoundError:
            return None
    wait_until(lambda: shown() == ["t.txt"], 30, lambda: f"{server.kind} ({said}): their folder shows {shown()}")
    def made() -> set[str]:
        return {r.path for r in server.requests() if r.method == "MKCOL"}
    # lighttpd writes its request log a few seconds late.
    wait_until(lambda: {"/top", "/top/a", "/top/a/b", "/top/a/b/c"} <= made(), 30, lambda: f"{server.kind}: MKCOLs logged: {made()}")
    asked_first = [f"{r.method} {r.path}" for r in server.requests()
                   if r.method == "PROPFIND" and r.path in ("/top/a", "/top/a/b", "/top/a/b/c")]
    assert not asked_first, f"{server.kind}: folders made in a folder made here were asked about first: {asked_first}"
    print(f"{server.kind}: mkdir of a folder another client just made there: {said}")
    assert m.unmount().returncode == 0

#: What `docfs status` says of each server once a file was written and chmod'ed.
TRAITS = {
    "docfs-serve": ["If-Match on upload: honoured", "mode and times: kept by this mount only"],
    "rclone": ["If-Match on upload: ignored by the server: uploads over a version take a WebDAV lock",
               "mode and times: kept by this mount only"],
    "wsgidav": ["If-Match on upload: honoured", "mode and times: kept on the server"],
    "apache": ["If-Match on upload: honoured", "mode and times: kept on the server"],
    "nginx": ["versions: made from modification time and size", "locks: the server has WebDAV locks",
              "If-Match on upload: ignored by the server: uploads over a version take a WebDAV lock",
              "mode and times: kept by this mount only"],
    "lighttpd": ["downloads: checked by a PROPFIND before and after each", "If-Match on upload: honoured",
                 "mode and times: kept on the server"],
    "sabre": ["versions: made from modification time and size", "locks: the server has WebDAV locks",
              "If-Match on upload: honoured"],
}


def test_status_says_what_the_server_does(dav, mount):
    server = dav({"a.txt": b"a\n"})
    m = mounted(server, mount)
    assert (m / "a.txt").read_bytes() == b"a\n"
    with open(m / "a.txt", "ab") as f:
        f.write(b"b\n")
    os.chmod(m / "a.txt", 0o640)
    settle(server, m, {"a.txt": b"a\nb\n"})

    def said() -> str:
        return m.xdg.docfs("status", m.path).stdout

    wait_until(lambda: all(line in said() for line in TRAITS[server.kind]), 30,
               f"docfs status on {server.kind} to say {TRAITS[server.kind]}:\n{said()}")
    assert m.unmount().returncode == 0

"""Servers that ignore `If-Match` on PUT (issue 30).

`rclone serve webdav` answers 201 to a PUT with `If-Match: "bogus"`: a version check made first
and the PUT then leave a window in which another client's upload is replaced (two docfs mounts
of one rclone server lost about one saved version in a hundred that way). docfs finds out with
one probe per mount and, where the server has WebDAV locks, checks and uploads under an
exclusive lock, which other docfs mounts (and every client that honours locks) wait for. On a
server that honours conditions (`docfs serve`) nothing changes: no lock is taken.
"""
from __future__ import annotations

import errno
import json
import os
import time
import urllib.request

import pytest

from fault_proxy import FaultProxy
from helpers import wait_until
from write_support import make_store

pytestmark = pytest.mark.fuse

LOCK_BODY = (b'<?xml version="1.0" encoding="utf-8"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope>'
             b'<D:locktype><D:write/></D:locktype><D:owner>another client</D:owner></D:lockinfo>')


def http(method: str, url: str, headers: dict | None = None, data: bytes | None = None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, resp.headers, resp.read()


def write_conditions(m) -> str | None:
    """What `docfs status` says the server does with If-Match."""
    return json.loads(m.xdg.docfs("status", "--json", m.path).stdout)["mounts"][0].get("writeConditions")


def test_rclone_ignores_if_match_and_docfs_uploads_under_a_lock(rclone_serve, mount, tmp_path):
    root = make_store(tmp_path / "store", {"a.txt": b"version 1\n"})
    server = rclone_serve(root)
    # What the probe finds: the server takes a PUT over a version no file has.
    status, _, _ = http("PUT", server.url + "probe-by-hand.txt", {"If-Match": '"bogus"'}, b"x")
    assert status in (200, 201, 204)
    http("DELETE", server.url + "probe-by-hand.txt")

    m = mount(server.url)
    assert (m / "a.txt").read_bytes() == b"version 1\n"
    # Another client holds a lock on the file for a moment: docfs's upload waits for it.
    _, headers, _ = http("LOCK", server.url + "a.txt", {"Timeout": "Second-60", "Content-Type": "application/xml"}, LOCK_BODY)
    token = headers["Lock-Token"]
    with open(m / "a.txt", "ab") as f:
        f.write(b"ours\n")
    # Barrier: docfs's upload asked for the lock (a LOCK of a.txt after ours) and was refused.
    wait_until(lambda: [(r.method, r.path) for r in server.logged()].count(("LOCK", "/a.txt")) >= 2, 30,
               lambda: f"docfs to ask for the lock on a.txt: {[(r.method, r.path) for r in server.logged()][-12:]}")
    assert (root / "a.txt").read_bytes() == b"version 1\n", "the upload went through another client's lock"
    http("UNLOCK", server.url + "a.txt", {"Lock-Token": token})
    wait_until(lambda: (root / "a.txt").read_bytes() == b"version 1\nours\n", 60, "the upload once the lock is gone")

    methods = [(r.method, r.path) for r in server.logged()]
    assert ("LOCK", "/a.txt") in methods and ("UNLOCK", "/a.txt") in methods, f"no lock around the upload: {methods[-12:]}"
    probes = [p for (_, p) in methods if ".docfs-probe-" in p]
    assert len({p for p in probes}) == 1, f"one probe per mount: {probes}"
    assert not [n for n in os.listdir(root) if n.startswith(".docfs-probe-")], "the probe's scratch file stayed"
    assert "ignores If-Match" in m.log_tail(200_000)
    assert "ignored by the server: uploads over a version take a WebDAV lock" in write_conditions(m)
    assert m.unmount().returncode == 0


def test_a_server_that_honours_if_match_gets_no_lock(docfs_serve, mount, tmp_path):
    root = make_store(tmp_path / "store", {"a.txt": b"version 1\n"})
    server = docfs_serve(root)
    m = mount(server.url)
    with open(m / "a.txt", "ab") as f:
        f.write(b"ours\n")
    wait_until(lambda: (root / "a.txt").read_bytes() == b"version 1\nours\n", 60, "the upload")
    methods = [r.method for r in server.requests()]
    assert "LOCK" not in methods, methods
    assert not [n for n in os.listdir(root) if n.startswith(".docfs-probe-")]
    assert write_conditions(m) == "honoured by the server"
    assert "If-Match on upload: honoured by the server" in m.xdg.docfs("status", m.path).stdout
    assert m.unmount().returncode == 0


def test_apache_weak_etags_make_no_false_conflict_and_no_estale(apache_serve, mount, tmp_path):
    """Apache's tag is weak (`W/"…"`) for a second after a change, and an `If-Match` with a weak
    tag never matches (RFC 9110 compares strongly): every save of a file changed in the last
    second was a false conflict, and a large file written a moment ago could not be read
    (`ESTALE`). docfs now uploads over a weak version under a lock and reads it by checking the
    answer's tag."""
    root = make_store(tmp_path / "store", {"a.txt": b"v1\n"})
    server = apache_serve(root)
    m = mount(server.url)
    for line in (b"one\n", b"two\n", b"three\n"):
        with open(m / "a.txt", "ab") as f:
            f.write(line)
        time.sleep(0.2)   # the scenario: the next save within the second Apache's tag stays weak
    big = os.urandom(6 << 20)
    (m / "big.bin").write_bytes(big)
    wait_until(lambda: (root / "a.txt").read_bytes() == b"v1\none\ntwo\nthree\n" and (root / "big.bin").exists()
               and (root / "big.bin").stat().st_size == len(big), 60, "the saves to reach Apache")
    assert (m / "big.bin").read_bytes() == big, "a large file written a moment ago reads back"
    assert not [n for n in os.listdir(root) if "conflict" in n], f"false conflicts: {os.listdir(root)}"
    weak = [r for r in server.requests() if r.method == "PUT" and r.status == 412]
    assert not weak, f"PUTs refused for a weak If-Match: {weak}"
    assert m.unmount().returncode == 0


def test_without_conditions_or_locks_a_new_file_is_moved_in_place(nginx_without_locks_serve, mount, tmp_path):
    """nginx without its lock zone ignores `If-None-Match: *` on PUT and has no locks: a new
    file goes to a hidden name and is moved in place with `Overwrite: F`, which refuses to
    replace a file another client created meanwhile (here: while ours was open)."""
    root = make_store(tmp_path / "store", {"a.txt": b"version 1\n"})
    server = nginx_without_locks_serve(root)
    m = mount(server.url, "--dir-cache-ttl", "0")
    (m / "mine.txt").write_bytes(b"mine\n")
    wait_until(lambda: (root / "mine.txt").is_file() and (root / "mine.txt").read_bytes() == b"mine\n", 60, "mine.txt uploaded")
    methods = [(r.method, r.path) for r in server.requests()]
    assert ("MOVE", "/mine.txt") not in methods
    assert any(method == "MOVE" and path.startswith("/.docfs-upload-") for method, path in methods), methods
    assert not any(method == "LOCK" for method, _ in methods), methods

    fd = os.open(m / "both.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"ours\n")
        (root / "both.txt").write_bytes(b"theirs\n")
    finally:
        os.close(fd)

    def both_kept() -> bool:
        copies = [n for n in os.listdir(root) if n.startswith("both (")]
        return (root / "both.txt").read_bytes() == b"theirs\n" and len(copies) == 1 and (root / copies[0]).read_bytes() == b"ours\n"

    wait_until(both_kept, 60, f"theirs under both.txt and ours beside it: {os.listdir(root)}\n{m.log_tail(3000)}")
    assert not [n for n in os.listdir(root) if n.startswith(".docfs-upload-")], "a temporary file left behind"
    assert "which has no locks: new files are moved in place" in (write_conditions(m) or "")
    assert m.unmount().returncode == 0


def test_a_file_renamed_or_removed_as_its_upload_ends_meets_no_lock_of_docfs(nginx_serve, mount, tmp_path):
    """An upload under a lock sends its UNLOCK after it returns (a round trip fewer per file at
    a distance): docfs's own next MOVE or DELETE of the path, or of a folder above it, waits for
    that UNLOCK instead of meeting its own lock (423), and no lock outlives the unmount."""
    root = make_store(tmp_path / "store", {"keep.txt": b"k\n"})
    server = nginx_serve(root)
    # Each UNLOCK takes half a second to be answered: docfs's next request comes before it.
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    proxy.latency(0.5, method="UNLOCK")
    m = mount(proxy.url)
    os.mkdir(m / "d")
    for i in range(12):
        (m / "d" / f"f{i}.txt").write_bytes(b"%d\n" % i)
    m.wait_uploads_done(60)
    for i in range(6):
        os.rename(m / "d" / f"f{i}.txt", m / "d" / f"g{i}.txt")
    for i in range(6, 12):
        os.unlink(m / "d" / f"f{i}.txt")
    (m / "e.txt").write_bytes(b"e\n")
    m.wait_uploads_done(60)
    os.rename(m / "e.txt", m / "d" / "e.txt")
    assert m.unmount().returncode == 0
    proxy.stop()

    assert sorted(os.listdir(root / "d")) == ["e.txt"] + [f"g{i}.txt" for i in range(6)]
    requests = server.requests()
    refused = [(r.method, r.path) for r in requests if r.status == 423]
    assert not refused, f"docfs met its own lock: {refused}"
    locks = [r.path for r in requests if r.method == "LOCK" and r.status in (200, 201)]
    unlocks = [r.path for r in requests if r.method == "UNLOCK" and r.status in (200, 204)]
    assert len(locks) >= 13, f"the uploads went under locks: {[(r.method, r.path) for r in requests]}"
    assert sorted(locks) == sorted(unlocks), f"a lock left after the unmount: {sorted(set(locks) - set(unlocks))}"


def lock_as_another_client(url: str) -> str:
    """An exclusive write lock taken by another WebDAV client; returns its token."""
    body = (b'<?xml version="1.0" encoding="utf-8"?><D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope>'
            b'<D:locktype><D:write/></D:locktype><D:owner>another client</D:owner></D:lockinfo>')
    request = urllib.request.Request(url, data=body, method="LOCK", headers={"Timeout": "Second-600", "Depth": "0",
                                                                                "Content-Type": "application/xml"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.headers["Lock-Token"]


@pytest.mark.parametrize("server_kind", ["apache", "nginx"])
def test_a_file_another_client_holds_locked_cannot_be_renamed_or_removed_and_says_busy(
        server_kind, apache_serve, nginx_serve, mount, tmp_path):
    """A file another WebDAV client holds locked (an office suite editing it) refuses MOVE and
    DELETE with 423 Locked. docfs said EIO, as for a server failure; it is EBUSY, and the file
    stays where it was, on the server and in the mount."""
    root = make_store(tmp_path / "store", {"held.odt": b"theirs\n"})
    server = (apache_serve if server_kind == "apache" else nginx_serve)(root)
    m = mount(server.url)
    assert os.listdir(m.path) == ["held.odt"]
    token = lock_as_another_client(server.url + "held.odt")
    assert token
    for attempt in (lambda: os.rename(m / "held.odt", m / "moved.odt"), lambda: os.unlink(m / "held.odt")):
        with pytest.raises(OSError) as failed:
            attempt()
        assert failed.value.errno == errno.EBUSY, f"{failed.value!r}: a file locked elsewhere is busy, not an I/O error"
    assert sorted(os.listdir(m.path)) == ["held.odt"]
    assert sorted(os.listdir(root)) == ["held.odt"]
    assert m.unmount().returncode == 0

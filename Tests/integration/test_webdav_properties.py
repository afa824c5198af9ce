"""POSIX attributes as WebDAV dead properties, against WsgiDAV: with its property manager the
server keeps them (PROPPATCH), so another machine with no catalog sees the modes and times set
here; without it the server refuses them, docfs asks once per mount and keeps them in its
catalog. A time set here is not believed once another client has written new content."""
from __future__ import annotations

import os
import stat
import time
import urllib.request

import pytest

from helpers import wait_until, xattr_state

pytestmark = pytest.mark.fuse


def seed(tmp_path):
    root = tmp_path / "store"
    (root / "docs").mkdir(parents=True)
    (root / "docs/old.txt").write_bytes(b"old content\n")
    (root / "plain.txt").write_bytes(b"plain\n")
    return root


def dead_properties(server, rel: str) -> str:
    """The server's own PROPFIND answer for docfs's properties of `rel`."""
    body = (b'<?xml version="1.0"?><D:propfind xmlns:D="DAV:" xmlns:P="urn:x-docfs:posix">'
            b'<D:prop><P:mode/><P:mtime/><P:mtime-of/></D:prop></D:propfind>')
    request = urllib.request.Request(server.url + rel, data=body, method="PROPFIND", headers={"Depth": "0"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read().decode()


def wait_uploaded(m, rel):
    wait_until(lambda: xattr_state(m / rel) in ("local", "placeholder"), 30,
               f"{rel} to be uploaded (user.docfs.state is {xattr_state(m / rel)!r})")


def test_modes_and_times_reach_a_server_that_keeps_dead_properties(wsgidav_serve, mount, xdg, tmp_path):
    server = wsgidav_serve(seed(tmp_path))
    m = mount(server.url)
    fd = os.open(m / "docs/new.txt", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o640)
    os.write(fd, b"new\n")
    os.close(fd)
    wait_uploaded(m, "docs/new.txt")
    os.chmod(m / "docs/old.txt", 0o604)
    os.utime(m / "docs/old.txt", (1_600_000_000, 1_600_000_000))
    os.mkdir(m / "docs/private", 0o700)
    os.chmod(m / "docs/private", 0o750)
    assert m.unmount().returncode == 0

    answer = dead_properties(server, "docs/old.txt")
    assert ">604<" in answer and ">1600000000<" in answer, answer
    assert ">640<" in dead_properties(server, "docs/new.txt")
    assert [r for r in server.requests() if r.method == "PROPPATCH" and r.status == 207]

    # Another machine, no catalog: the first listing shows them.
    xdg.another_machine("other-machine")
    m = mount(server.url)
    assert stat.S_IMODE(os.stat(m / "docs/old.txt").st_mode) == 0o604
    assert os.stat(m / "docs/old.txt").st_mtime == 1_600_000_000
    assert stat.S_IMODE(os.stat(m / "docs/new.txt").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(m / "docs/private").st_mode) == 0o750
    assert (m / "docs/old.txt").read_bytes() == b"old content\n"
    assert m.unmount().returncode == 0

    # Another client writes new content: the property outlives the PUT, but the time set here
    # was for the old content, so the server's own time shows; the mode stays.
    request = urllib.request.Request(server.url + "docs/old.txt", data=b"rewritten elsewhere\n", method="PUT")
    urllib.request.urlopen(request, timeout=10).close()
    xdg.another_machine("third-machine")
    m = mount(server.url)
    st = os.stat(m / "docs/old.txt")
    assert abs(st.st_mtime - time.time()) < 120, f"the new content's time, not the old one's: {st.st_mtime}"
    assert stat.S_IMODE(st.st_mode) == 0o604
    assert (m / "docs/old.txt").read_bytes() == b"rewritten elsewhere\n"


def test_a_server_that_refuses_dead_properties_is_asked_once(wsgidav_serve, mount, tmp_path):
    server = wsgidav_serve(seed(tmp_path), keep_properties=False)
    m = mount(server.url)
    for i in range(3):
        fd = os.open(m / f"docs/new{i}.txt", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
        os.write(fd, b"x")
        os.close(fd)
    for i in range(3):
        wait_uploaded(m, f"docs/new{i}.txt")
    os.chmod(m / "plain.txt", 0o606)
    # Kept in the catalog all the same (and across a remount, as on every store).
    assert stat.S_IMODE(os.stat(m / "plain.txt").st_mode) == 0o606
    assert stat.S_IMODE(os.stat(m / "docs/new1.txt").st_mode) == 0o600
    proppatches = [r for r in server.requests() if r.method == "PROPPATCH"]
    assert len(proppatches) == 1, f"one refused PROPPATCH per mount, then none: {proppatches}"
    assert sorted(os.listdir(m / "docs")) == ["new0.txt", "new1.txt", "new2.txt", "old.txt"]
    assert m.unmount().returncode == 0
    m = mount(server.url)
    assert stat.S_IMODE(os.stat(m / "plain.txt").st_mode) == 0o606

"""A large new file copied into the mount in order is uploaded while it is written (issue 9's
write target: the server has it about when `close` returns). Checked on the store side: the
body goes to a temporary name that one MOVE puts in place, so the real name never holds a torn
file; a writer that goes back (a zip, a video muxer) cancels the stream, leaves nothing behind
and no conflict copy, and its file goes up whole at close as before."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from fault_proxy import FaultProxy
from helpers import wait_until
from write_support import change_on_server, make_store, methods_log, moves, puts, sigkill_daemon, wait_server_bytes

pytestmark = pytest.mark.fuse

TEMPORARY = re.compile(r"^\.docfs-upload-[0-9a-f]{16}$")
MIB = 1 << 20


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "store")


def temporary_names(server) -> list[str]:
    return [name for name in os.listdir(server.root) if TEMPORARY.match(name)]


def test_dd_of_a_large_new_file_streams_it_to_a_temporary_name_and_moves_it_in_place(store_server, store, mount, tmp_path):
    server = store_server(store)
    m = mount(server.url)
    source = tmp_path / "source.bin"
    data = os.urandom(24 * MIB)
    source.write_bytes(data)
    subprocess.run(["dd", f"if={source}", f"of={m / 'copied.bin'}", "bs=1M", "status=none"], check=True)
    wait_server_bytes(server, "copied.bin", data)

    # The upload went through the stream: one PUT of a temporary name, one MOVE of it to the
    # file's name, and no PUT of the name itself (the upload at close found nothing to send).
    wait_until(lambda: moves(server), 10, f"a MOVE in the {server.kind} log")
    m.wait_uploads_done()   # barrier: an upload at close would be in the log by then
    streamed = [r for r in server.requests() if r.method == "PUT" and TEMPORARY.match(r.path.lstrip("/"))]
    assert len(streamed) == 1, methods_log(server)
    assert [r.path for r in moves(server)] == [streamed[0].path], methods_log(server)
    assert not puts(server, "copied.bin"), f"the file was uploaded again after its stream:\n{methods_log(server)}"
    # The name is asked about before the PUT (nothing there?), after the MOVE (its version), and
    # before its attributes go up (4 before: the MOVE's answer was asked for twice).
    asked = [r for r in server.requests() if r.method == "PROPFIND" and r.path == "/copied.bin"]
    assert len(asked) <= 3, methods_log(server)
    assert temporary_names(server) == []
    assert not any(TEMPORARY.match(name) for name in os.listdir(m.path))
    # Its record in the ledger went with it: a next mount has nothing to clean up.
    ledgers = list((m.xdg.state_home / "docfs").glob("*/webdav-uploads"))
    assert ledgers and not [record for ledger in ledgers for record in ledger.iterdir()], ledgers
    with open(m / "copied.bin", "rb") as f:
        assert f.read() == data


def test_the_body_of_a_large_new_file_goes_while_its_name_is_asked_about(store_server, store, mount, tmp_path):
    """Whether the name is free is asked alongside the PUT, not before it: far from the store
    that question was a round trip before the first byte went. The proxy holds the question
    1.5 s; the body reaches the server meanwhile, and the MOVE waits for the answer."""
    server = store_server(store)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    try:
        question = proxy.latency(1.5, method="PROPFIND", path=r"^/fresh\.bin$", count=1)
        m = mount(proxy.url)
        source = tmp_path / "source.bin"
        data = os.urandom(12 * MIB)
        source.write_bytes(data)
        subprocess.run(["dd", f"if={source}", f"of={m / 'fresh.bin'}", "bs=1M", "status=none"], check=True)
        wait_server_bytes(server, "fresh.bin", data)
        m.wait_uploads_done()
        assert question.hits == 1, methods_log(server)
        seen = proxy.requests()
        asked = next(r for r in seen if r.method == "PROPFIND" and r.target == "/fresh.bin")
        body = next(r for r in seen if r.method == "PUT" and TEMPORARY.match(r.target.lstrip("/")))
        moved = next(r for r in seen if r.method == "MOVE")
        # Asking first, the PUT would have come 1.5 s after the question, once it was answered.
        assert body.at - asked.at < 1.0, seen
        assert moved.at >= asked.at + 1.5, seen
        assert temporary_names(server) == []
    finally:
        proxy.stop()


def test_a_large_new_file_whose_name_another_client_took_meanwhile_keeps_both(store_server, store, mount, tmp_path):
    """The name is taken by another client between the create and the stream's question: the
    body sent alongside is stopped and leaves nothing behind, theirs stays under the name, and
    ours goes up at close as a conflict copy beside it."""
    server = store_server(store)
    m = mount(server.url)
    os.listdir(m.path)
    ours = os.urandom(10 * MIB)
    theirs = b"theirs, written while ours was being made\n"
    with open(m / "taken.bin", "wb") as f:
        change_on_server(server, "taken.bin", theirs, 1_700_000_000)
        for offset in range(0, len(ours), MIB):
            f.write(ours[offset:offset + MIB])
    m.wait_uploads_done()
    assert (server.root / "taken.bin").read_bytes() == theirs, methods_log(server)
    copies = [name for name in os.listdir(server.root) if name.startswith("taken (conflict ")]
    assert len(copies) == 1, (os.listdir(server.root), methods_log(server))
    assert (server.root / copies[0]).read_bytes() == ours
    assert temporary_names(server) == [], methods_log(server)
    assert not moves(server), methods_log(server)


def test_once_the_server_kept_a_chunked_body_whole_shorter_ones_are_not_asked_about(store_server, store, mount, tmp_path):
    """A server that mishandles chunked bodies does so every time: the size of a temporary file
    is asked for until one body as long was found whole, not for every upload (a round trip
    each, at a distance)."""
    server = store_server(store)
    m = mount(server.url)
    first, second = os.urandom(16 * MIB), os.urandom(8 * MIB)
    for name, data in (("first.bin", first), ("second.bin", second)):
        source = tmp_path / name
        source.write_bytes(data)
        subprocess.run(["dd", f"if={source}", f"of={m / name}", "bs=1M", "status=none"], check=True)
        wait_server_bytes(server, name, data)
    m.wait_uploads_done()
    streamed = [r.path for r in server.requests() if r.method == "PUT" and TEMPORARY.match(r.path.lstrip("/"))]
    assert len(streamed) == 2, methods_log(server)
    asked = [r.path for r in server.requests() if r.method == "PROPFIND"]
    assert streamed[0] in asked and streamed[1] not in asked, methods_log(server)


def test_a_writer_that_goes_back_leaves_no_torn_file_and_no_conflict_copy(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    before = set(os.listdir(server.root))
    data = bytearray(os.urandom(12 * MIB))
    with open(m / "archive.zip", "wb") as f:
        for offset in range(0, len(data), MIB):
            f.write(data[offset:offset + MIB])
        # The stream is under way (well within its 2 s patience): nothing shows under the
        # file's name yet.
        wait_until(lambda: os.getxattr(m / "archive.zip", "user.docfs.progress"), 10,
                   "the stream to be under way (user.docfs.progress of archive.zip)")
        assert not (server.root / "archive.zip").exists(), methods_log(server)
        f.seek(0)
        f.write(b"PK\x03\x04")
    data[0:4] = b"PK\x03\x04"
    wait_server_bytes(server, "archive.zip", bytes(data))
    m.wait_uploads_done()   # barrier: a second upload or a conflict copy would be there by then

    assert set(os.listdir(server.root)) - before == {"archive.zip"}, methods_log(server)
    assert not any("conflict" in name for name in os.listdir(server.root))
    assert len(puts(server, "archive.zip")) == 1, methods_log(server)
    assert not moves(server), methods_log(server)


def test_a_temporary_upload_name_on_the_server_is_never_listed(store_server, store, mount):
    (store / ".docfs-upload-0123456789abcdef").write_bytes(b"left by a killed daemon")
    (store / ".docfs-upload-not-hex").write_bytes(b"a user's file")
    server = store_server(store)
    m = mount(server.url)
    names = os.listdir(m.path)
    assert ".docfs-upload-0123456789abcdef" not in names
    assert ".docfs-upload-not-hex" in names


def test_a_temporary_file_a_killed_daemon_left_is_deleted_by_the_next_mount(store_server, store, mount, tmp_path):
    """A daemon killed between a streamed upload's PUT and its MOVE leaves the whole body under
    its temporary name on the server, where no listing shows it. docfs recorded that name before
    the PUT, so the next mount deletes it; a temporary name it did not record (another client's
    stream under way) stays. The file itself is not lost: the next mount uploads it."""
    others = ".docfs-upload-0123456789abcdef"
    (store / others).write_bytes(b"another client's stream, under way")
    server = store_server(store)
    proxy = FaultProxy(server.port, log_path=tmp_path / "proxy.log").start()
    try:
        held = proxy.latency(3600, method="MOVE", count=1)
        m = mount(proxy.url)
        data = os.urandom(8 * MIB)
        (m / "big.bin").write_bytes(data)
        wait_until(lambda: held.hits == 1, 30, "the stream's MOVE (held by the proxy)")
        left = set(temporary_names(server)) - {others}
        assert len(left) == 1, f"no temporary file on the server: {os.listdir(server.root)}"
        sigkill_daemon(m)
        assert m.unmount().returncode == 0

        m2 = mount(proxy.url)
        wait_server_bytes(server, "big.bin", data)
        wait_until(lambda: temporary_names(server) == [others], 30,
                   f"the next mount to delete {left} (and only that): {temporary_names(server)}")
        assert m2.unmount().returncode == 0
        records = list((m2.xdg.state_home / "docfs").glob("*/webdav-uploads/*"))
        assert not records, f"records of ended uploads are left: {records}"
    finally:
        proxy.stop()

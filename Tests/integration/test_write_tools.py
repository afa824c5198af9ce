"""Ordinary tools on a docfs mount: editor-style saves (tmp + fsync + rename), `sed -i`, `vim`,
the four document operations (import, open in place, export, move) and `git clone`."""
from __future__ import annotations

import os
import shutil
import time

import pytest

from conftest import run
from helpers import wait_until
from write_support import (SEED_FILES, git, make_store, methods_log, moves, puts, server_files,
                           wait_server_bytes)

pytestmark = pytest.mark.fuse


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "store")


def wait_store_listing(server, rel_dir, expected: set[str], timeout=20):
    d = server.root / rel_dir
    wait_until(lambda: set(os.listdir(d)) == expected, timeout,
               f"{d} to hold exactly {sorted(expected)} (has {sorted(os.listdir(d))})\n{methods_log(server)}")


def test_editor_style_save(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    new = b"report v2: rewritten by an editor\n" * 10
    tmp = m / "docs/.report.txt.tmp123"
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    try:
        os.write(fd, new)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, m / "docs/report.txt")
    wait_server_bytes(server, "docs/report.txt", new)
    wait_store_listing(server, "docs", {"report.txt", "sub"})
    assert (m / "docs/report.txt").read_bytes() == new
    assert sorted(os.listdir(m / "docs")) == ["report.txt", "sub"]
    m.wait_uploads_done()   # barrier: a late upload would have been sent by then
    assert (store / "docs/report.txt").read_bytes() == new, "a late upload overwrote the saved file"


def test_sed_in_place(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    result = run(["sed", "-i", "s/line a/LINE A/", str(m / "notes.md")], timeout=60)
    assert result.returncode == 0, result.stderr
    expected = SEED_FILES["notes.md"].replace(b"line a", b"LINE A")
    wait_server_bytes(server, "notes.md", expected)
    wait_store_listing(server, "", set(os.listdir(store)) - {n for n in os.listdir(store) if n.startswith("sed")})
    assert not [n for n in os.listdir(store) if n.startswith("sed")], sorted(os.listdir(store))
    assert (m / "notes.md").read_bytes() == expected
    m.wait_uploads_done()   # barrier: a late upload would have been sent by then
    assert (store / "notes.md").read_bytes() == expected


@pytest.mark.skipif(shutil.which("vim") is None, reason="vim is not installed")
def test_vim_edit(store_server, store, mount):
    server = store_server(store)
    m = mount(server.url)
    before = set(os.listdir(store / "docs"))
    result = run(["vim", "-u", "NONE", "-i", "NONE", "-c", "s/alpha/ALPHA/", "-c", "wq", str(m / "docs/report.txt")],
                 timeout=60, env=dict(os.environ, TERM="dumb"))
    assert result.returncode == 0, f"vim exited {result.returncode}: {result.stdout[-500:]} {result.stderr[-500:]}"
    expected = SEED_FILES["docs/report.txt"].replace(b"alpha", b"ALPHA")
    wait_server_bytes(server, "docs/report.txt", expected)
    wait_store_listing(server, "docs", before)   # no swap file, no backup left
    assert (m / "docs/report.txt").read_bytes() == expected
    m.wait_uploads_done()   # barrier: a late upload would have been sent by then
    assert (store / "docs/report.txt").read_bytes() == expected


def test_import_open_export_move(store_server, store, mount, tmp_path):
    server = store_server(store)
    m = mount(server.url)
    outside = tmp_path / "outside"
    outside.mkdir()

    # import: cp out of the mount
    run(["cp", str(m / "data.bin"), str(outside / "imported.bin")], check=True)
    assert (outside / "imported.bin").read_bytes() == SEED_FILES["data.bin"]

    # open in place: edit a document on the mount
    with open(m / "hello.txt", "r+b") as f:
        f.seek(6)
        f.write(b"DOCFS")
    expected = bytearray(SEED_FILES["hello.txt"])
    expected[6:11] = b"DOCFS"
    wait_server_bytes(server, "hello.txt", bytes(expected))
    assert len(puts(server, "hello.txt")) == 1, methods_log(server)

    # export: cp into the mount -> uploaded
    exported = os.urandom(300_000)
    (outside / "export.bin").write_bytes(exported)
    run(["cp", str(outside / "export.bin"), str(m / "docs/")], check=True)
    wait_server_bytes(server, "docs/export.bin", exported)
    assert (outside / "export.bin").exists()

    # move: mv from a local dir into the mount -> the source is gone, the data is on the store
    moved = os.urandom(200_000)
    (outside / "move.bin").write_bytes(moved)
    (outside / "movedir").mkdir()
    (outside / "movedir/a.txt").write_bytes(b"a\n")
    run(["mv", str(outside / "move.bin"), str(outside / "movedir"), str(m / "other/")], check=True)
    assert not (outside / "move.bin").exists() and not (outside / "movedir").exists()
    wait_server_bytes(server, "other/move.bin", moved)
    wait_server_bytes(server, "other/movedir/a.txt", b"a\n")
    # Read back through the mount at once (mv sets times/mode on the open fd after writing).
    got = (m / "other/move.bin").read_bytes()
    assert got == moved, f"mv'd file reads back as {len(got)} bytes through the mount, expected {len(moved)}"


def test_git_clone_into_mount(store_server, store, mount, tmp_path):
    server = store_server(store)
    m = mount(server.url)
    src = tmp_path / "src-repo"
    src.mkdir()
    git("init", "-q", "-b", "main", cwd=src)
    for i in range(3):
        (src / f"file{i}.txt").write_text(f"content {i}\n" * (i + 1))
        (src / "sub").mkdir(exist_ok=True)
        (src / "sub" / f"n{i}.py").write_text(f"print({i})\n")
        os.chmod(src / "sub" / f"n{i}.py", 0o755)
        git("add", "-A", cwd=src)
        git("commit", "-q", "-m", f"commit {i}", cwd=src)

    started = time.monotonic()
    clone = git("clone", str(src), str(m / "repo"), timeout=180, check=False)
    print(f"git clone: exit {clone.returncode} in {time.monotonic() - started:.1f} s\n{clone.stdout}{clone.stderr}")
    assert clone.returncode == 0, f"git clone into the mount failed: {clone.stderr}"
    status = git("-C", m / "repo", "status", "--porcelain", check=False)
    assert status.returncode == 0 and status.stdout.strip() == "", f"git status: {status.stdout} {status.stderr}"
    fsck = git("-C", m / "repo", "fsck", "--full", check=False)
    assert fsck.returncode == 0, f"git fsck: {fsck.stdout} {fsck.stderr}"
    assert os.stat(m / "repo/sub/n1.py").st_mode & 0o111, "executable bit lost"
    # A commit in the mount works too (index.lock + rename, refs, objects).
    (m / "repo/file0.txt").write_text("changed in the mount\n")
    git("-C", m / "repo", "commit", "-q", "-am", "edit in mount", timeout=120)
    log = git("-C", m / "repo", "log", "--oneline")
    assert len(log.stdout.splitlines()) == 4

    result = m.unmount(timeout=180)               # waits for the uploads
    assert result.returncode == 0, result.stderr
    # The store holds a working repository.
    fsck = git("-C", store / "repo", "fsck", "--full", check=False)
    assert fsck.returncode == 0, f"git fsck on the store copy: {fsck.stdout} {fsck.stderr}"
    status = git("-C", store / "repo", "status", "--porcelain", check=False)
    print(f"git status on the store copy: {status.stdout!r}")
    assert (store / "repo/file0.txt").read_text() == "changed in the mount\n"
    assert not [p for p in server_files(store / "repo") if p.endswith(".lock")], "lock files left on the store"


def test_a_file_stated_before_its_close_keeps_that_ctime_and_git_status_reads_nothing_again(store_server, store, mount, tmp_path):
    """A write changes a file's status time as well as its time (POSIX). docfs moved the ctime to
    the mtime only at the close's commit, so git, which stats each file it checks out before
    closing it, recorded an older ctime than the file showed next, and took the file for
    changed. (The first `git status` after a clone still reads the files checked out in the
    second the index was written, as on any file system: git cannot tell them from files changed
    in that second. It writes the index again, and the next `git status` reads none.)"""
    server = store_server(store)
    m = mount(server.url)
    fd = os.open(m / "stated.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        time.sleep(0.01)                       # the write's time is later than the create's
        os.write(fd, b"written\n")
        open_stat = os.fstat(fd)
    finally:
        os.close(fd)
    assert open_stat.st_ctime_ns >= open_stat.st_mtime_ns, "a write left the status time behind"
    closed = os.stat(m / "stated.txt")
    assert (closed.st_mtime_ns, closed.st_ctime_ns) == (open_stat.st_mtime_ns, open_stat.st_ctime_ns)

    src = tmp_path / "src-repo"
    src.mkdir()
    git("init", "-q", "-b", "main", cwd=src)
    for i in range(30):
        (src / f"file{i:02}.txt").write_text(f"content {i}\n")
    git("add", "-A", cwd=src)
    git("commit", "-q", "-m", "files", cwd=src)
    git("clone", "-q", "--no-hardlinks", str(src), str(m / "repo"), timeout=180)
    m.wait_uploads_done(120)
    # git compares times to the second: an index the first status writes in the second the
    # files were checked out still marks them racily clean, and the next status reads them
    # again on any file system. So the first status begins a second after the newest file.
    newest = max(os.stat(p).st_mtime for p in (m / "repo").glob("file*.txt"))
    wait_until(lambda: time.time() >= int(newest) + 1, 5, "the second after the checkout")
    first = git("-C", m / "repo", "status", "--porcelain", check=False)
    assert first.returncode == 0 and first.stdout.strip() == "", f"git status: {first.stdout} {first.stderr}"
    m.wait_uploads_done(120)
    before = len(server.gets())
    status = git("-C", m / "repo", "status", "--porcelain", check=False)
    assert status.returncode == 0 and status.stdout.strip() == "", f"git status: {status.stdout} {status.stderr}"
    reread = [r.path for r in server.gets()[before:] if "/repo/file" in r.path]
    assert not reread, f"git status read {len(reread)} checked-out files again: {reread[:5]}"
    assert m.unmount().returncode == 0
